import FilterControl
import Foundation
import Testing

/// A lab machine of the live channel's tests: its own namespace (the
/// network's client, or one from `addClient`), folder, configuration,
/// control socket and pupils known to its user database only.
struct LabMachine {
    let network: TestNetwork
    let namespace: String
    let name: String
    let pupils: [TestPerson]
    var folder: String { network.folder + "/" + name }
    var config: String { folder + "/hallpass.yaml" }
    var socket: String { folder + "/control.sock" }

    init(_ network: TestNetwork, namespace: String, name: String, pupils count: Int) throws {
        self.network = network
        self.namespace = namespace
        self.name = name
        try FileManager.default.createDirectory(atPath: network.folder + "/" + name + "/lib", withIntermediateDirectories: true)
        pupils = try TestPerson.pupils(count, folder: network.folder + "/" + name + "/people")
        try """
            queue:
              # The build folder has no _hallpass (the package's user for filter-data).
              user: nobody
              number: 3
            rules:
              directory: \(folder)/lib
            policy:
              unknown: allow
            blockPage:
              organization: "Lakeside Middle School"
              requestAccess:
                text: "Ask your teacher"
                url: builtin
            log:
              file: \(folder)/audit.jsonl
              journald: false
            admin:
              socket: \(socket)
            """.write(toFile: config, atomically: true, encoding: .utf8)
    }

    /// A shell command line in the machine's namespace.
    func run(_ command: String) throws -> (status: Int32, output: String) {
        try shell("ip netns exec \(namespace) sh -c '\(command.replacingOccurrences(of: "'", with: "'\\''"))'")
    }

    /// curl over HTTP to `host` at the test's nginx (no DNS), as `person`.
    func curl(_ host: String, path: String = "/", as person: TestPerson) throws -> (status: Int32, output: String) {
        try run(person.running("curl -sS -m 5 --resolve \(host):80:\(network.serverIPv4) 'http://\(host)\(path)'"))
    }

    /// Whether `person` reaches `host` (nginx answers `ok HOST`).
    func reaches(_ host: String, as person: TestPerson) throws -> Bool {
        try curl(host, as: person).output == "ok \(host)\n"
    }

    func enroll(_ school: FilterIntegrationTests.SchoolServer, room: String) throws {
        let token = try school.command("token create --room \(room)")
        let secret = try #require(token.output.split(separator: "\n").last { $0.hasPrefix("hp1.") }).trimmingCharacters(in: .whitespaces)
        let enrolled = try run("\(TestNetwork.binaries)/filterctl enroll \(school.url) \(secret) --config \(config) 2>&1")
        try #require(enrolled.status == 0, "\(enrolled.output)")
    }

    func start() throws -> ChildProcess {
        try network.start(
            ["ip", "netns", "exec", namespace] + pupils[0].knownTo + [
                TestNetwork.binaries + "/filter-control", "--config", config, "--runtime-dir", folder + "/run",
            ], log: "filter-control-\(name)")
    }

    func status() throws -> String {
        try run("\(TestNetwork.binaries)/filterctl status --socket \(socket)").output
    }

    func log() -> String { network.log("filter-control-\(name)") }

    func waitFor(_ what: String, attempts: Int = 300, _ condition: () throws -> Bool) throws {
        do {
            try network.waitFor("\(name): \(what)", attempts: attempts, condition)
        } catch {
            throw TestNetworkError("\(error)\n\(name)'s filter-control log ends:\n\(log().suffix(6000))")
        }
    }
}

/// The live channel end to end: the school's server (SQLite) in the server
/// namespace, two lab machines in room lab1 (each in a namespace of its
/// own, with pupils that exist only in the test), and nginx for the sites.
/// A teacher's room rules (focus, pause, block) reach both machines through
/// the held live request and cut open connections; ending them lets traffic
/// through; a block stays in force with the server stopped until it
/// expires. A taken-over server (the school's TLS key, a live key the
/// policy names, in the test's hands) cannot open a locked category, go
/// past the policy's longest duration or address another room, and an
/// older state it replays is refused; each refusal reaches the real server
/// as a record.
extension FilterIntegrationTests {
    @Test func theLiveChannel() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        // A big file on nginx, for a download that runs long enough to be cut.
        try #require(try shell("head -c 8000000 /dev/zero > \(network.folder)/big.bin").status == 0)
        let school = try SchoolServer(network)
        let serverKey = try school.command("live-key").output.split(separator: "\n").last { $0.hasPrefix("ed25519:") }
        let liveKey = try #require(serverKey.map(String.init), "hallpass-server live-key printed no key")
        let rogueScript = TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/rogue_live_server.py"
        let rogueKeyFile = network.folder + "/rogue-live.key"
        let rogueKey = try shell("\(TestNetwork.python) \(rogueScript) --make-key \(rogueKeyFile)").output
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(rogueKey.hasPrefix("ed25519:"), "\(rogueKey)")

        try "blocked.test\n".write(toFile: school.folder + "/demo.txt", atomically: true, encoding: .utf8)
        try "locked.test\n".write(toFile: school.folder + "/locked.txt", atomically: true, encoding: .utf8)
        try """
            locked: [ locked ]
            live:
              keys: [ "\(liveKey)", "\(rogueKey)" ]
              actions: [ allow, block, focus, pause ]
              longest: 2h
              rooms: [ lab1 ]
            policy:
              block: [ demo, locked ]
              unknown: allow
            """.write(toFile: school.folder + "/policy.yaml", atomically: true, encoding: .utf8)
        let set = try school.command(
            "policy set --policy \(school.folder)/policy.yaml --list demo=\(school.folder)/demo.txt --list locked=\(school.folder)/locked.txt "
                + "--reason 'rules with live bounds'")
        try #require(set.status == 0, "\(set.output)")
        try #require(try school.command("publish --reason 'rules with live bounds'").status == 0)
        var server = try school.start()

        let teacherToken = try school.command("api-token create --role teacher --room lab1")
        let bearer = try #require(teacherToken.output.split(separator: "\n").last { $0.hasPrefix("hpa1.") }).trimmingCharacters(in: .whitespaces)
        /// The API as the teacher of lab1: the status and the body.
        func api(_ method: String, _ path: String, _ body: String? = nil) throws -> (status: Int, body: String) {
            var command = "ip netns exec \(network.server) curl -sk -m 10 -X \(method) -w '\\n%{http_code}' -H 'Authorization: Bearer \(bearer)'"
            if let body { command += " -H 'Content-Type: application/json' --data-raw '\(body)'" }
            let result = try shell(command + " '\(school.url)\(path)'")
            let lines = result.output.split(separator: "\n", omittingEmptySubsequences: false)
            return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
        }

        let machineA = try LabMachine(network, namespace: network.client, name: "lab1-a", pupils: 2)
        let machineB = try LabMachine(network, namespace: try network.addClient(), name: "lab1-b", pupils: 1)
        var processes: [ChildProcess] = []
        for machine in [machineA, machineB] {
            try machine.enroll(school, room: "lab1")
            processes.append(try machine.start())
        }
        for machine in [machineA, machineB] {
            try machine.waitFor("the first rules", attempts: 600) { try machine.status().contains("version 1,") }
        }
        let (ada, ben) = (machineA.pupils[0], machineA.pupils[1])
        let cai = machineB.pupils[0]
        #expect(try machineA.reaches("allowed.test", as: ada) && machineB.reaches("other.test", as: cai))
        #expect(try !machineA.reaches("blocked.test", as: ada))

        // Focus on allowed.test: a download from another site, under way on machine A, is cut; new ones are refused on both machines.
        let download = try network.start(
            ["ip", "netns", "exec", machineA.namespace] + ada.knownTo + [
                "setpriv", "--reuid=\(ada.uid)", "--regid=\(ada.uid)", "--clear-groups", "curl", "-sS", "--limit-rate", "100k", "-o", "/dev/null",
                "--resolve", "other.test:80:\(network.serverIPv4)", "http://other.test/big",
            ], log: "download")
        try machineA.waitFor("the download to be under way") {
            try machineA.run("ss -tn state established dst \(network.serverIPv4) dport = :80").output.contains(network.serverIPv4)
        }
        let focus = try api("POST", "/api/v1/rooms/lab1/rules", #"{"action":"focus","targets":["allowed.test"],"minutes":30,"reason":"fractions lesson"}"#)
        try #require(focus.status == 201, "\(focus.status) \(focus.body)")
        let focusID = try #require((try JSONSerialization.jsonObject(with: Data(focus.body.utf8)) as? [String: Any])?["id"] as? String)
        // Without the rule the download would run for 80 seconds; it ends early, cut (not finished: exit status not 0).
        let cut = download.wait(atMost: 30)
        #expect(cut != nil && cut != 0, "the open download was not cut by the focus: \(String(describing: cut))\n\(machineA.log().suffix(3000))")
        for (machine, person) in [(machineA, ada), (machineB, cai)] {
            try machine.waitFor("the focus in force") { try !machine.reaches("other.test", as: person) }
            #expect(try machine.reaches("allowed.test", as: person), "the focus's own site")
        }
        // Ending it lets the other sites through again.
        #expect(try api("DELETE", "/api/v1/rooms/lab1/rules/\(focusID)").status / 100 == 2)
        for (machine, person) in [(machineA, ada), (machineB, cai)] {
            try machine.waitFor("the focus ended") { try machine.reaches("other.test", as: person) }
        }

        // A pause: nothing at all, then everything again when it is ended.
        let pause = try api("POST", "/api/v1/rooms/lab1/rules", #"{"action":"pause","targets":[],"minutes":10,"reason":"eyes on me"}"#)
        try #require(pause.status == 201, "\(pause.status) \(pause.body)")
        for (machine, person) in [(machineA, ada), (machineB, cai)] {
            try machine.waitFor("the pause in force") { try !machine.reaches("allowed.test", as: person) }
        }
        #expect(try api("DELETE", "/api/v1/rooms/lab1/rules").status / 100 == 2)
        try machineB.waitFor("the pause ended") { try machineB.reaches("allowed.test", as: cai) }

        // A pupil asks for blocked.test on the block page; the teacher of lab1, with the room's page open in
        // Chromium, sees the request appear without a reload and approves it for that pupil only.
        let teacherPassword = "a long test password"
        let added = try shell(
            "printf '%s\\n' '\(teacherPassword)' | \(TestNetwork.binaries)/hallpass-server user add ms.lovelace --role teacher --room lab1 "
                + "--password-stdin --config \(school.config) 2>&1")
        try #require(added.status == 0, "\(added.output)")
        let browser = try WebDriver(namespace: network.server, folder: network.folder + "/browser", log: network.folder + "/chromedriver.log")
        defer { browser.quit() }
        // As a person does: the console first, which sends the browser to its sign-in page.
        try browser.open("\(school.url)/console/")
        try browser.waitUntil("the sign-in page", seconds: 30) {
            try browser.currentURL.contains("/console/sign-in") && (try? browser.element("#login")) != nil
        }
        try browser.type("ms.lovelace", into: "#login")
        try browser.type(teacherPassword, into: "#password")
        try browser.click("#sign-in-form button[type=submit]")
        try browser.waitUntil("the teacher signed in") { try browser.text(of: "#signed-in-as") == "ms.lovelace" }
        try browser.open("\(school.url)/console/rooms/lab1")
        #expect(try !browser.source.contains("data-request=\"rq-"), "no request yet")
        /// curl as `person` on machine A to the block page (filter-control's, on 127.0.0.1) for `host`.
        func blockPage(_ person: TestPerson, _ arguments: String = "", path: String = "/") throws -> String {
            try machineA.run(person.running("curl -sS -m 5 --resolve blocked.test:80:127.0.0.1 \(arguments) 'http://blocked.test\(path)'")).output
        }
        let page = try blockPage(ada)
        let formToken = try #require(
            page.firstMatch(of: /name="token" value="([^"]+)"/).map { String($0.1) }, "no request form on the block page: \(page.prefix(3000))")
        // The form without its token is refused; with it, the request is taken.
        #expect(try blockPage(ada, "-o /dev/null -w '%{http_code}' --data-urlencode host=blocked.test --data-urlencode reason=x", path: "/request-access") == "403")
        let posted = try blockPage(
            ada,
            "--data-urlencode host=blocked.test --data-urlencode url=http://blocked.test/ --data-urlencode category=demo "
                + "--data-urlencode 'reason=our history project' --data-urlencode token=\(formToken)", path: "/request-access")
        #expect(posted.contains(#"id="request-id""#), "\(posted.prefix(3000))")
        try browser.waitUntil("the request on the room's page, without a reload", seconds: 30) { try browser.source.contains("data-request=\"rq-") }
        let requestID = try #require(browser.source.firstMatch(of: /data-request="(rq-[a-z0-9]+)"/).map { String($0.1) })
        #expect(try browser.text(of: "#request-\(requestID) [data-field=host]").contains("blocked.test"))
        let listed = try api("GET", "/api/v1/requests?state=pending")
        #expect(listed.status == 200 && listed.body.contains(requestID) && listed.body.contains(ada.name) && listed.body.contains("our history project"))
        _ = try browser.run("document.getElementById(arguments[0]).scrollIntoView();", ["request-\(requestID)"])
        try browser.screenshot("live-request-in-console")
        _ = try browser.run("document.getElementById(arguments[0]).value = 'user';", ["approve-scope-\(requestID)"])
        try browser.click("#approve-button-\(requestID)")
        try browser.waitUntil("the approval") { try browser.currentURL.contains("done=request-approved") }
        try machineA.waitFor("the approval in force for the pupil") { try machineA.reaches("blocked.test", as: ada) }
        #expect(try !machineA.reaches("blocked.test", as: ben), "approved for that pupil only, not for the other on the same machine")
        #expect(try !machineB.reaches("blocked.test", as: cai), "nor on the other machine")
        #expect(try school.count("SELECT COUNT(*) FROM audit_events WHERE action = 'request.approve' AND actor = 'person:ms.lovelace'") == 1)
        // The room's own form, in Chromium: a pause with a reason, in force on both machines; "End all" ends it.
        try browser.open("\(school.url)/console/rooms/lab1")
        _ = try browser.run("document.getElementById('action').value = 'pause';")
        try browser.type("eyes on the board", into: "#reason")
        try browser.click("form[action$='/rules'] button[type=submit]")
        try browser.waitUntil("the pause set") { try browser.currentURL.contains("done=rule-added") }
        for (machine, person) in [(machineA, ben), (machineB, cai)] {
            try machine.waitFor("the console's pause in force") { try !machine.reaches("allowed.test", as: person) }
        }
        try browser.screenshot("live-room-paused")
        try browser.click("#end-all")
        try browser.waitUntil("the rules ended") { try browser.currentURL.contains("done=rules-ended") }
        for (machine, person) in [(machineA, ben), (machineB, cai)] {
            try machine.waitFor("the console's pause ended") { try machine.reaches("allowed.test", as: person) }
        }

        // A teacher's rule to open a locked category is refused by the server too.
        let lockedAllow = try api("POST", "/api/v1/rooms/lab1/rules", #"{"action":"allow","targets":["locked.test"],"minutes":10,"reason":"x"}"#)
        #expect(lockedAllow.status == 422, "\(lockedAllow.status) \(lockedAllow.body)")
        // Another room is not this teacher's.
        let otherRoom = try api("POST", "/api/v1/rooms/lab2/rules", #"{"action":"pause","targets":[],"minutes":10,"reason":"x"}"#)
        #expect(otherRoom.status == 403, "\(otherRoom.status) \(otherRoom.body)")

        // A block for a short while, then the server stops: the block stays until its time, then ends on its own.
        let until = Date().addingTimeInterval(40)
        let untilText = ISO8601DateFormatter().string(from: until)
        let block = try api("POST", "/api/v1/rooms/lab1/rules", #"{"action":"block","targets":["other.test"],"until":"\#(untilText)","reason":"quiz"}"#)
        try #require(block.status == 201, "\(block.status) \(block.body)")
        try machineA.waitFor("the block in force") { try !machineA.reaches("other.test", as: ben) }
        _ = server.stop()
        #expect(try !machineA.reaches("other.test", as: ben), "the block stays with the server stopped")
        #expect(try machineA.reaches("allowed.test", as: ben), "and nothing else changed")
        try machineA.waitFor("the block to end at its time", attempts: 900) { try machineA.reaches("other.test", as: ben) }
        #expect(Date() >= until.addingTimeInterval(-1), "the block ended at its time, not before")

        // A taken-over server: the school's TLS key and a live key the policy names, in other hands.
        let statesFile = network.folder + "/rogue-state.json"
        let machineID = try #require(
            try String(contentsOfFile: machineA.folder + "/lib/identity", encoding: .utf8).split(separator: "\n")
                .first { $0.hasPrefix("machine ") }?.split(separator: " ").last.map(String.init))
        /// The rogue's next state (its payload's bytes, which the rogue signs as they are).
        @discardableResult
        func rogueState(sequence: Int, items: [[String: Any]]) throws -> Data {
            let now = Int(Date().timeIntervalSince1970)
            let payload: [String: Any] = [
                "format": 1, "machine": machineID, "room": "lab1", "sequence": sequence, "issued": now, "items": items, "requests": [],
            ]
            let data = try JSONSerialization.data(withJSONObject: payload)
            try data.write(to: URL(fileURLWithPath: statesFile))
            return data
        }
        func item(_ id: String, _ action: String, _ targets: [String], scope: (String, String) = ("room", "lab1"), minutes: Int = 10) -> [String: Any] {
            let now = Int(Date().timeIntervalSince1970)
            return [
                "id": id, "sequence": 1, "action": action, "targets": targets, "scope": ["kind": scope.0, "value": scope.1],
                "from": now, "until": now + minutes * 60, "by": "Rogue", "reason": "test",
            ]
        }
        // A sequence far above the real server's: the machine must still follow the real server afterwards.
        let first = try rogueState(sequence: 1_000_000, items: [
            item("lr-locked", "allow", ["locked.test"]),
            item("lr-long", "block", ["allowed.test"], minutes: 3 * 60),
            item("lr-room", "block", ["allowed.test"], scope: ("room", "lab2")),
            item("lr-good", "block", ["other.test"]),
        ])
        let rogue = try network.start(
            [
                "ip", "netns", "exec", network.server, TestNetwork.python, rogueScript, "--address", network.serverIPv4, "--port", "8443",
                "--cert", school.folder + "/server.crt", "--key", school.folder + "/server.key", "--live-key", rogueKeyFile, "--state", statesFile,
            ], log: "rogue-live")
        try network.waitFor("the rogue server") { network.log("rogue-live").contains("rogue-live ready") }
        // The item within the bounds applies; the three beyond them do not.
        try machineA.waitFor("the rogue's good item", attempts: 900) { try !machineA.reaches("other.test", as: ada) }
        #expect(try !machineA.reaches("locked.test", as: ada), "a live allow never opens a locked category")
        #expect(try machineA.reaches("allowed.test", as: ada), "an item past the longest duration, or for another room, is refused")
        // A later state ends the block; then the first one, replayed byte for byte, is refused: the block stays ended.
        try rogueState(sequence: 1_000_001, items: [])
        try machineA.waitFor("the later state", attempts: 900) { try machineA.reaches("other.test", as: ada) }
        try first.write(to: URL(fileURLWithPath: statesFile))
        try machineA.waitFor("the replay refused", attempts: 900) { machineA.log().contains("is not after the one held") }
        #expect(try machineA.reaches("other.test", as: ada), "the replayed older state is refused")
        _ = rogue.stop()

        // The real server again: its sequence is far below the rogue's, and the machine follows it (a block set now arrives).
        server = try school.start()
        let after = try api("POST", "/api/v1/rooms/lab1/rules", #"{"action":"block","targets":["other.test"],"minutes":5,"reason":"back"}"#)
        try #require(after.status == 201, "\(after.status) \(after.body)")
        try machineA.waitFor("the real server's rule after the rogue's", attempts: 900) { try !machineA.reaches("other.test", as: ada) }
        // The machine reports what it refused, as records.
        try network.waitFor("the refusals reported", attempts: 1200) {
            try school.count("SELECT COUNT(*) FROM records WHERE action = 'live-refused'") >= 3
        }
        _ = server
        for process in processes { _ = process.stop() }
    }
}
