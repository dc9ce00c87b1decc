import FilterControl
import Foundation
import Testing

/// filter-data runs as the user `queue.user` names (threat model item 14):
/// filter-control looks the name up and hands filter-data the numbers, and a
/// name the machine does not know falls back to nobody with one line in the
/// log. The package's own user (`_hallpass`) is checked under a real systemd
/// by scripts/test-systemd.sh; here, users every Debian system has.
extension FilterIntegrationTests {
    /// The ids of a process from /proc/PID/status: every one of real, effective, saved and file system id.
    static func ids(of pid: Int32) throws -> (uids: [String], gids: [String], groups: String) {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func field(_ name: String) -> String {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }.map { String($0.dropFirst(name.count + 1)).trimmingCharacters(in: .whitespaces) } ?? ""
        }
        return (field("Uid").split(whereSeparator: \.isWhitespace).map(String.init), field("Gid").split(whereSeparator: \.isWhitespace).map(String.init), field("Groups"))
    }

    /// The sandboxed filter-data of this test (its seccomp filter is loaded last, after the user change).
    func sandboxedDataProcess(_ network: TestNetwork, notAmong old: [Int32] = []) throws -> Int32 {
        var pid: Int32 = 0
        try network.waitFor("a sandboxed filter-data") {
            guard let first = network.processIDs(runningExecutable: "filter-data").first(where: { !old.contains($0) }) else { return false }
            pid = first
            return ((try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? "").contains("Seccomp:\t2")
        }
        return pid
    }

    @Test func filterDataRunsAsTheConfiguredUserAndFallsBackToNobodyOnce() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network)
        let base = try String(contentsOfFile: config, encoding: .utf8)
        #expect(base.contains("\n  user: nobody\n"), "prepare's configuration names nobody for the build folder")
        func configure(user: String) throws {
            try base.replacingOccurrences(of: "\n  user: nobody\n", with: "\n  user: \(user)\n").write(toFile: config, atomically: true, encoding: .utf8)
        }
        let daemonUID = try shell("id -u daemon").output.trimmingCharacters(in: .whitespacesAndNewlines)
        let daemonGID = try shell("id -g daemon").output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!daemonUID.isEmpty && daemonUID != "0" && daemonUID != "65534", "this machine's user daemon: '\(daemonUID)'")

        // A system user of the machine (daemon, uid 1 on Debian): filter-data becomes exactly that user,
        // with its primary group and no other, and still filters.
        try configure(user: "daemon")
        var hallpass = try startHallpass(network, config: config, store: store)
        var pid = try sandboxedDataProcess(network)
        var ids = try Self.ids(of: pid)
        #expect(ids.uids == Array(repeating: daemonUID, count: 4), "Uid: \(ids.uids)")
        #expect(ids.gids == Array(repeating: daemonGID, count: 4), "Gid: \(ids.gids)")
        #expect(ids.groups.isEmpty, "supplementary groups: \(ids.groups)")
        let blocked = try network.curl("http", "blocked.test")
        #expect([35, 56].contains(blocked.status), "blocked.test as daemon: exit \(blocked.status) \(blocked.output)")
        #expect(try network.curl("http", "allowed.test").output == "ok allowed.test\n")
        // The same user after a restart of filter-data (filter-control keeps the numbers it looked up).
        kill(pid, SIGKILL)
        let killed = pid
        pid = try sandboxedDataProcess(network, notAmong: [killed])
        #expect(try Self.ids(of: pid).uids == Array(repeating: daemonUID, count: 4))
        #expect(!network.log("filter-control").contains("queue.user"), "\(network.log("filter-control"))")
        hallpass.stop()

        // nobody, named on purpose (the build folder's configurations): 65534 and no line about it.
        try configure(user: "nobody")
        var logged = network.log("filter-control").count
        hallpass = try startHallpass(network, config: config, store: store)
        pid = try sandboxedDataProcess(network, notAmong: [killed])
        ids = try Self.ids(of: pid)
        #expect(ids.uids == Array(repeating: "65534", count: 4) && ids.gids.allSatisfy { $0 == "65534" }, "\(ids)")
        #expect(!String(network.log("filter-control").dropFirst(logged)).contains("queue.user"))
        hallpass.stop()

        // A user this machine does not have: nobody, said once (filter-data restarts do not repeat it).
        try configure(user: "hallpass-no-such-user")
        logged = network.log("filter-control").count
        hallpass = try startHallpass(network, config: config, store: store)
        let previous = pid
        pid = try sandboxedDataProcess(network, notAmong: [killed, previous])
        #expect(try Self.ids(of: pid).uids == Array(repeating: "65534", count: 4))
        kill(pid, SIGKILL)
        _ = try sandboxedDataProcess(network, notAmong: [killed, previous, pid])
        let lines = String(network.log("filter-control").dropFirst(logged)).split(separator: "\n").filter { $0.contains("queue.user") }
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.contains("no user hallpass-no-such-user") == true && lines.first?.contains("nobody (uid 65534)") == true, "\(lines)")
        hallpass.stop()

        // root is refused before anything starts, by name and by number.
        try configure(user: "root")
        let refused = try shell("\(TestNetwork.binaries)/filter-control --config \(config) --store \(store) --runtime-dir \(network.folder)/run 2>&1")
        #expect(refused.status == 78 && refused.output.contains("queue.user") && refused.output.contains("never runs as root"), "\(refused.output)")
        let direct = try shell("\(TestNetwork.binaries)/filter-data --store \(store) --uid 0 --gid 0 2>&1")
        #expect(direct.status == 64 && direct.output.contains("never runs as root"), "\(direct.output)")
    }

    @Test func theBlockPageServesItsOwnAddressOnAPrivilegedPortAndNeverListensOnAnother() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        // The test's own namespace, with Linux's default bound (what the problems below name).
        #expect(try network.inClient("sysctl -qw net.ipv4.ip_unprivileged_port_start=1024").status == 0)
        let (config, store) = try prepare(network)
        var hallpass = try startHallpass(network, config: config, store: store)
        // The page's own address (blockPage.port, by default the listener of port 80): a direct look works.
        func page() throws -> String {
            var page = ""
            try network.waitFor("the block page on port 80") {
                page = try network.inClient("curl -sS -m 5 'http://127.0.0.1/?url=http://blocked.test/games'").output
                return page.contains("blocked.test/games")
            }
            return page
        }
        #expect(try page().contains("blocked.test"))
        func listeningPorts() throws -> (ports: Set<Int>, text: String) {
            let listening = try network.inClient("ss -Hltn").output
            let ports = listening.split(separator: "\n").compactMap {
                $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first?.split(separator: ":").last.flatMap { Int($0) }
            }
            return (Set(ports), listening)
        }
        // Nothing of the block page listens on a port a local user could take while filter-control is down.
        var listening = try listeningPorts()
        #expect(!listening.ports.isEmpty && listening.ports.allSatisfy { $0 < 1024 }, "listening: \(listening.text)")
        hallpass.stop()

        // The 0.1.0 example's port: 8080, kept by dpkg in a configuration the school edited: filter-control
        // starts all the same and filters, says so once with the key and line, does not listen on 8080
        // and serves the page's own address on httpPort (80).
        let moved = config + ".8080"
        try (String(contentsOfFile: config, encoding: .utf8) + "\nblockPage:\n  port: 8080\n").write(toFile: moved, atomically: true, encoding: .utf8)
        let lines = try String(contentsOfFile: moved, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        let line = try #require(lines.firstIndex { $0.contains("port: 8080") }) + 1
        let logged = network.log("filter-control").count
        hallpass = try startHallpass(network, config: moved, store: store)
        let blocked = try network.curl("http", "blocked.test")
        #expect([35, 56].contains(blocked.status), "blocked.test with port 8080 configured: exit \(blocked.status) \(blocked.output)")
        #expect(try network.curl("http", "allowed.test").output == "ok allowed.test\n")
        #expect(try page().contains("blocked.test"))
        listening = try listeningPorts()
        #expect(listening.ports.contains(80) && !listening.ports.contains(8080), "listening: \(listening.text)")
        #expect(listening.ports.allSatisfy { $0 < 1024 }, "listening: \(listening.text)")
        #expect(try network.inClient("curl -sS -m 5 -o /dev/null http://127.0.0.1:8080/").status == 7, "something answers on 8080")
        let said = String(network.log("filter-control").dropFirst(logged)).split(separator: "\n").filter { $0.contains("blockPage.port") }
        #expect(said.count == 1, "\(said)")
        #expect(said.first?.contains("error") == true, "\(said)")
        #expect(said.first?.contains("blockPage.port (line \(line)): port 8080") == true, "\(said)")
        #expect(said.first?.contains("ip_unprivileged_port_start is 1024") == true, "\(said)")
        #expect(said.first?.contains("serves the page's own address on httpPort (80), http://127.0.0.1/") == true, "\(said)")
        hallpass.stop()

        // For the admin, the same is an error with the key and line.
        let check = try network.inClient("\(TestNetwork.binaries)/filterctl config check \(moved)")
        #expect(check.status == 78, "exit \(check.status): \(check.output)")
        #expect(check.output.contains("blockPage.port (line \(line)): port 8080"), "\(check.output)")
        #expect(try network.inClient("\(TestNetwork.binaries)/filterctl config check \(config)").status == 0)
        // It does not keep the unit from starting: config ready reads the file as ready.
        let sourced = config + ".source"
        try String(contentsOfFile: moved, encoding: .utf8)
            .replacingOccurrences(of: "\nrules:\n", with: "\nrules:\n  source: file://\(network.folder)/bundle/\n")
            .write(toFile: sourced, atomically: true, encoding: .utf8)
        let ready = try network.inClient("\(TestNetwork.binaries)/filterctl config ready \(sourced)")
        #expect(ready.status == 0 && ready.output.contains("ready: rules come from"), "exit \(ready.status): \(ready.output)")
    }
}
