import FilterControl
import Foundation
import Logging
import SchoolServer
import Synchronization
import Testing

/// The alerts' delivery with real mail parts on loopback: Debian's msmtp as
/// the sendmail command (`msmtp -C FILE -t`), Debian's aiosmtpd as the SMTP
/// server writing a Maildir, and a small Python HTTP server as the webhook's
/// receiver (Helpers/webhook_receiver.py). The outbox and its worker are
/// hallpass-server's own (`AlertDeliveryService` on an SQLite database of
/// the test's), run in this process as the server runs it. Every child is
/// stopped by its pid, also when the test fails.
@Suite(.serialized) struct AlertDeliveryIntegrationTests {
    /// Debian's Python: aiosmtpd is its package (python3-aiosmtpd), not a virtualenv's.
    static let python = "/usr/bin/python3"
    static let consoleURL = "https://hallpass.school.example:8443"
    static let secret = "integration-webhook-secret-0123456789"

    /// The test's children, stopped by their pids when it ends.
    final class Children: Sendable {
        private let processes = Mutex<[ChildProcess]>([])
        func add(_ process: ChildProcess) { processes.withLock { $0.append(process) } }
        func stopAll() {
            for process in processes.withLock({ $0 }) { _ = process.stop() }
        }
    }

    static func freePort() throws -> Int {
        let free = try shell(#"\#(python) -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'"#)
        guard let port = Int(free.output.trimmingCharacters(in: .whitespacesAndNewlines)) else { throw TestNetworkError("no free port: \(free.output)") }
        return port
    }

    static func waitFor(_ what: String, seconds: Int, _ condition: () throws -> Bool) throws {
        for _ in 0..<(seconds * 10) {
            if try condition() { return }
            usleep(100_000)
        }
        throw TestNetworkError("timed out waiting for \(what)")
    }

    static func waitFor(_ what: String, seconds: Int, _ condition: () async throws -> Bool) async throws {
        for _ in 0..<(seconds * 10) {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw TestNetworkError("timed out waiting for \(what)")
    }

    /// The messages of the Maildir as a mail reader sees them: envelope
    /// recipients, To, the decoded Subject, and the text part.
    struct Received: Decodable {
        let rcptTo: String
        let to: String
        let subject: String
        let text: String
        let html: String
    }

    static func received(_ maildir: String) throws -> [Received] {
        let script = """
            import email, email.policy, json, mailbox, sys
            out = []
            for message in mailbox.Maildir(sys.argv[1], factory=None, create=False):
                parsed = email.message_from_bytes(message.as_bytes(), policy=email.policy.default)
                text = parsed.get_body(preferencelist=("plain",)).get_content()
                html = parsed.get_body(preferencelist=("html",)).get_content()
                out.append({"rcptTo": parsed["X-RcptTo"], "to": parsed["To"], "subject": parsed["Subject"], "text": text, "html": html})
            print(json.dumps(out))
            """
        try script.write(toFile: maildir + ".py", atomically: true, encoding: .utf8)
        let result = try shell("\(python) \(maildir).py \(maildir)")
        guard result.status == 0 else { throw TestNetworkError("cannot read the Maildir: \(result.output)") }
        return try JSONDecoder().decode([Received].self, from: Data(result.output.utf8))
    }

    struct Post: Decodable {
        let path: String
        let contentType: String?
        let timestamp: String?
        let signature: String?
        let body: String
    }

    @Test func aDangerAlertIsEmailedOnceWaitsWhileTheMailServerIsDownAndIsPostedSigned() async throws {
        guard getuid() == 0 else { throw TestNetworkError("the integration tests run as root (scripts/test.sh)") }
        for program in ["/usr/bin/msmtp", Self.python] {
            guard FileManager.default.isExecutableFile(atPath: program) else {
                throw TestNetworkError("\(program) is missing: scripts/install-deps.sh installs msmtp and python3-aiosmtpd")
            }
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-alerts-it-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let children = Children()
        defer { children.stopAll() }

        let smtpPort = try Self.freePort()
        let hookPort = try Self.freePort()
        let maildir = folder + "/Maildir"
        try """
            defaults
            auth off
            tls off
            timeout 5
            logfile \(folder)/msmtp.log
            account school
            host 127.0.0.1
            port \(smtpPort)
            from hallpass@school.example
            account default : school
            """.write(toFile: folder + "/msmtprc", atomically: true, encoding: .utf8)
        chmod(folder + "/msmtprc", 0o600)
        try "\(Self.secret)\n".write(toFile: folder + "/webhook.secret", atomically: true, encoding: .utf8)
        chmod(folder + "/webhook.secret", 0o600)

        @Sendable func startSMTP() throws {
            let server = try ChildProcess(
                [Self.python, "-m", "aiosmtpd", "-n", "-l", "127.0.0.1:\(smtpPort)", "-c", "aiosmtpd.handlers.Mailbox", maildir],
                logPath: folder + "/smtp.log")
            children.add(server)
            try Self.waitFor("the SMTP server on port \(smtpPort)", seconds: 30) {
                guard server.isRunning else {
                    throw TestNetworkError("aiosmtpd exited: \((try? String(contentsOfFile: folder + "/smtp.log", encoding: .utf8)) ?? "")")
                }
                return try shell("\(Self.python) -c 'import socket; socket.create_connection((\"127.0.0.1\", \(smtpPort)), 1)'").status == 0
            }
        }
        let receiver = try ChildProcess(
            [
                Self.python, TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/webhook_receiver.py", "--port", String(hookPort),
                "--out", folder + "/posts.jsonl",
            ], logPath: folder + "/webhook.log")
        children.add(receiver)
        try Self.waitFor("the webhook receiver", seconds: 30) {
            ((try? String(contentsOfFile: folder + "/webhook.log", encoding: .utf8)) ?? "").contains("webhook ready")
        }

        var configuration = ServerConfiguration()
        configuration.database = .sqlite(path: folder + "/server.db")
        configuration.console.url = Self.consoleURL
        configuration.alerts = try ServerConfiguration(
            yaml: """
                alerts:
                  from: "hallpass <hallpass@school.example>"
                  sendmail: [/usr/bin/msmtp, -C, \(folder)/msmtprc, -t]
                  email: [danger]
                  escalation:
                    year7: [head.y7@school.example]
                  webhook:
                    url: http://127.0.0.1:\(hookPort)/hallpass
                    secretFile: \(folder)/webhook.secret
                """
        ).alerts
        let logger = Logger(label: "alert-delivery-it")
        let configured = configuration
        try await withServerStorage(configuration.database, logger: logger) { storage in
            _ = try await ServerAdministration.addPerson(
                storage: storage, login: "dana", displayName: "Dana Lee", role: .safeguarding, scope: .school, password: "a long test password",
                email: "dsl@school.example", author: "cli:test", now: Int64(Date().timeIntervalSince1970))
            let service = try AlertDeliveryService.make(
                configuration: configured, storage: storage, metrics: ServerMetrics(), logger: logger,
                clock: { Int64(Date().timeIntervalSince1970) })
            let worker = Task { try await service.run() }
            do {
                try await Self.deliver(service: service, storage: storage, folder: folder, maildir: maildir, startSMTP: startSMTP)
            } catch {
                worker.cancel()
                _ = await worker.result
                throw error
            }
            worker.cancel()
            _ = await worker.result
        }
    }

    static func deliver(
        service: AlertDeliveryService, storage: SQLStorage, folder: String, maildir: String, startSMTP: () throws -> Void
    ) async throws {
        do {
            func deliveries(_ alert: String) async throws -> [StoredAlertDelivery] { try await storage.alertDeliveries(alertID: alert) }

            // The mail server is not there yet: the emails wait, with msmtp's reason, and the webhook goes.
            let first = AlertMessage(
                id: "al-first", time: Int64(Date().timeIntervalSince1970) * 1000, severity: .danger, rule: "self-harm-search", user: "pupil7",
                group: "year7", room: "lab1", machine: "m-abcdefghijklmnopqrst", action: "allow", host: "www.google.com",
                url: "www.google.com/search?q=how+to+hurt+myself", category: "search", searchTerm: "how to hurt myself")
            #expect(try await service.enqueue(first) == 3)
            try await Self.waitFor("the first attempts to fail", seconds: 60) {
                try await deliveries("al-first").filter { $0.channel == .email }.allSatisfy { $0.attempts >= 1 && $0.state == .waiting }
            }
            let waiting = try await deliveries("al-first").filter { $0.channel == .email }
            #expect(waiting.allSatisfy { ($0.lastError ?? "").contains("msmtp") }, "\(waiting.map(\.lastError))")
            let early = FileManager.default.fileExists(atPath: maildir + "/new") ? try Self.received(maildir) : []
            #expect(early.isEmpty)

            // The mail server comes: the retries deliver each email, once.
            try startSMTP()
            try await Self.waitFor("the first alert's emails to be sent", seconds: 120) {
                try await deliveries("al-first").allSatisfy { $0.state == .sent }
            }
            var mails = try Self.received(maildir)
            #expect(mails.count == 2, "\(mails.map(\.to))")
            #expect(Set(mails.map(\.to)) == ["dsl@school.example", "head.y7@school.example"])
            #expect(mails.allSatisfy { $0.rcptTo == $0.to }, "msmtp -t takes the recipient from To:")
            let emailAttempts = try await deliveries("al-first").filter { $0.channel == .email }.map(\.attempts)
            #expect(emailAttempts.allSatisfy { $0 >= 2 }, "\(emailAttempts)")

            // With the mail server up: the next danger alert arrives at once, once, with the right To, Subject and links.
            var second = first
            second.id = "al-second"
            second.user = "Zoë Ångström"
            #expect(try await service.enqueue(second) == 3)
            try await Self.waitFor("the second alert's deliveries", seconds: 60) {
                try await deliveries("al-second").allSatisfy { $0.state == .sent }
            }
            #expect(try await deliveries("al-second").allSatisfy { $0.attempts == 1 })
            mails = try Self.received(maildir)
            let secondMails = mails.filter { $0.subject.contains("Zoë") }
            #expect(secondMails.count == 2, "\(mails.map(\.subject))")
            for mail in secondMails {
                #expect(mail.subject == "[hallpass] DANGER: self-harm-search for Zoë Ångström (room lab1)")
                #expect(mail.text.contains("\(Self.consoleURL)/console/timeline?user=Zo%C3%AB%20%C3%85ngstr%C3%B6m"), "\(mail.text)")
                #expect(mail.text.contains("\(Self.consoleURL)/console/alerts/al-second"))
                #expect(mail.html.contains("href=\"\(Self.consoleURL)/console/alerts/al-second\""))
            }
            // Enqueued again (a second server instance, a restart): nothing more is sent.
            #expect(try await service.enqueue(second) == 0)
            await service.runOnce()
            #expect(try Self.received(maildir).count == 4)

            // The webhook: one post for each alert, signed as docs/server.md says; the signature checked with Python's hmac.
            let posts = try String(contentsOfFile: folder + "/posts.jsonl", encoding: .utf8).split(separator: "\n")
                .map { try JSONDecoder().decode(Post.self, from: Data($0.utf8)) }
            #expect(posts.count == 2)
            for post in posts {
                #expect(post.path == "/hallpass" && post.contentType == "application/json")
                let timestamp = try #require(post.timestamp)
                #expect(Int64(timestamp).map { abs($0 - Int64(Date().timeIntervalSince1970)) < 3600 } == true)
                try post.body.write(toFile: folder + "/body", atomically: true, encoding: .utf8)
                let expected = try shell(
                    "\(Self.python) -c 'import hmac, hashlib, sys; print(\"sha256=\" + hmac.new(sys.argv[1].encode(), sys.argv[2].encode() + b\".\" + open(sys.argv[3], \"rb\").read(), hashlib.sha256).hexdigest())' \(Self.secret) \(timestamp) \(folder)/body")
                #expect(post.signature == expected.output.trimmingCharacters(in: .whitespacesAndNewlines), "\(expected.output)")
                let object = try #require(try JSONSerialization.jsonObject(with: Data(post.body.utf8)) as? [String: Any])
                #expect(object["severity"] as? String == "danger" && object["rule"] as? String == "self-harm-search")
                #expect((object["console"] as? String)?.hasPrefix("\(Self.consoleURL)/console/alerts/al-") == true)
            }
            #expect(Set(posts.compactMap { try? JSONSerialization.jsonObject(with: Data($0.body.utf8)) as? [String: Any] }.compactMap { $0["id"] as? String })
                == ["al-first", "al-second"])
        }
    }
}
