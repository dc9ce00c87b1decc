import Testing
import VerdictCore

/// Teacher overrides and exams in the engine: the layers before the lists.
@Suite struct OverrideAndExamTests {
    func decide(_ host: String, _ policy: Policy, destination: String? = nil) throws -> Decision {
        let facts = FlowFacts(host: try HostName(host), nameSource: .tlsServerName, destination: destination.flatMap { IPAddress($0) })
        return VerdictEngine(rules: try VerdictEngineTests.rules(), policy: policy).decide(facts)
    }

    func patterns(_ texts: String...) throws -> [RulePattern] { try texts.map { try RulePattern($0) } }

    @Test func anAllowOverrideBeatsTheCategoryAndTheDenyList() throws {
        var policy = Policy()
        policy.deny = try patterns("www.casino.example")
        policy.overrideAllow = try patterns("casino.example")
        let decision = try decide("www.casino.example", policy)
        #expect(decision.verdict == .allow)
        #expect(decision.reason == Reason(source: .overrideAllow, rule: "casino.example"))
        #expect(decision.reason.description.contains("teacher's override"))
    }

    @Test func aBlockOverrideBeatsTheAllowListAndWinsATie() throws {
        var policy = Policy(blockedCategories: .only([]))
        policy.allow = try patterns("edu.example")
        policy.overrideBlock = try patterns("edu.example")
        policy.overrideAllow = try patterns("edu.example")
        let decision = try decide("edu.example", policy)
        #expect(decision.verdict == .drop && decision.reason.source == .overrideBlock)
        // More specific wins inside the layer.
        policy.overrideAllow = try patterns("www.edu.example")
        #expect(try decide("www.edu.example", policy).reason.source == .overrideAllow)
        // Overrides by address.
        policy.overrideBlock = try patterns("198.51.100.0/24")
        #expect(try decide("other.example", policy, destination: "198.51.100.7").reason.source == .overrideBlock)
    }

    @Test func anExamLetsOnlyItsListThrough() throws {
        var policy = Policy(blockedCategories: .only([]), unknown: .allow, noName: .allow)
        policy.overrideAllow = try patterns("casino.example")
        policy.allow = try patterns("edu.example")
        policy.exam = Policy.Exam(allow: try patterns("exams.example.org", "192.0.2.10"), until: 1_800_000_000)
        let listed = try decide("www.exams.example.org", policy)
        #expect(listed.verdict == .allow && listed.reason == Reason(source: .examList, rule: "exams.example.org"))
        // Everything else is blocked, overrides and allow lists included.
        for host in ["casino.example", "edu.example", "unknown.example"] {
            let decision = try decide(host, policy)
            #expect(decision.verdict == .drop && decision.reason.source == .exam, "\(host)")
        }
        // An address on the list lets a name through to it; nameless flows likewise.
        #expect(try decide("cdn.example", policy, destination: "192.0.2.10").verdict == .allow)
        let engine = VerdictEngine(rules: try VerdictEngineTests.rules(), policy: policy)
        #expect(engine.decide(FlowFacts(destination: IPAddress("192.0.2.10"), transport: .udp)).verdict == .allow)
        #expect(engine.decide(FlowFacts(destination: IPAddress("192.0.2.11"), transport: .udp)).reason.source == .exam)
        // A flow that may still show its name waits for it.
        #expect(engine.decide(FlowFacts(destination: IPAddress("192.0.2.11"), mayRevealName: true)).verdict == .needMoreData)
    }

    @Test func socksAndConnectToTheSchoolsProxyAreNotTunnels() throws {
        var policy = Policy()
        policy.bypass.proxies = [ProxyEndpoint("10.0.0.8:3128")!]
        let engine = VerdictEngine(rules: try VerdictEngineTests.rules(), policy: policy)
        func connect(_ host: String, to destination: String, port: UInt16) throws -> Decision {
            engine.decide(FlowFacts(host: try HostName(host), nameSource: .httpHost, destination: IPAddress(destination), destinationPort: port, bypass: .connect))
        }
        // Through the school's proxy a CONNECT is judged by the name it asks for.
        #expect(try connect("unlisted.example", to: "10.0.0.8", port: 3128).verdict == .allow)
        let blocked = try connect("www.casino.example", to: "10.0.0.8", port: 3128)
        #expect(blocked.verdict == .drop && blocked.reason.source == .category && blocked.reason.category == "gambling")
        // Anywhere else (another port of the same address too) it is a tunnel.
        for (destination, port) in [("10.0.0.8", UInt16(8080)), ("198.51.100.7", 3128)] {
            let tunnel = try connect("unlisted.example", to: destination, port: port)
            #expect(tunnel.verdict == .drop && tunnel.reason == Reason(source: .bypass, category: "tunnels", rule: "connect"))
        }
        // SOCKS to the proxy shows no name: policy.noName decides.
        let socks = FlowFacts(destination: IPAddress("10.0.0.8"), destinationPort: 3128, bypass: .socks)
        #expect(engine.decide(socks).verdict == .allow)
        var strict = policy
        strict.noName = .block
        #expect(VerdictEngine(rules: try VerdictEngineTests.rules(), policy: strict).decide(socks).reason.source == .noName)
        // The exemption is for proxies only: WireGuard to the proxy's address is a tunnel.
        let wireguard = FlowFacts(destination: IPAddress("10.0.0.8"), destinationPort: 3128, transport: .udp, bypass: .wireguard)
        #expect(engine.decide(wireguard).reason == Reason(source: .bypass, category: "tunnels", rule: "wireguard"))
    }

    @Test func aTorRelayIsATunnelWhateverNameItShows() throws {
        var rules = try VerdictEngineTests.rules()
        try rules.add("198.51.100.7", "tor")
        var policy = Policy(blockedCategories: .only([]))
        policy.allow = try patterns("www.innocent.example")
        let facts = FlowFacts(host: try HostName("www.innocent.example"), nameSource: .tlsServerName, destination: IPAddress("198.51.100.7"), destinationPort: 9001)
        let decision = VerdictEngine(rules: rules, policy: policy).decide(facts)
        #expect(decision.verdict == .drop && decision.reason == Reason(source: .bypass, category: "tunnels", rule: "tor"), "before the allow list")
        // tunnels: allow leaves the relay to the lists (the tor category is not blocked here).
        policy.bypass.tunnels = .allow
        #expect(VerdictEngine(rules: rules, policy: policy).decide(facts).verdict == .allow)
        // Other addresses are not relays.
        policy.bypass.tunnels = .block
        var elsewhere = facts
        elsewhere.destination = IPAddress("198.51.100.8")
        #expect(VerdictEngine(rules: rules, policy: policy).decide(elsewhere).verdict == .allow)
    }

    @Test func overridesAndExamsTravelInThePolicyText() throws {
        var policy = Policy()
        policy.overrideAllow = try patterns("khanacademy.org")
        policy.overrideBlock = try patterns("=games.example", "203.0.113.0/24")
        policy.exam = Policy.Exam(allow: try patterns("exams.example.org"), until: 1_800_000_000)
        #expect(try PolicyText.parse(PolicyText.render(policy)) == policy)
        policy.exam = Policy.Exam(allow: [], until: nil)
        #expect(try PolicyText.parse(PolicyText.render(policy)) == policy)
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("examAllow a.example\n") }
        // The bypass keys: a file without them gets the defaults; each one round-trips.
        #expect(try PolicyText.parse("unknown allow\n").bypass == BypassPolicy())
        var bypassing = Policy()
        bypassing.bypass.tunnels = .allow
        bypassing.bypass.quic = .block
        bypassing.bypass.safeSearch = [.google, .youtubeModerate]
        bypassing.bypass.proxies = [ProxyEndpoint("10.0.0.8:3128")!, ProxyEndpoint("[2001:db8::/64]:8080")!]
        bypassing.bypass.ssh = .allow
        bypassing.bypass.sshServers = [ProxyEndpoint("10.0.0.5:22")!, ProxyEndpoint("2001:db8::/64")!]
        #expect(try PolicyText.parse(PolicyText.render(bypassing)) == bypassing)
        #expect(PolicyText.render(bypassing).contains("\nssh allow\nproxy 10.0.0.8:3128 [2001:db8::/64]:8080\nsshServers 10.0.0.5:22 2001:db8::/64\n"))
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("sshServers shell.school.example\n") }
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("ssh never\n") }
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("proxy proxy.school.example:3128\n") }
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("safeSearch altavista\n") }
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("tunnels sometimes\n") }
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("exam soon\n") }
    }
}
