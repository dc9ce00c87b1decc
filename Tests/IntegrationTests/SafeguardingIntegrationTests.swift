import FilterControl
import Foundation
import Testing

/// Safeguarding alerts end to end with real parts: a lab machine in the
/// client namespace (filter-data on the kernel's queue, pupils who exist
/// only in the test) enrolled to hallpass-server in the server namespace;
/// the server sends its alerts through Debian's msmtp to aiosmtpd and to a
/// webhook receiver, both on the server namespace's loopback. Nothing here
/// calls the server's code in-process: the pupils' traffic is what raises
/// the alerts, as it would in a lab.
///
/// - A search for self-harm on a site the policy allows (an allowed flow a
///   danger rule watches) reaches the safeguarding lead by email and the
///   webhook once; the same pupil's next search within the repeat limit
///   raises no second alert.
/// - A caution (a blocked adult site) is an alert in the queue and pages no
///   one, and is in the weekly digest the lead gets the next Monday (the
///   server restarted under libfaketime at Monday 07:31; the digest mailed
///   through msmtp to aiosmtpd).
/// - With the mail server down the danger alert waits and is sent when it
///   comes back.
extension FilterIntegrationTests {
    @Test func aDangerSearchOnALabMachineReachesTheSafeguardingLeadOnceAndACautionPagesNoOne() throws {
        let python = AlertDeliveryIntegrationTests.python
        for program in ["/usr/bin/msmtp", python] {
            guard FileManager.default.isExecutableFile(atPath: program) else {
                throw TestNetworkError("\(program) is missing: scripts/install-deps.sh installs msmtp and python3-aiosmtpd")
            }
        }
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let school = try SchoolServer(network)

        // The school's rules: adult sites blocked; the shipped safeguarding rules (no `safeguarding:` key).
        try "blocked.test\n".write(toFile: school.folder + "/demo.txt", atomically: true, encoding: .utf8)
        try "adult.test\n".write(toFile: school.folder + "/adult.txt", atomically: true, encoding: .utf8)
        try """
            policy:
              block: [ demo, adult ]
              unknown: allow
            """.write(toFile: school.folder + "/policy.yaml", atomically: true, encoding: .utf8)
        let set = try school.command(
            "policy set --policy \(school.folder)/policy.yaml --list demo=\(school.folder)/demo.txt --list adult=\(school.folder)/adult.txt "
                + "--reason 'adult sites blocked'")
        try #require(set.status == 0, "\(set.output)")
        try #require(try school.command("publish --reason 'adult sites blocked'").status == 0)

        // The mail parts, in the server's namespace (ports of that namespace alone).
        let smtpPort = 2525
        let hookPort = 8099
        let maildir = school.folder + "/Maildir"
        try """
            defaults
            auth off
            tls off
            timeout 5
            logfile \(school.folder)/msmtp.log
            account school
            host 127.0.0.1
            port \(smtpPort)
            from hallpass@school.example
            account default : school
            """.write(toFile: school.folder + "/msmtprc", atomically: true, encoding: .utf8)
        chmod(school.folder + "/msmtprc", 0o600)
        try "\(AlertDeliveryIntegrationTests.secret)\n".write(toFile: school.folder + "/webhook.secret", atomically: true, encoding: .utf8)
        chmod(school.folder + "/webhook.secret", 0o600)
        let configuration = try String(contentsOfFile: school.config, encoding: .utf8)
        try (configuration + """

            console:
              url: \(AlertDeliveryIntegrationTests.consoleURL)
            alerts:
              from: "Lakeside safeguarding <hallpass@school.example>"
              sendmail: [/usr/bin/msmtp, -C, \(school.folder)/msmtprc, -t]
              email: [danger]
              webhook:
                url: http://127.0.0.1:\(hookPort)/hallpass
                secretFile: \(school.folder)/webhook.secret

            """).write(toFile: school.config, atomically: true, encoding: .utf8)
        let added = try shell(
            "printf '%s\\n' 'a long test password' | \(TestNetwork.binaries)/hallpass-server user add dana --role safeguarding "
                + "--email dsl@school.example --password-stdin --config \(school.config) 2>&1")
        try #require(added.status == 0, "\(added.output)")

        func inServer(_ command: String) throws -> (status: Int32, output: String) {
            try shell("ip netns exec \(network.server) sh -c '\(command.replacingOccurrences(of: "'", with: "'\\''"))'")
        }
        func startSMTP() throws -> ChildProcess {
            let smtp = try network.start(
                [
                    "ip", "netns", "exec", network.server, python, "-m", "aiosmtpd", "-n", "-l", "127.0.0.1:\(smtpPort)", "-c",
                    "aiosmtpd.handlers.Mailbox", maildir,
                ], log: "smtp")
            try network.waitFor("the SMTP server") {
                try inServer("\(python) -c 'import socket; socket.create_connection((\"127.0.0.1\", \(smtpPort)), 1)'").status == 0
            }
            return smtp
        }
        var smtp = try startSMTP()
        _ = try network.start(
            [
                "ip", "netns", "exec", network.server, python, TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/webhook_receiver.py",
                "--port", String(hookPort), "--out", school.folder + "/posts.jsonl",
            ], log: "webhook")
        try network.waitFor("the webhook receiver") { network.log("webhook").contains("webhook ready") }
        var server = try school.start()

        let machine = try LabMachine(network, namespace: network.client, name: "lab1-a", pupils: 3)
        try machine.enroll(school, room: "lab1")
        _ = try machine.start()
        try machine.waitFor("the first rules", attempts: 600) { try machine.status().contains("version 1,") }
        let (ada, ben, cai) = (machine.pupils[0], machine.pupils[1], machine.pupils[2])
        #expect(try !machine.reaches("adult.test", as: ben), "the policy blocks adult.test")

        func mails() throws -> [AlertDeliveryIntegrationTests.Received] {
            FileManager.default.fileExists(atPath: maildir + "/new") ? try AlertDeliveryIntegrationTests.received(maildir) : []
        }
        func alerts(_ person: TestPerson, _ rule: String) throws -> Int {
            try school.count("SELECT COUNT(*) FROM alerts WHERE user_name = '\(person.name)' AND rule_id = '\(rule)'")
        }

        // Ada searches for a way to harm herself on a site the policy allows: the page loads, and the lead is told.
        let search = "/search?q=how+to+kill+myself"
        #expect(try machine.curl("www.google.com", path: search, as: ada).output == "ok www.google.com\n", "an allowed site stays allowed")
        try network.waitFor("the danger email to the safeguarding lead", attempts: 900) {
            try mails().contains { $0.subject.contains(ada.name) }
        }
        let email = try #require(try mails().first { $0.subject.contains(ada.name) })
        #expect(email.to == "dsl@school.example" && email.rcptTo == "dsl@school.example")
        #expect(email.subject == "[hallpass] DANGER: self-harm-search for \(ada.name) (room lab1)", "\(email.subject)")
        #expect(email.text.contains("how to kill myself"), "the search term is in the email:\n\(email.text)")
        #expect(email.text.contains("\(AlertDeliveryIntegrationTests.consoleURL)/console/timeline?user=\(ada.name)"), "\(email.text)")
        #expect(
            try school.count(
                "SELECT COUNT(*) FROM alerts WHERE user_name = '\(ada.name)' AND severity = 'danger' AND action = 'allow' "
                    + "AND search_term = 'how to kill myself' AND room = 'lab1'") == 1)

        // The webhook got it too, once, signed as docs/server.md says (checked with Python's hmac).
        try network.waitFor("the webhook's post") {
            ((try? String(contentsOfFile: school.folder + "/posts.jsonl", encoding: .utf8)) ?? "").contains(ada.name)
        }
        func posts() throws -> [AlertDeliveryIntegrationTests.Post] {
            try String(contentsOfFile: school.folder + "/posts.jsonl", encoding: .utf8).split(separator: "\n")
                .map { try JSONDecoder().decode(AlertDeliveryIntegrationTests.Post.self, from: Data($0.utf8)) }
        }
        let post = try #require(try posts().first { $0.body.contains(ada.name) })
        try post.body.write(toFile: school.folder + "/body", atomically: true, encoding: .utf8)
        let timestamp = try #require(post.timestamp)
        let expected = try shell(
            "\(python) -c 'import hmac, hashlib, sys; print(\"sha256=\" + hmac.new(sys.argv[1].encode(), sys.argv[2].encode() + b\".\" + "
                + "open(sys.argv[3], \"rb\").read(), hashlib.sha256).hexdigest())' \(AlertDeliveryIntegrationTests.secret) \(timestamp) "
                + "\(school.folder)/body")
        #expect(post.signature == expected.output.trimmingCharacters(in: .whitespacesAndNewlines))

        // Her next search within the repeat limit (10 minutes) reaches the server and raises no second alert.
        #expect(try machine.curl("www.google.com", path: "/search?q=kill+myself+painless", as: ada).output == "ok www.google.com\n")
        try network.waitFor("the second search at the server", attempts: 600) {
            try school.count("SELECT COUNT(*) FROM records WHERE user_name = '\(ada.name)' AND url LIKE '%painless%'") == 1
        }
        #expect(try alerts(ada, "self-harm-search") == 1)
        #expect(try school.count("SELECT suppressed FROM alert_limits WHERE person = '\(ada.name)' AND rule_id = 'self-harm-search'") >= 1)

        // Ben is blocked on an adult site: a caution alert in the queue, nothing sent.
        #expect(try !machine.reaches("adult.test", as: ben))
        try network.waitFor("the caution alert", attempts: 600) { try alerts(ben, "adult") == 1 }
        let caution = try school.count(
            "SELECT COUNT(*) FROM alert_deliveries d JOIN alerts a ON a.id = d.alert_id WHERE a.user_name = '\(ben.name)'")
        #expect(caution == 0, "a caution pages no one")

        // The mail server goes down; Cai's danger search waits, and is sent when it is back.
        #expect(smtp.stop() != nil)
        #expect(try machine.curl("www.google.com", path: "/search?q=ways+to+end+my+life", as: cai).output == "ok www.google.com\n")
        try network.waitFor("a failed attempt to send Cai's alert", attempts: 900) {
            try school.count(
                "SELECT COUNT(*) FROM alert_deliveries d JOIN alerts a ON a.id = d.alert_id WHERE a.user_name = '\(cai.name)' "
                    + "AND d.channel = 'email' AND d.state = 'waiting' AND d.attempts >= 1") == 1
        }
        #expect(try !mails().contains { $0.subject.contains(cai.name) })
        smtp = try startSMTP()
        // The first retries come 10 s and 30 s after the first failure.
        try network.waitFor("Cai's alert sent after the mail server came back", attempts: 1200) {
            try mails().contains { $0.subject.contains(cai.name) }
        }

        // In all: one email and one post for each danger alert, none for the caution.
        let all = try mails()
        #expect(all.filter { $0.subject.contains(ada.name) }.count == 1)
        #expect(all.filter { $0.subject.contains(cai.name) }.count == 1)
        #expect(!all.contains { $0.subject.contains(ben.name) })
        try network.waitFor("the webhook's post for Cai") { try posts().contains { $0.body.contains(cai.name) } }
        #expect(try posts().count == 2)

        // Next Monday at 07:31 (the weekly digest is due at 07:30, the server's zone): the server,
        // restarted on that clock, makes the week's digest for the lead, which names Ben's caution.
        try #require(FileManager.default.fileExists(atPath: Self.libfaketime), "no libfaketime: scripts/install-deps.sh installs Debian's faketime")
        #expect(server.stop() != nil)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        // The Monday after today: the week before it holds today.
        let tomorrow = try #require(calendar.date(byAdding: .day, value: 1, to: calendar.startOfDay(for: Date())))
        let monday = try #require(
            calendar.nextDate(after: tomorrow, matching: DateComponents(hour: 7, minute: 31, weekday: 2), matchingPolicy: .nextTime))
        let stamp = DateFormatter()
        stamp.calendar = calendar
        stamp.timeZone = calendar.timeZone
        stamp.locale = Locale(identifier: "en_US_POSIX")
        stamp.dateFormat = "yyyy-MM-dd HH:mm:ss"
        server = try school.start(wrapper: [
            "env", "LD_PRELOAD=\(Self.libfaketime)", "FAKETIME=@\(stamp.string(from: monday))", "DONT_FAKE_MONOTONIC=1",
            // As ClockStepIntegrationTests says: no shared memory, so the environment stays where Swift's runtime finds argv.
            "FAKETIME_SHARED=none none",
        ])
        try network.waitFor("the weekly digest for the safeguarding lead", attempts: 900) {
            try mails().contains { $0.subject.contains("weekly safeguarding digest") }
        }
        let digests = try mails().filter { $0.subject.contains("weekly safeguarding digest") }
        #expect(digests.count == 1, "one digest: \(digests.map(\.subject))")
        let digest = try #require(digests.first)
        #expect(digest.rcptTo == "dsl@school.example")
        #expect(digest.subject.contains("(2 danger, 3 in all)"), "\(digest.subject)")
        // The most-flagged students: Ben, in no group, with his one caution (danger, caution, advisory).
        let benRow = digest.text.split(separator: "\n").first { $0.hasPrefix(ben.name + " ") }
        #expect(benRow.map { $0.split(separator: " ").suffix(3) == ["0", "1", "0"] } == true, "\(digest.text)")
        #expect(digest.text.contains("adult") && digest.html.contains(ben.name), "\(digest.text)")
    }
}
