import Foundation
import Synchronization
@testable import SchoolServer
import Testing
import VerdictCore

/// Safeguarding alerts on both engines (docs/server.md, "Safeguarding
/// alerts"): made as records arrive, once per record, within the repeat
/// limit, from the count-th attempt; listed within a scope; triaged with
/// the audit trail; taken once by the delivery.
@Suite(.timeLimit(.minutes(10))) struct AlertTests {
    static let now = StorageTests.now

    /// A record of `user` at `now` + `offset` seconds, blocked in `category` unless `action` says otherwise.
    static func record(
        _ machine: String, _ sequence: Int64, user: String? = "alice", group: String? = "7a", category: String? = "drogue",
        action: String = "block", reason: String = "category", host: String = "site.example", url: String? = nil, offset: Int64 = 0
    ) -> StoredRecord {
        let time = (now + offset) * 1000 + sequence % 1000
        return StoredRecord(
            machine: machine, timeMilliseconds: time,
            record: MachineRecord(
                sequence: sequence, time: RecordTime.format(milliseconds: time), uid: 1001, user: user, group: group, kind: url == nil ? "tls" : "http",
                host: host, url: url, destination: "192.0.2.7", port: 443, action: action, category: category, rule: host, reason: reason,
                rulesVersion: 1))
    }

    static func store(_ storage: SQLStorage, _ machine: String, _ records: [StoredRecord], now: Int64 = now, rules: SafeguardingPolicy = .shipped)
        async throws -> StoreOutcome
    {
        try await storage.storeRecords(machine: machine, records: records, dropped: 0, now: now, safeguarding: rules)
    }

    // MARK: Storage

    @Test(arguments: Engine.allCases)
    func aRecordPostedTwiceAlertsOnceAndItsAlertSaysWhatHappened(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await StorageTests.enrol(storage)
            let danger = Self.record(machine, 1, category: nil, action: "allow", host: "www.google.com", url: "http://www.google.com/search?q=how+to+kill+myself")
            let first = try await Self.store(storage, machine, [danger])
            #expect(first.inserted == 1 && first.alerts.count == 1 && first.suppressed == 0)
            // Sent again (the machine did not hear the answer), with a new record of no concern.
            let again = try await Self.store(storage, machine, [danger, Self.record(machine, 2, category: "games")])
            #expect(again.inserted == 1 && again.alerts.isEmpty && again.suppressed == 0, "a record already stored is not judged again")

            let alert = try #require(first.alerts.first)
            #expect(Secrets.isAlertID(alert.id) && alert.ruleID == "self-harm-search" && alert.severity == .danger)
            #expect(alert.action == "allow" && alert.searchTerm == "how to kill myself" && alert.host == "www.google.com")
            #expect(alert.machine == machine && alert.room == "lab2" && alert.user == "alice" && alert.group == "7a" && alert.recordSequence == 1)
            #expect(alert.time == danger.timeMilliseconds && alert.createdAt == Self.now && alert.state == .new && !alert.dispatched)
            #expect(try await storage.alert(id: alert.id) == alert)
            #expect(try await storage.alerts(AlertQuery()).alerts == [alert])
            // Without the rules (tools that store records alone): nothing judged.
            let plain = try await storage.storeRecords(machine: machine, records: [Self.record(machine, 3)], dropped: 0, now: Self.now)
            #expect(plain.alerts.isEmpty && plain.inserted == 1)
        }
    }

    @Test(arguments: Engine.allCases)
    func anAllowedFlowMatchingADangerRuleAlertsAndABlockedOnlyRuleLeavesAllowedFlowsAlone(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await StorageTests.enrol(storage)
            let outcome = try await Self.store(
                storage, machine,
                [
                    Self.record(machine, 1, category: "dangerous_material", action: "allow"),
                    Self.record(machine, 2, user: "bob", category: "games", action: "allow"),
                    Self.record(machine, 3, user: "carol", category: "tunnels", action: "allow", reason: "bypass"),
                    Self.record(machine, 4, user: "dan", category: nil, action: "allow", url: "http://www.google.com/search?q=skill+myself"),
                ])
            #expect(outcome.alerts.map(\.ruleID) == ["dangerous-material"])
            #expect(outcome.alerts.first?.severity == .danger && outcome.alerts.first?.action == "allow")
        }
    }

    @Test(arguments: Engine.allCases)
    func onePersonAndRuleAlertOnceWithinTheRepeatAndTheRestAreCounted(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await StorageTests.enrol(storage)
            // Three drug sites in one post: one alert, two kept quiet.
            let first = try await Self.store(storage, machine, (1...3).map { Self.record(machine, $0) })
            #expect(first.alerts.count == 1 && first.suppressed == 2)
            // Another person, and another rule for alice: each their own.
            let others = try await Self.store(
                storage, machine, [Self.record(machine, 4, user: "bob"), Self.record(machine, 5, category: "dangerous_material")])
            #expect(Set(others.alerts.map { "\($0.user ?? "-")/\($0.ruleID)" }) == ["bob/drugs", "alice/dangerous-material"])
            // 599 s later: still quiet; 600 s after the alert: the next one.
            let early = try await Self.store(storage, machine, [Self.record(machine, 6, offset: 599)], now: Self.now + 599)
            #expect(early.alerts.isEmpty && early.suppressed == 1)
            let later = try await Self.store(storage, machine, [Self.record(machine, 7, offset: 600)], now: Self.now + 600)
            #expect(later.alerts.count == 1 && later.suppressed == 0)
            let limit = try await storage.engine.run(
                "SELECT last_at, suppressed FROM alert_limits WHERE person = 'alice' AND rule_id = 'drugs'"
            ).first
            #expect(try limit?.integer("last_at") == Self.now + 600 && limit?.integer("suppressed") == 0, "counted since the last alert")
            // A school's shorter repeat.
            let quick = SafeguardingPolicy(repeatSeconds: 60)
            #expect(try await Self.store(storage, machine, [Self.record(machine, 8, offset: 660)], now: Self.now + 660, rules: quick).alerts.count == 1)
            // A record that names no one counts for its machine.
            let nobody = try await Self.store(storage, machine, [Self.record(machine, 9, user: nil), Self.record(machine, 10, user: nil)])
            #expect(nobody.alerts.count == 1 && nobody.suppressed == 1 && nobody.alerts.first?.person == "machine:\(machine)")
        }
    }

    @Test(arguments: Engine.allCases)
    func twoPostsAtOnceAboutOnePersonAlertOnce(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            var machines: [String] = []
            for index in 0..<8 { machines.append(try await StorageTests.enrol(storage, hostname: "pc\(index)")) }
            let outcomes = try await withThrowingTaskGroup(of: StoreOutcome.self) { group in
                for machine in machines {
                    group.addTask {
                        try await Self.store(storage, machine, [Self.record(machine, 1), Self.record(machine, 2, user: "bob")])
                    }
                }
                var all: [StoreOutcome] = []
                for try await outcome in group { all.append(outcome) }
                return all
            }
            // Eight machines, the same two people, at once: one alert each, the rest kept quiet.
            #expect(outcomes.flatMap(\.alerts).map { $0.user ?? "" }.sorted() == ["alice", "bob"])
            #expect(outcomes.map(\.suppressed).reduce(0, +) == 14)
            #expect(try await storage.alerts(AlertQuery()).alerts.count == 2)
        }
    }

    @Test(arguments: Engine.allCases)
    func theFifthAttemptWithinTenMinutesAlertsAndFourDoNot(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await StorageTests.enrol(storage)
            func attempt(_ sequence: Int64, _ user: String, at offset: Int64) -> StoredRecord {
                Self.record(machine, sequence, user: user, category: "tunnels", reason: "bypass", host: "vpn.example", offset: offset)
            }
            // Four within ten minutes: nothing yet.
            let four = try await Self.store(storage, machine, [0, 60, 120, 180].enumerated().map { attempt(Int64($0.offset + 1), "alice", at: $0.element) })
            #expect(four.alerts.isEmpty && four.suppressed == 0)
            // The fifth, still within ten minutes of the first: the alert.
            let fifth = try await Self.store(storage, machine, [attempt(5, "alice", at: 500)], now: Self.now + 500)
            #expect(fifth.alerts.map(\.ruleID) == ["bypass-attempts"] && fifth.alerts.first?.severity == .caution)
            // Bob's five are spread over more than ten minutes, a post each: never five within ten.
            for (index, offset) in [Int64(0), 240, 480, 720, 780].enumerated() {
                let spread = try await Self.store(storage, machine, [attempt(Int64(index + 10), "bob", at: offset)], now: Self.now + offset)
                #expect(spread.alerts.isEmpty)
            }
            // Seven in one post: the fifth is the alert, the two after it are kept quiet.
            let seven = try await Self.store(
                storage, machine, (0..<7).map { attempt(Int64(20 + $0), "carol", at: Int64($0) * 10) }, now: Self.now + 60)
            #expect(seven.alerts.map(\.recordSequence) == [24] && seven.suppressed == 2)
            // The attempts of the window are kept; the older ones are gone.
            let bobs = try await storage.engine.run("SELECT COUNT(*) AS count FROM alert_attempts WHERE person = 'bob'").first?.integer("count")
            #expect(bobs == 4, "240..780: the one at 0 fell out of the window")
            // Retention takes what is past (here: alice's 5, bob's 4, carol's 7).
            #expect(try await storage.pruneAlertAttempts(before: (Self.now + 10_000) * 1000) == 16)
        }
    }

    @Test(arguments: Engine.allCases)
    func theListKeepsToItsScopeAndFiltersAndPages(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let lab2 = try await StorageTests.enrol(storage)
            let secret = try await StorageTests.makeToken(storage, room: "lab3")
            let lab3 = Secrets.newMachineID()
            _ = try await storage.enrol(
                NewMachine(id: lab3, publicKey: Secrets.newSecret(), hostname: "lab3-pc01", version: "1.0"), tokenHash: Secrets.hash(secret),
                now: Self.now)
            _ = try await Self.store(storage, lab2, [Self.record(lab2, 1, user: "alice", group: "7a")])
            _ = try await Self.store(storage, lab3, [Self.record(lab3, 1, user: "bob", group: "7b", category: "dangerous_material", offset: 1)], now: Self.now + 1)
            _ = try await Self.store(storage, lab3, [Self.record(lab3, 2, user: "carol", group: "7a", category: "gambling", offset: 2)], now: Self.now + 2)
            func users(_ query: AlertQuery) async throws -> [String] { try await storage.alerts(query).alerts.compactMap(\.user) }
            #expect(try await users(AlertQuery()) == ["carol", "bob", "alice"], "newest first")
            #expect(try await users(AlertQuery(scope: Scope(rooms: ["lab2"]))) == ["alice"])
            #expect(try await users(AlertQuery(scope: Scope(groups: ["7a"]))) == ["carol", "alice"])
            #expect(try await users(AlertQuery(scope: Scope(rooms: ["lab3"], groups: ["7a"]))) == ["carol", "bob", "alice"])
            #expect(try await users(AlertQuery(scope: Scope(rooms: ["lab9"]))) == [])
            #expect(try await users(AlertQuery(severity: .danger)) == ["bob"])
            #expect(try await users(AlertQuery(user: "alice")) == ["alice"])
            #expect(try await users(AlertQuery(states: [])) == [])
            #expect(try await users(AlertQuery(since: (Self.now + 1) * 1000)) == ["carol", "bob"])
            #expect(try await users(AlertQuery(until: (Self.now + 1) * 1000)) == ["alice"])
            // Pages of one, by cursor.
            var seen: [String] = []
            var query = AlertQuery(limit: 1)
            while true {
                let page = try await storage.alerts(query)
                seen += page.alerts.compactMap(\.user)
                guard let next = page.next else { break }
                #expect(AlertCursor(token: next.token) == next)
                query.after = next
            }
            #expect(seen == ["carol", "bob", "alice"])
            #expect(AlertCursor(token: "a1.nonsense") == nil && AlertCursor(token: "r1.x") == nil)
        }
    }

    @Test(arguments: Engine.allCases)
    func triageGoesForwardOnlyAndTheDeliveryTakesEachAlertOnce(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await StorageTests.enrol(storage)
            let made = try await Self.store(storage, machine, [Self.record(machine, 1), Self.record(machine, 2, user: "bob")]).alerts
            let alert = try #require(made.first)
            let acknowledged = try await storage.triageAlert(id: alert.id, to: .acknowledged, note: nil, by: "person:dsl", now: Self.now + 5)
            #expect(acknowledged?.state == .acknowledged && acknowledged?.updatedBy == "person:dsl" && acknowledged?.updatedAt == Self.now + 5)
            #expect(try await storage.triageAlert(id: alert.id, to: .acknowledged, note: nil, by: "person:x", now: Self.now) == nil, "once")
            let escalated = try await storage.triageAlert(id: alert.id, to: .escalated, note: "told the head of year", by: "person:dsl", now: Self.now)
            #expect(escalated?.state == .escalated && escalated?.note == "told the head of year")
            let closed = try await storage.triageAlert(id: alert.id, to: .closed, note: nil, by: "person:dsl", now: Self.now)
            #expect(closed?.state == .closed && closed?.note == "told the head of year", "no note keeps the one before")
            #expect(try await storage.triageAlert(id: alert.id, to: .escalated, note: nil, by: "person:dsl", now: Self.now) == nil, "closed stays closed")
            #expect(try await storage.triageAlert(id: "al-aaaaaaaaaaaaaaaa", to: .closed, note: "x", by: "person:dsl", now: Self.now) == nil)

            #expect(Set(try await storage.undispatchedAlerts(limit: 10).map(\.id)) == Set(made.map(\.id)))
            #expect(Set(try await storage.markAlertsDispatched(ids: made.map(\.id) + ["al-aaaaaaaaaaaaaaaa"])) == Set(made.map(\.id)))
            #expect(try await storage.markAlertsDispatched(ids: made.map(\.id)) == [], "taken once")
            #expect(try await storage.undispatchedAlerts(limit: 10).isEmpty)
            #expect(try await storage.alert(id: alert.id)?.dispatched == true)
        }
    }

    // MARK: The API

    struct Listing: Decodable {
        struct Alert: Decodable {
            let id: String
            let rule: String
            let severity: String
            let user: String?
            let room: String
            let state: String
            let note: String?
            let searchTerm: String?
        }
        let alerts: [Alert]
        let next: String?
    }

    static func records(_ items: [(sequence: Int, user: String, group: String, category: String)]) -> String {
        let records = items.map { item in
            #"{"sequence":\#(item.sequence),"time":"2025-11-28T08:00:0\#(item.sequence % 10).250Z","uid":1001,"user":"\#(item.user)","group":"\#(item.group)","kind":"tls","host":"site.example","destination":"192.0.2.7","port":443,"action":"block","category":"\#(item.category)","rule":"site.example","reason":"category","rulesVersion":42}"#
        }
        return #"{"records":[\#(records.joined(separator: ","))],"dropped":0}"#
    }

    @Test(arguments: Engine.allCases)
    func recordsAlertAtIngestAndTheRolesAndScopesAreKept(engine: Engine) async throws {
        // The server's own worker, with an outbox that takes nothing and
        // tells the test each time it looks; it looks at its start and, its
        // interval an hour, otherwise only when the ingest's poke wakes it.
        let (looks, looked) = AsyncStream.makeStream(of: Int.self)
        let delivery: @Sendable (any ServerStorage) -> AlertDeliveryService = { storage in
            var settings = AlertDeliveryService.Settings(alerts: AlertsConfiguration(), consoleURL: "https://console.example", pseudonyms: false)
            settings.interval = .seconds(3600)
            return AlertDeliveryService(
                settings: settings, storage: storage, sendmail: SendmailCommand(command: ["/bin/false"]),
                outbox: WatchingOutbox(storage: storage, looked: looked), metrics: ServerMetrics(), logger: testLogger, clock: { 0 })
        }
        try await withRunningServer(engine, delivery: delivery) { server async throws in
            var looking = looks.makeAsyncIterator()
            #expect(await looking.next() == 0, "the worker's first look, at its start")
            let lab2 = try await server.enrol(TestMachine(), room: "lab2")
            let lab3 = try await server.enrol(TestMachine(), room: "lab3")
            let alice = Self.records([(1, "alice", "7a", "drogue"), (2, "alice", "7a", "games")])
            #expect(try await server.post("/api/v1/machine/records", alice, signedBy: lab2).status == 200)
            // The poke comes after the commit: the worker, woken, finds the alert.
            #expect(await looking.next() == 1)
            #expect(try await server.storage.undispatchedAlerts(limit: 10).map(\.ruleID) == ["drugs"])
            // Posted twice: no second alert, no poke.
            #expect(try await server.post("/api/v1/machine/records", alice, signedBy: lab2).status == 200)
            // A second later (the list is newest first).
            server.clock.advance(1)
            #expect(try await server.post("/api/v1/machine/records", Self.records([(1, "bob", "7b", "dangerous_material")]), signedBy: lab3).status == 200)
            #expect(try await server.storage.alerts(AlertQuery()).alerts.count == 2)

            let admin = try await AccessRequestTests.token(server, .admin)
            func list(_ headers: [(String, String)], _ query: String = "") async throws -> Listing {
                let answer = try await server.client.request(.GET, "/api/v1/alerts" + query, headers: headers)
                #expect(answer.status == 200, "\(answer.text)")
                return try JSONDecoder().decode(Listing.self, from: Data(answer.body))
            }
            let all = try await list(admin).alerts
            #expect(all.map(\.user) == ["bob", "alice"])
            let bob = try #require(all.first)
            #expect(bob.rule == "dangerous-material" && bob.severity == "danger" && bob.room == "lab3" && bob.state == "new")
            #expect(try await list(admin, "?severity=caution").alerts.map(\.user) == ["alice"])
            #expect(try await list(admin, "?state=open&user=bob").alerts.map(\.user) == ["bob"])
            #expect(try await server.client.request(.GET, "/api/v1/alerts?state=maybe", headers: admin).status == 400)
            #expect(try await server.client.request(.GET, "/api/v1/alerts?colour=red", headers: admin).status == 400)
            #expect(try await server.client.request(.GET, "/api/v1/alerts?cursor=x", headers: admin).status == 400)

            // A teacher may not; an auditor reads and does not triage; no token, no answer.
            let teacher = try await AccessRequestTests.token(server, .teacher, Scope(rooms: ["lab3"]))
            let refused = try await server.client.request(.GET, "/api/v1/alerts", headers: teacher)
            #expect(refused.status == 403 && refused.text.contains("role-forbidden"))
            #expect(try await server.client.request(.GET, "/api/v1/alerts/\(bob.id)", headers: teacher).status == 403)
            let auditor = try await AccessRequestTests.token(server, .auditor)
            #expect(try await list(auditor).alerts.count == 2)
            #expect(try await server.client.request(.POST, "/api/v1/alerts/\(bob.id)/acknowledge", headers: auditor).status == 403)
            #expect(try await server.client.request(.GET, "/api/v1/alerts").status == 401)

            // A safeguarding lead of lab2 never sees lab3's alert: not listed, not found, not triaged.
            let lab2Lead = try await AccessRequestTests.token(server, .safeguarding, Scope(rooms: ["lab2"]))
            #expect(try await list(lab2Lead).alerts.map(\.user) == ["alice"])
            #expect(try await server.client.request(.GET, "/api/v1/alerts/\(bob.id)", headers: lab2Lead).status == 404)
            #expect(try await server.client.request(.POST, "/api/v1/alerts/\(bob.id)/acknowledge", headers: lab2Lead).status == 404)
            #expect(try await server.storage.alert(id: bob.id)?.state == .new)
            // One of group 7b sees bob's, from lab3.
            let groupLead = try await AccessRequestTests.token(server, .safeguarding, Scope(groups: ["7b"]))
            #expect(try await list(groupLead).alerts.map(\.user) == ["bob"])
            let one = try await server.client.request(.GET, "/api/v1/alerts/\(bob.id)", headers: groupLead)
            #expect(one.status == 200 && one.text.contains(#""rule":"dangerous-material""#))
            #expect(try await server.client.request(.GET, "/api/v1/alerts/al-aaaaaaaaaaaaaaaa", headers: admin).status == 404)
        }
    }

    @Test(arguments: Engine.allCases)
    func triageThroughTheAPINeedsANoteToCloseAndEachStepIsInTheAuditTrail(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let machine = try await server.enrol(TestMachine(), room: "lab2")
            #expect(try await server.post("/api/v1/machine/records", Self.records([(1, "alice", "7a", "sect")]), signedBy: machine).status == 200)
            let id = try #require(try await server.storage.alerts(AlertQuery()).alerts.first?.id)
            let lead = try await AccessRequestTests.token(server, .safeguarding)
            func step(_ name: String, _ body: String = "", form: Bool = false) async throws -> PinnedHTTPSClient.Answer {
                let type = form ? "application/x-www-form-urlencoded" : "application/json"
                return try await server.client.request(.POST, "/api/v1/alerts/\(id)/\(name)", headers: lead + [("Content-Type", type)], body: Array(body.utf8))
            }
            let acknowledged = try await step("acknowledge")
            #expect(acknowledged.status == 200 && acknowledged.text.contains(#""state":"acknowledged""#), "\(acknowledged.text)")
            #expect(try await step("acknowledge").status == 409, "acknowledged already")
            let escalated = try await step("escalate", "note=Told+the+head+of+year+%28Mr+Khan%29", form: true)
            #expect(escalated.status == 200 && escalated.text.contains("Told the head of year (Mr Khan)"), "\(escalated.text)")
            let noNote = try await step("close", #"{"note":"   "}"#)
            #expect(noNote.status == 422 && noNote.text.contains("note-required"))
            #expect(try await step("close", #"{"note":"\#(String(repeating: "x", count: 2001))"}"#).status == 400)
            #expect(try await step("close", "{").status == 400)
            let closed = try await step("close", #"{"note":"Spoke with her and her parents; a referral to the school counsellor."}"#)
            #expect(closed.status == 200 && closed.text.contains(#""state":"closed""#))
            #expect(try await step("escalate").status == 409, "closed stays closed")

            let events = try await server.storage.auditEvents(AuditQuery()).events.map(\.event).filter { $0.action.hasPrefix("alert.") }
            #expect(events.map(\.action).sorted() == ["alert.acknowledge", "alert.close", "alert.escalate"])
            #expect(events.allSatisfy { $0.target == id && $0.actor.hasPrefix("token:") })
            #expect(events.first { $0.action == "alert.escalate" }?.reason == "Told the head of year (Mr Khan)")
            #expect(events.first { $0.action == "alert.close" }?.reason?.hasPrefix("Spoke with her") == true)
            #expect(events.first { $0.action == "alert.close" }?.detail?.contains("rule=extremism severity=caution from=escalated") == true)
        }
    }

    @Test(arguments: Engine.allCases)
    func thePublishedPolicysRulesJudgeTheRecordsAndANewPublicationIsReadAgain(engine: Engine) async throws {
        try await withPublishingServer(engine) { publishing async throws in
            let server = publishing.server
            let machine = try await server.enrol(TestMachine(), room: "lab2")
            try await publishing.putList("games", ["games.example"])
            let own = """
                groups:
                  year7: { unixGroups: [year7] }
                policy:
                  block: [games]
                safeguarding:
                  defaults: false
                  repeat: 1m
                  rules:
                    - { id: year7-games, severity: advisory, categories: [games], groups: [year7] }
                """
            #expect(try await publishing.putPolicy(own).status == 201)
            _ = try await publishing.publish()
            let posted = Self.records([(1, "alice", "year7", "games"), (2, "bob", "year9", "games"), (3, "carol", "year7", "drogue")])
            #expect(try await server.post("/api/v1/machine/records", posted, signedBy: machine).status == 200)
            #expect(try await server.storage.alerts(AlertQuery()).alerts.map { "\($0.user ?? "")/\($0.ruleID)" } == ["alice/year7-games"])

            // A new publication without safeguarding: the shipped rules.
            #expect(try await publishing.putPolicy("policy:\n  block: [games]\n").status == 201)
            _ = try await publishing.publish()
            #expect(try await server.post("/api/v1/machine/records", Self.records([(4, "carol", "year7", "drogue")]), signedBy: machine).status == 200)
            #expect(try await server.storage.alerts(AlertQuery(user: "carol")).alerts.map(\.ruleID) == ["drugs"])

            // The counters: one advisory, one caution so far.
            let metrics = try await ServerAdministration.createAPIToken(storage: server.storage, role: .metrics, createdBy: "t", now: 0)
            let text = try await server.client.request(.GET, "/metrics", headers: [("Authorization", "Bearer \(metrics.token)")]).text
            #expect(text.contains(#"hallpass_server_alerts_total{severity="advisory"} 1"#), "\(text)")
            #expect(text.contains(#"hallpass_server_alerts_total{severity="caution"} 1"#))
            #expect(text.contains(#"hallpass_server_alerts_total{severity="danger"} 0"#))
            #expect(text.contains("hallpass_server_alerts_suppressed_total 0"))
        }
    }
}

/// An outbox that dispatches nothing (the alerts stay for the test to read)
/// and yields how many undispatched alerts it saw each time the worker looked.
struct WatchingOutbox: AlertOutbox {
    let storage: any ServerStorage
    let looked: AsyncStream<Int>.Continuation

    func undispatched(limit: Int) async throws -> [AlertMessage] {
        looked.yield(try await storage.undispatchedAlerts(limit: limit).count)
        return []
    }

    func markDispatched(ids: [String]) async throws {}
}
