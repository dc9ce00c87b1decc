import Foundation
@testable import SchoolServer
import Testing
import VerdictCore

/// The safeguarding alerts in the console (docs/console.md, "Alerts"): the
/// queue within the principal's scope and role, pseudonyms for the roles of
/// `console.pseudonyms`, an alert's page, and triage through its forms with
/// the CSRF token, a note required to close, forward only.
@Suite struct ConsoleAlertsTests {
    @Test(arguments: Engine.allCases)
    func theQueueKeepsToScopeAndRoleAndTriageGoesThroughTheForms(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let storage = console.storage
            let lab2 = try await StorageTests.enrol(storage)  // room lab2
            let stored = try await storage.storeRecords(
                machine: lab2,
                records: [
                    AlertTests.record(lab2, 1, user: "alice", group: "7a", category: nil, action: "allow", host: "www.google.com",
                        url: "http://www.google.com/search?q=how+to+kill+myself"),
                    AlertTests.record(lab2, 2, user: "<b>bob</b>", group: "7b", category: "adult"),
                ], dropped: 0, now: AlertTests.now, safeguarding: .shipped)
            let danger = try #require(stored.alerts.first { $0.severity == .danger })
            let caution = try #require(stored.alerts.first { $0.ruleID == "adult" })

            // The safeguarding lead sees both, newest first, names escaped; the danger one says what was searched.
            let queue = try await console.get("/console/alerts", as: .safeguarding)
            #expect(queue.status == 200)
            #expect(queue.text.contains(#"id="alert-\#(danger.id)""#) && queue.text.contains(#"id="alert-\#(caution.id)""#))
            #expect(queue.text.contains("“how to kill myself”") && queue.text.contains("&lt;b&gt;bob&lt;/b&gt;") && !queue.text.contains("<b>bob</b>"))
            let dangerOnly = try await console.get("/console/alerts?severity=danger", as: .safeguarding)
            #expect(dangerOnly.text.contains(danger.id) && !dangerOnly.text.contains(caution.id))
            #expect(try await console.get("/console/alerts?state=nonsense", as: .safeguarding).status == 400)
            // A lead scoped to another room and group sees neither; a teacher may not open the queue; an auditor reads pseudonyms.
            let elsewhere = try await console.get("/console/alerts", as: .safeguarding, rooms: ["lab3"])
            #expect(elsewhere.status == 200 && elsewhere.text.contains(#"id="no-alerts""#))
            #expect(try await console.get("/console/alerts/\(danger.id)", as: .safeguarding, rooms: ["lab3"]).status == 404)
            #expect(try await console.get("/console/alerts", as: .teacher, rooms: ["lab2"]).status == 403)
            let auditor = try await console.get("/console/alerts", as: .auditor)
            #expect(auditor.status == 200 && auditor.text.contains(Pseudonyms.prefix) && !auditor.text.contains(">alice<"))
            let auditorAlert = try await console.get("/console/alerts/\(danger.id)", as: .auditor)
            #expect(auditorAlert.status == 200 && !auditorAlert.text.contains(#"id="acknowledge-form""#) && !auditorAlert.text.contains("alice"))

            // The alert's page: the fields, the timeline of that day, the triage forms.
            let page = try await console.get("/console/alerts/\(danger.id)", as: .safeguarding)
            #expect(page.status == 200 && page.text.contains("self-harm-search") && page.text.contains(#"id="timeline-link""#))
            #expect(page.text.contains(#"href="/console/timeline?user=alice&amp;since="#))
            #expect(page.text.contains(#"id="acknowledge-form""#) && page.text.contains(#"id="close-form""#))

            // Triage: the CSRF token; an auditor may not; a note to close; forward only.
            #expect(try await console.post("/console/alerts/\(danger.id)/acknowledge", as: .safeguarding, [], csrf: false).status == 403)
            #expect(try await console.post("/console/alerts/\(danger.id)/acknowledge", as: .auditor, []).status == 403)
            let acknowledged = try await console.post("/console/alerts/\(danger.id)/acknowledge", as: .safeguarding, [("note", "looking")])
            #expect(acknowledged.status == 303 && acknowledged.header("Location") == "/console/alerts/\(danger.id)?done=alert-acknowledge")
            let noNote = try await console.post("/console/alerts/\(danger.id)/close", as: .safeguarding, [("note", "  ")])
            #expect(noNote.status == 422 && noNote.text.contains(#"id="triage-error""#))
            let again = try await console.post("/console/alerts/\(danger.id)/acknowledge", as: .safeguarding, [])
            #expect(again.status == 409)
            let closed = try await console.post("/console/alerts/\(danger.id)/close", as: .admin, [("note", "Spoke to her; parents told.")])
            #expect(closed.status == 303)
            let after = try #require(try await storage.alert(id: danger.id))
            #expect(after.state == .closed && after.note == "Spoke to her; parents told." && after.updatedBy == "person:t-admin")
            let closedPage = try await console.get("/console/alerts/\(danger.id)", as: .safeguarding)
            #expect(!closedPage.text.contains(#"id="close-form""#) && closedPage.text.contains("Spoke to her; parents told."))
            #expect(try await console.get("/console/alerts", as: .safeguarding).text.contains(caution.id))
            #expect(!(try await console.get("/console/alerts", as: .safeguarding).text.contains(#"id="alert-\#(danger.id)""#)), "the open queue leaves closed alerts out")
        }
    }

    /// The dashboard's count of new danger alerts, within the scope, for the roles that see alerts, linking to their queue.
    @Test(arguments: Engine.allCases)
    func theDashboardCountsTheNewDangerAlerts(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let storage = console.storage
            let lab2 = try await StorageTests.enrol(storage)
            let search = "http://www.google.com/search?q=how+to+kill+myself"
            let stored = try await storage.storeRecords(
                machine: lab2,
                records: [
                    AlertTests.record(lab2, 1, user: "alice", group: "7a", category: nil, action: "allow", host: "www.google.com", url: search),
                    AlertTests.record(lab2, 2, user: "bob", group: "7b", category: nil, action: "allow", host: "www.google.com", url: search),
                    AlertTests.record(lab2, 3, user: "carol", group: "7b", category: "adult"),
                ], dropped: 0, now: AlertTests.now, safeguarding: .shipped)
            #expect(stored.alerts.filter { $0.severity == .danger }.count == 2)
            let link = #"<a href="/console/alerts?state=new&amp;severity=danger">"#
            let lead = try await console.get("/console/", as: .safeguarding)
            #expect(lead.text.contains(#"<p id="new-danger-alerts">\#(link)<strong class="state state-unfiltered">2</strong> new danger alerts"#), "\(lead.text)")
            // A lead of 7a only counts alice's; an auditor sees the count; a teacher has no card.
            let seven = try await console.get("/console/", as: .safeguarding, groups: ["7a"])
            #expect(seven.text.contains(#"<strong class="state state-unfiltered">1</strong>"#))
            #expect(try await console.get("/console/", as: .auditor).text.contains(#"id="new-danger-alerts""#))
            #expect(!(try await console.get("/console/", as: .teacher, rooms: ["lab2"]).text.contains(#"id="new-danger-alerts""#)))
            // The queue the link opens holds the two; once both are acknowledged the card says there are none.
            let queue = try await console.get("/console/alerts?state=new&severity=danger", as: .safeguarding)
            #expect(queue.status == 200 && stored.alerts.filter { $0.severity == .danger }.allSatisfy { queue.text.contains(#"id="alert-\#($0.id)""#) })
            for alert in stored.alerts where alert.severity == .danger {
                #expect(try await console.post("/console/alerts/\(alert.id)/acknowledge", as: .safeguarding, []).status == 303)
            }
            #expect(try await console.get("/console/", as: .safeguarding).text.contains(#"\#(link)No new danger alerts."#))
        }
    }
}
