// DataPath run turn by turn on a fake queue and a test clock, with
// filter-control's end of a real control channel: held flows and how they
// end, the hold bound, reports, rule swaps and the health check. What only
// the root integration tests reached before (Tests/IntegrationTests).
import Foundation
@testable import FilterData
import HallpassIPC
import SharedStore
import Testing
import VerdictCore

/// Unknown names are asked about; no answer in time blocks, and so does an answer of `adult`.
private let asking = Policy(blockedCategories: .only(["adult"]), unknown: .ask, askDefault: .block, askTimeoutMilliseconds: 2000)

@Suite struct DataPathHeldFlowTests {
    @Test func aFlowThatNeedsRulesIsHeldUntilTheAnswerDecidesIt() throws {
        let data = try DataPathHarness(policy: asking)
        let hello = try data.connect(TCPClient(), to: "new.example")
        #expect(data.queue.verdict(for: hello) == nil, "held: no verdict until filter-control answers")
        #expect(data.path.held.packetCount == 1)
        let asked = try data.events()
        guard case .ask(let question) = asked.first, asked.count == 1 else {
            Issue.record("expected one question, got \(asked)")
            return
        }
        #expect(question.host.description == "new.example" && question.port == 443 && question.uid == 1000)

        // A retransmission while it waits is held too, and asks nothing more.
        let again = data.queue.enqueue(TCPClient().data(at: 0, clientHelloRecords("new.example")))
        try data.turn()
        let events = try data.events()
        #expect(data.queue.verdict(for: again) == nil && data.path.held.packetCount == 2 && events.isEmpty)

        data.clock.advance(milliseconds: 3)
        try data.send(.answer(host: try HostName("new.example"), categories: ["education"], timeToLive: 60))
        let allowed = KernelVerdict.repeatWithMark(data.path.marks.allow)
        #expect(data.queue.verdict(for: hello) == allowed && data.queue.verdict(for: again) == allowed)
        #expect(data.path.held.isEmpty && data.path.counters.answers == 1 && data.path.counters.askTimeouts == 0)
        #expect(data.path.report().roundTrips == 1 && data.path.report().roundTripP50Micros == 3000)
    }

    @Test func anAnswerInABlockedCategoryBlocksTheHeldFlow() throws {
        let data = try DataPathHarness(policy: asking)
        let hello = try data.connect(TCPClient(), to: "new.example")
        try data.send(.answer(host: try HostName("new.example"), categories: ["adult"], timeToLive: 60))
        #expect(data.queue.verdict(for: hello) == .repeatWithMark(data.path.marks.block))
    }

    @Test func noAnswerGivesTheAskDefaultAtOnce() throws {
        let data = try DataPathHarness(policy: asking)
        let first = try data.connect(TCPClient(), to: "new.example")
        let second = try data.connect(TCPClient(clientPort: 40_001), to: "new.example")
        #expect(try data.events().count == 1, "one question for both flows")
        try data.send(.noAnswer(host: try HostName("new.example")))
        let blocked = KernelVerdict.repeatWithMark(data.path.marks.block)
        #expect(data.queue.verdict(for: first) == blocked && data.queue.verdict(for: second) == blocked)
        #expect(data.path.held.isEmpty && data.path.counters.askTimeouts == 0)
        // The decision is reported with its reason.
        data.clock.advance(milliseconds: 50)
        try data.turn()
        let reports = try data.events().flatMap { event -> [FlowReport] in
            guard case .reports(let lines) = event else { return [] }
            return lines.reports
        }
        #expect(reports.count == 2 && reports.allSatisfy { $0.verdict == .drop && $0.reason.source == .askTimeout })
    }

    @Test func theDeadlineGivesTheAskDefault() throws {
        let data = try DataPathHarness(policy: asking)
        let hello = try data.connect(TCPClient(), to: "new.example")
        #expect(data.path.pollTimeout() == 250, "the deadline is 2 s away: the longest wait")
        data.clock.advance(milliseconds: 1_999)
        #expect(data.path.pollTimeout() == 2, "run wakes for the deadline")
        try data.turn()
        #expect(data.queue.verdict(for: hello) == nil, "still waiting before its deadline")
        data.clock.advance(milliseconds: 1)
        try data.turn()
        #expect(data.queue.verdict(for: hello) == .repeatWithMark(data.path.marks.block))
        #expect(data.path.held.isEmpty && data.path.counters.askTimeouts == 1)
        // An answer after the deadline finds nobody waiting.
        try data.send(.answer(host: try HostName("new.example"), categories: ["education"], timeToLive: 60))
        #expect(data.queue.verdict(for: hello) == .repeatWithMark(data.path.marks.block))
    }

    @Test func theHoldIsBoundedAndAFlowPastItGetsTheDefault() throws {
        let data = try DataPathHarness(policy: asking, heldPacketCapacity: 2)
        let first = try data.connect(TCPClient(clientPort: 41_000), to: "one.example")
        let second = try data.connect(TCPClient(clientPort: 41_001), to: "two.example")
        let third = try data.connect(TCPClient(clientPort: 41_002), to: "three.example")
        #expect(data.queue.verdict(for: first) == nil && data.queue.verdict(for: second) == nil)
        #expect(data.queue.verdict(for: third) == .repeatWithMark(data.path.marks.block), "no room: the default at once")
        #expect(data.path.counters.holdOverflows == 1 && data.path.held.packetCount == 2)
        let questions = try data.events().compactMap { event -> String? in
            guard case .ask(let question) = event else { return nil }
            return question.host.description
        }
        #expect(questions == ["one.example", "two.example"], "nothing asked for a flow that was not held")
    }

    @Test func withoutFilterControlAFlowGetsTheDefaultAtOnce() throws {
        let queue = FakePacketQueue()
        let path = DataPath(queue: queue, clock: TestClock(), inspector: FlowInspector(engine: VerdictEngine(rules: blockedStore, policy: asking)))
        let client = TCPClient()
        queue.enqueue(client.syn)
        let hello = queue.enqueue(client.data(at: 0, clientHelloRecords("new.example")))
        _ = try path.turn(queueReady: true, controlReady: false)
        #expect(queue.verdict(for: hello) == .repeatWithMark(path.marks.block) && path.held.isEmpty)
    }

    @Test func stoppingGivesEveryHeldPacketTheDefault() throws {
        let data = try DataPathHarness(policy: asking)
        let hello = try data.connect(TCPClient(clientPort: 45_000), to: "new.example")
        _ = try data.connect(TCPClient(clientPort: 45_001), to: "blocked.example")
        _ = try data.events()
        try data.path.finish()
        // Packet by packet (the flow is not marked): a filter-data started after this one judges the connection afresh.
        #expect(data.queue.verdict(for: hello) == .drop && data.path.held.isEmpty)
        let reported = try data.events().flatMap { event -> [String] in
            guard case .reports(let lines) = event else { return [] }
            return lines.reports.compactMap(\.host)
        }
        #expect(reported == ["blocked.example"], "the reports in hand go, without waiting")
    }

    /// A flow waits for its user's group; once placed, it needs its name,
    /// which another flow already asked about: it waits for that answer too.
    @Test func aFlowWhoseUserIsPlacedWaitsForTheNameAnotherFlowAskedAbout() throws {
        let set = PolicySet(policies: [.ungrouped: asking, .system: asking], users: [1000: .ungrouped], askUsers: true)
        let data = try DataPathHarness(engines: PolicyEngines(rules: blockedStore, set: set))
        let known = try data.connect(TCPClient(clientPort: 42_000), to: "new.example", uid: 1000)
        let newcomer = try data.connect(TCPClient(clientPort: 42_001), to: "new.example", uid: 20_001)
        let asked = try data.events()
        #expect(asked.count == 2 && asked.last == .askUser(20_001))

        try data.send(.userPlacement(uid: 20_001, audience: .ungrouped))
        let afterPlacement = try data.events()
        #expect(data.queue.verdict(for: newcomer) == nil && afterPlacement.isEmpty, "the name is asked about already")
        try data.send(.answer(host: try HostName("new.example"), categories: ["education"], timeToLive: 60))
        let allowed = KernelVerdict.repeatWithMark(data.path.marks.allow)
        #expect(data.queue.verdict(for: known) == allowed)
        #expect(data.queue.verdict(for: newcomer) == allowed, "decided by the answer, not by the deadline")
        #expect(data.path.held.isEmpty)
    }

    @Test func aHeldDNSQueryDecidedByTheAnswerGetsItsAnswerPlan() throws {
        var policy = asking
        policy.dnsRewrite = Policy.DNSRewrite(ipv4: IPAddress("10.0.0.9")!, ipv6: IPAddress("fd00::9")!)
        let data = try DataPathHarness(policy: policy)
        let query = data.queue.enqueue(udpPacket(Build.dnsQuery("new.example", id: 0x4242)))
        try data.turn()
        #expect(data.queue.verdict(for: query) == nil && data.path.held.packetCount == 1)
        try data.send(.answer(host: try HostName("new.example"), categories: ["adult"], timeToLive: 60))
        #expect(data.queue.verdict(for: query) == .repeatWithMark(data.path.marks.dnsAnswer), "blocked: its answer comes back to be rewritten")
        #expect(data.path.answerPlans.count == 1)
    }
}

@Suite struct DataPathReportTests {
    /// Allowed names (the store blocks only its own), each on a flow of its own.
    func decide(_ count: Int, on data: DataPathHarness, name: (Int) -> String = { "site\($0).example" }) throws {
        for index in 0..<count {
            _ = try data.connect(TCPClient(clientPort: 30_000 + index), to: name(index))
        }
    }

    func reportMessages(_ events: [DataEvent]) -> [FlowReportLines] {
        events.compactMap { event in
            guard case .reports(let lines) = event else { return nil }
            return lines
        }
    }

    @Test func reportsWaitForOthersThenGoTogetherByAge() throws {
        let data = try DataPathHarness(policy: Policy())
        try decide(3, on: data)
        let early = try data.events()
        #expect(data.path.reports.count == 3 && early.isEmpty, "three reports wait for more")
        #expect(data.path.pollTimeout() <= 51, "run wakes when they are due")
        data.clock.advance(milliseconds: 49)
        try data.turn()
        #expect(try data.events().isEmpty)
        data.clock.advance(milliseconds: 1)
        try data.turn()
        let messages = reportMessages(try data.events())
        #expect(messages.count == 1 && messages.first?.count == 3, "one message for the three")
        #expect(messages.first?.reports.map { $0.host } == ["site0.example", "site1.example", "site2.example"])
        #expect(data.path.reports.isEmpty && data.path.counters.reportsSent == 3)
    }

    @Test func aFullBatchGoesAtOnceInMessagesUnderTheSizeLimit() throws {
        let data = try DataPathHarness(policy: Policy())
        // Names of about 200 bytes: far fewer than 128 lines fit in a message.
        let long = String(repeating: "a", count: 60) + "." + String(repeating: "b", count: 60) + "." + String(repeating: "c", count: 60)
        try decide(FlowReportBatch().batchSize, on: data) { "\(long).n\($0).example" }
        let events = try data.events()
        let messages = reportMessages(events)
        #expect(messages.count > 2, "cut by size, not by the line limit")
        #expect(events.allSatisfy { $0.encoded.count <= controlMessageMaximumSize })
        #expect(messages.reduce(0) { $0 + $1.count } == FlowReportBatch().batchSize, "every report, without waiting")
        let hosts = messages.flatMap { $0.reports.compactMap(\.host) }
        #expect(hosts == (0..<FlowReportBatch().batchSize).map { "\(long).n\($0).example" }, "in the order of the decisions")
    }
}

@Suite struct DataPathRuleSwapTests {
    @Test func aSwapRefusedForABadStoreKeepsTheOldRulesAndSaysWhy() throws {
        let folder = try ScratchFolder()
        defer { folder.remove() }
        let data = try DataPathHarness(policy: asking)
        let policy = try folder.policy("policy", PolicySet(single: Policy()))
        let broken = try folder.write("broken.hpstore", Array("not a store at all".utf8))
        try data.send(.useRules(store: broken, policy: policy))
        let events = try data.events()
        guard case .rulesRefused(let code, let message) = events.first, events.count == 1 else {
            Issue.record("expected one refusal, got \(events)")
            return
        }
        #expect(code == "store.magic" && message.contains(broken), "\(code): \(message)")
        #expect(data.path.counters.ruleSwapsRefused == 1 && data.path.counters.ruleSwaps == 0)
        #expect(data.path.inspector.engine.rules.version == 1 && data.path.inspector.engine.policy.unknown == .ask, "the old rules and policy")

        // A missing store and an unreadable policy are refused the same way, each with its code.
        try data.send(.useRules(store: folder.path + "/missing.hpstore", policy: policy))
        try data.send(.usePolicy(folder.path + "/missing-policy"))
        let codes = try data.events().compactMap { event -> String? in
            guard case .rulesRefused(let code, _) = event else { return nil }
            return code
        }
        #expect(codes == ["store.open", "policy.unreadable"])

        // Still judging by the old store.
        let blocked = try data.connect(TCPClient(), to: "blocked.example")
        #expect(data.queue.verdict(for: blocked) == .repeatWithMark(data.path.marks.block))
    }

    @Test func aSwapDecidesHeldFlowsTheNewRulesKnow() throws {
        let folder = try ScratchFolder()
        defer { folder.remove() }
        let data = try DataPathHarness(policy: asking)
        let known = try data.connect(TCPClient(clientPort: 43_000), to: "new.example")
        let unknown = try data.connect(TCPClient(clientPort: 43_001), to: "still-new.example")
        _ = try data.events()

        let store = try folder.store("v2.hpstore", version: 2, [("new.example", "adult")])
        let policy = try folder.policy("policy", PolicySet(single: asking))
        try data.send(.useRules(store: store, policy: policy))
        #expect(try data.events() == [.rulesLoaded(version: 2)])
        #expect(data.path.counters.ruleSwaps == 1 && data.path.inspector.engine.rules.version == 2)
        #expect(data.queue.verdict(for: known) == .repeatWithMark(data.path.marks.block), "decided by the new rules")
        #expect(data.queue.verdict(for: unknown) == nil, "the new rules do not know it either: it keeps waiting")
        let stillNew = try HostName("still-new.example")
        #expect(data.path.held.flowCount == 1 && data.path.held.waiting(for: .host(stillNew)) != nil)
    }

    @Test func aPolicySwapKeepsTheStoreAndRetriesHeldFlows() throws {
        let folder = try ScratchFolder()
        defer { folder.remove() }
        let data = try DataPathHarness(policy: asking)
        let hello = try data.connect(TCPClient(), to: "new.example")
        _ = try data.events()
        // The new policy no longer asks: an unknown name is allowed.
        try data.send(.usePolicy(try folder.policy("policy", PolicySet(single: Policy(unknown: .allow)))))
        #expect(try data.events() == [.rulesLoaded(version: 1)])
        #expect(data.queue.verdict(for: hello) == .repeatWithMark(data.path.marks.allow) && data.path.held.isEmpty)
    }
}

@Suite struct DataPathHealthCheckTests {
    @Test func aPingIsAnsweredWithTheCounters() throws {
        let data = try DataPathHarness(policy: asking)
        _ = try data.connect(TCPClient(clientPort: 44_000), to: "new.example")
        _ = try data.connect(TCPClient(clientPort: 44_001), to: "blocked.example")
        _ = try data.events()
        try data.send(.ping(7))
        let events = try data.events()
        guard case .pong(let number, let counters) = events.first, events.count == 1 else {
            Issue.record("expected one pong, got \(events)")
            return
        }
        #expect(number == 7)
        #expect(counters.packets == 4 && counters.flows == 2 && counters.rulesVersion == 1)
        #expect(counters.heldPackets == 1 && counters.heldFlows == 1 && counters.questions == 1 && counters.neededRules == 1)
        #expect(counters.dropped == 1 && counters.verdictsSent == data.queue.counters.verdictsSent && counters.verdictsSent == 3)
        #expect(counters == data.path.report())
    }

    @Test func aMessageOfTheWrongDirectionIsCountedAndSkipped() throws {
        let data = try DataPathHarness(policy: asking)
        // What only filter-data sends, sent to it: it does not decode as a command.
        let wrong = DataEvent.hello(pid: 1, rulesVersion: 1).encoded
        #expect(wrong.withUnsafeBytes { send(data.control.descriptor.rawValue, $0.baseAddress, $0.count, 0) } == wrong.count)
        try data.send(.ping(8))
        #expect(data.path.counters.invalidControlMessages == 1)
        #expect(try data.events().count == 1)
    }

    @Test func theEndOfFilterControlStopsTheLoop() throws {
        let path: DataPath<FakePacketQueue, TestClock>
        do {
            // filter-control's end goes at the end of this block.
            let pair = try ControlChannelPair.make()
            path = DataPath(
                queue: FakePacketQueue(), clock: TestClock(), inspector: FlowInspector(engine: VerdictEngine(rules: blockedStore, policy: asking)),
                control: pair.data)
        }
        #expect(try path.turn(queueReady: false, controlReady: true) == .controlClosed)
    }
}
