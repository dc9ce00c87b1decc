import Foundation
@testable import SchoolServer
import Testing
import VerdictCore

/// The digests in the console (docs/console.md, "Digests"), on both
/// engines: the digests made with where their emails stand, for the admin
/// and the safeguarding lead only, and the preview of one's own digest so
/// far as HTML and as the PDF, of one's own scope, with pseudonyms for the
/// roles of `console.pseudonyms`.
@Suite struct ConsoleDigestsTests {
    @Test(arguments: Engine.allCases)
    func thePageListsTheDigestsAndPreviewsOnesOwn(engine: Engine) async throws {
        // The server's own worker would take the digests' emails the test
        // leases itself: here it lives at the epoch, when nothing is due.
        let idle: @Sendable (any ServerStorage) -> AlertDeliveryService = { storage in
            var settings = AlertDeliveryService.Settings(alerts: AlertsConfiguration(), consoleURL: "https://console.example", pseudonyms: false)
            settings.interval = .seconds(3600)
            return AlertDeliveryService(
                settings: settings, storage: storage, sendmail: SendmailCommand(command: ["/bin/false"]), metrics: ServerMetrics(),
                logger: testLogger, clock: { 0 })
        }
        try await withConsoleServer(engine, pseudonyms: [.auditor, .teacher], delivery: idle) { console async throws in
            let storage = console.storage
            let lab2 = try await StorageTests.enrol(storage)
            // This week (Friday 28 November 2025; the week from Monday the 24th): a danger alert for alice of 7a, a caution for bob of 7b.
            _ = try await storage.storeRecords(
                machine: lab2,
                records: [
                    AlertTests.record(lab2, 1, user: "alice", group: "7a", category: nil, action: "allow", host: "www.google.com",
                        url: "http://www.google.com/search?q=how+to+kill+myself", offset: -3600),
                    AlertTests.record(lab2, 2, user: "bob", group: "7b", category: "adult", offset: -3000),
                ], dropped: 0, now: AlertTests.now - 3000, safeguarding: .shipped)
            // Two digests made last Monday: one sent, one waiting.
            let week = (AlertTests.now - 11 * 86_400) * 1000..<(AlertTests.now - 4 * 86_400) * 1000
            for (login, id) in [("dsl", "dg-sent"), ("mr.kim", "dg-waiting")] {
                #expect(
                    try await storage.claimDigest(
                        NewDigestClaim(kind: .weekly, period: week, login: login, address: "\(login)@school.example", deliveryID: id, message: "To: x\n\nm\n"),
                        now: AlertTests.now - 4 * 86_400))
            }
            let lease = try await storage.claimAlertDeliveries(owner: "t", now: AlertTests.now, leaseUntil: AlertTests.now + 60, limit: 10)
            let sent = try #require(lease.first { $0.id == "dg-sent" })
            #expect(try await storage.finishAlertDelivery(id: sent.id, owner: "t", .sent, now: AlertTests.now - 4 * 86_400 + 5))

            let page = try await console.get("/console/digests", as: .safeguarding)
            #expect(page.status == 200 && page.text.contains(#"<table id="digests">"#))
            #expect(page.text.contains("dsl &lt;dsl@school.example&gt;") && page.text.contains("mr.kim &lt;mr.kim@school.example&gt;"))
            #expect(page.text.contains(#"<span class="state digest-sent">Delivered to the mail server</span>"#))
            #expect(page.text.contains(#"<span class="state digest-waiting">Waiting to be sent</span>"#))
            #expect(page.text.contains(#"href="/console/digests/preview.pdf?kind=weekly""#) && page.text.contains(#"href="/console/digests""#))
            for role in [Role.teacher, .auditor] {
                #expect(try await console.get("/console/digests", as: role, rooms: role == .teacher ? ["lab2"] : []).status == 403)
                #expect(try await console.get("/console/digests/preview.pdf", as: role, rooms: role == .teacher ? ["lab2"] : []).status == 403)
            }

            // The preview: this week so far, the lead's whole school with names; a lead of 7a sees only alice.
            let html = try await console.get("/console/digests/preview?kind=weekly", as: .safeguarding)
            #expect(html.status == 200 && html.header("Content-Type") == "text/html; charset=utf-8")
            #expect(html.header("Content-Security-Policy")?.hasPrefix("default-src 'none'") == true)
            #expect(html.text.contains("alice") && html.text.contains("bob") && html.text.contains("Weekly safeguarding digest"))
            let seven = try await console.get("/console/digests/preview?kind=weekly", as: .safeguarding, groups: ["7a"])
            #expect(seven.text.contains("alice") && !seven.text.contains("bob"))
            let pdf = try await console.get("/console/digests/preview.pdf", as: .safeguarding)
            #expect(pdf.status == 200 && pdf.header("Content-Type") == "application/pdf" && pdf.body.starts(with: Array("%PDF-".utf8)))
            let text = try DigestDeliveryTests.pdfText(pdf.body)
            #expect(text.contains("alice") && text.contains("bob"), "\(text)")
            // Today so far: the alerts of this morning are in it; nonsense is refused.
            #expect(try await console.get("/console/digests/preview?kind=daily", as: .admin).text.contains("alice"))
            #expect(try await console.get("/console/digests/preview?kind=monthly", as: .admin).status == 400)
        }
    }

    /// A lead whose role sees pseudonyms previews a digest with pseudonyms, as it would be mailed.
    @Test(arguments: Engine.allCases)
    func thePreviewKeepsToPseudonyms(engine: Engine) async throws {
        try await withConsoleServer(engine, pseudonyms: [.auditor, .safeguarding]) { console async throws in
            let storage = console.storage
            let lab2 = try await StorageTests.enrol(storage)
            _ = try await storage.storeRecords(
                machine: lab2,
                records: [AlertTests.record(lab2, 1, user: "alice", group: "7a", category: "adult", offset: -3600)],
                dropped: 0, now: AlertTests.now - 3600, safeguarding: .shipped)
            let pseudonym = Pseudonyms(key: try await storage.pseudonymKey()).of("alice")
            let html = try await console.get("/console/digests/preview", as: .safeguarding)
            #expect(html.status == 200 && html.text.contains(pseudonym) && !html.text.contains("alice"))
            let text = try DigestDeliveryTests.pdfText(try await console.get("/console/digests/preview.pdf", as: .safeguarding).body)
            #expect(text.contains(pseudonym) && !text.contains("alice"))
        }
    }
}
