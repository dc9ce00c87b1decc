import Foundation
import HallpassSystem

/// A PostgreSQL cluster of the tests' own: made with Debian's initdb in a
/// folder under /tmp, listening only on a unix socket in that folder,
/// stopped and removed when the last test using it is done (also when a
/// test fails). Run as the `postgres` user when the tests run as root
/// (PostgreSQL refuses root), as the tests' own user otherwise. Never
/// touches a cluster it did not make.
final class PostgresCluster: Sendable {
    static let binaries = "/usr/lib/postgresql/15/bin"

    let folder: String
    let port: Int
    var socketDirectory: String { folder }
    var data: String { folder + "/data" }

    private init(folder: String, port: Int) {
        self.folder = folder
        self.port = port
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func start() throws -> PostgresCluster {
        guard FileManager.default.isExecutableFile(atPath: binaries + "/initdb") else {
            throw Failure(description: "no \(binaries)/initdb: install Debian's postgresql (scripts/install-deps.sh does)")
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-pg-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let cluster = PostgresCluster(folder: folder, port: Int.random(in: 20_000..<60_000))
        do {
            if getuid() == 0 {
                try run("/bin/chown", ["postgres:postgres", folder])
            }
            try cluster.watchOver()
            try cluster.asOwner(binaries + "/initdb", ["-D", cluster.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            // Connections: the tests that run at once each hold a server's pool (up to 10)
            // and, since the live channel, its listener; two instances in one test hold two.
            // A stopping server's pool now outlives its queries, and one that does not end
            // is left behind with its connections (PostgresEngine.run): 300 ran out once in CI.
            try cluster.asOwner(
                binaries + "/pg_ctl",
                [
                    "-D", cluster.data, "-l", folder + "/server.log", "-w", "-t", "60", "-o",
                    "-c listen_addresses='' -c unix_socket_directories='\(folder)' -p \(cluster.port) -c fsync=off -c max_connections=1000",
                    "start",
                ])
        } catch {
            let log = (try? String(contentsOfFile: folder + "/server.log", encoding: .utf8)) ?? ""
            cluster.stop()
            throw Failure(description: "could not start the test's PostgreSQL: \(error)\n\(log)")
        }
        return cluster
    }

    /// Makes a new, empty database and returns its name.
    func createDatabase() throws -> String {
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        try Self.run(Self.binaries + "/createdb", ["-h", folder, "-p", String(port), "-U", "postgres", name])
        return name
    }

    func stop() {
        if FileManager.default.fileExists(atPath: data + "/postmaster.pid") {
            try? asOwner(Self.binaries + "/pg_ctl", ["-D", data, "-m", "immediate", "-w", "-t", "30", "stop"])
        }
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func asOwner(_ program: String, _ arguments: [String]) throws {
        if getuid() == 0 {
            try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", program] + arguments)
        } else {
            try Self.run(program, arguments)
        }
    }

    /// Runs `program` to its end; throws with its output when it fails.
    /// (HallpassSystem's spawn and waitpid, not Foundation's Process, whose
    /// wait missed the child's end under the test runner.)
    static func run(_ program: String, _ arguments: [String]) throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-pg-run-\(UUID().uuidString.prefix(8)).log").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        // From /: the postgres user may not read the tests' own folder.
        let child = try ProcessID.spawn(executable: "/usr/bin/env", arguments: ["-C", "/", program] + arguments, outputPath: output)
        let status = child.reap(blocking: true) ?? 255
        guard status == 0 else {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            throw Failure(description: "\(program) \(arguments.joined(separator: " ")) exited \(status): \(text)")
        }
    }

    /// If the test process dies before it stops the cluster (a crash, a
    /// kill), a watcher of its own stops and removes it: no cluster outlives
    /// the tests.
    private func watchOver() throws {
        let stop =
            getuid() == 0
            ? "runuser -u postgres -- \(Self.binaries)/pg_ctl -D '\(data)' -m immediate -w stop"
            : "\(Self.binaries)/pg_ctl -D '\(data)' -m immediate -w stop"
        let script = "while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; [ -d '\(data)' ] && \(stop); rm -rf '\(folder)'"
        _ = try ProcessID.spawn(executable: "/bin/sh", arguments: ["-c", script], outputPath: "/dev/null")
    }
}

/// One cluster shared by the tests that run at the same time: started by
/// the first, stopped and removed when the last one leaves.
actor SharedPostgres {
    static let shared = SharedPostgres()
    private var cluster: PostgresCluster?
    private var users = 0

    func acquire() throws -> PostgresCluster {
        if let cluster {
            users += 1
            return cluster
        }
        let started = try PostgresCluster.start()
        cluster = started
        users = 1
        return started
    }

    func release() {
        users -= 1
        if users == 0 {
            cluster?.stop()
            cluster = nil
        }
    }
}
