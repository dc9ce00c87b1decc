import Foundation
import HallpassConfig
import Logging
@testable import SchoolServer
import Synchronization
import Testing

/// The alerts' delivery (docs/server.md, "Alert delivery"): the email as written
/// (MIME, encoded-words, no header from data, HTML escaped), the webhook's
/// signature against a vector computed outside Swift, the retry schedule,
/// the outbox's lease on both engines, `alerts:` and `console.url` in
/// server.yaml, and the worker with a sendmail of the test's own (a shell
/// script) and a webhook transport that records.
@Suite struct AlertDeliveryTests {
    static let now: Int64 = 1_764_320_400
    /// The worker's retries log a warning each, by design; a day of them is no help in a test's output.
    static let quiet: Logger = {
        var logger = Logger(label: "alert-delivery-tests")
        logger.logLevel = .critical
        return logger
    }()

    static func message(
        id: String = "al-1", severity: AlertMessage.Severity = .danger, user: String? = "pupil7", group: String? = "year7",
        room: String? = "lab1"
    ) -> AlertMessage {
        AlertMessage(
            id: id, time: now * 1000, severity: severity, rule: "self-harm-search", user: user, group: group, room: room, machine: "m-abc",
            action: "allow", host: "www.google.com", url: "www.google.com/search?q=how+to", category: "search", searchTerm: "how to")
    }

    // MARK: The email

    /// The header lines of a rendered message (to its first empty line), continuation lines joined to theirs.
    static func headers(_ rendered: String) -> [(name: String, value: String)] {
        var result: [(String, String)] = []
        for line in rendered.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.isEmpty { break }
            if line.hasPrefix(" ") || line.hasPrefix("\t") {
                result[result.count - 1].1 += String(line)
            } else {
                let parts = line.split(separator: ":", maxSplits: 1)
                result.append((String(parts[0]), parts.count > 1 ? String(parts[1].dropFirst()) : ""))
            }
        }
        return result
    }

    /// RFC 2047 `=?UTF-8?B?...?=` words decoded (what a mail reader shows); other text as it is.
    static func decodeWords(_ value: String) -> String {
        var text = ""
        var rest = Substring(value)
        while let start = rest.range(of: "=?UTF-8?B?") {
            text += rest[..<start.lowerBound].trimmingCharacters(in: .whitespaces)
            let after = rest[start.upperBound...]
            guard let end = after.range(of: "?=") else { break }
            text += String(decoding: Data(base64Encoded: String(after[..<end.lowerBound])) ?? Data(), as: UTF8.self)
            rest = after[end.upperBound...]
        }
        return text + rest
    }

    /// The decoded bodies of the message's parts, by content type.
    static func parts(_ rendered: String) throws -> [String: String] {
        let type = try #require(headers(rendered).first { $0.name == "Content-Type" }?.value)
        let boundary = try #require(type.split(separator: "\"").dropFirst().first.map(String.init))
        var result: [String: String] = [:]
        for section in rendered.components(separatedBy: "--" + boundary).dropFirst() where !section.hasPrefix("--") {
            let pieces = section.components(separatedBy: "\n\n")
            let head = pieces[0]
            let body = pieces.dropFirst().joined(separator: "\n\n").replacingOccurrences(of: "\n", with: "")
            let contentType = try #require(head.split(separator: "\n").first { $0.hasPrefix("Content-Type:") })
            let decoded = try #require(Data(base64Encoded: body))
            result[String(contentType.dropFirst("Content-Type: ".count).split(separator: ";")[0])] = String(decoding: decoded, as: UTF8.self)
        }
        return result
    }

    static let sender = AlertsConfiguration.Sender(name: "hallpass", address: "hallpass@school.example")

    @Test func anEmailHasTheRightHeadersBothPartsAndTheConsoleLinks() throws {
        let email = AlertEmail(
            message: Self.message(), from: Self.sender, to: "dsl@school.example", consoleURL: "https://hallpass.school.example:8443",
            deliveryID: "ad-abc", date: Self.now, shownUser: "pupil7")
        let rendered = email.render()
        #expect(!rendered.contains("\r"), "LF line ends on the pipe; sendmail makes them CRLF")
        let headers = Self.headers(rendered)
        let names = headers.map(\.name)
        #expect(
            names == [
                "From", "To", "Subject", "Date", "Message-ID", "MIME-Version", "Auto-Submitted", "X-Auto-Response-Suppress", "Content-Type",
            ])
        #expect(headers[0].value == "hallpass <hallpass@school.example>")
        #expect(headers[1].value == "dsl@school.example")
        #expect(headers[2].value == "[hallpass] DANGER: self-harm-search for pupil7 (room lab1)")
        #expect(headers[3].value == "Fri, 28 Nov 2025 09:00:00 +0000")
        #expect(headers[4].value == "<ad-abc@school.example>")
        #expect(headers[8].value.hasPrefix("multipart/alternative; boundary=\""))
        for line in rendered.split(separator: "\n") { #expect(line.utf8.count <= 998) }

        let parts = try Self.parts(rendered)
        #expect(Set(parts.keys) == ["text/plain", "text/html"])
        let text = try #require(parts["text/plain"])
        #expect(text.contains("https://hallpass.school.example:8443/console/timeline?user=pupil7"))
        #expect(text.contains("https://hallpass.school.example:8443/console/alerts/al-1"))
        #expect(text.contains("Searched for:") && text.contains("how to") && text.contains("allowed it"))
        let html = try #require(parts["text/html"])
        #expect(html.contains(#"<a href="https://hallpass.school.example:8443/console/timeline?user=pupil7">"#))
        #expect(html.contains(#"<a href="https://hallpass.school.example:8443/console/alerts/al-1">"#))
    }

    /// A name beyond ASCII is an encoded-word that reads back as the name;
    /// a value with CR/LF makes no header of its own, in the subject or
    /// anywhere; HTML in a value is text, in the body and in the links.
    @Test func dataNeverMakesAHeaderAndIsEscapedInTheHTML() throws {
        var message = Self.message(user: "Zoë Ångström 김민준", room: "lab1\r\nBcc: everyone@example.com\nX-Evil: 1")
        message.host = "<script>alert(1)</script>.example"
        message.url = "example.com/\"><img src=x onerror=alert(1)>"
        message.rule = "rule\r\n\r\n<b>body</b>"
        let email = AlertEmail(
            message: message, from: Self.sender, to: "dsl@school.example", consoleURL: "https://console.example", deliveryID: "ad-x",
            date: Self.now, shownUser: message.user)
        let rendered = email.render()
        let headers = Self.headers(rendered)
        #expect(!headers.contains { $0.name == "Bcc" || $0.name == "X-Evil" }, "\(headers)")
        #expect(headers.map(\.name).count == 9)
        // Every header line is a known header or a folded continuation.
        let head = rendered.components(separatedBy: "\n\n")[0]
        for line in head.split(separator: "\n") {
            #expect(line.hasPrefix(" ") || headers.map(\.name).contains(String(line.split(separator: ":")[0])), "\(line)")
            #expect(line.utf8.count <= 78, "\(line)")
        }
        let subject = try #require(headers.first { $0.name == "Subject" }?.value)
        #expect(subject.hasPrefix("=?UTF-8?B?"))
        #expect(
            Self.decodeWords(subject)
                == "[hallpass] DANGER: rule    <b>body</b> for Zoë Ångström 김민준 (room lab1  Bcc: everyone@example.com X-Evil: 1)")

        let parts = try Self.parts(rendered)
        let html = try #require(parts["text/html"])
        #expect(!html.contains("<script>") && html.contains("&lt;script&gt;alert(1)&lt;/script&gt;.example"))
        #expect(!html.contains("<img") && html.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"))
        #expect(!html.contains("<b>body</b>"))
        // The link's user is percent-encoded: nothing of the name can leave the attribute.
        #expect(html.contains("/console/timeline?user=Zo%C3%AB%20%C3%85ngstr%C3%B6m%20%EA%B9%80%EB%AF%BC%EC%A4%80"))
        let text = try #require(parts["text/plain"])
        #expect(text.contains("Person:") && text.contains("Zoë Ångström 김민준"))
        #expect(!text.contains("\r") && !text.contains("\nBcc:"))
    }

    @Test func headerTextIsPlainOnlyWhenNothingCouldBeDecodedFromIt() {
        #expect(AlertEmail.headerText("[hallpass] DANGER: x for y") == "[hallpass] DANGER: x for y")
        // A value that looks like an encoded-word would be decoded by the reader: it is encoded itself.
        let lookalike = AlertEmail.headerText("=?UTF-8?B?SGk=?= spoof")
        #expect(lookalike.hasPrefix("=?UTF-8?B?") && Self.decodeWords(lookalike) == "=?UTF-8?B?SGk=?= spoof")
        // Long text: words of at most 75 characters, each on its own folded line, whole characters in each.
        let long = String(repeating: "가나다라마바사", count: 20)
        let encoded = AlertEmail.headerText(long)
        for line in encoded.split(separator: "\n") { #expect(line.trimmingCharacters(in: .whitespaces).count <= 75) }
        #expect(Self.decodeWords(encoded.replacingOccurrences(of: "\n ", with: "")) == long)
        #expect(AlertEmail.mailbox(.init(name: "Safeguarding, St Mary's", address: "a@b.example")) == "\"Safeguarding, St Mary's\" <a@b.example>")
        #expect(AlertEmail.mailbox(.init(name: "학교", address: "a@b.example")).hasPrefix("=?UTF-8?B?"))
        #expect(AlertEmail.mailbox(.init(name: nil, address: "a@b.example")) == "a@b.example")
    }

    @Test func addressesAreOnePlainAddress() {
        for good in ["dsl@school.example", "head.y7@school.example", "a@localhost", "first+alerts@mail.school.example", "o'brien@school.example"] {
            #expect(MailAddress.refusal(good) == nil, "\(good)")
        }
        for bad in [
            "", "no-at", "two@@school.example", "a@b@c", "with space@school.example", "a@school.example\r\nBcc: x@y", "a,b@school.example",
            "<a@school.example>", "\"a\"@school.example", "a@-school.example", "a@school..example", ".a@school.example", "ä@school.example",
            String(repeating: "a", count: 250) + "@b.example",
        ] {
            #expect(MailAddress.refusal(bad) != nil, "\(bad)")
        }
    }

    // MARK: The webhook

    /// The vector was computed outside Swift, with Python's hmac module:
    ///   python3 -c 'import hmac,hashlib; print(hmac.new(b"a-webhook-secret-for-tests",
    ///     b"1764320400." + b"{\"id\":\"al-1\"}", hashlib.sha256).hexdigest())'
    @Test func theWebhookSignatureIsHMACSHA256OfTimestampDotBody() {
        let signature = AlertWebhook.signature(
            secret: Array("a-webhook-secret-for-tests".utf8), timestamp: 1_764_320_400, body: Array(#"{"id":"al-1"}"#.utf8))
        #expect(signature == "sha256=ab184442f830b10730d83dd3adafa47a0f295d37a8b8a72e45cd58bc02e2bb90")
    }

    @Test func theWebhookBodyHasEveryFieldAndEscapesValues() throws {
        var message = Self.message(group: nil)
        message.searchTerm = "a \"quote\"\n<and> \u{1}"
        let body = AlertWebhook.body(message, consoleURL: "https://console.example")
        let text = String(decoding: body, as: UTF8.self)
        #expect(!text.contains("<") && !text.contains("\n"))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(
            Set(object.keys) == [
                "id", "time", "severity", "rule", "user", "group", "room", "machine", "action", "host", "url", "category", "searchTerm", "console",
            ])
        #expect(object["group"] is NSNull)
        #expect(object["searchTerm"] as? String == "a \"quote\"\n<and> \u{1}")
        #expect(object["time"] as? String == "2025-11-28T09:00:00.000Z")
        #expect(object["console"] as? String == "https://console.example/console/alerts/al-1")
        #expect(object["severity"] as? String == "danger")
    }

    // MARK: Retries

    @Test func retriesFollowTheScheduleForADayThenFail() {
        let made: Int64 = 1_000_000
        var now = made
        var waits: [Int64] = []
        var failures = 0
        while true {
            failures += 1
            guard let next = AlertRetrySchedule.next(failures: failures, createdAt: made, now: now) else { break }
            waits.append(next - now)
            now = next
        }
        #expect(Array(waits.prefix(7)) == [10, 30, 60, 120, 300, 600, 600])
        #expect(waits.dropFirst(5).allSatisfy { $0 == 600 })
        // The last try is within the day; the one after it would not be.
        #expect(now <= made + 86_400 && now + 600 > made + 86_400)
        #expect(AlertRetrySchedule.next(failures: 1, createdAt: made, now: made + 86_395) == nil)
    }

    // MARK: Recipients

    @Test func recipientsAreTheSafeguardingLeadsInScopeAndTheGroupsEscalationList() {
        func person(_ login: String, _ role: Role, _ scope: Scope = .school, email: String?, disabled: Bool = false) -> StoredPerson {
            StoredPerson(
                login: login, displayName: login, role: role, scope: scope, method: .local, disabledAt: disabled ? 1 : nil, createdBy: "t",
                createdAt: 0, email: email)
        }
        let people = [
            person("dsl", .safeguarding, email: "dsl@school.example"),
            person("dsl-lab2", .safeguarding, Scope(rooms: ["lab2"]), email: "lab2@school.example"),
            person("dsl-y7", .safeguarding, Scope(groups: ["year7"]), email: "DSL@school.example"),
            person("gone", .safeguarding, email: "gone@school.example", disabled: true),
            person("quiet", .safeguarding, email: nil),
            person("admin", .admin, email: "it@school.example"),
            person("teacher", .teacher, Scope(rooms: ["lab1"]), email: "t@school.example"),
        ]
        var alerts = AlertsConfiguration()
        alerts.escalation = ["year7": ["head.y7@school.example", "dsl@school.example"]]
        let danger = AlertRecipients.plan(Self.message(), people: people, alerts: alerts)
        #expect(danger.map(\.target) == ["dsl@school.example", "head.y7@school.example"])
        #expect(danger.allSatisfy { $0.channel == .email })
        // Caution is not emailed by default; with `email: [danger, caution]` it is, without the escalation list.
        #expect(AlertRecipients.plan(Self.message(severity: .caution), people: people, alerts: alerts).isEmpty)
        alerts.email = [.danger, .caution]
        #expect(AlertRecipients.plan(Self.message(severity: .caution), people: people, alerts: alerts).map(\.target) == ["dsl@school.example"])
        alerts.webhook = .init(url: "https://hook.example/in", secretFile: "/s", severities: [.danger, .advisory])
        let advisory = AlertRecipients.plan(Self.message(severity: .advisory), people: people, alerts: alerts)
        #expect(advisory.map(\.channel) == [.webhook] && advisory.first?.target == "https://hook.example/in")
        // Another room and group: the lab2 lead, not the year7 one.
        let lab2 = AlertRecipients.plan(Self.message(group: "year9", room: "lab2"), people: people, alerts: alerts)
        #expect(lab2.map(\.target) == ["dsl@school.example", "lab2@school.example", "https://hook.example/in"])
    }

    // MARK: server.yaml

    @Test func alertsAndTheConsoleURLAreRead() throws {
        let configuration = try ServerConfiguration(
            yaml: """
                listen:
                  port: 9443
                alerts:
                  from: "Safeguarding <hallpass@school.example>"
                  sendmail: [/usr/bin/msmtp, -C, /etc/hallpass/msmtprc, -t]
                  email: [danger, caution]
                  escalation:
                    year7: [head.y7@school.example, Head.Y7@school.example]
                    "Year 8": [head.y8@school.example]
                  webhook:
                    url: https://safeguarding.example/hook
                    secretFile: /etc/hallpass/webhook.secret
                    severities: [danger]
                console:
                  url: https://hallpass.school.example:8443/
                """)
        let alerts = configuration.alerts
        #expect(alerts.from == .init(name: "Safeguarding", address: "hallpass@school.example"))
        #expect(alerts.sendmail == ["/usr/bin/msmtp", "-C", "/etc/hallpass/msmtprc", "-t"])
        #expect(alerts.email == [.danger, .caution])
        #expect(alerts.escalation == ["year7": ["head.y7@school.example"], "Year 8": ["head.y8@school.example"]])
        #expect(alerts.webhook == .init(url: "https://safeguarding.example/hook", secretFile: "/etc/hallpass/webhook.secret", severities: [.danger]))
        #expect(configuration.consoleURL == "https://hallpass.school.example:8443")

        let defaults = try ServerConfiguration(yaml: "listen:\n  port: 9443\n")
        #expect(defaults.alerts.sendmail == ["/usr/sbin/sendmail", "-t", "-oi"] && defaults.alerts.email == [.danger])
        #expect(defaults.alerts.webhook == nil && defaults.alerts.escalation.isEmpty)
        #expect(defaults.consoleURL.hasPrefix("https://") && defaults.consoleURL.hasSuffix(":9443"))
        #expect(MailAddress.refusal(defaults.alerts.sender.address) == nil)
    }

    @Test(arguments: [
        ("alerts:\n  form: x@y.example\n", "alerts.form", "unknown key"),
        ("alerts:\n  from: \"Name <not an address>\"\n", "alerts.from", "expected the sender"),
        ("alerts:\n  from: \"a@b.example\\r\\nBcc: c@d.example\"\n", "alerts.from", "expected the sender"),
        ("alerts:\n  sendmail: [sendmail, -t]\n", "alerts.sendmail[0]", "absolute path"),
        ("alerts:\n  sendmail: []\n", "alerts.sendmail", "as a list"),
        ("alerts:\n  sendmail: /usr/sbin/sendmail -t\n", "alerts.sendmail", "expected a list"),
        ("alerts:\n  email: [danger, urgent]\n", "alerts.email[1]", "expected one of danger, caution, advisory"),
        ("alerts:\n  email: [danger, danger]\n", "alerts.email[1]", "given twice"),
        ("alerts:\n  escalation:\n    year7: [\"head <h@school.example>\"]\n", "alerts.escalation.year7[0]", "plain ASCII"),
        ("alerts:\n  escalation:\n    year7: head@school.example\n", "alerts.escalation.year7", "expected a list"),
        ("alerts:\n  escalation: [a@b.example]\n", "alerts.escalation", "mapping of groups"),
        ("alerts:\n  webhook:\n    url: http://safeguarding.example/hook\n    secretFile: /s\n", "alerts.webhook.url", "https"),
        ("alerts:\n  webhook:\n    url: https://safeguarding.example/hook\n", "alerts.webhook", "give secretFile"),
        ("alerts:\n  webhook:\n    secretFile: /s\n", "alerts.webhook", "give url"),
        ("alerts:\n  webhook:\n    url: https://h.example/\n    secretFile: s\n", "alerts.webhook.secretFile", "absolute path"),
        ("alerts:\n  webhook:\n    url: https://h.example/\n    secretFile: /s\n    severities: []\n", "alerts.webhook.severities", "at least one"),
        ("console:\n  url: hallpass.school.example\n", "console.url", "the console's address"),
        ("console:\n  url: https://hallpass.school.example/?a=b\n", "console.url", "the console's address"),
    ])
    func everyMistakeInAlertsIsAnErrorNamingItsKey(yaml: String, key: String, words: String) {
        let error = #expect(throws: ConfigurationError.self) { try ServerConfiguration(yaml: yaml) }
        #expect(error?.key == key, "\(String(describing: error))")
        #expect(error?.description.contains(words) == true, "\(String(describing: error))")
        #expect(error?.line != nil, "\(String(describing: error))")
    }

    @Test func theWebhookSecretMustNotBeReadableByOthers() throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/webhook.secret"
        try "a-webhook-secret-for-tests\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        #expect(throws: ServerError.self) { try AlertWebhook.readSecret(path) }
        chmod(path, 0o640)
        #expect(try AlertWebhook.readSecret(path) == Array("a-webhook-secret-for-tests".utf8))
        try "short\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        let short = #expect(throws: ServerError.self) { try AlertWebhook.readSecret(path) }
        #expect(short?.message.contains("at least 16") == true)
    }

    // MARK: Sendmail

    static func folder() throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-alerts-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder
    }

    /// A sendmail of the test's own: `body` is the shell script's text after `#!/bin/sh`.
    static func script(_ folder: String, _ name: String, _ body: String) throws -> String {
        let path = folder + "/" + name
        try ("#!/bin/sh\n" + body + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o755)
        return path
    }

    @Test func sendmailGetsTheMessageOnItsInputAndItsErrorLineIsTheReason() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Arguments are passed as they are, never through a shell.
        let good = try Self.script(folder, "good", "cat > \"$0.in\"; printf '%s\\n' \"$@\" > \"$0.args\"")
        let message = Array(String(repeating: "a line of the message\n", count: 10_000).utf8)
        // A long timeout: on a loaded CI machine the parallel tests can keep this task's short sleeps
        // waiting for a thread for many seconds (this test ran into the 30 s default once).
        let roomy = Duration.seconds(300)
        #expect(await SendmailCommand(command: [good, "-t", "$(touch \(folder)/pwned)", "a b"], timeout: roomy).send(message) == .sent)
        #expect(try Array(Data(contentsOf: URL(fileURLWithPath: good + ".in"))) == message)
        #expect(try String(contentsOfFile: good + ".args", encoding: .utf8) == "-t\n$(touch \(folder)/pwned)\na b\n")
        #expect(!FileManager.default.fileExists(atPath: folder + "/pwned"))

        let refused = try Self.script(folder, "refused", "cat > /dev/null; echo; echo 'msmtp: cannot connect to 127.0.0.1, port 2525' >&2; echo more >&2; exit 75")
        #expect(await SendmailCommand(command: [refused], timeout: roomy).send(message) == .notSent(reason: "msmtp: cannot connect to 127.0.0.1, port 2525"))
        let silent = try Self.script(folder, "silent", "exit 3")
        #expect(await SendmailCommand(command: [silent], timeout: roomy).send(message) == .notSent(reason: "\(silent) exited with status 3"))
        let missing = await SendmailCommand(command: [folder + "/none"]).send(message)
        #expect(missing != .sent)
    }

    @Test func aSendmailThatHangsIsKilledAtItsTimeout() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let hang = try Self.script(folder, "hang", "echo $$ > \"$0.pid\"; exec sleep 600")
        let outcome = await SendmailCommand(command: [hang], timeout: .seconds(1)).send(Array("x\n".utf8))
        #expect(outcome == .notSent(reason: "\(hang) did not finish within 1 s; it was stopped"))
        let pid = try #require(Int32(try String(contentsOfFile: hang + ".pid", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(kill(pid, 0) != 0, "the child is gone (killed and reaped)")
    }

    // MARK: The outbox

    static func delivery(_ alert: String, _ target: String, channel: AlertChannel = .email) -> NewAlertDelivery {
        NewAlertDelivery(alertID: alert, channel: channel, target: target, message: "{}")
    }

    @Test(arguments: Engine.allCases)
    func aDeliveryIsAddedOnceAndTwoWorkersNeverHoldOneAtOnce(engine: Engine) async throws {
        try await withTestStorage(engine) { storage in
            var added = try await storage.addAlertDeliveries((0..<40).map { Self.delivery("al-\($0)", "dsl@school.example") }, now: Self.now)
            #expect(added == 40)
            // The same alert again (another instance, or after a stop): nothing new.
            added = try await storage.addAlertDeliveries(
                [Self.delivery("al-3", "dsl@school.example"), Self.delivery("al-3", "head@school.example")], now: Self.now)
            #expect(added == 1)

            // Two workers take at once, again and again, until nothing is left.
            let all = try await withThrowingTaskGroup(of: [String].self) { group in
                for owner in ["w-one", "w-two", "w-three"] {
                    group.addTask {
                        var mine: [String] = []
                        while true {
                            let claimed = try await storage.claimAlertDeliveries(owner: owner, now: Self.now, leaseUntil: Self.now + 60, limit: 3)
                            if claimed.isEmpty { return mine }
                            #expect(claimed.allSatisfy { $0.leaseOwner == owner && $0.leaseUntil == Self.now + 60 })
                            mine += claimed.map(\.id)
                        }
                    }
                }
                return try await group.reduce(into: [String]()) { $0 += $1 }
            }
            #expect(all.count == 41 && Set(all).count == 41, "each delivery taken once: \(all.count) taken, \(Set(all).count) distinct")

            // Held: not taken again while the lease lasts, taken when it has ended.
            #expect(try await storage.claimAlertDeliveries(owner: "w-four", now: Self.now + 60, leaseUntil: Self.now + 120, limit: 100).isEmpty)
            let again = try await storage.claimAlertDeliveries(owner: "w-four", now: Self.now + 61, leaseUntil: Self.now + 121, limit: 100)
            #expect(again.count == 41)
            // Only the holder writes the outcome.
            let first = try #require(again.first)
            #expect(try await !storage.finishAlertDelivery(id: first.id, owner: "w-one", .sent, now: Self.now + 62))
            #expect(try await storage.finishAlertDelivery(id: first.id, owner: "w-four", .retry(error: "down", next: Self.now + 72), now: Self.now + 62))
            let after = try #require(try await storage.alertDeliveries(alertID: first.alertID).first { $0.id == first.id })
            #expect(after.state == .waiting && after.attempts == 1 && after.nextAttemptAt == Self.now + 72 && after.lastError == "down")
            #expect(after.leaseOwner == nil && after.leaseUntil == nil)
            // Not due before its next attempt.
            let due = try await storage.claimAlertDeliveries(owner: "w-five", now: Self.now + 71, leaseUntil: Self.now + 131, limit: 100)
            #expect(!due.contains { $0.id == first.id })
            let counts = try await storage.alertDeliveryCounts()
            #expect(counts == [AlertDeliveryCount(channel: .email, state: .waiting, count: 41)])
        }
    }

    @Test(arguments: Engine.allCases)
    func aPersonKeepsAnEmailAddress(engine: Engine) async throws {
        try await withTestStorage(engine) { storage in
            let person = try await ServerAdministration.addPerson(
                storage: storage, login: "dsl", displayName: "Dana", role: .safeguarding, scope: .school, password: "a long password",
                email: "dsl@school.example", author: "cli:test", now: Self.now)
            #expect(try await storage.person(login: "dsl")?.email == "dsl@school.example" && person.email == "dsl@school.example")
            let refused = await #expect(throws: ServerError.self) {
                _ = try await ServerAdministration.addPerson(
                    storage: storage, login: "dsl2", displayName: nil, role: .safeguarding, scope: .school, password: "a long password",
                    email: "dsl@school.example\nBcc: x@y.example", author: "cli:test", now: Self.now)
            }
            #expect(refused?.code == "user.email")
            _ = try await ServerAdministration.changePerson(
                storage: storage, login: "dsl", .init(email: "dana.lee@school.example"), author: "cli:test", now: Self.now)
            #expect(try await storage.person(login: "dsl")?.email == "dana.lee@school.example")
            // Another change keeps the address.
            _ = try await ServerAdministration.changePerson(storage: storage, login: "dsl", .init(displayName: "Dana Lee"), author: "cli:test", now: Self.now)
            #expect(try await storage.person(login: "dsl")?.email == "dana.lee@school.example")
            _ = try await ServerAdministration.changePerson(storage: storage, login: "dsl", .init(email: .some(nil)), author: "cli:test", now: Self.now)
            #expect(try await storage.person(login: "dsl")?.email == nil)
            let table = try await ServerAdministration.peopleTable(storage: storage, now: Self.now)
            #expect(table.contains("EMAIL"))
            let trail = try await storage.auditEvents(AuditQuery(action: "person.change")).events.compactMap(\.event.detail)
            #expect(trail.contains("email dana.lee@school.example") && trail.contains("no email"))
        }
    }

    @Test func theProvidersEmailClaimIsTakenWhenItIsAnAddress() throws {
        var configuration = OpenIDConfiguration(
            issuer: "https://id.example", clientID: "hallpass", clientSecretFile: "/s", redirectURL: "https://h.example/console/oidc/callback")
        configuration.roles = [.init(value: "dsl", role: .safeguarding)]
        func identity(_ claims: [String: ClaimValue]) throws -> VerifiedIdentity {
            try configuration.identity(
                from: IDTokenClaims(["sub": .string("1"), "preferred_username": .string("dana"), "groups": .array([.string("dsl")])].merging(claims) { $1 }),
                returnTo: "/console/")
        }
        #expect(try identity(["email": .string("dana@school.example")]).email == "dana@school.example")
        #expect(try identity(["email": .string("dana@school.example"), "email_verified": .bool(false)]).email == nil)
        #expect(try identity(["email": .string("dana@school.example\r\nBcc: x@y.example")]).email == nil)
        #expect(try identity([:]).email == nil)
    }

    // MARK: The worker

    /// Records what a webhook would have been sent; answers `status`.
    final class RecordingWebhook: AlertWebhookTransport {
        let posts = Mutex<[(url: String, body: [UInt8], headers: [(String, String)])]>([])
        let status = Mutex(204)

        func post(url: String, body: [UInt8], headers: [(String, String)]) async throws -> Int {
            posts.withLock { $0.append((url, body, headers)) }
            return status.withLock { $0 }
        }

        func shutdown() async throws {}
    }

    @Test(arguments: Engine.allCases)
    func theWorkerEmailsAndPostsOnceRetriesAFailureAndGivesUpAfterADay(engine: Engine) async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Each message is kept in a file of its own; while `down` exists the "mail server" refuses.
        let sendmail = try Self.script(
            folder, "sendmail",
            """
            if [ -e "$(dirname "$0")/down" ]; then cat > /dev/null; echo 'sendmail: cannot reach the mail server' >&2; exit 75; fi
            n=$(ls "$(dirname "$0")" | grep -c '^mail-')
            cat > "$(dirname "$0")/mail-$n.eml"
            """)
        try await withTestStorage(engine) { storage in
            _ = try await ServerAdministration.addPerson(
                storage: storage, login: "dsl", displayName: nil, role: .safeguarding, scope: .school, password: "a long password",
                email: "dsl@school.example", author: "cli:test", now: Self.now)
            var alerts = AlertsConfiguration()
            alerts.sendmail = [sendmail]
            alerts.from = .init(name: "hallpass", address: "hallpass@school.example")
            alerts.webhook = .init(url: "https://hook.example/in", secretFile: "/unused")
            let clock = TestClock(Self.now)
            let webhook = RecordingWebhook()
            let metrics = ServerMetrics()
            let service = AlertDeliveryService(
                settings: .init(alerts: alerts, consoleURL: "https://console.example", pseudonyms: false), storage: storage,
                sendmail: SendmailCommand(command: [sendmail]), webhookSecret: Array("a-webhook-secret-for-tests".utf8), webhook: webhook,
                metrics: metrics, logger: Self.quiet, clock: { clock.now })

            #expect(try await service.enqueue(Self.message(id: "al-1")) == 2)
            #expect(try await service.enqueue(Self.message(id: "al-1")) == 0, "the same alert again adds nothing")
            await service.runOnce()
            await service.runOnce()
            let mails = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasPrefix("mail-") }
            #expect(mails == ["mail-0.eml"], "one email, once")
            let mail = try String(contentsOfFile: folder + "/mail-0.eml", encoding: .utf8)
            #expect(mail.contains("\nTo: dsl@school.example\n") && mail.contains("Subject: [hallpass] DANGER: self-harm-search for pupil7 (room lab1)"))
            let posts = webhook.posts.withLock { $0 }
            #expect(posts.count == 1)
            let post = try #require(posts.first)
            #expect(post.url == "https://hook.example/in")
            let timestamp = try #require(post.headers.first { $0.0 == "Hallpass-Timestamp" }?.1)
            #expect(timestamp == String(Self.now))
            let signature = try #require(post.headers.first { $0.0 == "Hallpass-Signature" }?.1)
            #expect(signature == AlertWebhook.signature(secret: Array("a-webhook-secret-for-tests".utf8), timestamp: Self.now, body: post.body))
            #expect(try await storage.alertDeliveries(alertID: "al-1").allSatisfy { $0.state == .sent && $0.attempts == 1 && $0.sentAt == Self.now })

            // The mail server down and the webhook failing: both wait, with the reason, and are tried again on the schedule.
            FileManager.default.createFile(atPath: folder + "/down", contents: nil)
            webhook.status.withLock { $0 = 503 }
            try await service.enqueue(Self.message(id: "al-2"))
            await service.runOnce()
            var waiting = try await storage.alertDeliveries(alertID: "al-2")
            #expect(waiting.count == 2 && waiting.allSatisfy { $0.state == .waiting && $0.attempts == 1 && $0.nextAttemptAt == Self.now + 10 })
            #expect(Set(waiting.compactMap(\.lastError)) == ["sendmail: cannot reach the mail server", "the webhook answered HTTP 503"])
            clock.advance(9)
            await service.runOnce()
            #expect(try await storage.alertDeliveries(alertID: "al-2").allSatisfy { $0.attempts == 1 }, "not before its time")
            clock.advance(1)
            await service.runOnce()
            waiting = try await storage.alertDeliveries(alertID: "al-2")
            #expect(waiting.allSatisfy { $0.attempts == 2 && $0.nextAttemptAt == clock.now + 30 })

            // The mail server back: the email arrives, once.
            try FileManager.default.removeItem(atPath: folder + "/down")
            clock.advance(30)
            await service.runOnce()
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasPrefix("mail-") }.count == 2)
            #expect(try await storage.alertDeliveries(alertID: "al-2").first { $0.channel == .email }?.state == .sent)

            // The webhook never recovers: after a day of tries it is failed, counted and shown.
            for _ in 0..<200 {
                clock.advance(600)
                await service.runOnce()
            }
            let hook = try #require(try await storage.alertDeliveries(alertID: "al-2").first { $0.channel == .webhook })
            #expect(hook.state == .failed && hook.lastError == "the webhook answered HTTP 503")
            #expect(hook.attempts > 100 && hook.attempts < 160)
            let rendered = String(decoding: metrics.render(), as: UTF8.self)
            #expect(rendered.contains(#"hallpass_server_alert_deliveries{channel="webhook",state="failed"} 1"#), "\(rendered)")
            #expect(rendered.contains(#"hallpass_server_alert_deliveries{channel="email",state="sent"} 2"#))
            #expect(rendered.contains(#"hallpass_server_alert_delivery_attempts_total{channel="webhook",outcome="failed"} 1"#))
            #expect(rendered.contains(#"hallpass_server_alert_delivery_attempts_total{channel="email",outcome="retry"} 2"#))
        }
    }

    /// The alerts table's side, as the ingest will give it: alerts not dispatched yet, and the mark.
    final class MemoryOutbox: AlertOutbox {
        let alerts: Mutex<[AlertMessage]>
        let marked = Mutex<[String]>([])
        let reads = Mutex(0)

        init(_ alerts: [AlertMessage]) { self.alerts = Mutex(alerts) }

        func undispatched(limit: Int) async throws -> [AlertMessage] {
            reads.withLock { $0 += 1 }
            let marked = self.marked.withLock { Set($0) }
            return Array(alerts.withLock { $0 }.filter { !marked.contains($0.id) }.prefix(limit))
        }

        func markDispatched(ids: [String]) async throws {
            marked.withLock { $0 += ids }
        }
    }

    /// The worker takes the outbox's alerts, writes their deliveries and
    /// marks them; an alert that can never be sent is marked too, not read
    /// again at every pass; one read again (marked by nobody) adds nothing.
    @Test func theWorkerEnqueuesTheOutboxsAlertsAndMarksThem() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let sendmail = try Self.script(folder, "sendmail", "cat > \"$0.$$.eml\"")
        try await withTestStorage(.sqlite) { storage in
            _ = try await ServerAdministration.addPerson(
                storage: storage, login: "dsl", displayName: nil, role: .safeguarding, scope: .school, password: "a long password",
                email: "dsl@school.example", author: "cli:test", now: Self.now)
            var alerts = AlertsConfiguration()
            alerts.sendmail = [sendmail]
            let outbox = MemoryOutbox([Self.message(id: "al-1"), Self.message(id: String(repeating: "x", count: 200)), Self.message(id: "al-2")])
            let service = AlertDeliveryService(
                settings: .init(alerts: alerts, consoleURL: "https://console.example", pseudonyms: false), storage: storage,
                sendmail: SendmailCommand(command: [sendmail]), outbox: outbox, metrics: ServerMetrics(), logger: Self.quiet, clock: { Self.now })
            await service.runOnce()
            #expect(Set(outbox.marked.withLock { $0 }).count == 3)
            #expect(try await storage.alertDeliveries(alertID: "al-1").map(\.state) == [.sent])
            #expect(try await storage.alertDeliveries(alertID: "al-2").map(\.state) == [.sent])
            await service.runOnce()
            #expect(outbox.reads.withLock { $0 } == 2)
            // Read again after a stop between the deliveries and the mark: nothing more is sent.
            outbox.marked.withLock { $0 = [] }
            await service.runOnce()
            #expect(try await storage.alertDeliveries(alertID: "al-1").count == 1)
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".eml") }.count == 2)
        }
    }

    /// The server as `serve` builds it runs the worker: a delivery written to
    /// the outbox is sent by the server's own service, through the sendmail
    /// server.yaml names.
    @Test func theServersServiceGroupRunsTheWorker() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Written aside and renamed: the test waits for the name, and must not read a message half written.
        let sendmail = try Self.script(folder, "sendmail", "cat > \"$0.part\" && mv \"$0.part\" \"$0.eml\"")
        try await withRunningServer(.sqlite, configure: { $0.alerts.sendmail = [sendmail] }) { server in
            let message = Self.message(id: "al-served")
            let json = String(decoding: try JSONEncoder().encode(message), as: UTF8.self)
            _ = try await server.storage.addAlertDeliveries(
                [NewAlertDelivery(alertID: "al-served", channel: .email, target: "dsl@school.example", message: json)], now: server.clock.now)
            for _ in 0..<300 where !FileManager.default.fileExists(atPath: sendmail + ".eml") { try await Task.sleep(for: .milliseconds(100)) }
            let mail = try String(contentsOfFile: sendmail + ".eml", encoding: .utf8)
            #expect(mail.contains("To: dsl@school.example"))
        }
    }
}
