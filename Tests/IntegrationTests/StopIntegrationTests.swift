import FilterControl
import Foundation
import Testing

/// How filter-control ends: it stops filter-data and removes its kernel
/// rules even where it may not signal filter-data, and rules it could not
/// remove (a SIGKILL) are removed by `--remove-rules` (the unit's
/// ExecStopPost) or replaced by the next start. Part of the serialized suite.
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
        // CAP_KILL is bit 5 of the bounding set.
        let status = try String(contentsOfFile: "/proc/\(hallpass.pid)/status", encoding: .utf8)
        let bounding = status.split(separator: "\n").first { $0.hasPrefix("CapBnd:") }.flatMap { UInt64($0.dropFirst(7).trimmingCharacters(in: .whitespaces), radix: 16) }
        #expect(bounding.map { $0 & (1 << 5) == 0 } == true, "the test did not take CAP_KILL away: \(String(describing: bounding))")

        #expect(kill(hallpass.pid, SIGTERM) == 0)
        let exit = hallpass.wait(atMost: 10)
        let log = network.log("filter-control")
        #expect(exit == 0, "filter-control did not end within 10 s of SIGTERM:\n\(log)")
        // The stop request that needs no privilege is the end of the control
        // channel. (Whether the refused SIGTERM is logged depends on whether
        // filter-data already left when it is sent.)
        // Exit status 0, not a signal: it left on the end of the channel (the SIGKILL would be refused too).
        #expect(log.contains("filter-data stopped (exit status 0)") && log.contains("kernel rules removed"), "\(log)")
        #expect(!log.contains("stopped on an error"), "every service stops cleanly:\n\(log)")
        #expect(kill(data, 0) != 0, "filter-data \(data) is still running")
        let left = try hallpassRules(network)
        #expect(left.isEmpty, "\(left)")
    }

    @Test func rulesLeftByAKilledFilterControlAreRemovedOrReplacedNotDoubled() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let (config, store) = try prepare(network, failMode: "closed")
        let first = try startHallpass(network, config: config, store: store)
        let rules = try hallpassRules(network)
        #expect(kill(first.pid, SIGKILL) == 0)
        _ = first.wait()
        // filter-data ends with its channel; the rules stay (closed mode: nothing new leaves).
        try network.waitFor("filter-data to end with its channel") { network.processIDs(runningExecutable: "filter-data").isEmpty }
        #expect(try hallpassRules(network) == rules)

        // A new start replaces them: one jump per hook and family, as before.
        let second = try startHallpass(network, config: config, store: store)
        #expect(network.log("filter-control").contains("kernel rules of an earlier run found; replacing them"))
        let replaced = try hallpassRules(network)
        #expect(replaced == rules, "\(replaced)")
        #expect(kill(second.pid, SIGKILL) == 0)
        _ = second.wait()

        // --remove-rules (the unit's ExecStopPost) takes them out; a second run finds nothing.
        let removal = "\(TestNetwork.binaries)/filter-control --remove-rules"
        let removed = try network.inClient(removal)
        #expect(removed.status == 0 && removed.output.contains("kernel rules removed"), "\(removed.output)")
        let left = try hallpassRules(network)
        #expect(left.isEmpty, "\(left)")
        let again = try network.inClient(removal)
        #expect(again.status == 0 && again.output.contains("no kernel rules to remove"), "\(again.output)")
    }
}
