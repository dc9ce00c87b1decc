@testable import FilterData
import HallpassIPC
import Testing
import VerdictCore

/// filter-data selects the addresses of inspected names for the proxy: the
/// answers of their queries come back to it, and their A and AAAA records
/// go into the kernel sets before the answer goes on.
@Suite struct InspectionSelectionTests {
    /// A response for `name` with an A and an AAAA record, TTL `ttl`.
    static func response(_ name: String, id: Int = 0x1234, ttl: UInt32 = 300) -> [UInt8] {
        var message = Build.dnsQuery(name, id: id)
        message[2] |= 0x80
        let a = [0xC0, 12] + Build.be16(1) + Build.be16(1) + Build.be32(ttl) + Build.be16(4) + [192, 0, 2, 7]
        let aaaa = [0xC0, 12] + Build.be16(28) + Build.be16(1) + Build.be32(ttl) + Build.be16(16) + [UInt8](repeating: 0x20, count: 16)
        message[6...7] = ArraySlice(Build.be16(2))
        return message + a + aaaa
    }

    static func harness() throws -> DataPathHarness {
        var policy = Policy()
        policy.inspection.hosts = [try RulePattern("video.example")]
        return try DataPathHarness(policy: policy)
    }

    @Test func anInspectedNamesAddressesAreInTheSetsBeforeItsAnswerGoesOn() throws {
        let data = try Self.harness()
        let query = data.queue.enqueue(udpPacket(Build.dnsQuery("www.video.example")))
        try data.turn()
        #expect(data.queue.verdict(for: query) == .repeatWithMark(data.path.marks.dnsAnswer), "its answer comes back")
        #expect(data.queue.setRequests.isEmpty)

        let answer = data.queue.enqueue(udpPacket(Self.response("www.video.example"), fromServer: true), hook: QueuedPacket.inputHook)
        let verdictsBefore = data.queue.sentCount
        try data.turn()
        #expect(data.queue.verdict(for: answer) == .accept, "the answer itself is not changed")
        let requests = data.queue.setRequests
        #expect(requests.map(\.request) == [
            InspectionSets.addRequest(IPAddress("192.0.2.7")!, timeout: 300, sequence: 1),
            InspectionSets.addRequest(IPAddress("2020:2020:2020:2020:2020:2020:2020:2020")!, timeout: 300, sequence: 2),
        ])
        #expect(requests.allSatisfy { $0.afterVerdicts == verdictsBefore }, "sent before the answer's verdict")
        #expect(data.path.counters.inspectionAddresses == 2)
    }

    @Test func otherNamesAndOtherQueriesCostNothing() throws {
        let data = try Self.harness()
        let other = data.queue.enqueue(udpPacket(Build.dnsQuery("www.example.org")))
        let text = data.queue.enqueue(udpPacket(sourcePort: 40_001, Build.dnsQuery("www.video.example", type: 16)))
        try data.turn()
        #expect(data.queue.verdict(for: other) != .repeatWithMark(data.path.marks.dnsAnswer))
        #expect(data.queue.verdict(for: text) != .repeatWithMark(data.path.marks.dnsAnswer), "only A and AAAA carry addresses")
        // With nothing inspected, an inspected-looking name is an ordinary query.
        let plain = try DataPathHarness(policy: Policy())
        let query = plain.queue.enqueue(udpPacket(Build.dnsQuery("www.video.example")))
        try plain.turn()
        #expect(plain.queue.verdict(for: query) != .repeatWithMark(plain.path.marks.dnsAnswer))
        #expect(plain.queue.setRequests.isEmpty && data.queue.setRequests.isEmpty)
    }

    @Test func shortAndLongTimesToLiveAreBounded() throws {
        let data = try Self.harness()
        _ = data.queue.enqueue(udpPacket(Build.dnsQuery("video.example", id: 7)))
        try data.turn()
        _ = data.queue.enqueue(udpPacket(Self.response("video.example", id: 7, ttl: 5), fromServer: true), hook: QueuedPacket.inputHook)
        try data.turn()
        #expect(data.queue.setRequests.first?.request == InspectionSets.addRequest(IPAddress("192.0.2.7")!, timeout: 60, sequence: 1))
    }
}
