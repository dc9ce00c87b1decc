import FilterData
import HallpassWire
import HallpassIPC
import SharedStore
import Testing
import VerdictCore

/// Ways around the filter, through the flow inspector and the engine: the
/// recognizers name the flow's kind, and the policy's `bypass:` keys decide.
@Suite struct BypassInspectionTests {
    func policy(_ change: (inout BypassPolicy) -> Void = { _ in }) -> Policy {
        var policy = Policy(blockedCategories: .only(["adult"]))
        change(&policy.bypass)
        return policy
    }

    @Test func dnsOverTLSIsKnownByItsPortBeforeAnyByte() {
        var judge = inspector(policy: policy())
        var client = TCPClient()
        client.serverPort = 853
        _ = judge.inspect(client.syn, now: 0)
        let hello = judge.inspect(client.data(at: 0, clientHelloRecords("dns.example")), now: 1)
        #expect(hello.kind == .dot && hello.verdict == .drop && hello.finality == .firstDecision)
        #expect(hello.decision.reason.source == .bypass && hello.decision.reason.category == "encryptedDNS" && hello.decision.reason.rule == "dot")
        #expect(hello.findings.name == "dns.example", "the resolver's name is still read and reported")

        // A policy that allows encrypted DNS judges it as any nameless flow (noName: allow).
        var allowing = inspector(policy: policy { $0.encryptedDNS = .allow })
        _ = allowing.inspect(client.syn, now: 0)
        let allowed = allowing.inspect(client.data(at: 0, clientHelloRecords("dns.example")), now: 1)
        #expect(allowed.kind == .dot && allowed.verdict == .allow, "\(allowed.decision)")
        // ... and by its name, like any TLS flow.
        _ = allowing.inspect(TCPClient(clientPort: 40_001, serverPort: 853).syn, now: 0)
        let blockedResolver = allowing.inspect(TCPClient(clientPort: 40_001, serverPort: 853).data(at: 0, clientHelloRecords("dns.blocked.example")), now: 1)
        #expect(blockedResolver.verdict == .drop && blockedResolver.decision.reason.category == "adult")
    }

    @Test func aSOCKS5GreetingIsATunnel() {
        var judge = inspector(policy: policy())
        var client = TCPClient()
        client.serverPort = 1080
        _ = judge.inspect(client.syn, now: 0)
        let greeting = judge.inspect(client.data(at: 0, [0x05, 0x01, 0x00]), now: 1)
        #expect(greeting.kind == .socks && greeting.verdict == .drop, "\(greeting.kind) \(greeting.decision)")
        #expect(greeting.decision.reason.category == "tunnels")

        var staff = inspector(policy: policy { $0.tunnels = .allow })
        _ = staff.inspect(client.syn, now: 0)
        let allowed = staff.inspect(client.data(at: 0, [0x05, 0x01, 0x00]), now: 1)
        #expect(allowed.kind == .socks && allowed.verdict == .allow)
    }

    @Test func anHTTPConnectRequestIsATunnelNotAPlainRequest() {
        var judge = inspector(policy: policy())
        var client = TCPClient()
        client.serverPort = 3128
        _ = judge.inspect(client.syn, now: 0)
        let request = judge.inspect(client.data(at: 0, Array("CONNECT blocked-not.example:443 HTTP/1.1\r\nHost: blocked-not.example:443\r\n\r\n".utf8)), now: 1)
        #expect(request.kind == .connect && request.verdict == .drop, "\(request.kind) \(request.decision)")
        #expect(request.findings.name == "blocked-not.example", "the proxy's target is reported")
    }

    /// FlowKind and BypassKind map by name both ways (two switches that must not drift apart).
    @Test func flowKindsAndBypassKindsMapByName() {
        for kind in FlowKind.allCases {
            #expect(kind.bypass?.rawValue == BypassKind(rawValue: kind.rawValue)?.rawValue, "\(kind)")
        }
        for bypass in BypassKind.allCases { #expect(FlowKind(bypass).rawValue == bypass.rawValue) }
    }

    @Test func plainHTTPIsNoTunnel() {
        var judge = inspector(policy: policy())
        var client = TCPClient()
        client.serverPort = 80
        _ = judge.inspect(client.syn, now: 0)
        let request = judge.inspect(client.data(at: 0, Array("GET / HTTP/1.1\r\nHost: fine.example\r\n\r\n".utf8)), now: 1)
        #expect(request.kind == .http && request.verdict == .allow)
    }

    /// SSH on any port is blocked by `bypass.ssh` (default block), not by `tunnels`;
    /// the school's SSH servers are left to the rules (a nameless flow: noName).
    @Test func sshIsBlockedByItsOwnKeyExceptToTheSchoolsServers() throws {
        let banner = Array("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n".utf8)
        func first(_ policy: Policy, port: Int) -> Inspection {
            var judge = inspector(policy: policy)
            var client = TCPClient()
            client.serverPort = port
            _ = judge.inspect(client.syn, now: 0)
            return judge.inspect(client.data(at: 0, banner), now: 1)
        }
        // Port 53 carries DNS over TCP, 853 DNS over TLS: SSH there is SSH all the same.
        for port in [22, 443, 53, 853] {
            let blocked = first(policy(), port: port)
            #expect(blocked.kind == .ssh && blocked.verdict == .drop && blocked.finality == .firstDecision, "\(blocked.kind) \(blocked.decision)")
            #expect(blocked.decision.reason.source == .bypass && blocked.decision.reason.category == "ssh" && blocked.decision.reason.rule == "ssh")
        }
        for port in [22, 53, 853] {
            #expect(first(policy { $0.tunnels = .allow; $0.encryptedDNS = .allow }, port: port).verdict == .drop,
                    "tunnels and encryptedDNS allowed do not allow SSH on \(port)")
            #expect(first(policy { $0.ssh = .allow }, port: port).verdict == .allow, "\(port)")
        }
        #expect(first(policy { $0.ssh = .allow; $0.tunnels = .block }, port: 22).kind == .ssh)
        // TCPClient's server is 10.0.0.2 (Build's default destination): the school's server, on port 22 only.
        let server = try #require(ProxyEndpoint("10.0.0.2:22"))
        #expect(first(policy { $0.sshServers = [server] }, port: 22).verdict == .allow)
        #expect(first(policy { $0.sshServers = [server] }, port: 2222).verdict == .drop, "another port of that address")
        var noNames = policy { $0.sshServers = [server] }
        noNames.noName = .block
        #expect(first(noNames, port: 22).verdict == .drop, "the school's server is judged as nameless")
    }

    @Test func wireGuardAndIKEAreRecognizedByTheirFirstDatagram() {
        var judge = inspector(policy: policy())
        let wireGuard = judge.inspect(udpPacket(sourcePort: 40_000, destinationPort: 51_820, TunnelRecognizerTests.wireguardGoInitiation), now: 0)
        #expect(wireGuard.kind == .wireguard && wireGuard.verdict == .drop && wireGuard.finality == .firstDecision)
        var ike = TunnelRecognizerTests.ikeSAInit()
        ike[0] = 0xC3  // an SPI whose first bit a QUIC long header also sets
        let ikeInspection = judge.inspect(udpPacket(sourcePort: 40_001, destinationPort: 500, ike), now: 0)
        #expect(ikeInspection.kind == .ike && ikeInspection.verdict == .drop)
        let doq = judge.inspect(udpPacket(sourcePort: 40_002, destinationPort: 853, rfc9001ClientInitial), now: 0)
        #expect(doq.kind == .doq && doq.decision.reason.category == "encryptedDNS")
    }

    @Test func quicBlockEndsEveryQUICFlowAtItsFirstDatagram() {
        var judge = inspector(policy: policy { $0.quic = .block })
        let first = judge.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, rfc9001ClientInitial), now: 0)
        #expect(first.kind == .quic && first.verdict == .drop && first.finality == .firstDecision)
        #expect(first.decision.reason.source == .bypass && first.decision.reason.category == "quic")
        // The default lets readable QUIC go to its name's judgement.
        var open = inspector(policy: policy())
        let named = open.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, rfc9001ClientInitial), now: 0)
        #expect(named.kind == .quic && named.findings.name == "example.com" && named.decision.reason.source != .bypass)
    }

    @Test func quicThatCannotBeReadIsBlockedByDefault() {
        var settings = FlowInspectorSettings()
        settings.limits = FlowLimits(quicDatagramBound: 2)
        var judge = inspector(policy: policy(), settings: settings)
        var greased = rfc9001ClientInitial
        greased[1...4] = [0x0a, 0x0a, 0x0a, 0x0a]
        let first = judge.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, greased), now: 0)
        #expect(first.finality == .undecided, "it may still send an Initial hallpass can read")
        let second = judge.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, greased), now: 1)
        #expect(second.kind == .quic && second.verdict == .drop && second.decision.reason.category == "unreadableQUIC")

        var allowing = FlowInspector(engine: VerdictEngine(rules: blockedStore, policy: policy { $0.unreadableQUIC = .allow }), settings: settings)
        _ = allowing.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, greased), now: 0)
        let allowed = allowing.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, greased), now: 1)
        #expect(allowed.verdict == .allow && allowed.decision.reason.source == .noName)
    }

    @Test func quicOfAVersionWithoutKeysIsJudgedAtItsFirstDatagram() {
        var judge = inspector(policy: policy())
        var unknown = rfc9001ClientInitial
        unknown[1...4] = [0x1a, 0x2b, 0x3c, 0x4d]
        let first = judge.inspect(udpPacket(sourcePort: 50_000, destinationPort: 4443, unknown), now: 0)
        #expect(first.kind == .quic && first.verdict == .drop && first.finality == .firstDecision)
        #expect(first.decision.reason.category == "unreadableQUIC")
        // A Q050 Initial that does not open with Q050's salt: Google QUIC that cannot be read.
        var gquic = rfc9001ClientInitial
        gquic[1...4] = Array("Q050".utf8)[0...3]
        let google = judge.inspect(udpPacket(sourcePort: 50_001, destinationPort: 443, gquic), now: 0)
        #expect(google.verdict == .drop && google.decision.reason.category == "unreadableQUIC")
    }

    @Test func googleQUICIsJudgedByTheNameItsCHLOCarries() {
        var judge = inspector(policy: policy())
        let blocked = GoogleQUICTests.chlo([("PAD\u{0}", [0x2D, 0x2D]), ("SNI\u{0}", Array("www.blocked.example".utf8)), ("VER\u{0}", Array("Q046".utf8))])
        let one = judge.inspect(udpPacket(sourcePort: 50_002, destinationPort: 443, GoogleQUICTests.q046Packet(blocked)), now: 0)
        #expect(one.kind == .quic && one.findings.name == "www.blocked.example" && one.verdict == .drop, "\(one.decision)")
        #expect(one.decision.reason.category == "adult")
        // Across two datagrams, the second first: the flow waits, then gets its name.
        let message = GoogleQUICTests.chlo([("PAD\u{0}", [UInt8](repeating: 0x2D, count: 300)), ("SNI\u{0}", Array("fine.example".utf8))])
        let late = judge.inspect(udpPacket(sourcePort: 50_003, destinationPort: 443, GoogleQUICTests.q046Packet(Array(message.dropFirst(200)), offset: 200)), now: 0)
        #expect(late.finality == .undecided)
        let early = judge.inspect(udpPacket(sourcePort: 50_003, destinationPort: 443, GoogleQUICTests.q046Packet(Array(message.prefix(200)))), now: 1)
        #expect(early.findings.name == "fine.example" && early.verdict == .allow && early.decision.reason.source != .bypass)
        // A CHLO that never starts at offset 0 gives no name: unreadable within the datagram bound.
        var settings = FlowInspectorSettings()
        settings.limits = FlowLimits(quicDatagramBound: 2)
        var bounded = inspector(policy: policy(), settings: settings)
        let later = GoogleQUICTests.q046Packet(Array(message.dropFirst(200)), offset: 200)
        _ = bounded.inspect(udpPacket(sourcePort: 50_004, destinationPort: 443, later), now: 0)
        let second = bounded.inspect(udpPacket(sourcePort: 50_004, destinationPort: 443, later), now: 1)
        #expect(second.verdict == .drop && second.decision.reason.category == "unreadableQUIC")
    }

    static func tcpQuery(_ name: String, type: Int = 1) -> [UInt8] {
        let message = Build.dnsQuery(name, type: type)
        return Build.be16(message.count) + message
    }

    @Test func everyQueryOverTCPIsJudged() {
        var judge = inspector(policy: policy())
        var client = TCPClient()
        client.serverPort = 53
        _ = judge.inspect(client.syn, now: 0)
        // Two queries in one write: the second, the canary, refuses the write.
        let first = Self.tcpQuery("fine.example") + Self.tcpQuery("use-application-dns.net")
        let both = judge.inspect(client.data(at: 0, first), now: 1)
        #expect(both.kind == .dns && both.verdict == .drop && both.findings.name == "use-application-dns.net", "\(both.decision)")
        // On a connection whose first query was allowed, a later write is judged on its own.
        let other = TCPClient(clientPort: 40_050, serverPort: 53)
        _ = judge.inspect(other.syn, now: 0)
        let allowed = judge.inspect(other.data(at: 0, Self.tcpQuery("fine.example")), now: 1)
        #expect(allowed.verdict == .allow && allowed.finality == .firstDecision)
        let blocked = Self.tcpQuery("www.blocked.example")
        let later = judge.inspect(other.data(at: Self.tcpQuery("fine.example").count, blocked), now: 2)
        #expect(later.verdict == .drop && later.decision.reason.category == "adult" && later.finality == .firstDecision, "\(later.decision)")
        // A query split over two writes is judged once it is whole.
        let split = TCPClient(clientPort: 40_051, serverPort: 53)
        _ = judge.inspect(split.syn, now: 0)
        let head = judge.inspect(split.data(at: 0, Array(blocked.prefix(9))), now: 1)
        #expect(head.finality == .undecided)
        let tail = judge.inspect(split.data(at: 9, Array(blocked.dropFirst(9))), now: 2)
        #expect(tail.verdict == .drop && tail.findings.name == "www.blocked.example")
    }

    @Test func whatFollowsTCPQueriesUnreadIsNotLetThrough() {
        var judge = inspector(policy: policy())
        var port = 40_080
        func write(_ bytes: [UInt8]) -> Inspection {
            port += 1
            let client = TCPClient(clientPort: port, serverPort: 53)
            return judge.inspect(client.data(at: 0, bytes), now: 1)
        }
        // A query and then a length prefix that promises more than the peek bound.
        let tail = write(Self.tcpQuery("fine.example") + [0xFF, 0xFF])
        #expect(tail.verdict == .drop && tail.decision.reason == Reason(source: .bypass, category: "tunnels", rule: "unreadable-dns-over-tcp"), "\(tail.decision)")
        // A query and then one the parser refuses (a control byte in a label).
        var bad = Self.tcpQuery("www.blocked.example")
        bad[4 + 12 + 2] = 0x7F
        #expect(write(Self.tcpQuery("fine.example") + bad).verdict == .drop)
        // More queries in one write than are read: refused, not judged by the first.
        let many = (0...FlowLimits.maximumQueriesPerWrite).flatMap { _ in Self.tcpQuery("fine.example") }
        #expect(write(many).verdict == .drop)
        // A blocked query among them is what the decision names.
        let blockedFirst = write(Self.tcpQuery("www.blocked.example") + [0xFF, 0xFF])
        #expect(blockedFirst.decision.reason.category == "adult")
        // tunnels: allow judges the unreadable rest as nameless (noName: allow here).
        var relaxed = inspector(policy: policy { $0.tunnels = .allow })
        #expect(relaxed.inspect(TCPClient(clientPort: 40_200, serverPort: 53).data(at: 0, Self.tcpQuery("fine.example") + [0xFF, 0xFF]), now: 1).verdict == .allow)
    }

    @Test func aTCPQueryIsNotHeldForALookup() throws {
        let store = try makeStore([("blocked.example", "adult")])
        var asking = policy()
        asking.unknown = .ask
        asking.askDefault = .block
        var judge = FlowInspector(engine: VerdictEngine(rules: store, policy: asking))
        let client = TCPClient(clientPort: 40_090, serverPort: 53)
        let unknown = judge.inspect(client.data(at: 0, Self.tcpQuery("fine.example") + Self.tcpQuery("unknown.example")), now: 1)
        #expect(unknown.finality == .firstDecision && unknown.verdict == .drop && unknown.decision.reason.source == .askTimeout, "\(unknown.decision)")
    }

    @Test func aWriteAfterAGapStartsTheTCPDNSFlowAgain() {
        var judge = inspector(policy: policy())
        let client = TCPClient(clientPort: 40_095, serverPort: 53)
        // An old segment sent again: the first half of a query, never completed.
        let old = Self.tcpQuery("fine.example")
        let half = judge.inspect(client.data(at: 0, Array(old.prefix(8))), now: 1)
        #expect(half.finality == .undecided)
        // The next write comes after a gap: judged on its own, not left waiting unread.
        let later = judge.inspect(client.data(at: 500, Self.tcpQuery("www.blocked.example")), now: 2)
        #expect(later.verdict == .drop && later.findings.name == "www.blocked.example", "\(later.finality) \(later.decision)")
    }

    @Test func aTCPQueryWhoseAnswerTheFilterWouldChangeIsRefused() {
        let client = TCPClient(clientPort: 40_060, serverPort: 53)
        // An HTTPS record over TCP could bring an ECH key that no rewrite takes out.
        var judge = inspector(policy: policy())
        _ = judge.inspect(client.syn, now: 0)
        let https = judge.inspect(client.data(at: 0, Self.tcpQuery("www.ech.example", type: 65)), now: 1)
        #expect(https.verdict == .drop && https.decision.reason == Reason(source: .bypass, category: "ech", rule: "https-record-over-tcp"))
        var relaxed = inspector(policy: policy { $0.ech = .allow })
        _ = relaxed.inspect(client.syn, now: 0)
        #expect(relaxed.inspect(client.data(at: 0, Self.tcpQuery("www.ech.example", type: 65)), now: 1).verdict == .allow)
        // A name SafeSearch covers, once the enforcement host's addresses are known (as over UDP).
        var safe = inspector(policy: policy { $0.safeSearch = [.google] })
        _ = safe.inspect(client.syn, now: 0)
        #expect(safe.inspect(client.data(at: 0, Self.tcpQuery("www.google.com")), now: 1).verdict == .allow, "no addresses yet")
        var set = safe.engines.set
        set.safeSearchTargets[.google] = SafeSearchTarget(addresses: [IPAddress("216.239.38.120")!], timeToLive: 300)
        safe.replaceEngines(PolicyEngines(rules: blockedStore, set: set))
        let again = TCPClient(clientPort: 40_062, serverPort: 53)
        let google = safe.inspect(again.data(at: 0, Self.tcpQuery("www.google.com")), now: 2)
        #expect(google.verdict == .drop && google.decision.reason.category == "safeSearch")
        // An A query for an ordinary name goes.
        let plain = TCPClient(clientPort: 40_061, serverPort: 53)
        _ = safe.inspect(plain.syn, now: 0)
        #expect(safe.inspect(plain.data(at: 0, Self.tcpQuery("www.example.org")), now: 1).verdict == .allow)
    }

    @Test func aFlowToATorRelayIsOfKindTor() throws {
        let store = try makeStore([("10.0.0.2", "tor"), ("blocked.example", "adult")])
        var judge = FlowInspector(engine: VerdictEngine(rules: store, policy: policy()))
        // (The kernel queues a connection's first payload, not its SYN.)
        let client = TCPClient(clientPort: 40_070, serverPort: 9001)
        let hello = judge.inspect(client.data(at: 0, clientHelloRecords("www.random-looking.example")), now: 1)
        #expect(hello.kind == .tor && hello.verdict == .drop && hello.decision.reason == Reason(source: .bypass, category: "tunnels", rule: "tor"))
        #expect(hello.findings.name == "www.random-looking.example", "the name it showed is still reported")
    }

    @Test func encryptedDNSShowsItselfByItsALPNOnAnyPort() {
        var judge = inspector(policy: policy())
        var client = TCPClient()
        client.serverPort = 443
        _ = judge.inspect(client.syn, now: 0)
        let hello = Build.records(Build.clientHello(extensions: [Build.sniExtension("resolver.example"), Build.alpnExtension(["dot"])]))
        let dot = judge.inspect(client.data(at: 0, hello), now: 1)
        #expect(dot.kind == .dot && dot.verdict == .drop && dot.decision.reason.category == "encryptedDNS", "\(dot.kind) \(dot.decision)")
        // h2 and http/1.1 are TLS as before.
        let web = TCPClient(clientPort: 40_010, serverPort: 443)
        _ = judge.inspect(web.syn, now: 0)
        let plain = judge.inspect(web.data(at: 0, Build.records(Build.clientHello(extensions: [Build.sniExtension("resolver.example"), Build.alpnExtension(["h2", "http/1.1"])]))), now: 1)
        #expect(plain.kind == .tls && plain.verdict == .allow)
    }

    @Test func theDoHAndECHFrontListsGoWithTheirKeys() throws {
        let store = try makeStore([("dns.google", BypassPolicy.encryptedDNSCategory), ("cloudflare-ech.com", BypassPolicy.echFrontCategory)])
        let strict = VerdictEngine(rules: store, policy: policy())
        #expect(strict.decide(FlowFacts(host: try HostName("dns.google"), nameSource: .tlsServerName)).verdict == .drop)
        let outer = strict.decide(FlowFacts(host: try HostName("cloudflare-ech.com"), nameSource: .tlsServerName, encryptedClientHello: true))
        #expect(outer.verdict == .drop && outer.reason.category == "ech-front")
        let relaxed = VerdictEngine(rules: store, policy: policy { $0.encryptedDNS = .allow; $0.ech = .allow })
        #expect(relaxed.decide(FlowFacts(host: try HostName("dns.google"), nameSource: .tlsServerName)).verdict == .allow)
        #expect(relaxed.decide(FlowFacts(host: try HostName("cloudflare-ech.com"), nameSource: .tlsServerName)).verdict == .allow)
    }
}
