import Foundation
import NIOHTTP1
@testable import SchoolServer
import Testing
import VerdictCore

/// One person's export for a subject access request (docs/safeguarding.md,
/// "A person's records"), on both engines: everything held about the name
/// and nobody else's, in pages; an empty export for a name with nothing;
/// only the roles that see names; in the audit trail; the console's button.
@Suite struct PersonExportTests {
    struct Export: Decodable {
        struct Record: Decodable {
            let user: String?
            let sequence: Int64
        }
        struct Alert: Decodable {
            let user: String?
            let state: String
            let note: String?
        }
        struct Request: Decodable {
            let user: String?
            let reason: String
        }
        let user: String
        let exportedBy: String
        let records: [Record]
        let alerts: [Alert]
        let accessRequests: [Request]
    }

    static func token(_ console: ConsoleServer, _ role: Role, _ scope: Scope = .school) async throws -> (id: String, header: [(String, String)]) {
        let made = try await ServerAdministration.createAPIToken(storage: console.storage, role: role, scope: scope, createdBy: "t", now: 0)
        return (made.id, [("Authorization", "Bearer \(made.token)")])
    }

    @Test(arguments: Engine.allCases)
    func oneNamesRecordsAlertsAndRequestsInOneDocument(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let storage = console.storage
            let lab2 = try await StorageTests.enrol(storage)
            // More of alice's records than one page holds, bob's between them, and a danger alert of each.
            let count = PersonExport.pageSize * 2 + 7
            var records: [StoredRecord] = []
            for sequence in 1...Int64(count) {
                records.append(AlertTests.record(lab2, sequence, user: sequence % 10 == 0 ? "bob" : "alice", category: "games", offset: sequence))
            }
            for start in stride(from: 0, to: records.count, by: 500) {
                _ = try await storage.storeRecords(machine: lab2, records: Array(records[start..<min(start + 500, records.count)]), dropped: 0, now: AlertTests.now)
            }
            let dangers = try await storage.storeRecords(
                machine: lab2,
                records: [
                    AlertTests.record(lab2, 5001, user: "alice", category: nil, action: "allow", host: "www.google.com",
                        url: "http://www.google.com/search?q=how+to+kill+myself"),
                    AlertTests.record(lab2, 5002, user: "bob", category: nil, action: "allow", host: "www.google.com",
                        url: "http://www.google.com/search?q=how+to+kill+myself"),
                ], dropped: 0, now: AlertTests.now, safeguarding: .shipped)
            let alices = try #require(dangers.alerts.first { $0.user == "alice" })
            _ = try await storage.triageAlert(id: alices.id, to: .closed, note: "Spoke to her; parents told.", by: "person:dsl", now: AlertTests.now + 60)
            _ = try await storage.storeAccessRequests(
                machine: lab2, room: "lab2",
                [
                    NewAccessRequest(machineRequest: "00000001", user: "alice", group: "7a", host: "a.example", url: "https://a.example/",
                        category: "games", reason: "maths homework", createdAt: AlertTests.now),
                    NewAccessRequest(machineRequest: "00000002", user: "bob", group: "7a", host: "b.example", url: "https://b.example/",
                        category: "games", reason: "bob's reason", createdAt: AlertTests.now),
                ], now: AlertTests.now)
            let alicesRecords = records.filter { $0.record.user == "alice" }.count + 1

            let dsl = try await Self.token(console, .safeguarding)
            let answer = try await console.server.client.request(.GET, "/api/v1/people/alice/export", headers: dsl.header)
            #expect(answer.status == 200 && answer.header("Content-Type") == "application/json")
            #expect(answer.header("Content-Disposition") == #"attachment; filename="hallpass-export-alice.json""#)
            let export = try JSONDecoder().decode(Export.self, from: Data(answer.body))
            #expect(export.user == "alice" && export.exportedBy == "token:\(dsl.id)")
            #expect(export.records.count == alicesRecords && export.records.allSatisfy { $0.user == "alice" })
            #expect(Set(export.records.map(\.sequence)).count == alicesRecords, "each record once across the pages")
            #expect(export.alerts.count == 1 && export.alerts.first?.state == "closed" && export.alerts.first?.note == "Spoke to her; parents told.")
            #expect(export.accessRequests.map(\.reason) == ["maths homework"])
            #expect(!answer.text.contains("bob"))
            let audited = try await storage.auditEvents(AuditQuery(action: "person.export")).events
            #expect(audited.map(\.event) == [NewAuditEvent(time: audited.first?.event.time ?? 0, actor: "token:\(dsl.id)", action: "person.export", target: "alice")])

            // A name that holds nothing: the document with nothing in it.
            let nobody = try await console.server.client.request(.GET, "/api/v1/people/nobody%20here/export", headers: dsl.header)
            #expect(nobody.status == 200)
            let empty = try JSONDecoder().decode(Export.self, from: Data(nobody.body))
            #expect(empty.user == "nobody here" && empty.records.isEmpty && empty.alerts.isEmpty && empty.accessRequests.isEmpty)

            // A lead with a scope elsewhere exports within it: nothing of lab2's.
            let elsewhere = try await Self.token(console, .safeguarding, Scope(rooms: ["lab3"]))
            let scoped = try JSONDecoder().decode(
                Export.self, from: Data(try await console.server.client.request(.GET, "/api/v1/people/alice/export", headers: elsewhere.header).body))
            #expect(scoped.records.isEmpty && scoped.alerts.isEmpty && scoped.accessRequests.isEmpty)

            // Roles that may not: refused, and nothing audited for them.
            for role in [Role.teacher, .auditor, .metrics] {
                let refused = try await console.server.client.request(
                    .GET, "/api/v1/people/alice/export", headers: try await Self.token(console, role, role == .teacher ? Scope(rooms: ["lab2"]) : .school).header)
                #expect(refused.status == 403 && refused.text.contains("role-forbidden"), "\(role)")
            }
            #expect(try await console.server.client.request(.GET, "/api/v1/people/alice/export").status == 401)
            #expect(try await console.server.client.request(.GET, "/api/v1/people/a%00b/export", headers: dsl.header).status == 400)
            #expect(try await storage.auditEvents(AuditQuery(action: "person.export")).events.count == 3)

            // The console: the timeline's button for the lead, the download audited; none for an auditor, who sees pseudonyms.
            let timeline = try await console.get("/console/timeline?user=alice", as: .safeguarding)
            #expect(timeline.text.contains(#"href="/console/timeline/export?user=alice""#))
            let download = try await console.get("/console/timeline/export?user=alice", as: .safeguarding)
            #expect(download.status == 200 && download.header("Content-Type") == "application/json")
            #expect(try JSONDecoder().decode(Export.self, from: Data(download.body)).records.count == alicesRecords)
            #expect(console.hooks.all.contains("person.export person:t-safeguarding alice -"))
            #expect(!(try await console.get("/console/timeline?user=\(Pseudonyms.prefix)00000000", as: .auditor).text.contains("timeline/export")))
            #expect(try await console.get("/console/timeline/export?user=alice", as: .auditor).status == 403)
            #expect(try await console.get("/console/timeline/export?user=alice", as: .teacher, rooms: ["lab2"]).status == 403)
            #expect(try await console.get("/console/timeline/export", as: .admin).status == 400)
        }
    }
}
