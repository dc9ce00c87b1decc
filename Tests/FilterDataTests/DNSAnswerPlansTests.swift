@testable import FilterData
import HallpassWire
import HallpassIPC
import Testing
import VerdictCore

@Suite struct DNSAnswerPlansTests {
    let second: UInt64 = 1_000_000_000

    func key(_ port: UInt16, id: UInt16 = 7) -> DNSAnswerPlans.Key {
        let flow = FlowKey(
            protocolNumber: 17, source: IPAddress("10.0.0.1")!, sourcePort: port, destination: IPAddress("10.0.0.2")!, destinationPort: 53)
        return .init(flow: flow, id: id)
    }

    func name(_ text: String) -> HostName { try! HostName(bytes: Array(text.utf8)) }

    @Test func anAnswerGetsItsQuerysActionOnce() {
        var plans = DNSAnswerPlans()
        plans.expect(key(1000), name: name("blocked.test"), action: .pointAtBlockPage, now: 0)
        #expect(plans.take(key(1000), name: name("blocked.test"), now: second) == .pointAtBlockPage)
        #expect(plans.take(key(1000), name: name("blocked.test"), now: second) == nil, "a plan is used up by its answer")
        #expect(plans.count == 0)
    }

    @Test func otherQueriesAndOtherNamesGetNothing() {
        var plans = DNSAnswerPlans()
        plans.expect(key(1000), name: name("blocked.test"), action: .pointAtBlockPage, now: 0)
        #expect(plans.take(key(1001), name: name("blocked.test"), now: 0) == nil, "another socket")
        #expect(plans.take(key(1000, id: 8), name: name("blocked.test"), now: 0) == nil, "another message id")
        #expect(plans.take(key(1000), name: name("allowed.test"), now: 0) == nil, "an answer about another name")
        #expect(plans.take(key(1000), name: nil, now: 0) == nil)
        #expect(plans.take(key(1000), name: name("blocked.test"), now: 0) == .pointAtBlockPage, "the plan waits for its own answer")
    }

    @Test func plansRunOutAndTheOldestGoWhenFull() {
        var plans = DNSAnswerPlans(capacity: 3, lifetime: .seconds(30))
        plans.expect(key(1), name: name("a.test"), action: .pointAtBlockPage, now: 0)
        #expect(plans.take(key(1), name: name("a.test"), now: 31 * second) == nil, "expired")
        for port in UInt16(10)..<15 { plans.expect(key(port), name: name("a.test"), action: .pointAtBlockPage, now: 40 * second) }
        #expect(plans.count == 3)
        #expect(plans.take(key(10), name: name("a.test"), now: 40 * second) == nil, "the oldest went first")
        #expect(plans.take(key(14), name: name("a.test"), now: 40 * second) == .pointAtBlockPage)
        plans.removeExpired(now: 100 * second)
        #expect(plans.count == 0)
    }

    @Test func aRepeatedQueryKeepsItsNewerPlan() {
        var plans = DNSAnswerPlans(capacity: 8, lifetime: .seconds(30))
        plans.expect(key(1), name: name("a.test"), action: .pointAtBlockPage, now: 0)
        plans.expect(key(1), name: name("a.test"), action: .pointAtBlockPage, now: 20 * second)
        // The first entry's expiry must not take the second plan with it.
        plans.removeExpired(now: 35 * second)
        #expect(plans.take(key(1), name: name("a.test"), now: 35 * second) == .pointAtBlockPage)
    }

    @Test func manyAnsweredPlansKeepTheBookkeepingBounded() {
        var plans = DNSAnswerPlans(capacity: 16, lifetime: .seconds(30))
        for index in 0..<100_000 {
            let port = UInt16(truncatingIfNeeded: index)
            plans.expect(key(port), name: name("a.test"), action: .pointAtBlockPage, now: UInt64(index))
            #expect(plans.take(key(port), name: name("a.test"), now: UInt64(index)) == .pointAtBlockPage)
        }
        #expect(plans.count == 0)
        #expect(plans.bookkeepingCount < 2 * 16 + 1100, "\(plans.bookkeepingCount) entries kept for 16 plans")
    }
}
