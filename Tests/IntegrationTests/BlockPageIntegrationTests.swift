import FilterControl
import Foundation
import Testing

/// The block page as a person meets it: Chromium (Debian's package, headless)
/// in the client namespace resolves names through the server's dnsmasq,
/// filter-data points the answers for blocked names at the block page, and
/// the page says what was blocked, in the school's name and the browser's
/// language; over HTTPS once the school's local CA is trusted. Screenshots go
/// to test-artifacts/ (not in git).
extension FilterIntegrationTests {
    struct Browser {
        let network: TestNetwork
        let home: String

        /// A Chromium profile of its own, with an NSS database (where a school's CA goes).
        init(_ network: TestNetwork) throws {
            self.network = network
            home = network.folder + "/browser-home"
            let database = try shell("mkdir -p \(home)/.pki/nssdb && certutil -d sql:\(home)/.pki/nssdb -N --empty-password 2>&1")
            guard database.status == 0 else { throw TestNetworkError("certutil: \(database.output)") }
        }

        func trust(_ certificate: String) throws {
            let added = try shell("certutil -d sql:\(home)/.pki/nssdb -A -t C,, -n hallpass-test-ca -i \(certificate) 2>&1")
            guard added.status == 0 else { throw TestNetworkError("certutil: \(added.output)") }
        }

        /// The page's DOM after load; a screenshot of it into test-artifacts/NAME.png.
        func load(_ url: String, language: String = "en", screenshot name: String) throws -> String {
            let artifacts = TestNetwork.packageRoot + "/test-artifacts"
            try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
            let common =
                "HOME=\(home) chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
                + "--user-data-dir=\(home)/profile --lang=\(language) --accept-lang=\(language) --timeout=8000 "
                + "--window-size=420,900"
            let shot = try network.inClient("\(common) --screenshot=\(artifacts)/\(name).png '\(url)' 2>/dev/null")
            #expect(shot.status == 0, "screenshot of \(url): \(shot.output)")
            let dom = try network.inClient("\(common) --dump-dom '\(url)' 2>/dev/null")
            #expect(dom.status == 0, "chromium \(url): exit \(dom.status)")
            return dom.output
        }
    }

    func blockPageConfig(_ network: TestNetwork, requestAccess: Bool = true) -> String {
        """
        queue:
          # The build folder has no _hallpass (the package's user for filter-data).
          user: nobody
          number: 3
        rules:
          directory: \(network.folder)/lib
        policy:
          block: [ demo ]
        blockPage:
          organization: "Lakeside Middle School"
          ca: \(network.folder)/ca
        \(requestAccess ? "  requestAccess:\n    text: \"Ask your teacher\"\n    url: builtin\n" : "")log:
          file: \(network.folder)/audit.jsonl
          journald: false
        admin:
          socket: \(network.folder)/control.sock
        """
    }

    @Test func aPersonSeesTheBlockPageOverHTTPAndHTTPSAndCanAskForAccess() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.useServerDNS()
        try network.startDNS()
        try network.startNginx()
        let (_, store) = try prepare(network)
        let config = network.folder + "/blockpage.yaml"
        try FileManager.default.createDirectory(atPath: network.folder + "/lib", withIntermediateDirectories: true)
        try blockPageConfig(network).write(toFile: config, atomically: true, encoding: .utf8)
        var hallpass = try startHallpass(network, config: config, store: store)
        let browser = try Browser(network)
        let ctl = "\(TestNetwork.binaries)/filterctl"

        // Allowed names load as usual, through the rewritten resolver path.
        #expect(try network.inClient("curl -sS -m 5 http://allowed.test/").output == "ok allowed.test\n")
        // No local CA yet: HTTPS to a blocked name is refused at once (curl 7), no hang.
        let refused = try network.inClient("curl -sS -m 5 https://blocked.test/")
        #expect(refused.status == 7, "exit \(refused.status): \(refused.output)")

        // HTTP: the school's page, with what was blocked and why.
        let page = try browser.load("http://www.blocked.test/games/play?level=2", screenshot: "blocked-http-en")
        #expect(page.contains("Lakeside Middle School"), "\(page)")
        #expect(page.contains(#"id="blocked-host""#) && page.contains("www.blocked.test"))
        #expect(page.contains("http://www.blocked.test/games/play?level=2"))
        #expect(page.contains(#"id="blocked-category""#) && page.contains(">demo<"), "\(page)")
        #expect(page.contains(#"id="request-access-form""#) && page.contains("Ask your teacher"))
        #expect(page.contains("This page is blocked"))

        // In Korean when the browser asks for it.
        let korean = try browser.load("http://blocked.test/", language: "ko", screenshot: "blocked-http-ko")
        #expect(korean.contains("이 페이지는 차단되었습니다"), "\(korean)")
        #expect(korean.contains(#"lang="ko""#))

        // Markup in the URL is shown as text, never run.
        let hostile = try browser.load("http://blocked.test/<script>document.title='owned'</script>", screenshot: "blocked-http-script")
        #expect(!hostile.lowercased().contains("<script"), "\(hostile)")
        #expect(!hostile.contains("owned</title>"))

        // The school makes its CA; the browsers trust it; a reload starts HTTPS (no restart).
        let created = try shell("\(ctl) ca init --config \(config)")
        #expect(created.status == 0, "\(created.output)")
        let exported = try shell("\(ctl) ca export --config \(config) --out \(network.folder)/school-ca.pem")
        #expect(exported.status == 0, "\(exported.output)")
        try browser.trust(network.folder + "/school-ca.pem")
        #expect(try shell("\(ctl) reload --socket \(network.folder)/control.sock").status == 0)

        // HTTPS: the same page, no certificate warning (Chromium's interstitial would replace it).
        let secure = try browser.load("https://www.blocked.test/", screenshot: "blocked-https-en")
        #expect(secure.contains("Lakeside Middle School") && secure.contains("https://www.blocked.test/"), "\(secure)\n\(network.log("filter-control"))")
        func httpsStatus(trusting certificate: String) throws -> (status: Int32, output: String) {
            let result = try network.inClient("curl -sS -m 5 --cacert \(certificate) -o /dev/null -w '%{http_code}' https://blocked.test/")
            return (result.status, result.output)
        }
        let verified = try httpsStatus(trusting: network.folder + "/school-ca.pem")
        #expect(verified.status == 0 && verified.output == "403", "curl: \(verified.status) \(verified.output)")

        // A new CA (ca init --force) and a reload: certificates come from it at once, blocked.test's
        // (made from the old CA a moment ago) included; the old CA no longer verifies them.
        #expect(try shell("\(ctl) ca init --force --config \(config)").status == 0)
        #expect(try shell("\(ctl) ca export --config \(config) --out \(network.folder)/school-ca-2.pem").status == 0)
        #expect(try shell("\(ctl) reload --socket \(network.folder)/control.sock").status == 0)
        let fromNew = try httpsStatus(trusting: network.folder + "/school-ca-2.pem")
        #expect(fromNew.status == 0 && fromNew.output == "403", "curl: \(fromNew.status) \(fromNew.output)")
        let fromOld = try httpsStatus(trusting: network.folder + "/school-ca.pem")
        #expect(fromOld.status == 60, "curl with the old CA: \(fromOld.status) \(fromOld.output)")

        // The request-access form, posted as the browser does, with the page's token; the admin approves it.
        let blockPage = try network.inClient("curl -sS -m 5 http://blocked.test/")
        let token = try #require(
            blockPage.output.range(of: #"name="token" value=""#).map { String(blockPage.output[$0.upperBound...].prefix { $0 != "\"" }) }, "\(blockPage.output)")
        // Another site's form (no token) is refused.
        let forged = try network.inClient(
            "curl -sS -m 5 -o /dev/null -w '%{http_code}' --data-urlencode host=blocked.test --data-urlencode 'reason=x' http://blocked.test/request-access")
        #expect(forged.output == "403", "\(forged.output)")
        let posted = try network.inClient(
            "curl -sS -m 5 --data-urlencode host=blocked.test --data-urlencode url=http://blocked.test/ --data-urlencode category=demo "
                + "--data-urlencode 'reason=Science project' --data-urlencode token=\(token) http://blocked.test/request-access")
        #expect(posted.status == 0 && posted.output.contains(#"id="request-id""#), "\(posted.output)")
        let listed = try shell("\(ctl) requests list --json --socket \(network.folder)/control.sock")
        let entry = try #require(
            listed.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }.first)
        #expect(entry["host"] as? String == "blocked.test" && entry["reason"] as? String == "Science project" && entry["user"] as? String == "root")
        let id = try #require(entry["id"] as? String)
        #expect(posted.output.contains(id))
        let approved = try shell("\(ctl) requests approve \(id) --for 2h --socket \(network.folder)/control.sock")
        #expect(approved.status == 0 && approved.output.contains("allowed until"), "\(approved.output)")
        // At once, no restart: the name resolves to its server and loads.
        #expect(try network.inClient("curl -sS -m 5 http://blocked.test/").output == "ok blocked.test\n")

        // The approval survives a restart.
        hallpass.stop()
        hallpass = try startHallpass(network, config: config, store: store)
        #expect(try network.inClient("curl -sS -m 5 http://blocked.test/").output == "ok blocked.test\n")
        let all = try shell("\(ctl) requests list --all --socket \(network.folder)/control.sock")
        #expect(all.output.contains(id) && all.output.contains("approved until"), "\(all.output)")
        // Denying ends it.
        #expect(try shell("\(ctl) requests deny \(id) --socket \(network.folder)/control.sock").status == 0)
        let denied = try network.inClient("curl -sS -m 5 -o /dev/null -w '%{http_code}' http://blocked.test/")
        #expect(denied.output == "403", "\(denied.output)")
        // HTTPS came back with the restart, from the CA in the folder.
        let afterRestart = try httpsStatus(trusting: network.folder + "/school-ca-2.pem")
        #expect(afterRestart.status == 0 && afterRestart.output == "403", "curl: \(afterRestart.status) \(afterRestart.output)")

        // A school without a request-access link: the page shows none (after a reload, no restart).
        try blockPageConfig(network, requestAccess: false).write(toFile: config, atomically: true, encoding: .utf8)
        #expect(try shell("\(ctl) reload --socket \(network.folder)/control.sock").status == 0)
        let plain = try browser.load("http://blocked.test/", screenshot: "blocked-http-nolink")
        #expect(plain.contains("Lakeside Middle School") && !plain.contains("request-access"), "\(plain)")
    }
}
