import FilterControl
import Foundation
import Testing

/// How filter-control ends: it stops filter-data and removes its kernel
/// rules even where it may not signal filter-data. Part of the serialized suite.
extension FilterIntegrationTests {
    /// The lines of iptables-save and ip6tables-save in the client that name a chain of hallpass.
    func hallpassRules(_ network: TestNetwork) throws -> [Substring] {
        try network.inClient("iptables-save; ip6tables-save").output.split(separator: "\n").filter { $0.contains("HALLPASS") }
    }

    @Test func aStopWithoutCAP_KILLStillEndsFilterDataAndRemovesTheRules() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let (config, store) = try prepare(network, failMode: "closed")
        // As under a unit whose CapabilityBoundingSet lacks CAP_KILL: root, but
        // filter-data (uid 65534) is another user's process it may not signal.
        let hallpass = try startHallpass(network, config: config, store: store, wrapper: ["setpriv", "--bounding-set=-kill", "--"])
        let data = try filterData(network)
        #expect(!(try hallpassRules(network)).isEmpty)

        let started = Date()
        #expect(kill(hallpass.pid, SIGTERM) == 0)
        let status = hallpass.wait(atMost: 10)
        let took = Date().timeIntervalSince(started)
        let log = network.log("filter-control")
        #expect(status == 0, "filter-control did not end within 10 s of SIGTERM:\n\(log)")
        // The stop request that needs no privilege is the end of the control channel.
        #expect(log.contains("cannot send SIGTERM to filter-data \(data)"), "the test did not take CAP_KILL away:\n\(log)")
        #expect(log.contains("filter-data stopped (exit status 0)") && log.contains("kernel rules removed"), "\(log)")
        #expect(took < 3, "the stop took \(took) s")
        #expect(kill(data, 0) != 0, "filter-data \(data) is still running")
        let left = try hallpassRules(network)
        #expect(left.isEmpty, "\(left)")
    }
}
