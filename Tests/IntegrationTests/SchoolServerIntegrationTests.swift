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
            // Ten days: a test may run the server on a clock up to a week ahead (the safeguarding digest's Monday).
            let made = try shell(
                "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(folder)/server.key "
                    + "-out \(folder)/server.crt -subj /CN=school -addext subjectAltName=IP:\(network.serverIPv4) -days 10 2>&1")
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

        /// Starts `hallpass-server serve`, under `wrapper` when given (`env` and
        /// its variables, e.g. libfaketime's), and waits for it to listen.
        func start(wrapper: [String] = []) throws -> ChildProcess {
            let process = try network.start(
                ["ip", "netns", "exec", network.server] + wrapper + [TestNetwork.binaries + "/hallpass-server", "serve", "--config", config],
                log: "hallpass-server")
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

    /// The server's log lines for `GET /bundle/NAME` (BundleRoutes: "bundle GET NAME STATUS BYTES bytes to PEER"),
    /// from line `from` on: (name, status, bytes, peer).
    func bundleDownloads(_ network: TestNetwork, from: Int = 0) -> [(name: String, status: Int, bytes: Int, peer: String)] {
        let lines = network.log("hallpass-server").split(separator: "\n", omittingEmptySubsequences: false).dropFirst(from)
        return lines.compactMap { line in
            guard let range = line.range(of: "bundle GET ") else { return nil }
            let fields = line[range.upperBound...].split(separator: " ")
            guard fields.count >= 6, fields[3] == "bytes", fields[4] == "to", let status = Int(fields[1]), let bytes = Int(fields[2]) else {
                return nil
            }
            return (String(fields[0]), status, bytes, String(fields[5]))
        }
    }

    /// A machine enrolled with a server that publishes takes its rules from
    /// the server's /bundle/ (no rules.source of its own; the pinned key, the
    /// keys from enrolment), and a policy-only publication reaches it by its
    /// check-in alone, costing the policy file and the manifest, never the
    /// store: the server's log of bundle downloads shows it.
    @Test func aMachineTakesItsRulesFromThePublishingServerAndAPolicyChangeCostsThePolicyAlone() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let school = try SchoolServer(network)
        _ = try school.start()

        // The school's list and policy, set and published through the server.
        try "blocked.test\n".write(toFile: school.folder + "/demo.txt", atomically: true, encoding: .utf8)
        let policy = "policy:\n  block: [ demo ]\n  unknown: allow\n"
        try policy.write(toFile: school.folder + "/policy-1.yaml", atomically: true, encoding: .utf8)
        let set = try school.command("policy set --policy \(school.folder)/policy-1.yaml --list demo=\(school.folder)/demo.txt --reason 'the first policy'")
        try #require(set.status == 0, "\(set.output)")
        let published = try school.command("publish --reason 'rules for lab1'")
        try #require(published.status == 0, "\(published.output)")

        let token = try school.command("token create --room lab1")
        let secret = try #require(token.output.split(separator: "\n").last { $0.hasPrefix("hp1.") }).trimmingCharacters(in: .whitespaces)
        let (config, _) = try prepare(network)
        let enrolled = try network.inClient("\(TestNetwork.binaries)/filterctl enroll \(school.url) \(secret) --config \(config) 2>&1")
        try #require(enrolled.status == 0, "\(enrolled.output)")
        let configuration = try Configuration(yaml: String(contentsOfFile: config, encoding: .utf8))
        #expect(configuration.school?.bundleKeys.count == 1)
        #expect(configuration.rules.source == "\(school.url)/bundle/", "\(configuration.rules)")

        // No --store: filter-control fetches its first rules from the server.
        _ = try network.start(
            [
                "ip", "netns", "exec", network.client, TestNetwork.binaries + "/filter-control", "--config", config,
                "--runtime-dir", network.folder + "/run",
            ], log: "filter-control")
        try network.waitFor("filter-data to bind queue 3") {
            let queues = try network.inClient("cat /proc/net/netfilter/nfnetlink_queue").output
            return queues.split(separator: "\n").contains { $0.split(separator: " ", omittingEmptySubsequences: true).first == "3" }
        }
        let machine = "10.77."
        let first = bundleDownloads(network).filter { $0.peer.hasPrefix(machine) && $0.status == 200 }
        #expect(Set(first.map(\.name)) == ["manifest", "manifest.sig", "rules.hpstore", "policy.yaml"], "\(first)")
        #expect(try network.curl("http", "allowed.test").output == "ok allowed.test\n")
        #expect(try network.curl("http", "blocked.test").status != 0)
        func rulesVersion() throws -> String {
            try network.inClient("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock").output
        }
        let status = try rulesVersion()
        #expect(status.contains("version 1,"), "\(status)")
        try network.waitFor("the machine's first check-in", attempts: 900) {
            try school.count("SELECT COUNT(*) FROM machines WHERE checkin_at IS NOT NULL") == 1
        }

        // A policy-only change: allowed.test is denied from now on; the list stays.
        try (policy + "  deny: [ allowed.test ]\n").write(toFile: school.folder + "/policy-2.yaml", atomically: true, encoding: .utf8)
        let changed = try school.command("policy set --policy \(school.folder)/policy-2.yaml --reason 'allowed.test distracts'")
        try #require(changed.status == 0, "\(changed.output)")
        let mark = network.log("hallpass-server").split(separator: "\n", omittingEmptySubsequences: false).count - 1
        let second = try school.command("publish --reason 'deny allowed.test'")
        try #require(second.status == 0, "\(second.output)")
        // Nobody reloads the machine: its next check-in (every 60 s) hears of version 2 and fetches it.
        try network.waitFor("the machine to install version 2 by itself", attempts: 1500) {
            try rulesVersion().contains("version 2,")
        }
        let update = bundleDownloads(network, from: mark).filter { $0.peer.hasPrefix(machine) }
        let fetched = update.filter { $0.status == 200 }
        #expect(Set(fetched.map(\.name)) == ["manifest", "manifest.sig", "policy.yaml"], "\(update)")
        #expect(!update.contains { $0.name == "rules.hpstore" && $0.status == 200 }, "the store did not change: \(update)")
        #expect(try network.curl("http", "allowed.test").status != 0, "the new policy is in force")
        #expect(try network.curl("http", "blocked.test").status != 0)
        let listed = try school.command("machine list")
        #expect(listed.status == 0, "\(listed.output)")
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
