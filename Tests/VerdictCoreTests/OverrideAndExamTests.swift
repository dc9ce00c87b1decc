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
        #expect(try PolicyText.parse(PolicyText.render(bypassing)) == bypassing)
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("safeSearch altavista\n") }
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("tunnels sometimes\n") }
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("exam soon\n") }
    }
}
