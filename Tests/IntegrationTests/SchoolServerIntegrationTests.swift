import FilterControl
import Foundation
import Testing

/// The school's side end to end with real parts: hallpass-server on SQLite
/// in the server namespace, a lab machine (filter-control and filter-data on
/// the kernel's queue) in the client namespace enrolled with
/// `filterctl enroll` and a token from `hallpass-server token create`, and
/// real blocked traffic. Part of the serialized suite (it filters the
/// client namespace's traffic).
extension FilterIntegrationTests {
    /// hallpass-server in the server namespace, its files in `folder/school`.
    struct SchoolServer {
        let network: TestNetwork
        var folder: String { network.folder + "/school" }
        var config: String { folder + "/server.yaml" }
        var database: String { folder + "/server.db" }
        var url: String { "https://\(network.serverIPv4):8443" }

        init(_ network: TestNetwork) throws {
            self.network = network
            try FileManager.default.createDirectory(atPath: network.folder + "/school", withIntermediateDirectories: true)
            // The school's own certificate (a P-256 key, as `init` would make): its fingerprint is what the token pins.
            let made = try shell(
                "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(folder)/server.key "
                    + "-out \(folder)/server.crt -subj /CN=school -addext subjectAltName=IP:\(network.serverIPv4) -days 2 2>&1")
            try #require(made.status == 0, "\(made.output)")
            try """
                listen:
                  address: \(network.serverIPv4)
                  port: 8443
                tls:
                  certificate: \(folder)/server.crt
                  key: \(folder)/server.key
                database: \(database)
                """.write(toFile: config, atomically: true, encoding: .utf8)
            let initialized = try command("init")
            try #require(initialized.status == 0, "\(initialized.output)")
        }

        /// A hallpass-server command on this server's configuration.
        func command(_ arguments: String) throws -> (status: Int32, output: String) {
            try shell("\(TestNetwork.binaries)/hallpass-server \(arguments) --config \(config) 2>&1")
        }

        func start() throws -> ChildProcess {
            let process = try network.start(
                ["ip", "netns", "exec", network.server, TestNetwork.binaries + "/hallpass-server", "serve", "--config", config], log: "hallpass-server")
            try network.waitFor("hallpass-server to listen") {
                try network.inClient("curl -sk -o /dev/null -m 2 \(url)/metrics").status == 0
            }
            return process
        }

        /// One number from the server's database (Python's sqlite3 module reads the file the server writes).
        func count(_ query: String) throws -> Int {
            let result = try shell("python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' \(database) \"\(query)\"")
            guard result.status == 0, let value = Int(result.output.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw TestNetworkError("cannot read \(database): \(result.output)")
            }
            return value
        }
    }

    /// The audit file's records (one JSON object a line) that say `action` block.
    func blockedRecords(_ network: TestNetwork) -> Int {
        let text = (try? String(contentsOfFile: network.folder + "/audit.jsonl", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { $0.contains("\"action\":\"block\"") }.count
    }

    @Test func aMachineEnrolsAndEveryRecordReachesTheServerOnceThroughAnOutage() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let school = try SchoolServer(network)
        var server = try school.start()

        let token = try school.command("token create --room lab1 --uses 1")
        try #require(token.status == 0, "\(token.output)")
        let secret = try #require(token.output.split(separator: "\n").last { $0.hasPrefix("hp1.") }).trimmingCharacters(in: .whitespaces)

        // A token of another server (another fingerprint) is refused before anything is sent.
        let otherFingerprint = String(repeating: "ab", count: 32)
        let parts = secret.split(separator: ".")
        let forged = "hp1.\(otherFingerprint).\(parts[2])"
        let (config, store) = try prepare(network)
        let refused = try network.inClient("\(TestNetwork.binaries)/filterctl enroll \(school.url) \(forged) --config \(config) 2>&1")
        #expect(refused.status != 0 && refused.output.contains("fingerprint"), "\(refused.output)")
        #expect(try school.count("SELECT COUNT(*) FROM machines") == 0)

        let enrolled = try network.inClient("\(TestNetwork.binaries)/filterctl enroll \(school.url) \(secret) --config \(config) 2>&1")
        try #require(enrolled.status == 0, "\(enrolled.output)")
        #expect(try String(contentsOfFile: config, encoding: .utf8).contains("school:"))
        #expect(try school.count("SELECT COUNT(*) FROM machines WHERE room = 'lab1'") == 1)
        // The token had one use: a second machine with it is refused.
        try "rules:\n  directory: \(network.folder)/second\n".write(toFile: network.folder + "/second.yaml", atomically: true, encoding: .utf8)
        let again = try network.inClient(
            "\(TestNetwork.binaries)/filterctl enroll \(school.url) \(secret) --config \(network.folder)/second.yaml 2>&1")
        #expect(again.status != 0 && again.output.contains("used"), "\(again.output)")

        _ = try startHallpass(network, config: config, store: store)
        for _ in 0..<5 { _ = try network.curl("http", "blocked.test") }
        try network.waitFor("the first blocked records at the server") {
            try school.count("SELECT COUNT(*) FROM records WHERE action = 'block'") >= 5
        }
        try network.waitFor("the machine's first check-in", attempts: 900) {
            try school.count("SELECT COUNT(*) FROM machines WHERE checkin_at IS NOT NULL") == 1
        }

        // The server goes away; the machine goes on filtering and keeps what it owes.
        #expect(server.stop() != nil)
        for _ in 0..<7 { _ = try network.curl("http", "blocked.test") }
        try network.waitFor("12 blocked records in the audit file") { blockedRecords(network) >= 12 }

        server = try school.start()
        // The sender waits longer after each failed post (1 s, doubling): up to two minutes.
        let written = try network.waitForValue("every record of the audit file at the server", attempts: 1200) { () -> Int? in
            let inFile = (try? String(contentsOfFile: network.folder + "/audit.jsonl", encoding: .utf8))?.split(separator: "\n").count ?? 0
            return try school.count("SELECT COUNT(*) FROM records") == inFile && inFile >= 12 ? inFile : nil
        }
        // Once each, numbered 1...n without a gap, all of this one machine.
        #expect(try school.count("SELECT COUNT(DISTINCT sequence) FROM records") == written)
        #expect(try school.count("SELECT MIN(sequence) FROM records") == 1)
        #expect(try school.count("SELECT MAX(sequence) FROM records") == written)
        #expect(try school.count("SELECT COUNT(DISTINCT machine) FROM records") == 1)
        #expect(try school.count("SELECT COUNT(*) FROM records WHERE action = 'block' AND host = 'blocked.test' AND category = 'demo'") >= 12)

        // The machine is listed, and filtering.
        let listed = try school.command("machine list")
        #expect(listed.status == 0 && listed.output.contains("lab1") && listed.output.contains("ok"), "\(listed.output)")
    }
}

extension TestNetwork {
    /// Waits until `value` gives something, and returns it.
    func waitForValue<T>(_ what: String, attempts: Int = 300, _ value: () throws -> T?) throws -> T {
        var found: T?
        try waitFor(what, attempts: attempts) {
            found = try value()
            return found != nil
        }
        return found!
    }
}
