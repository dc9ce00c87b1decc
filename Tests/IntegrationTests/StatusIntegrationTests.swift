import Foundation
import Testing

/// `filterctl status` with real traffic: filter-control asks filter-data for
/// its counters before it answers, so they count the request just made, and
/// says how old they are when filter-data does not answer. Part of the
/// serialized suite: one test network at a time.
extension FilterIntegrationTests {
    /// `filterctl status --json`, parsed.
    func statusObject(_ network: TestNetwork) throws -> [String: Any] {
        let status = try shell("\(TestNetwork.binaries)/filterctl status --json --socket \(network.folder)/control.sock")
        #expect(status.status == 0, "\(status.output)")
        return try #require(try JSONSerialization.jsonObject(with: Data(status.output.utf8)) as? [String: Any], "\(status.output)")
    }

    @Test func statusCountsTheTrafficJustMadeAndSaysHowOldCountersAre() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network)
        _ = try startHallpass(network, config: config, store: store)

        // Each request is counted by the status asked for right after it. The
        // health check's counters (once a second) would be the ones from
        // before the request nearly every time.
        var seen = 0
        for round in 1...5 {
            let allowed = try network.curl("http", "allowed.test")
            #expect(allowed.status == 0, "\(allowed.output)\n\(network.log("filter-control"))")
            let object = try statusObject(network)
            let counters = try #require(object["counters"] as? [String: Any])
            #expect((object["dataProcess"] as? [String: Any])?["countersFresh"] as? Bool == true, "\(object)")
            let packets = try #require(counters["packets"] as? Int, "\(counters)")
            #expect(packets > seen, "round \(round): \(packets) packets after a request, \(seen) before it")
            seen = packets
        }

        // filter-data stopped (SIGSTOP): status still answers, after its
        // bounded wait, with the last counters and how old they are.
        let pid = try filterData(network)
        #expect(kill(pid, SIGSTOP) == 0)
        let status = try shell("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock")
        // Continued: the poll it was stopped in resumes (restart_syscall, which the
        // sandbox allows; without it filter-data exited on EPERM), and the same
        // filter-data filters on and answers.
        kill(pid, SIGCONT)
        #expect(status.status == 0, "\(status.output)")
        #expect(status.output.contains("filter-data did not answer just now"), "\(status.output)")
        #expect(status.output.contains("packets:") && !status.output.contains("packets:     - seen"), "\(status.output)")
        try network.waitFor("filter-data to answer status") {
            let again = try shell("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock")
            return again.status == 0 && again.output.contains("filter-data: pid \(pid)") && !again.output.contains("counters:")
        }
        let after = try network.curl("http", "allowed.test")
        #expect(after.status == 0, "\(after.output)\n\(network.log("filter-control"))")
        #expect(network.processIDs(runningExecutable: "filter-data") == [pid], "\(network.log("filter-control"))")
        #expect(!network.log("filter-control").contains("poll failed"), "\(network.log("filter-control"))")
    }

    /// filter-control's own DNS lookups (SafeSearch's enforcement hosts) leave
    /// from a socket with the allow mark and are not queued: they need no
    /// filter-data, in closed mode too. A query from an unmarked socket is
    /// queued as every other (filter-data's packet count shows which went
    /// through it).
    @Test func markedDNSQueriesAreNotQueued() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startDNS()
        let (config, store) = try prepare(network, failMode: "closed")
        _ = try startHallpass(network, config: config, store: store)
        let query = """
            import socket, struct, sys
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            if sys.argv[2] != "0":
                s.setsockopt(socket.SOL_SOCKET, 36, int(sys.argv[2], 0))  # SO_MARK
            s.settimeout(3)
            s.sendto(struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"\\x07allowed\\x04test\\x00" + struct.pack("!HH", 1, 1), (sys.argv[1], 53))
            try:
                answer = s.recv(512)
                print("answered" if answer[:2] == b"\\x42\\x42" else "other")
            except socket.timeout:
                print("timeout")
            """
        try query.write(toFile: network.folder + "/query.py", atomically: true, encoding: .utf8)
        func packets() throws -> Int {
            let counters = try #require(statusObject(network)["counters"] as? [String: Any])
            return try #require(counters["packets"] as? Int, "\(counters)")
        }
        let before = try packets()
        let marked = try network.inClient("python3 \(network.folder)/query.py \(network.serverIPv4) 0x00100000")
        #expect(marked.output == "answered\n", "\(marked.output)")
        let afterMarked = try packets()
        #expect(afterMarked == before, "the marked query went through filter-data: \(before) packets, then \(afterMarked)")
        let unmarked = try network.inClient("python3 \(network.folder)/query.py \(network.serverIPv4) 0")
        #expect(unmarked.output == "answered\n", "\(unmarked.output)")
        #expect(try packets() > afterMarked, "the unmarked query was not queued")
    }
}
