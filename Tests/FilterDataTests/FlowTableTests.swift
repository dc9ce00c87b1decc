// The flow table alone: lookup, LRU order and eviction, idle timeouts per
// stage and protocol, the inspecting-flows list, slot reuse.
import Testing
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

private let second: UInt64 = 1_000_000_000

private func tcpKey(_ port: UInt16) -> FlowKey {
    FlowKey(protocolNumber: 6, source: .v4(0x0A00_0001), sourcePort: port, destination: .v4(0x0A00_0002), destinationPort: 443)
}

private func udpKey(_ port: UInt16) -> FlowKey {
    FlowKey(protocolNumber: 17, source: .v4(0x0A00_0001), sourcePort: port, destination: .v4(0x0A00_0002), destinationPort: 443)
}

@Suite struct FlowTableTests {
    @Test func insertFindAndRemove() throws {
        var table = FlowTable<String>()
        #expect(table.find(tcpKey(1), now: 0) == nil)
        let slot = table.insert(tcpKey(1), "one", stage: .inspecting, now: 0)
        #expect(table.count == 1 && table.inspectingCount == 1)
        let lookup = table.find(tcpKey(1), now: 1)
        let found = try #require(lookup)
        #expect(found == slot && table[found] == "one" && table.key(of: found) == tcpKey(1))
        table[found] += "!"
        #expect(table[found] == "one!")
        #expect(table.find(tcpKey(1).reversed, now: 1) == nil, "keys are directed")
        #expect(table.remove(found) == "one!")
        #expect(table.count == 0 && table.inspectingCount == 0 && table.find(tcpKey(1), now: 2) == nil)
    }

    @Test func evictsTheLeastRecentlyUsedWhenFull() throws {
        var table = FlowTable<Int>(settings: FlowTableSettings(capacity: 3))
        for port in 1...3 { table.insert(tcpKey(UInt16(port)), port, stage: .decided, now: UInt64(port)) }
        #expect(table.find(tcpKey(1), now: 10) != nil)  // 1 is now the most recent; 2 the oldest
        var departed: [(FlowKey, Int, FlowDeparture)] = []
        table.insert(tcpKey(4), 4, stage: .decided, now: 11) { departed.append(($0, $1, $2)) }
        #expect(departed.count == 1 && departed[0].0 == tcpKey(2) && departed[0].1 == 2 && departed[0].2 == .evicted)
        #expect(table.count == 3 && table.evictedCount == 1)
        #expect(table.slotsByRecency.map { table.key(of: $0) } == [tcpKey(4), tcpKey(1), tcpKey(3)])
        #expect(table.slot(for: tcpKey(2)) == nil)
    }

    @Test func aFullTableLetsADecidedFlowGoBeforeOneStillGatheringItsName() {
        var table = FlowTable<Int>(settings: FlowTableSettings(capacity: 3))
        table.insert(tcpKey(1), 1, stage: .inspecting, now: 1)
        table.insert(tcpKey(2), 2, stage: .decided, now: 2)
        table.insert(tcpKey(3), 3, stage: .inspecting, now: 3)
        table.insert(tcpKey(4), 4, stage: .inspecting, now: 4)
        #expect(table.slot(for: tcpKey(1)) != nil, "the oldest flow is still inspecting: it stays")
        #expect(table.slot(for: tcpKey(2)) == nil, "the decided flow went instead")
        // With no decided flow left, the least recently used goes.
        table.insert(tcpKey(5), 5, stage: .inspecting, now: 5)
        #expect(table.slot(for: tcpKey(1)) == nil && table.count == 3 && table.evictedCount == 2)
    }

    @Test func anExpiredOldestEntryLeavesAsExpiredNotEvicted() {
        var table = FlowTable<Int>(settings: FlowTableSettings(capacity: 1))
        table.insert(udpKey(1), 1, stage: .decided, now: 0)
        table.insert(udpKey(2), 2, stage: .decided, now: 61 * second)
        #expect(table.expiredCount == 1 && table.evictedCount == 0 && table.count == 1)
    }

    @Test func idleTimeoutsFollowProtocolAndStage() {
        var table = FlowTable<Int>()
        table.insert(tcpKey(1), 1, stage: .inspecting, now: 0)
        table.insert(tcpKey(2), 2, stage: .decided, now: 0)
        table.insert(udpKey(3), 3, stage: .inspecting, now: 0)
        table.insert(tcpKey(4), 4, stage: .waitingForRules, now: 0)
        table.insert(udpKey(5), 5, stage: .decided, now: 0)
        // 2 s (TCP) and 10 s (UDP) exactly are not past the timeout.
        #expect(table.find(tcpKey(2), now: 2 * second) != nil, "decided TCP: 2 s")
        #expect(table.find(tcpKey(2), now: 4 * second + 1) == nil)
        #expect(table.find(udpKey(5), now: 10 * second) != nil, "decided UDP: 10 s")
        #expect(table.find(udpKey(5), now: 21 * second) == nil)
        #expect(table.find(tcpKey(1), now: 30 * second) != nil)
        #expect(table.find(tcpKey(1), now: 61 * second) == nil, "undecided TCP: 30 s idle")
        #expect(table.find(tcpKey(4), now: 31 * second) == nil, "waiting for rules counts as undecided")
        #expect(table.find(udpKey(3), now: 59 * second) != nil)
        #expect(table.find(udpKey(3), now: 120 * second) == nil, "undecided UDP: 60 s idle")
        #expect(table.expiredCount == 5 && table.count == 0)
    }

    @Test func settingsChangeTimeouts() {
        let settings = FlowTableSettings(capacity: 8, tcpUndecidedIdleTimeout: .milliseconds(5), tcpDecidedIdleTimeout: .seconds(1), udpIdleTimeout: .seconds(2))
        #expect(settings.idleTimeoutNanoseconds(protocolNumber: 6, stage: .inspecting) == 5_000_000)
        #expect(settings.idleTimeoutNanoseconds(protocolNumber: 6, stage: .decided) == second)
        #expect(settings.idleTimeoutNanoseconds(protocolNumber: 17, stage: .inspecting) == 2 * second)
        #expect(FlowTableSettings.nanoseconds(.seconds(-3)) == 0)
        var table = FlowTable<Int>(settings: settings)
        table.insert(tcpKey(1), 1, stage: .inspecting, now: 0)
        #expect(table.find(tcpKey(1), now: 6_000_000) == nil)
    }

    @Test func decidedFlowsAreKeptSecondsAndUndecidedOnesLonger() {
        let settings = FlowTableSettings()
        // A decided TCP flow only waits for packets queued before its mark was saved (and
        // a reused port within this time gets its decision: docs/threat-model.md, item 18).
        #expect(settings.idleTimeoutNanoseconds(protocolNumber: 6, stage: .decided) == 2 * second)
        #expect(settings.idleTimeoutNanoseconds(protocolNumber: 17, stage: .decided) == 10 * second)
        #expect(settings.idleTimeoutNanoseconds(protocolNumber: 6, stage: .inspecting) == 30 * second)
        #expect(settings.idleTimeoutNanoseconds(protocolNumber: 17, stage: .waitingForRules) == 60 * second)
    }

    @Test func removeExpiredWalksFromTheOldestEndAndStopsAtYoungEntries() {
        var table = FlowTable<Int>(settings: FlowTableSettings(tcpDecidedIdleTimeout: .seconds(300), udpDecidedIdleTimeout: .seconds(60)))
        for port in 1...10 { table.insert(udpKey(UInt16(port)), port, stage: .decided, now: UInt64(port) * second) }
        table.insert(tcpKey(99), 99, stage: .decided, now: 0)  // decided TCP lives 5 min
        _ = table.find(tcpKey(99), now: 1)
        // At 65 s, UDP flows seen at 1...4 s are past 60 s.
        var gone: [FlowKey] = []
        let removed = table.removeExpired(now: 65 * second) { key, _ in gone.append(key) }
        #expect(removed == 4 && gone == (1...4).map { udpKey(UInt16($0)) })
        #expect(table.count == 7)
        // A limit bounds the work per call.
        #expect(table.removeExpired(now: 200 * second, limit: 2) == 2)
        #expect(table.removeExpired(now: 200 * second) == 4, "the decided TCP flow (5 min) stays")
        #expect(table.count == 1 && table.expiredCount == 10)
    }

    @Test func inspectingEntriesHaveTheirOwnRecencyList() throws {
        var table = FlowTable<Int>()
        for port in 1...4 { table.insert(tcpKey(UInt16(port)), port, stage: .inspecting, now: UInt64(port)) }
        #expect(table.inspectingCount == 4)
        #expect(table.leastRecentlyUsedInspecting.map { table.key(of: $0) } == tcpKey(1))
        #expect(table.find(tcpKey(1), now: 10) != nil)
        #expect(table.leastRecentlyUsedInspecting.map { table.key(of: $0) } == tcpKey(2))
        table.setStage(try #require(table.slot(for: tcpKey(2))), .decided)
        #expect(table.inspectingCount == 3)
        #expect(table.leastRecentlyUsedInspecting.map { table.key(of: $0) } == tcpKey(3))
        let two = try #require(table.slot(for: tcpKey(2)))
        table.setStage(two, .inspecting)
        #expect(table.inspectingCount == 4 && table.stage(of: two) == .inspecting)
    }

    @Test func slotsAreReusedAndManyFlowsStayBounded() {
        var table = FlowTable<Int>(settings: FlowTableSettings(capacity: 100))
        for port in 0..<10_000 {
            table.insert(tcpKey(UInt16(port)), port, stage: port % 3 == 0 ? .inspecting : .decided, now: UInt64(port))
            #expect(table.count <= 100)
        }
        #expect(table.count == 100 && table.evictedCount == 9_900)
        #expect(table.inspectingCount == table.slotsByRecency.filter { table.stage(of: $0) == .inspecting }.count)
        #expect(table.slotsByRecency.first.map { table[$0] } == 9_999)
    }

    @Test func insertingAnExistingKeyReplacesItsValue() throws {
        var table = FlowTable<Int>()
        table.insert(tcpKey(1), 1, stage: .inspecting, now: 0)
        table.insert(tcpKey(1), 2, stage: .decided, now: 1)
        let lookup = table.find(tcpKey(1), now: 2)
        let slot = try #require(lookup)
        #expect(table.count == 1 && table[slot] == 2 && table.inspectingCount == 0)
    }
}
