import Foundation
@testable import SchoolServer
import Testing

/// `GET /api/v1/records` on a real server, on both engines: the role check,
/// filters and paging through the API, CSV, and the refusals.
@Suite struct RecordsAPITests {
    struct Listing: Decodable {
        struct Record: Decodable, Hashable {
            let machine: String
            let room: String
            let hostname: String
            let sequence: Int64
            let time: String
            let user: String?
            let action: String
        }
        let records: [Record]
        let next: String?
    }

    /// An API token of `role` on `server`, as a header.
    static func bearer(_ server: RunningServer, _ role: Role) async throws -> [(String, String)] {
        // A teacher's token needs a scope.
        let scope = role == .teacher ? Scope(rooms: ["lab2"]) : .school
        let made = try await ServerAdministration.createAPIToken(storage: server.storage, role: role, scope: scope, createdBy: "t", now: 0)
        return [("Authorization", "Bearer \(made.token)")]
    }

    static func get(_ server: RunningServer, _ path: String, _ headers: [(String, String)]) async throws -> PinnedHTTPSClient.Answer {
        try await server.client.request(.GET, path, headers: headers)
    }

    @Test(arguments: Engine.allCases)
    func onlyTheRolesThatMayReadRecordsGetThem(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            // Every role there is: those that may view records get 200, the others 403.
            for role in Role.allCases {
                let answer = try await Self.get(server, "/api/v1/records", try await Self.bearer(server, role))
                #expect(answer.status == (role.may(.viewRecords) ? 200 : 403), "\(role)")
            }
            #expect(Role.allCases.filter { $0.may(.viewRecords) } == [.admin, .safeguarding, .teacher, .auditor])
            let none = try await Self.get(server, "/api/v1/records", [])
            #expect(none.status == 401)
            #expect(none.text.contains(#""error":"token-invalid""#))
            let admin = try await Self.bearer(server, .admin)
            #expect(try await Self.get(server, "/api/v1/records", [("Authorization", admin[0].1 + "x")]).status == 401)
            // A machine's signed request is not an API token.
            let machine = try await server.enrol(TestMachine())
            let signed = try RequestSignature.headers(
                machine: machine.id, key: machine.key, method: "GET", path: "/api/v1/records", body: [], now: server.clock.now)
            #expect(try await Self.get(server, "/api/v1/records", signed).status == 401)
        }
    }

    @Test(arguments: Engine.allCases)
    func filtersAndPagesThroughTheAPI(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let one = try await server.enrol(TestMachine(), room: "lab2")
            let two = try await server.enrol(TestMachine(), room: "lab3")
            #expect(try await server.post("/api/v1/machine/records", APITests.recordsBody(1...5), signedBy: one).status == 200)
            #expect(try await server.post("/api/v1/machine/records", APITests.recordsBody(1...3), signedBy: two).status == 200)
            let auditor = try await Self.bearer(server, .auditor)

            let all = try await Self.get(server, "/api/v1/records", auditor)
            #expect(all.status == 200, "\(all.text)")
            #expect(all.header("Content-Type") == "application/json")
            let listing = try JSONDecoder().decode(Listing.self, from: Data(all.body))
            #expect(listing.records.count == 8)
            #expect(listing.next == nil)
            #expect(all.header("Hallpass-Next") == nil)
            // By time, then machine, then sequence.
            let keys = listing.records.map { ($0.time, $0.machine, $0.sequence) }
            #expect(zip(keys, keys.dropFirst()).allSatisfy { $0 < $1 })
            #expect(listing.records.first?.user == "alice")

            let lab3 = try JSONDecoder().decode(Listing.self, from: Data(try await Self.get(server, "/api/v1/records?room=lab3", auditor).body))
            #expect(lab3.records.map(\.machine) == [two.id, two.id, two.id])
            #expect(lab3.records.allSatisfy { $0.room == "lab3" && $0.hostname == "lab2-pc07" })
            let path = "/api/v1/records?machine=\(one.id)&user=alice&action=block&category=gambling&group=students"
                + "&since=2025-11-28T08:00:02Z&until=2025-11-28T09:00:04.250%2B01:00"
            let combined = try JSONDecoder().decode(Listing.self, from: Data(try await Self.get(server, path, auditor).body))
            // 09:00:04.250+01:00 is 08:00:04.250Z; since takes 08:00:02.250, until leaves out 08:00:04.250.
            #expect(combined.records.map(\.sequence) == [2, 3])
            let window = try JSONDecoder().decode(
                Listing.self,
                from: Data(try await Self.get(server, "/api/v1/records?machine=\(one.id)&since=2025-11-28T08:00:02Z&until=2025-11-28T08:00:04.250Z", auditor).body))
            #expect(window.records.map(\.sequence) == [2, 3])
            let allowed = try JSONDecoder().decode(Listing.self, from: Data(try await Self.get(server, "/api/v1/records?action=allow", auditor).body))
            #expect(allowed.records.isEmpty)

            // Pages of three: 3 + 3 + 2, each record once.
            var seen: [Listing.Record] = []
            var next: String? = nil
            var pages = 0
            repeat {
                let answer = try await Self.get(server, "/api/v1/records?limit=3" + (next.map { "&cursor=\($0)" } ?? ""), auditor)
                #expect(answer.status == 200, "\(answer.text)")
                let page = try JSONDecoder().decode(Listing.self, from: Data(answer.body))
                #expect(answer.header("Hallpass-Next") == page.next)
                seen += page.records
                next = page.next
                pages += 1
            } while next != nil && pages < 10
            #expect(pages == 3)
            #expect(seen == listing.records)
        }
    }

    @Test(arguments: Engine.allCases)
    func csvIsQuotedAndSafeInASpreadsheet(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let machine = try await server.enrol(TestMachine())
            let body = APITests.recordsBody(1...2)
                .replacingOccurrences(of: #""user":"alice""#, with: #""user":"=HYPERLINK(\"http://x.example\",\"y\")""#)
                .replacingOccurrences(of: #""host":"casino.example""#, with: #""host":"a,b\r\nc""#)
                .replacingOccurrences(of: #""rule":"casino.example""#, with: #""rule":"@SUM(1)""#)
            #expect(try await server.post("/api/v1/machine/records", body, signedBy: machine).status == 200)
            let admin = try await Self.bearer(server, .admin)
            let answer = try await Self.get(server, "/api/v1/records?limit=1", admin + [("Accept", "text/csv")])
            #expect(answer.status == 200)
            #expect(answer.header("Content-Type") == "text/csv; charset=utf-8; header=present")
            #expect(answer.header("Hallpass-Next") != nil)
            let expected = [
                "2025-11-28T08:00:01.250Z", machine.id, "lab2", "lab2-pc07", "1", "1001",
                #""'=HYPERLINK(""http://x.example"",""y"")""#, "students", "tls", "\"a,b\r\nc\"", "", "192.0.2.7", "443", "block", "gambling",
                #""'@SUM(1)""#, "category", "42",
            ].joined(separator: ",")
            #expect(answer.text == RecordsCSV.columns.joined(separator: ",") + "\r\n" + expected + "\r\n")
            #expect(answer.text.hasSuffix("\r\n"))
            // format=csv without Accept; format=json over an Accept of CSV.
            let byParameter = try await Self.get(server, "/api/v1/records?format=csv", admin)
            #expect(byParameter.header("Content-Type")?.hasPrefix("text/csv") == true)
            // The header, two records with a line break in their host each, and the end of the last line.
            #expect(byParameter.text.components(separatedBy: "\r\n").count == 6)
            let json = try await Self.get(server, "/api/v1/records?format=json", admin + [("Accept", "text/csv")])
            #expect(json.header("Content-Type") == "application/json")
        }
    }

    @Test(arguments: Engine.allCases)
    func badQueriesAreRefusedWithTheReason(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let admin = try await Self.bearer(server, .admin)
            let cases: [(String, String)] = [
                ("cursor=r1.bm90LWEtY3Vyc29y", "cursor is not one this server gave out"),
                ("cursor=garbage", "cursor is not one"),
                ("offset=100", "unknown query parameter 'offset'"),
                ("user=a&user=b", "given more than once"),
                ("user=", "is empty"),
                ("user=" + String(repeating: "a", count: 257), "longer than 256 characters"),
                ("user=a%00b", "control character"),
                ("since=yesterday", "since must be an RFC 3339 time"),
                ("until=2025-11-28", "until must be an RFC 3339 time"),
                ("action=deny", "action must be block or allow"),
                ("machine=pc07", "machine must be a machine id"),
                ("limit=0", "limit must be a whole number from 1 to 1000"),
                ("limit=1001", "limit must be"),
                ("limit=-5", "limit must be"),
                ("format=xml", "format must be json or csv"),
            ]
            for (query, message) in cases {
                let answer = try await Self.get(server, "/api/v1/records?" + query, admin)
                #expect(answer.status == 400, "\(query)")
                #expect(answer.text.contains(#""error":"bad-request""#), "\(query)")
                #expect(answer.text.contains(message), "\(query): \(answer.text)")
            }
            #expect(try await Self.get(server, "/api/v1/records?limit=1000", admin).status == 200)
        }
    }

    @Test func csvCells() {
        #expect(RecordsCSV.cell("plain") == "plain")
        #expect(RecordsCSV.cell("") == "")
        #expect(RecordsCSV.cell("a,b") == "\"a,b\"")
        #expect(RecordsCSV.cell("say \"hi\"") == "\"say \"\"hi\"\"\"")
        #expect(RecordsCSV.cell("two\nlines") == "\"two\nlines\"")
        for formula in ["=1+1", "+1", "-1", "@A1", "\tx", "\rx"] {
            #expect(RecordsCSV.cell(formula) == "\"'\(formula)\"", "\(formula)")
        }
        #expect(RecordsCSV.cell("a=b") == "a=b")
    }

    @Test func acceptHeader() {
        #expect(RecordsRequest.prefersCSV(accept: "text/csv"))
        #expect(RecordsRequest.prefersCSV(accept: "text/csv;q=0.9, application/json;q=0.5"))
        #expect(!RecordsRequest.prefersCSV(accept: "application/json, text/csv"))
        #expect(!RecordsRequest.prefersCSV(accept: "text/csv;q=0, */*"))
        #expect(!RecordsRequest.prefersCSV(accept: "*/*"))
        #expect(!RecordsRequest.prefersCSV(accept: nil))
    }
}
