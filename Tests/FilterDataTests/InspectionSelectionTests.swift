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

    // MARK: An inspected name outside the redirect

    /// The reports filter-data sent so far.
    static func reports(_ data: DataPathHarness) throws -> [FlowReport] {
        data.clock.advance(milliseconds: 1_000)
        try data.turn()
        return try data.events().flatMap { event -> [FlowReport] in
            guard case .reports(let lines) = event else { return [] }
            return lines.reports
        }
    }

    @Test func anInspectedNameSentToAnAddressOutsideTheSetIsResetAndItsAddressSelected() throws {
        let data = try Self.harness()
        let verdictsBefore = data.queue.sentCount
        let hello = try data.connect(TCPClient(server: [192, 0, 2, 9]), to: "www.video.example")
        #expect(data.queue.verdict(for: hello) == .repeatWithMark(data.path.marks.block), "reset, as a blocked connection is")
        #expect(data.queue.setRequests.map(\.request) == [
            InspectionSets.addRequest(IPAddress("192.0.2.9")!, timeout: InspectionSets.outsideRedirectTimeout, sequence: 1)
        ])
        #expect(data.queue.setRequests.first?.afterVerdicts == verdictsBefore, "the address is selected before the reset goes")
        #expect(data.path.counters.outsideRedirect == 1 && data.path.counters.inspectionAddresses == 1)
        let reports = try Self.reports(data)
        #expect(reports.count == 1)
        #expect(reports.first?.verdict == .drop && reports.first?.reason.source == .inspectBlock)
        #expect(reports.first?.reason.category == Inspection.outsideRedirectCategory && reports.first?.reason.rule == "192.0.2.9")
    }

    @Test func theRedirectedRetryAndOtherNamesPassAsBefore() throws {
        let data = try Self.harness()
        // The retry, redirected by the kernel: it reaches the queue addressed to the proxy's listener.
        let redirected = try data.connect(TCPClient(server: [127, 0, 0, 1]), to: "www.video.example")
        #expect(data.queue.verdict(for: redirected) == .repeatWithMark(data.path.marks.allow))
        // A name nobody inspects, on a hard-coded address, is judged by its name alone.
        let other = try data.connect(TCPClient(clientPort: 40_001, server: [192, 0, 2, 9]), to: "www.example.org")
        #expect(data.queue.verdict(for: other) == .repeatWithMark(data.path.marks.allow))
        // Another port is not redirected by the kernel, so a reset would only break it: judged by name.
        let port = try data.connect(TCPClient(clientPort: 40_002, serverPort: 8443, server: [192, 0, 2, 9]), to: "www.video.example")
        #expect(data.queue.verdict(for: port) == .repeatWithMark(data.path.marks.allow))
        // A name blocked by the policy keeps its own reason.
        let blocked = try data.connect(TCPClient(clientPort: 40_003, server: [192, 0, 2, 9]), to: "blocked.example")
        #expect(data.queue.verdict(for: blocked) == .repeatWithMark(data.path.marks.block) && data.queue.setRequests.isEmpty)
        #expect(data.path.counters.outsideRedirect == 0)
        #expect(try Self.reports(data).allSatisfy { $0.reason.source != .inspectBlock })
        // With nothing inspected, the same connection is an ordinary one.
        let plain = try DataPathHarness(policy: Policy())
        let hello = try plain.connect(TCPClient(server: [192, 0, 2, 9]), to: "www.video.example")
        #expect(plain.queue.verdict(for: hello) == .repeatWithMark(plain.path.marks.allow) && plain.queue.setRequests.isEmpty)
    }

    @Test func aHeldFlowDecidedLaterIsResetAndSelectedToo() throws {
        var policy = Policy(blockedCategories: .only(["adult"]), unknown: .ask, askDefault: .block, askTimeoutMilliseconds: 2000)
        policy.inspection.hosts = [try RulePattern("video.example")]
        let data = try DataPathHarness(policy: policy)
        let hello = try data.connect(TCPClient(server: [192, 0, 2, 9]), to: "www.video.example")
        #expect(data.queue.verdict(for: hello) == nil && data.queue.setRequests.isEmpty, "held for the lookup")
        try data.send(.answer(host: try HostName("www.video.example"), categories: ["education"], timeToLive: 60))
        #expect(data.queue.verdict(for: hello) == .repeatWithMark(data.path.marks.block))
        #expect(data.queue.setRequests.map(\.request) == [
            InspectionSets.addRequest(IPAddress("192.0.2.9")!, timeout: InspectionSets.outsideRedirectTimeout, sequence: 1)
        ])
    }

    @Test func aQUICInitialOutsideTheSetIsDroppedAndItsAddressSelected() throws {
        var policy = Policy()
        policy.inspection.hosts = [try RulePattern("example.com")]
        let data = try DataPathHarness(policy: policy)
        let initial = data.queue.enqueue(udpPacket(sourcePort: 50_000, destinationPort: 443, rfc9001ClientInitial))
        try data.turn()
        #expect(data.queue.verdict(for: initial) == .repeatWithMark(data.path.marks.block))
        #expect(data.queue.setRequests.map(\.request) == [
            InspectionSets.addRequest(IPAddress("10.0.0.2")!, timeout: InspectionSets.outsideRedirectTimeout, sequence: 1)
        ])
    }

    @Test func loopbackAddressesAreTheRedirectsOnes() {
        #expect(IPAddress("127.0.0.1")!.isLoopback && IPAddress("127.8.9.10")!.isLoopback && IPAddress("::1")!.isLoopback)
        #expect(IPAddress("::ffff:127.0.0.1")!.isLoopback)
        #expect(!IPAddress("128.0.0.1")!.isLoopback && !IPAddress("::2")!.isLoopback && !IPAddress("10.0.0.2")!.isLoopback)
        #expect(!IPAddress("1::1")!.isLoopback)
    }
}
