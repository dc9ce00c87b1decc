import FilterControl
import Foundation
import HallpassSystem
import SharedStore
import Testing

/// What the running filter-data holds: its standard streams, the control
/// channel, the queue socket and the rule store, nothing else (DESIGN.md).
/// filter-control listens on the block page's ports meanwhile, so a leak of
/// its sockets into the sandbox would show here.
extension FilterIntegrationTests {
    /// One open descriptor of a process, as /proc shows it.
    struct OpenDescriptor: CustomStringConvertible {
        var number: Int
        /// The link target: a path, `socket:[inode]`, `pipe:[inode]`, `anon_inode:...`.
        var target: String
        /// For sockets, the protocol the kernel names (`NETLINK`, `UNIX`, `TCP`, `TCPv6`, `UDP`, ...).
        var socketProtocol: String?

        var description: String { "fd \(number) -> \(target)" + (socketProtocol.map { " (\($0))" } ?? "") }
    }

    static func openDescriptors(of pid: Int32) throws -> [OpenDescriptor] {
        let folder = "/proc/\(pid)/fd"
        let sockets = socketProtocols(of: pid)
        return try FileManager.default.contentsOfDirectory(atPath: folder).compactMap { entry -> OpenDescriptor? in
            guard let number = Int(entry) else { return nil }
            // The descriptor may close between the listing and the read (none should, but do not crash on it).
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: folder + "/" + entry) else { return nil }
            var socketProtocol: String? = nil
            if target.hasPrefix("socket:[") {
                let inode = target.dropFirst("socket:[".count).dropLast()
                socketProtocol = sockets[String(inode)] ?? "unknown"
            }
            return OpenDescriptor(number: number, target: target, socketProtocol: socketProtocol)
        }.sorted { $0.number < $1.number }
    }

    /// Socket inode to protocol, from the tables of the process's network
    /// namespace (what `ss` reads): the inode is the last number of a
    /// netlink line, the 7th field of a unix line, the 10th of tcp/udp/raw.
    static func socketProtocols(of pid: Int32) -> [String: String] {
        let tables: [(file: String, name: String, inodeField: Int?)] = [
            ("netlink", "NETLINK", nil), ("unix", "UNIX", 6), ("packet", "PACKET", nil),
            ("tcp", "TCP", 9), ("tcp6", "TCPv6", 9), ("udp", "UDP", 9), ("udp6", "UDPv6", 9), ("raw", "RAW", 9), ("raw6", "RAWv6", 9),
        ]
        var result: [String: String] = [:]
        for table in tables {
            // BoundedFile reads to the end (Foundation stops after 4 KB of a /proc table).
            let text = String(decoding: (try? BoundedFile.read("/proc/\(pid)/net/\(table.file)", limit: 64 << 20)) ?? [], as: UTF8.self)
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                let inode = table.inodeField.flatMap { $0 < fields.count ? fields[$0] : nil } ?? fields.last
                if let inode { result[String(inode)] = table.name }
            }
        }
        return result
    }

    /// The descriptors of `pid` that the sandbox must not hold: any socket but
    /// one netlink socket (the queue) and one Unix socket on descriptor 3 (the
    /// control channel); any file but /dev/null on 0, the pipe to
    /// filter-control on 1 and 2, and the store.
    static func unexpectedDescriptors(of pid: Int32, store: String) throws -> [OpenDescriptor] {
        var netlinkSeen = false
        return try openDescriptors(of: pid).filter { descriptor in
            switch (descriptor.number, descriptor.socketProtocol) {
            case (0, nil): return descriptor.target != "/dev/null"
            case (1, nil), (2, nil): return !descriptor.target.hasPrefix("pipe:")
            case (3, "UNIX"?): return false
            case (_, "NETLINK"?):
                defer { netlinkSeen = true }
                return netlinkSeen
            case (_, nil): return descriptor.target != store
            default: return true
            }
        }
    }

    @Test func filterDataHoldsOnlyItsQueueChannelAndStoreAlsoAfterARestart() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let (_, store) = try prepare(network)
        let config = network.folder + "/blockpage.yaml"
        try FileManager.default.createDirectory(atPath: network.folder + "/lib", withIntermediateDirectories: true)
        try blockPageConfig(network).write(toFile: config, atomically: true, encoding: .utf8)
        // With the school's CA the block page listens on HTTPS too.
        let created = try shell("\(TestNetwork.binaries)/filterctl ca init --config \(config)")
        #expect(created.status == 0, "\(created.output)")
        let control = try startHallpass(network, config: config, store: store)

        // filter-control holds the listening sockets that must not leak: the page's own port, 80 and 443.
        var listening: [String] = []
        try network.waitFor("the block page to listen") {
            listening = try network.inClient("ss -ltnp").output.split(separator: "\n").filter { $0.contains("filter-control") }.map(String.init)
            return listening.contains { $0.contains(":443") } && listening.contains { $0.contains(":80 ") }
        }
        let controlSockets = try FilterIntegrationTests.openDescriptors(of: childPID(of: control, named: "filter-control"))
            .filter { $0.socketProtocol?.hasPrefix("TCP") == true }
        #expect(controlSockets.count >= 3, "filter-control should hold the block page's listeners: \(controlSockets)")

        var pids: [Int32] = []
        for round in ["at start", "after a restart"] {
            var pid: Int32 = 0
            try network.waitFor("a filter-data that is not \(pids)") {
                let running = network.processIDs(runningExecutable: "filter-data").filter { !pids.contains($0) }
                guard let first = running.first else { return false }
                pid = first
                // Sandboxed means the descriptors are final: it locks down after opening the queue and the store.
                let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
                return status.contains("Seccomp:\t2")
            }
            let unexpected = try FilterIntegrationTests.unexpectedDescriptors(of: pid, store: store)
            let all = try FilterIntegrationTests.openDescriptors(of: pid)
            #expect(unexpected.isEmpty, "filter-data \(pid) \(round) holds \(unexpected); all: \(all)")
            #expect(all.contains { $0.socketProtocol == "NETLINK" }, "no queue socket \(round): \(all)")
            #expect(all.contains { $0.number == 3 && $0.socketProtocol == "UNIX" }, "no control channel \(round): \(all)")
            pids.append(pid)
            if round == "at start" { kill(pid, SIGKILL) }
        }
    }

    /// The pid of the process `name` that `process` started (through `ip netns exec`, which execs in place).
    func childPID(of process: ChildProcess, named name: String) throws -> Int32 {
        let command = (try? String(contentsOfFile: "/proc/\(process.pid)/comm", encoding: .utf8)) ?? ""
        guard command.hasPrefix(name) else { throw TestNetworkError("process \(process.pid) is \(command), not \(name)") }
        return process.pid
    }
}
