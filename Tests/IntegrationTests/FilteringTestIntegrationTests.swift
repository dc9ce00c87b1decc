import FilterControl
import Foundation
import Testing

/// The annual review's filtering test end to end with real parts: the
/// school's server (SQLite) in the server namespace, two lab machines in
/// room lab1, each in a namespace of its own, and the server's alert email
/// through Debian's msmtp to aiosmtpd. The school publishes a policy that
/// blocks gambling; machine A takes it, machine B is kept on the bundle
/// before (its rules come from a folder that has nothing newer). An admin's
/// token starts a run; both machines get it through the held live request,
/// judge the test names with their own rules and post the results. The run
/// finds the category machine B lets through, says so in its results (which
/// name, which group, on which bundle version), and raises one danger alert
/// for machine B, emailed to the admin and the safeguarding lead.
extension FilterIntegrationTests {
    @Test func theFilteringTestFindsTheCategoryAMachineOnAnOlderBundleLetsThrough() throws {
        let python = AlertDeliveryIntegrationTests.python
        for program in ["/usr/bin/msmtp", python] {
            guard FileManager.default.isExecutableFile(atPath: program) else {
                throw TestNetworkError("\(program) is missing: scripts/install-deps.sh installs msmtp and python3-aiosmtpd")
            }
        }
        let network = try TestNetwork()
        defer { network.tearDown() }
        let school = try SchoolServer(network)

        // The first policy blocks the demo list only; the gambling list holds two shipped test names and the school's own.
        try "blocked.test\n".write(toFile: school.folder + "/demo.txt", atomically: true, encoding: .utf8)
        try "pokerstars.com\n888casino.com\ncasino.test\n".write(toFile: school.folder + "/gambling.txt", atomically: true, encoding: .utf8)
        func publish(blocking categories: String, reason: String) throws {
            try """
                policy:
                  block: [ \(categories) ]
                  unknown: allow
                """.write(toFile: school.folder + "/policy.yaml", atomically: true, encoding: .utf8)
            let set = try school.command(
                "policy set --policy \(school.folder)/policy.yaml --list demo=\(school.folder)/demo.txt "
                    + "--list gambling=\(school.folder)/gambling.txt --reason '\(reason)'")
            try #require(set.status == 0, "\(set.output)")
            let published = try school.command("publish --reason '\(reason)'")
            try #require(published.status == 0, "\(published.output)")
        }
        try publish(blocking: "demo", reason: "the first policy")

        // The alert's email: msmtp to aiosmtpd on the server namespace's loopback.
        let smtpPort = 2525
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
        let configuration = try String(contentsOfFile: school.config, encoding: .utf8)
        try (configuration + """

            console:
              url: \(AlertDeliveryIntegrationTests.consoleURL)
            alerts:
              from: "Lakeside safeguarding <hallpass@school.example>"
              sendmail: [/usr/bin/msmtp, -C, \(school.folder)/msmtprc, -t]
              email: [danger]
            filteringTest:
              gambling: [ casino.test ]

            """).write(toFile: school.config, atomically: true, encoding: .utf8)
        for (login, role, email) in [("ida", "admin", "it@school.example"), ("dana", "safeguarding", "dsl@school.example")] {
            let added = try shell(
                "printf '%s\\n' 'a long test password' | \(TestNetwork.binaries)/hallpass-server user add \(login) --role \(role) "
                    + "--email \(email) --password-stdin --config \(school.config) 2>&1")
            try #require(added.status == 0, "\(added.output)")
        }
        _ = try network.start(
            [
                "ip", "netns", "exec", network.server, python, "-m", "aiosmtpd", "-n", "-l", "127.0.0.1:\(smtpPort)", "-c",
                "aiosmtpd.handlers.Mailbox", maildir,
            ], log: "smtp")
        try network.waitFor("the SMTP server") {
            try shell(
                "ip netns exec \(network.server) \(python) -c 'import socket; socket.create_connection((\"127.0.0.1\", \(smtpPort)), 1)'"
            ).status == 0
        }
        _ = try school.start()

        let adminToken = try school.command("api-token create --role admin")
        let bearer = try #require(adminToken.output.split(separator: "\n").last { $0.hasPrefix("hpa1.") }).trimmingCharacters(in: .whitespaces)
        func api(_ method: String, _ path: String) throws -> (status: Int, body: String) {
            let result = try shell(
                "ip netns exec \(network.server) curl -sk -m 10 -X \(method) -w '\\n%{http_code}' -H 'Authorization: Bearer \(bearer)' "
                    + "'\(school.url)\(path)'")
            let lines = result.output.split(separator: "\n", omittingEmptySubsequences: false)
            return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
        }

        let machineA = try LabMachine(network, namespace: network.client, name: "lab1-a", pupils: 1)
        let machineB = try LabMachine(network, namespace: try network.addClient(), name: "lab1-b", pupils: 1)
        for machine in [machineA, machineB] {
            try machine.enroll(school, room: "lab1")
        }
        _ = try machineA.start()
        var processB = try machineB.start()
        for machine in [machineA, machineB] {
            try machine.waitFor("the first rules", attempts: 600) { try machine.status().contains("version 1,") }
        }

        // Machine B stays on bundle 1: its rules now come from a folder with nothing in it, so it fetches nothing newer.
        #expect(processB.stop() != nil)
        let frozen = machineB.folder + "/frozen"
        try FileManager.default.createDirectory(atPath: frozen, withIntermediateDirectories: true)
        var text = try String(contentsOfFile: machineB.config, encoding: .utf8)
        let keys = try #require(
            text.split(separator: "\n").first { $0.hasPrefix("  bundleKeys: [") }.map { $0.dropFirst("  bundleKeys: ".count) },
            "no bundleKeys in \(text)")
        text = text.replacingOccurrences(
            of: "  directory: \(machineB.folder)/lib\n",
            with: "  directory: \(machineB.folder)/lib\n  source: file://\(frozen)/\n  trustedKeys: \(keys)\n")
        try text.write(toFile: machineB.config, atomically: true, encoding: .utf8)
        processB = try machineB.start()
        try machineB.waitFor("bundle 1 again", attempts: 600) { try machineB.status().contains("version 1,") }

        // The school blocks gambling; machine A takes it within a check-in, machine B cannot.
        try publish(blocking: "demo, gambling", reason: "gambling blocked for everyone")
        try machineA.waitFor("the second rules", attempts: 1200) { try machineA.status().contains("version 2,") }
        #expect(try machineB.status().contains("version 1,"))

        // Only an admin starts a run; the run is on bundle 2 and expects gambling to be blocked.
        let started = try api("POST", "/api/v1/filtering-tests")
        try #require(started.status == 201, "\(started.body)")
        let run = try #require(try JSONSerialization.jsonObject(with: Data(started.body.utf8)) as? [String: Any])
        let id = try #require(run["id"] as? String)
        #expect(run["bundleVersion"] as? Int == 2)
        // Of the test's categories the bundle lists gambling and the built-in doh: the policy blocks gambling, and doh by default.
        #expect((run["blocked"] as? [String: [String]])?["(no group)"] == ["doh", "gambling"], "\(run)")

        // Both machines answer through the live channel (no check-in needed).
        try network.waitFor("both machines' answers", attempts: 600) {
            try school.count("SELECT COUNT(*) FROM filtering_answers WHERE run = '\(id)'") == 2
        }
        let read = try api("GET", "/api/v1/filtering-tests/\(id)")
        try #require(read.status == 200, "\(read.body)")
        let body = try #require(try JSONSerialization.jsonObject(with: Data(read.body.utf8)) as? [String: Any])
        let answers = try #require(body["answers"] as? [[String: Any]])
        let results = try #require(body["results"] as? [[String: Any]])
        let oldMachine = try #require(answers.first { $0["bundleVersion"] as? Int == 1 }?["machine"] as? String, "\(answers)")
        let newMachine = try #require(answers.first { $0["bundleVersion"] as? Int == 2 }?["machine"] as? String, "\(answers)")
        func result(_ machine: String, _ name: String) -> [String: Any]? {
            results.first { $0["machine"] as? String == machine && $0["name"] as? String == name && $0["group"] as? String == "(no group)" }
        }
        for name in ["pokerstars.com", "888casino.com", "casino.test"] {
            let old = try #require(result(oldMachine, name), "no result for \(name) from machine B: \(results)")
            #expect(old["category"] as? String == "gambling" && old["expected"] as? String == "block")
            #expect(old["actual"] as? String == "allow" && old["failed"] as? Bool == true && old["bundleVersion"] as? Int == 1, "\(old)")
            let new = try #require(result(newMachine, name), "no result for \(name) from machine A: \(results)")
            #expect(new["actual"] as? String == "block" && new["failed"] as? Bool == false && new["bundleVersion"] as? Int == 2, "\(new)")
        }
        // A category the policy does not block is let through on both and is no failure.
        let dating = try #require(result(newMachine, "tinder.com"))
        #expect(dating["expected"] as? String == "allow" && dating["actual"] as? String == "allow" && dating["failed"] as? Bool == false)
        #expect(answers.first { $0["machine"] as? String == oldMachine }?["failures"] as? Int == 3)
        #expect(answers.first { $0["machine"] as? String == newMachine }?["failures"] as? Int == 0)

        // One danger alert, for machine B, naming what it let through; emailed to the admin and the lead.
        #expect(
            try school.count(
                "SELECT COUNT(*) FROM alerts WHERE rule_id = 'filtering-test' AND severity = 'danger' AND machine = '\(oldMachine)' "
                    + "AND category = 'gambling' AND room = 'lab1'") == 1)
        #expect(try school.count("SELECT COUNT(*) FROM alerts WHERE rule_id = 'filtering-test'") == 1)
        func mails() throws -> [AlertDeliveryIntegrationTests.Received] {
            FileManager.default.fileExists(atPath: maildir + "/new") ? try AlertDeliveryIntegrationTests.received(maildir) : []
        }
        try network.waitFor("the danger email to the admin and the lead", attempts: 900) {
            Set(try mails().filter { $0.subject.contains("filtering-test") }.map(\.rcptTo)) == ["it@school.example", "dsl@school.example"]
        }
        let email = try #require(try mails().first { $0.subject.contains("filtering-test") })
        #expect(email.subject == "[hallpass] DANGER: filtering-test for machine \(oldMachine) (room lab1)", "\(email.subject)")
        _ = processB
    }
}
