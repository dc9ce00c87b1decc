import Foundation
@testable import SchoolServer
import Testing

/// The alerts of the ingest reach the delivery (docs/server.md, "Alert
/// delivery"): a machine's record that a danger rule matches becomes an
/// alert in the records' transaction, the ingest's signal wakes the server's
/// worker, which writes the alert's email for the safeguarding lead and sends
/// it through the sendmail server.yaml names, once.
@Suite struct AlertJoinTests {
    @Test func aDangerRecordPostedByAMachineIsEmailedToTheSafeguardingLeadOnce() async throws {
        let folder = try AlertDeliveryTests.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Each message in a file of its own: the test counts them. Written aside and renamed,
        // so that a name the test sees is a whole message.
        let sendmail = try AlertDeliveryTests.script(folder, "sendmail", "cat > \"$0.$$.part\" && mv \"$0.$$.part\" \"$0.$$.eml\"")
        try await withRunningServer(.sqlite, configure: { $0.alerts.sendmail = [sendmail] }) { server in
            _ = try await ServerAdministration.addPerson(
                storage: server.storage, login: "dsl", displayName: nil, role: .safeguarding, scope: .school, password: "a long password",
                email: "dsl@school.example", author: "cli:test", now: server.clock.now)
            let machine = try await server.enrol(TestMachine(), room: "lab2")
            let body = AlertTests.records([(1, "alice", "7a", "dangerous_material")])
            #expect(try await server.post("/api/v1/machine/records", body, signedBy: machine).status == 200)
            // Posted again (the machine did not hear the answer): no second alert, no second email.
            #expect(try await server.post("/api/v1/machine/records", body, signedBy: machine).status == 200)
            func mails() throws -> [String] {
                try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".eml") }
            }
            for _ in 0..<300 where try mails().isEmpty { try await Task.sleep(for: .milliseconds(100)) }
            let names = try mails()
            #expect(names.count == 1)
            let mail = try String(contentsOfFile: folder + "/" + (names.first ?? ""), encoding: .utf8)
            #expect(mail.contains("To: dsl@school.example"))
            #expect(mail.contains("dangerous-material"))
            let alert = try #require(try await server.storage.alerts(AlertQuery()).alerts.first)
            let undispatched = try await server.storage.undispatchedAlerts(limit: 10)
            #expect(undispatched.isEmpty && alert.ruleID == "dangerous-material")
            // The worker writes the outcome once sendmail has exited, a moment after the message is there.
            func states() async throws -> [AlertDeliveryState] { try await server.storage.alertDeliveries(alertID: alert.id).map(\.state) }
            for _ in 0..<50 where try await states() != [.sent] { try await Task.sleep(for: .milliseconds(100)) }
            #expect(try await states() == [.sent])
            // A few more passes of the worker send nothing more.
            try await Task.sleep(for: .seconds(6))
            #expect(try mails().count == 1)
        }
    }
}
