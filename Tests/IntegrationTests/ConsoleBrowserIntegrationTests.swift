import FilterControl
import Foundation
import Testing

/// The console as the school's people meet it: Debian's Chromium, driven
/// through chromedriver (WebDriver), in the server namespace with
/// hallpass-server (SQLite) and the tests' real OpenID provider
/// (django-oidc-provider over HTTPS); a lab machine in the client
/// namespace enrolled in room lab1, taking its rules from the server, with
/// a pupil whose blocked visits reach the server as records. An admin signs
/// in with a local account, finds the pupil's records for today and
/// exports them, opens the pupil's timeline (the audit trail shows it),
/// changes the policy with a reason and publishes it, and the change is in
/// force on the lab machine. A teacher of lab2 is refused the policy and
/// lab1's records, in the pages and the API alike; a form without its CSRF
/// token is refused; the safeguarding lead signs in through the provider.
/// Screenshots of each page go to test-artifacts/console-*.png.
extension FilterIntegrationTests {
    static let consolePassword = "a long test password"
    static let providerPassword = "school-password"

    @Test func theConsoleInABrowser() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let school = try SchoolServer(network)
        let console = "\(school.url)/console"

        // The school's OpenID provider, in the server namespace beside the server.
        let providerFolder = network.folder + "/provider"
        let callback = "\(school.url)/console/oidc/callback"
        let provider = try network.start(
            [
                "ip", "netns", "exec", network.server, TestNetwork.packageRoot + "/scripts/lib/oidc-provider/run.sh", "--port", "9443", "--folder",
                providerFolder, "--redirect-uri", callback, "--password", Self.providerPassword,
            ], log: "oidc-provider")
        defer { _ = provider.stop() }
        try network.waitFor("the OpenID provider", attempts: 900) { network.log("oidc-provider").contains("oidc-provider ready") }
        try (String(contentsOfFile: school.config, encoding: .utf8) + """

            signIn:
              oidc:
                issuer: https://127.0.0.1:9443/openid
                clientID: hallpass
                clientSecretFile: \(providerFolder)/client-secret
                redirectURL: \(callback)
                scopes: [openid, profile, email, groups]
                caFile: \(providerFolder)/ca.pem
                roles:
                  - value: admins
                    role: admin
                  - value: dsl
                    role: safeguarding
                  - value: teacher-lab2
                    role: teacher
                    rooms: [lab2]
            """).write(toFile: school.config, atomically: true, encoding: .utf8)
        for (login, role) in [("it", "admin"), ("mr.kim", "teacher --room lab2")] {
            let added = try shell(
                "printf '%s\\n' '\(Self.consolePassword)' | \(TestNetwork.binaries)/hallpass-server user add \(login) --role \(role) "
                    + "--password-stdin --config \(school.config) 2>&1")
            try #require(added.status == 0, "\(added.output)")
        }

        // The school's rules, published; the lab machine enrols in lab1 and takes them.
        try "blocked.test\n".write(toFile: school.folder + "/demo.txt", atomically: true, encoding: .utf8)
        try "policy:\n  block: [ demo ]\n  unknown: allow\n".write(toFile: school.folder + "/policy.yaml", atomically: true, encoding: .utf8)
        try #require(
            try school.command("policy set --policy \(school.folder)/policy.yaml --list demo=\(school.folder)/demo.txt --reason 'first rules'")
                .status == 0)
        try #require(try school.command("publish --reason 'first rules'").status == 0)
        _ = try school.start()
        let token = try school.command("token create --room lab1")
        let secret = try #require(token.output.split(separator: "\n").last { $0.hasPrefix("hp1.") }).trimmingCharacters(in: .whitespaces)
        let (config, _) = try prepare(network)
        let enrolled = try network.inClient("\(TestNetwork.binaries)/filterctl enroll \(school.url) \(secret) --config \(config) 2>&1")
        try #require(enrolled.status == 0, "\(enrolled.output)")
        let pupil = try TestPerson(in: network)
        _ = try network.start(
            ["ip", "netns", "exec", network.client] + pupil.knownTo + [
                TestNetwork.binaries + "/filter-control", "--config", config, "--runtime-dir", network.folder + "/run",
            ], log: "filter-control")
        func rulesVersion() throws -> String {
            try network.inClient("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock").output
        }
        try network.waitFor("the lab machine's first rules", attempts: 600) { try rulesVersion().contains("version 1,") }
        for _ in 0..<3 { #expect(try network.curl("http", "blocked.test", as: pupil).status != 0) }
        #expect(try network.curl("http", "allowed.test", as: pupil).output == "ok allowed.test\n")
        try network.waitFor("the pupil's records at the server", attempts: 1200) {
            try school.count("SELECT COUNT(*) FROM records WHERE user_name = '\(pupil.name)' AND host = 'blocked.test'") >= 3
        }

        let browser = try WebDriver(
            namespace: network.server, folder: network.folder + "/browser", log: network.folder + "/chromedriver.log")
        defer { browser.quit() }
        func signIn(_ login: String) throws {
            try browser.open("\(console)/")
            try browser.waitUntil("the sign-in page") { try browser.currentURL.contains("/console/sign-in") }
            try browser.type(login, into: "#login")
            try browser.type(Self.consolePassword, into: "#password")
            try browser.click("#sign-in-form button[type=submit]")
            try browser.waitUntil("\(login) to be signed in") { try browser.text(of: "#signed-in-as") == login }
        }
        func signOut() throws {
            try browser.click("header form[action='/console/sign-out'] button")
            try browser.waitUntil("the sign-out") { try browser.currentURL.contains("/console/sign-in") }
        }
        /// A request from the page itself (its cookies, its origin), as a script of the page would send it: the status and the body.
        func fetch(_ method: String, _ path: String, form: String? = nil) throws -> (status: Int, body: String) {
            let answer = try browser.run(
                """
                var request = new XMLHttpRequest();
                request.open(arguments[0], arguments[1], false);
                if (arguments[2] !== null) request.setRequestHeader('Content-Type', 'application/x-www-form-urlencoded');
                request.send(arguments[2]);
                return [request.status, request.responseText];
                """, [method, path, form ?? NSNull()])
            let pair = answer as? [Any] ?? []
            return ((pair.first as? Int) ?? (pair.first as? NSNumber)?.intValue ?? 0, pair.count > 1 ? (pair[1] as? String ?? "") : "")
        }

        // The admin signs in with a local account: the session cookie is HttpOnly, Secure and SameSite=Strict.
        try browser.open("\(console)/")
        try browser.waitUntil("the sign-in page") { try browser.currentURL.contains("/console/sign-in") }
        try browser.screenshot("console-sign-in")
        try signIn("it")
        let cookie = try #require(try browser.cookies()["__Host-hallpass-session"])
        #expect(cookie["httpOnly"] as? Bool == true && cookie["secure"] as? Bool == true && cookie["sameSite"] as? String == "Strict", "\(cookie)")
        #expect(try browser.source.contains("id=\"machine-states\""))
        try browser.screenshot("console-dashboard")

        // The pupil's records for today, through the filter form, and their CSV export.
        try browser.open("\(console)/records")
        let today = String(ISO8601DateFormatter().string(from: Date()).prefix(10))
        try browser.type(pupil.name, into: "#user")
        try browser.run("document.getElementById('since').value = arguments[0]; document.getElementById('until').value = arguments[0];", [today])
        try browser.click("form[role=search] button[type=submit]")
        try browser.waitUntil("the pupil's records") { try browser.currentURL.contains("user=\(pupil.name)") }
        let records = try browser.source
        #expect(records.contains("blocked.test") && records.contains("id=\"records\""), "\(records.prefix(2000))")
        #expect(!records.contains("allowed.test"), "only blocks are recorded by default")
        try browser.screenshot("console-records")
        let csvLink = try #require(
            try browser.run("return document.getElementById('export-csv').getAttribute('href');") as? String)
        let csv = try fetch("GET", csvLink)
        #expect(csv.status == 200 && csv.body.contains("blocked.test") && csv.body.contains(pupil.name), "\(csv.status) \(csv.body.prefix(500))")

        // The pupil's timeline, from the records' link; the audit trail shows that it was opened, and by whom.
        try browser.click("#records a[href*='/console/timeline']")
        try browser.waitUntil("the timeline") { try browser.currentURL.contains("/console/timeline") }
        #expect(try browser.source.contains("blocked.test"))
        try browser.screenshot("console-timeline")
        try browser.open("\(console)/audit")
        let trail = try browser.source
        #expect(trail.contains("timeline.open") && trail.contains(pupil.name) && trail.contains("person:it"), "\(trail.prefix(3000))")
        try browser.screenshot("console-audit")
        try browser.open("\(console)/machines")
        #expect(try browser.source.contains("lab1"))
        try browser.screenshot("console-machines")

        // A form posted without its CSRF token, or with another, is refused, and publishes nothing.
        #expect(try fetch("POST", "/console/policy/publish", form: "reason=no+token").status == 403)
        #expect(try fetch("POST", "/console/policy/publish", form: "reason=forged&csrf=AAAA").status == 403)

        // The policy edited in the browser with a reason, and published: allowed.test is denied from now on.
        try browser.open("\(console)/policy")
        try browser.run(
            "var yaml = document.getElementById('yaml'); yaml.value = yaml.value.replace(/unknown: allow/, 'unknown: allow\\n  deny: [ allowed.test ]');")
        #expect((try browser.run("return document.getElementById('yaml').value;") as? String)?.contains("deny: [ allowed.test ]") == true)
        try browser.type("allowed.test distracts in lessons", into: "#reason")
        try browser.click("#policy-form button[type=submit]")
        try browser.waitUntil("the policy saved") { try browser.currentURL.contains("done=policy-saved") }
        try browser.type("deny allowed.test", into: "#publish-reason")
        try browser.click("#publish-form button[type=submit]")
        try browser.waitUntil("the publication") { try browser.currentURL.contains("done=published") }
        try browser.screenshot("console-policy")
        #expect(try school.count("SELECT COUNT(*) FROM audit_events WHERE actor = 'person:it' AND action = 'publish'") == 1)
        // Nobody touches the lab machine: its next check-in hears of version 2.
        try network.waitFor("the lab machine to take the published change", attempts: 1500) { try rulesVersion().contains("version 2,") }
        #expect(try network.curl("http", "allowed.test", as: pupil).status != 0, "the console's change is in force")

        // The same policy as a form: SafeSearch for Google ticked for people in no group, with a reason; a new version (not published).
        try browser.open("\(console)/policy")
        try browser.click("#policy-keys-form input[type=checkbox][value=google]")
        try browser.type("SafeSearch for everyone", into: "#form-reason")
        try browser.run("document.getElementById('policy-keys-form').scrollIntoView();")
        try browser.screenshot("console-policy-form")
        try browser.click("#policy-keys-form button[type=submit]")
        try browser.waitUntil("the form's policy saved") { try browser.currentURL.contains("done=policy-saved") }
        #expect(try school.count("SELECT COUNT(*) FROM policy_versions WHERE version = 3 AND policy LIKE '%google%' AND reason = 'SafeSearch for everyone'") == 1)
        #expect(try school.count("SELECT COUNT(*) FROM policy_versions WHERE version = 3 AND policy LIKE '%allowed.test%'") == 1, "the rest kept")
        try signOut()

        // A teacher of lab2: no policy, nothing of lab1, in the pages and the API alike.
        try signIn("mr.kim")
        #expect(try fetch("GET", "/console/policy").status == 403)
        #expect(try fetch("GET", "/console/records?room=lab1").status == 403)
        let ownRoom = try fetch("GET", "/console/records?user=\(pupil.name)")
        #expect(ownRoom.status == 200 && !ownRoom.body.contains("blocked.test"), "lab1's records are not in lab2's teacher's scope")
        try browser.open("\(console)/policy")
        #expect(try browser.text(of: "#message").contains("does not allow"))
        #expect(try !browser.source.contains("id=\"policy-form\""))
        try browser.screenshot("console-teacher-refused")
        let teacherToken = try school.command("api-token create --role teacher --room lab2")
        let bearer = try #require(teacherToken.output.split(separator: "\n").last { $0.hasPrefix("hpa1.") }).trimmingCharacters(in: .whitespaces)
        func api(_ path: String) throws -> String {
            try shell("ip netns exec \(network.server) curl -sk -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer \(bearer)' '\(school.url)\(path)'")
                .output
        }
        #expect(try api("/api/v1/policy") == "403")
        #expect(try api("/api/v1/records?room=lab1") == "403")
        #expect(try api("/api/v1/records") == "200")
        try signOut()

        // The safeguarding lead signs in through the school's provider.
        try browser.open("\(console)/sign-in")
        try browser.click("#sign-in-oidc")
        do {
            try browser.waitUntil("the provider's sign-in form") { try browser.currentURL.hasPrefix("https://127.0.0.1:9443/") }
        } catch {
            Issue.record("no provider's form: at \((try? browser.currentURL) ?? "-"); the server's log:\n\(network.log("hallpass-server").suffix(3000))")
            throw error
        }
        try browser.type("dora", into: "input[name=username]")
        try browser.type(Self.providerPassword, into: "input[name=password]")
        try browser.screenshot("console-provider-sign-in")
        try browser.click("form [type=submit]")
        try browser.waitUntil("dora back in the console", seconds: 30) { try browser.text(of: "#signed-in-as") == "dora" }
        #expect(try browser.currentURL.hasPrefix("\(console)/"))
        #expect(try fetch("GET", "/console/records").status == 200)
        #expect(try fetch("POST", "/console/policy/publish", form: "reason=x").status == 403)
        try browser.screenshot("console-oidc-safeguarding")
        #expect(try school.count("SELECT COUNT(*) FROM people WHERE login = 'dora' AND method = 'oidc' AND role = 'safeguarding'") == 1)
        // A callback this browser did not begin (a link with someone else's code and state: login CSRF) signs nobody in.
        let forged = try fetch("GET", "/console/oidc/callback?code=someone-elses&state=someone-elses")
        #expect(forged.body.contains("id=\"sign-in-error\""), "\(forged.body.prefix(500))")
        #expect(try school.count("SELECT COUNT(*) FROM audit_events WHERE action = 'sign-in.failed' AND detail LIKE '%not begun in this browser%'") == 1)
    }
}
