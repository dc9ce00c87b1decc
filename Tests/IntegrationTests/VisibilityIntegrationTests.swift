import FilterControl
import Foundation
import Testing

/// A person at a lab machine: a uid no account of the host has, with a
/// login name and a primary group of the same name (as Debian makes an
/// account). Only the programs started through `knownTo` see the account:
/// copies of /etc/passwd and /etc/group with the person added, mounted over
/// the originals in a mount namespace of their own. The host's files are
/// never changed.
struct TestPerson {
    let uid: UInt32
    let name: String
    let folder: String

    init(in network: TestNetwork) throws {
        var uid = UInt32.random(in: 60_000...64_000)
        while getpwuid(uid) != nil || getgrgid(uid) != nil { uid += 1 }
        self.uid = uid
        name = "hp-pupil-\(uid)"
        folder = network.folder + "/person"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let passwd = try String(contentsOfFile: "/etc/passwd", encoding: .utf8) + "\(name):x:\(uid):\(uid):pupil:/nonexistent:/usr/sbin/nologin\n"
        let groups = try String(contentsOfFile: "/etc/group", encoding: .utf8) + "\(name):x:\(uid):\n"
        try passwd.write(toFile: folder + "/passwd", atomically: true, encoding: .utf8)
        try groups.write(toFile: folder + "/group", atomically: true, encoding: .utf8)
        chmod(folder + "/passwd", 0o644)
        chmod(folder + "/group", 0o644)
    }

    private init(uid: UInt32, name: String, folder: String) {
        self.uid = uid
        self.name = name
        self.folder = folder
    }

    /// `count` pupils known to one machine's user database (one overlay of
    /// /etc/passwd and /etc/group in `folder`, which `knownTo` of any of
    /// them mounts).
    static func pupils(_ count: Int, folder: String) throws -> [TestPerson] {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        var passwd = try String(contentsOfFile: "/etc/passwd", encoding: .utf8)
        var groups = try String(contentsOfFile: "/etc/group", encoding: .utf8)
        var people: [TestPerson] = []
        var uid = UInt32.random(in: 60_000...64_000)
        while people.count < count {
            if getpwuid(uid) == nil && getgrgid(uid) == nil {
                let person = TestPerson(uid: uid, name: "hp-pupil-\(uid)", folder: folder)
                passwd += "\(person.name):x:\(uid):\(uid):pupil:/nonexistent:/usr/sbin/nologin\n"
                groups += "\(person.name):x:\(uid):\n"
                people.append(person)
            }
            uid += 1
        }
        try passwd.write(toFile: folder + "/passwd", atomically: true, encoding: .utf8)
        try groups.write(toFile: folder + "/group", atomically: true, encoding: .utf8)
        chmod(folder + "/passwd", 0o644)
        chmod(folder + "/group", 0o644)
        return people
    }

    /// A prefix for a command line: the rest runs with the person in the
    /// user database (filter-control names people through NSS).
    var knownTo: [String] {
        [
            "unshare", "--mount", "--propagation", "private", "sh", "-c",
            "mount --bind \(folder)/passwd /etc/passwd && mount --bind \(folder)/group /etc/group && exec \"$@\"", "sh",
        ]
    }

    /// `command` (a shell command line) run as the person: their uid and gid, no other group.
    func running(_ command: String) -> String {
        "setpriv --reuid=\(uid) --regid=\(uid) --clear-groups \(command)"
    }
}

/// What a school sees, through the real filter-control in the test
/// namespace with real traffic: the audit records in `log.file` and at a
/// real rsyslog collector in the server namespace (TCP, from `log.syslog`),
/// what `log.users` lets them say about the person, the Prometheus
/// endpoint scraped by a real Prometheus, and a stop under SIGTERM with all
/// of it running. Part of the serialized suite.
extension FilterIntegrationTests {
    /// The fields of every record of a blocked flow that came from a person (docs/fleet.md).
    static let blockedRecordFields: Set<String> = [
        "time", "machine", "uid", "user", "group", "kind", "host", "destination", "port", "action", "category", "rule", "reason", "rulesVersion",
    ]

    /// A configuration with the audit log's file and the collector on, in
    /// closed mode, where a flow that shows no name is blocked: the
    /// collector's connection shows none, so it reaches rsyslog only as
    /// filter-control's own (allow-marked) connection.
    func auditConfiguration(
        _ network: TestNetwork, machine: String, users: String, metricsPort: Int? = nil, category: String = "demo"
    ) throws -> String {
        let config = network.folder + "/\(machine).yaml"
        try """
            queue:
              # The build folder has no _hallpass (the package's user for filter-data).
              user: nobody
              number: 3
              failMode: closed
            rules:
              directory: \(network.folder)/lib
            policy:
              block: [ \(category) ]
              unknown: allow
              noName: block
            log:
              file: \(network.folder)/\(machine).jsonl
              journald: false
              syslog: tcp://\(network.serverIPv4):514
              users: \(users)
              machine: \(machine)
              pseudonymKey: \(network.folder)/pseudonym.key
            admin:
              socket: \(network.folder)/control.sock
            """.appending(metricsPort.map { "\nmetrics:\n  address: 127.0.0.1\n  port: \($0)\n" } ?? "\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        return config
    }

    /// The audit file's records, each as its JSON object and its line.
    func auditRecords(_ path: String) -> [(fields: [String: Any], line: String)] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return (object, String(line))
        }
    }

    /// Polls every 50 ms until `found` gives a value or `seconds` have passed since `since`.
    func within<T>(_ seconds: Double, of since: Date, _ found: () throws -> T?) rethrows -> T? {
        while true {
            if let value = try found() { return value }
            if Date().timeIntervalSince(since) > seconds { return nil }
            usleep(50_000)
        }
    }

    /// The collector's lines from `machine` (rsyslog's file for that host name).
    func collectorLines(_ collected: String, machine: String) -> [String] {
        ((try? String(contentsOfFile: collected + "/\(machine).log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test func aBlockedRequestReachesTheAuditFileAndTheCollectorWithinTwoSeconds() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let collected = try network.startCollector()
        let person = try TestPerson(in: network)
        let store = network.folder + "/rules.hpstore"
        try compile(network, ["blocked.test"], version: 7, to: store)
        let config = try auditConfiguration(network, machine: "lab-names", users: "name")
        _ = try startHallpass(network, config: config, store: store, wrapper: person.knownTo)
        let file = network.folder + "/lab-names.jsonl"

        let asked = Date()
        let https = try network.curl("https", "blocked.test", as: person)
        #expect(isReset(https), "https://blocked.test as \(person.name): exit \(https.status) \(https.output)")
        let decided = Date()
        let tls = within(2, of: decided) { auditRecords(file).first { $0.fields["kind"] as? String == "tls" } }
        let record = try #require(tls, "no record in \(file) within 2 s of the blocked request\n\(network.log("filter-control"))")
        #expect(Set(record.fields.keys) == Self.blockedRecordFields, "\(record.line)")
        let time = try #require(AuditTime.parse(record.fields["time"] as? String ?? ""), "\(record.line)")
        #expect(time >= asked.addingTimeInterval(-0.001) && time <= Date(), "time \(time) is not between the request (\(asked)) and now")
        #expect(record.fields["machine"] as? String == "lab-names")
        #expect(record.fields["uid"] as? Int == Int(person.uid))
        #expect(record.fields["user"] as? String == person.name, "the name from the user database")
        #expect(record.fields["group"] as? String == person.name, "the person's primary group (no policy groups)")
        #expect(record.fields["host"] as? String == "blocked.test")
        #expect(record.fields["destination"] as? String == network.serverIPv4)
        #expect(record.fields["port"] as? Int == 443)
        #expect(record.fields["action"] as? String == "block")
        #expect(record.fields["category"] as? String == "demo")
        #expect(record.fields["rule"] as? String == "blocked.test")
        #expect(record.fields["reason"] as? String == "category")
        #expect(record.fields["rulesVersion"] as? Int == 7)

        // The same record at the school's collector, over TCP.
        let received = within(2, of: decided) {
            collectorLines(collected, machine: "lab-names").first { $0.contains("kind=\"tls\"") }
        }
        let line = try #require(received, "rsyslog received no record within 2 s\n\(network.log("rsyslog"))\n\(network.log("filter-control"))")
        for field in [
            "[hallpass@32473 ", "uid=\"\(person.uid)\"", "user=\"\(person.name)\"", "group=\"\(person.name)\"", "host=\"blocked.test\"",
            "destination=\"\(network.serverIPv4)\"", "port=\"443\"", "action=\"block\"", "category=\"demo\"", "rule=\"blocked.test\"",
            "reason=\"category\"", "rulesVersion=\"7\"",
            "block tls blocked.test:443 (user \(person.name), group \(person.name)): category demo, rule blocked.test",
        ] {
            #expect(line.contains(field), "\(field) missing at the collector: \(line)")
        }

        // Plain HTTP: the record carries the whole URL.
        let http = try network.curl("http", "www.blocked.test", path: "/lesson?page=2", as: person)
        #expect(isReset(http), "exit \(http.status) \(http.output)")
        let httpRecord = within(2, of: Date()) { auditRecords(file).first { $0.fields["kind"] as? String == "http" } }
        #expect(httpRecord?.fields["url"] as? String == "http://www.blocked.test/lesson?page=2", "\(httpRecord?.line ?? "no record")")
        #expect(httpRecord?.fields["port"] as? Int == 80 && httpRecord?.fields["host"] as? String == "www.blocked.test")
        #expect(auditRecords(file).count == 2, "one record per blocked flow: \(auditRecords(file).map(\.line))")
    }

    @Test func pseudonymsAndNoneKeepTheNameOutOfTheFileAndTheCollector() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let collected = try network.startCollector()
        let person = try TestPerson(in: network)
        let store = network.folder + "/rules.hpstore"
        try compile(network, ["blocked.test"], version: 7, to: store)
        // The school's key, as its configuration management would copy it.
        let key = (0..<32).map { _ in UInt8.random(in: 0...255) }
        #expect(FileManager.default.createFile(atPath: network.folder + "/pseudonym.key", contents: Data(key), attributes: [.posixPermissions: 0o600]))
        let pseudonym = Pseudonyms(key: key).pseudonym(for: person.name)

        for users in ["pseudonym", "none"] {
            let machine = "lab-\(users)"
            let config = try auditConfiguration(network, machine: machine, users: users)
            let hallpass = try startHallpass(network, config: config, store: store, wrapper: person.knownTo)
            let blocked = try network.curl("https", "blocked.test", as: person)
            #expect(isReset(blocked), "exit \(blocked.status) \(blocked.output)")
            let decided = Date()
            let record = within(2, of: decided) { auditRecords(network.folder + "/\(machine).jsonl").first }
            let line = within(2, of: decided) { collectorLines(collected, machine: machine).first { $0.contains("host=\"blocked.test\"") } }
            #expect(hallpass.stop() == 0, "filter-control did not stop cleanly:\n\(network.log("filter-control"))")
            let written = try #require(record, "users: \(users): no record in the file\n\(network.log("filter-control"))")
            let sent = try #require(line, "users: \(users): no record at the collector\n\(network.log("rsyslog"))")

            for text in [written.line, sent] {
                #expect(!text.contains(person.name), "users: \(users) lets the name through: \(text)")
            }
            #expect(written.fields["uid"] == nil && !sent.contains("uid="), "users: \(users) lets the uid through:\n\(written.line)\n\(sent)")
            #expect(written.fields["group"] == nil, "a primary group named after the person is not kept: \(written.line)")
            #expect(written.fields["host"] as? String == "blocked.test" && written.fields["action"] as? String == "block")
            if users == "pseudonym" {
                #expect(written.fields["user"] as? String == pseudonym, "the pseudonym under the school's key: \(written.line)")
                #expect(sent.contains("user=\"\(pseudonym)\"") && sent.contains("(user \(pseudonym))"), "\(sent)")
            } else {
                #expect(written.fields["user"] == nil, "\(written.line)")
                #expect(!sent.contains("user="), "\(sent)")
            }
        }
    }

    @Test func sigtermStopsFilterControlWithItsAuditLogCollectorAndMetricsRunning() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let collected = try network.startCollector()
        let person = try TestPerson(in: network)
        let store = network.folder + "/rules.hpstore"
        try compile(network, ["blocked.test"], version: 7, to: store)
        let config = try auditConfiguration(network, machine: "lab-stop", users: "name", metricsPort: 9733)
        let hallpass = try startHallpass(network, config: config, store: store, wrapper: person.knownTo)
        let data = try filterData(network)
        #expect(!(try hallpassRules(network)).isEmpty)
        #expect(try network.inClient("curl -sf -o /dev/null http://127.0.0.1:9733/metrics").status == 0, "the metrics endpoint is not up")

        // Forty blocked flows at once, then SIGTERM as soon as the last one was refused.
        let burst = try network.inClient(
            "seq 1 40 | xargs -P 10 -I N "
                + person.running("curl -s -o /dev/null -m 5 --resolve bN.blocked.test:80:\(network.serverIPv4) http://bN.blocked.test/"))
        #expect(burst.status != 0, "the blocked flows were let through")
        #expect(kill(hallpass.pid, SIGTERM) == 0)
        let status = hallpass.wait(atMost: 10)
        let log = network.log("filter-control")
        #expect(status == 0, "filter-control did not end within 10 s of SIGTERM:\n\(log)")
        #expect(log.contains("filter-data stopped (exit status 0)") && log.contains("audit: stopped") && log.contains("kernel rules removed"), "\(log)")
        #expect(kill(data, 0) != 0, "filter-data \(data) is still running")
        #expect(network.processIDs(runningExecutable: "filter-data").isEmpty)
        let left = try hallpassRules(network)
        #expect(left.isEmpty, "\(left)")
        #expect(try network.inClient("curl -s -o /dev/null -m 2 http://127.0.0.1:9733/metrics").status != 0, "the metrics endpoint outlived filter-control")

        // Every flow refused before the stop is in the file, and reached the collector.
        let expected = Set((1...40).map { "b\($0).blocked.test" })
        let inFile = auditRecords(network.folder + "/lab-stop.jsonl").compactMap { $0.fields["host"] as? String }
        #expect(Set(inFile) == expected && inFile.count == 40, "\(inFile.count) records in the file: \(inFile.sorted())")
        let atCollector = within(2, of: Date()) { () -> [String]? in
            let lines = collectorLines(collected, machine: "lab-stop")
            return lines.count >= 40 ? lines : nil
        } ?? collectorLines(collected, machine: "lab-stop")
        let hosts = atCollector.compactMap { line in expected.first { line.contains("host=\"\($0)\"") } }
        #expect(Set(hosts) == expected && hosts.count == 40, "\(hosts.count) records at the collector")
    }

    @Test func prometheusScrapesABlockedRequestIntoTheDecisionCounter() throws {
        let tools = try ["prometheus", "promtool"].map { name in
            try #require(
                TestNetwork.executable(name) ?? TestNetwork.unpackedPrometheus(name),
                "\(name) is missing: scripts/install-deps.sh unpacks Debian's prometheus package into .build/prometheus")
        }
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        // A category of this test's own, so the counter can only move with its requests.
        try "casino.test\n".write(toFile: network.folder + "/casino.txt", atomically: true, encoding: .utf8)
        let store = network.folder + "/rules.hpstore"
        let compiled = try shell("\(TestNetwork.binaries)/filterctl compile --quiet --version 3 --out \(store) gambling=\(network.folder)/casino.txt")
        #expect(compiled.status == 0, "\(compiled.output)")
        let config = network.folder + "/metrics.yaml"
        try """
            queue:
              # The build folder has no _hallpass (the package's user for filter-data).
              user: nobody
              number: 3
            rules:
              directory: \(network.folder)/lib
            policy:
              block: [ gambling ]
            log:
              file: \(network.folder)/audit.jsonl
              journald: false
            admin:
              socket: \(network.folder)/control.sock
            metrics:
              address: 127.0.0.1
              port: 9733
            """.write(toFile: config, atomically: true, encoding: .utf8)
        _ = try startHallpass(network, config: config, store: store)

        // Prometheus in the client namespace with its own configuration and storage, scraping every second.
        try FileManager.default.createDirectory(atPath: network.folder + "/tsdb", withIntermediateDirectories: true)
        try """
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
            scrape_configs:
              - job_name: hallpass
                static_configs:
                  - targets: [ "127.0.0.1:9733" ]
            """.write(toFile: network.folder + "/prometheus.yml", atomically: true, encoding: .utf8)
        try network.start(
            [
                "ip", "netns", "exec", network.client, tools[0], "--config.file=\(network.folder)/prometheus.yml",
                "--storage.tsdb.path=\(network.folder)/tsdb", "--web.listen-address=127.0.0.1:9090",
            ], log: "prometheus")
        try network.waitFor("Prometheus to be ready", attempts: 300) {
            try network.inClient("curl -sf -o /dev/null http://127.0.0.1:9090/-/ready").status == 0
        }
        /// The value of an instant query with one result, nil when it has none.
        func query(_ expression: String) throws -> Double? {
            let answer = try network.inClient("curl -sf -G http://127.0.0.1:9090/api/v1/query --data-urlencode 'query=\(expression)'")
            guard answer.status == 0, let object = try JSONSerialization.jsonObject(with: Data(answer.output.utf8)) as? [String: Any],
                object["status"] as? String == "success", let data = object["data"] as? [String: Any],
                let result = data["result"] as? [[String: Any]], let value = result.first?["value"] as? [Any], let text = value.last as? String
            else { return nil }
            return Double(text)
        }
        try network.waitFor("Prometheus's first scrape of filter-control", attempts: 150) { try query("up{job=\"hallpass\"}") == 1 }
        let blocks = "sum(hallpass_decisions_total{action=\"block\",category=\"gambling\"})"
        let before = try query(blocks) ?? 0

        let blocked = try network.curl("https", "casino.test")
        #expect(isReset(blocked), "exit \(blocked.status) \(blocked.output)")
        let http = try network.curl("http", "www.casino.test")
        #expect(isReset(http), "exit \(http.status) \(http.output)")
        #expect(try network.curl("https", "allowed.test").status == 0)
        try? network.waitFor("the counter at Prometheus", attempts: 150) { try query(blocks) == before + 2 }
        let after = try query(blocks)
        let expected: Double = before + 2
        #expect(after == expected, "Prometheus sees \(String(describing: after)) blocked decisions in gambling, expected \(expected)")
        #expect(try query("hallpass_decisions_total{action=\"block\",category=\"gambling\",kind=\"tls\"}") == 1)
        #expect(try query("hallpass_decisions_total{action=\"block\",category=\"gambling\",kind=\"http\"}") == 1)

        // promtool accepts the endpoint's exposition, as it stands after the traffic.
        let checked = try network.inClient("curl -sf http://127.0.0.1:9733/metrics | \(tools[1]) check metrics")
        #expect(checked.status == 0, "promtool check metrics: \(checked.output)")
    }
}

extension TestNetwork {
    /// The path of `name` on the PATH, nil when it is not there.
    static func executable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/sbin:/usr/bin:/sbin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { access($0, X_OK) == 0 }
    }

    /// `name` (prometheus, promtool) from Debian's package as scripts/install-deps.sh unpacks it.
    static func unpackedPrometheus(_ name: String) -> String? {
        let path = packageRoot + "/.build/prometheus/usr/bin/" + name
        return access(path, X_OK) == 0 ? path : nil
    }
}
