import Foundation
import NIOHTTP1
@testable import SchoolServer
import SharedStore
import Testing
import VerdictCore

/// Pseudonymised views (docs/safeguarding.md, "Pseudonyms"), on both
/// engines: with every role but the admin's in `console.pseudonyms`, every
/// console page that shows people, opened by each of those roles, shows the
/// pupils' pseudonyms and never their names: the dashboard with its
/// requests, the records (and their CSV), a timeline, the alert queue and an
/// alert, the machines, the rooms and a room (who is signed in, its live
/// JSON), the requests' JSON, the audit trail, the annual review (page and
/// PDF), the filtering tests, the digests and a digest's preview, and the
/// export is refused.
@Suite struct PseudonymViewsTests {
    static let pseudonymous: [(Role, [String])] = [(.auditor, []), (.teacher, ["lab2"]), (.safeguarding, [])]

    /// Every GET page of the console that can show a pupil's name, `{pseudonym}`
    /// and `{alert}` filled in, and the permission it needs.
    static func pages(pseudonym: String, alert: String) -> [(String, Permission)] {
        [
            ("/console/", .viewDashboard), ("/console/records", .viewRecords), ("/console/records?user=\(pseudonym)", .viewRecords),
            ("/console/records?format=csv", .viewRecords), ("/console/timeline?user=\(pseudonym)", .viewTimeline),
            ("/console/machines", .viewMachines), ("/console/alerts", .viewAlerts), ("/console/alerts?state=closed", .viewAlerts),
            ("/console/alerts/\(alert)", .viewAlerts), ("/console/rooms", .controlRoom), ("/console/rooms/lab2", .controlRoom),
            ("/console/rooms/lab2/live", .controlRoom), ("/console/requests/live", .answerRequests), ("/console/audit", .viewAudit),
            ("/console/policy", .viewPolicy), ("/console/people", .viewPeople), ("/console/review", .viewReview),
            ("/console/review.pdf", .viewReview), ("/console/filtering-tests", .viewReview), ("/console/digests", .viewDigests),
            ("/console/digests/preview", .viewDigests),
        ]
    }

    @Test(arguments: Engine.allCases)
    func noPageShowsANameToARoleOfPseudonyms(engine: Engine) async throws {
        let live = LiveChannel(key: LiveKey(signing: BundleSigningKey()), recheck: .seconds(3600))
        try await withConsoleServer(engine, live: live, pseudonyms: [.auditor, .teacher, .safeguarding]) { console async throws in
            let server = console.server
            let storage = console.storage
            let admin = try await ServerAdministration.createAPIToken(storage: storage, role: .admin, createdBy: "t", now: 0)
            let bearer = [("Authorization", "Bearer \(admin.token)")]
            let policy = String(decoding: try JSONEncoder().encode(LiveTests.policy(key: live.key.publicText)), as: UTF8.self)
            let set = try await server.client.request(.PUT, "/api/v1/policy", headers: bearer, body: Array(#"{"policy":\#(policy),"reason":"r"}"#.utf8))
            #expect(set.status == 201)
            #expect(try await server.client.request(.POST, "/api/v1/policy/publish", headers: bearer, body: Array(#"{"reason":"r"}"#.utf8)).status == 201)

            // Two pupils, each everywhere a name is kept: records, an alert (one closed), a request, a check-in, a rule for one person.
            let names = ["zoya.fenwick", "ravi.okonkwo"]
            let machine = try await server.enrol(TestMachine(), room: "lab2")
            let lab2 = machine.id
            var alerts: [StoredAlert] = []
            for (index, name) in names.enumerated() {
                let sequence = Int64(index * 10)
                let outcome = try await storage.storeRecords(
                    machine: lab2,
                    records: [
                        AlertTests.record(lab2, sequence + 1, user: name, group: "7a", category: "games", offset: sequence),
                        AlertTests.record(lab2, sequence + 2, user: name, group: "7a", category: nil, action: "allow", host: "www.google.com",
                            url: "http://www.google.com/search?q=how+to+kill+myself", offset: sequence + 1),
                    ], dropped: 0, now: AlertTests.now, safeguarding: .shipped)
                alerts += outcome.alerts
            }
            let first = try #require(alerts.first { $0.user == names[0] })
            _ = try await storage.triageAlert(id: try #require(alerts.first { $0.user == names[1] }).id, to: .closed, note: "seen", by: "person:dsl", now: AlertTests.now)
            let requests = names.enumerated().map { (id: "r\($0.offset)", user: $0.element, group: "7a", host: "games\($0.offset).example") }
            #expect(try await server.post("/api/v1/machine/requests", AccessRequestTests.body(requests), signedBy: machine).status == 200)
            let pending = try await storage.accessRequests(AccessRequestQuery())
            let approved = try #require(pending.first { $0.request.user == names[1] })
            #expect(try await console.post("/console/requests/\(approved.id)/approve", as: .admin, [("scope", "user"), ("minutes", "30")]).status == 303)
            try await storage.recordCheckIn(
                machine: lab2,
                CheckIn(
                    version: "1.2", rulesVersion: 1, rulesSince: nil, filterData: .running, filterDataRestarts: 0, failMode: .open, queueDrops: 0,
                    recordsWaiting: 0, recordsDropped: 0, users: names),
                now: server.clock.now)
            // The console's audit trail (the tests' own source) names `alice` as a timeline's target.
            let shownNames = names + ["alice"]
            let key = Pseudonyms(key: try await storage.pseudonymKey())

            // The admin, who sees names, sees them: the pages do hold them.
            #expect(try await console.get("/console/records", as: .admin).text.contains(names[0]))
            #expect(try await console.get("/console/alerts/\(first.id)", as: .admin).text.contains(names[0]))

            for (role, rooms) in Self.pseudonymous {
                var pseudonymsSeen = 0
                for (path, permission) in Self.pages(pseudonym: key.of(names[0]), alert: first.id) {
                    let answer = try await console.get(path, as: role, rooms: rooms)
                    #expect(answer.status == (role.may(permission) ? 200 : 403), "\(role) \(path): \(answer.text.prefix(300))")
                    for name in shownNames {
                        #expect(!answer.text.contains(name), "\(role) \(path) shows \(name)")
                    }
                    if answer.status == 200 && shownNames.contains(where: { answer.text.contains(key.of($0)) }) { pseudonymsSeen += 1 }
                }
                #expect(pseudonymsSeen >= 5, "\(role): pseudonyms on the pages that show people")
                // The pseudonym finds the person; a name typed in finds nothing (it would tell whose pseudonym it is).
                let timeline = try await console.get("/console/timeline?user=\(key.of(names[0]))", as: role, rooms: rooms)
                #expect(timeline.status == 200 && timeline.text.contains("site.example"), "\(role): the pseudonym's own records")
                #expect(try await console.get("/console/timeline?user=\(names[0])", as: role, rooms: rooms).status == 400)
                #expect(try await console.get("/console/timeline/export?user=\(names[0])", as: role, rooms: rooms).status == 403)
            }
        }
    }

    /// The audit page's targets that hold a pupil's name: a timeline opened,
    /// an export, and the `user` of a records export's filters.
    @Test func theAuditTrailShowsTheTargetsNamesAsPseudonyms() throws {
        let key = Pseudonyms(key: Array(repeating: 7, count: 32))
        func shown(_ action: String, _ target: String, names: NameShown = NameShown(pseudonyms: key)) -> String? {
            AuditTrailPage.target(of: ConsoleAuditEvent(time: 0, actor: "person:it", action: action, target: target, reason: nil), names: names)
        }
        let pseudonym = key.of("zoya.fenwick")
        #expect(shown("timeline.open", "zoya.fenwick") == pseudonym)
        #expect(shown("person.export", "zoya.fenwick") == pseudonym)
        #expect(shown("records.export", "/console/records?since=2025-11-28&user=zoya.fenwick&format=csv")
            == "/console/records?since=2025-11-28&user=\(pseudonym)&format=csv")
        #expect(shown("records.export", "/console/records?user=\(pseudonym)") == "/console/records?user=\(pseudonym)", "typed as a pseudonym already")
        #expect(shown("records.export", "/console/records?since=2025-11-28") == "/console/records?since=2025-11-28")
        #expect(shown("policy.set", "version 3") == "version 3")
        #expect(shown("records.export", "/console/records?user=zoya.fenwick", names: NameShown(pseudonyms: nil)) == "/console/records?user=zoya.fenwick")
    }
}
