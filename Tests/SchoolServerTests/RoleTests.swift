import Foundation
import Logging
import NIOHTTP1
@testable import SchoolServer
import Testing

/// Who may reach what, route by route, on both engines: every (method,
/// path) the router serves, taken from the router itself, against every
/// role (a teacher with a scope, an auditor with a scope) and no
/// credential. Then the scopes' answers, and the audit trail of changes
/// made through the API.
@Suite struct RoleTests {
    /// What a route asks of whoever calls it.
    enum Access: Sendable {
        /// An API token whose role has the permission (and, for an answer of
        /// the whole school's, no scope).
        case token(Permission, wholeSchool: Bool = false)
        /// The same answer whatever API token comes with the request (the
        /// machines', the bundle's, the console's routes): this status.
        case fixed(Int)
    }

    /// Every route. A route the router serves and this table does not name
    /// fails the test: a new route cannot be added without saying who may use it.
    static let table: [String: Access] = [
        "GET /api/v1/machines": .token(.viewMachines),
        "GET /api/v1/records": .token(.viewRecords),
        "GET /api/v1/policy": .token(.viewPolicy),
        "GET /api/v1/policy/versions": .token(.viewPolicy),
        "GET /api/v1/policy/versions/{version}": .token(.viewPolicy),
        "GET /api/v1/policy/diff": .token(.viewPolicy),
        "GET /api/v1/policy/pending/manifest": .token(.viewPolicy),
        "PUT /api/v1/policy": .token(.editPolicy),
        "PUT /api/v1/policy/lists/{category}": .token(.editPolicy),
        "DELETE /api/v1/policy/lists/{category}": .token(.editPolicy),
        "POST /api/v1/policy/rollback": .token(.editPolicy),
        "POST /api/v1/policy/publish": .token(.editPolicy),
        "POST /api/v1/policy/pending/signature": .token(.editPolicy),
        "GET /api/v1/rooms": .token(.controlRoom),
        "GET /api/v1/rooms/{room}/rules": .token(.controlRoom),
        "POST /api/v1/rooms/{room}/rules": .token(.controlRoom),
        "DELETE /api/v1/rooms/{room}/rules": .token(.controlRoom),
        "DELETE /api/v1/rooms/{room}/rules/{rule}": .token(.controlRoom),
        "PUT /api/v1/machines/{id}/room": .token(.enrolMachines),
        "GET /api/v1/requests": .token(.answerRequests),
        "POST /api/v1/requests/{id}/approve": .token(.answerRequests),
        "POST /api/v1/requests/{id}/deny": .token(.answerRequests),
        "GET /api/v1/alerts": .token(.viewAlerts),
        "GET /api/v1/alerts/{id}": .token(.viewAlerts),
        "POST /api/v1/alerts/{id}/acknowledge": .token(.triageAlerts),
        "POST /api/v1/alerts/{id}/escalate": .token(.triageAlerts),
        "POST /api/v1/alerts/{id}/close": .token(.triageAlerts),
        "POST /api/v1/filtering-tests": .token(.runFilteringTest),
        "GET /api/v1/filtering-tests": .token(.viewReview),
        "GET /api/v1/filtering-tests/{id}": .token(.viewReview),
        "GET /api/v1/people/{user}/export": .token(.exportPerson),
        "GET /metrics": .token(.viewMetrics, wholeSchool: true),
        "GET /health": .fixed(200),
        // An empty body: refused as not JSON, before any token is asked for.
        "POST /api/v1/enrol": .fixed(400),
        // Not signed by a machine: an API token opens nothing here.
        "POST /api/v1/machine/records": .fixed(401),
        "POST /api/v1/machine/checkin": .fixed(401),
        "POST /api/v1/machine/live": .fixed(401),
        "POST /api/v1/machine/requests": .fixed(401),
        "POST /api/v1/machine/filtering-test": .fixed(401),
        // Nothing published yet.
        "GET /bundle/{name}": .fixed(404),
        "HEAD /bundle/{name}": .fixed(404),
        // The console: a failed sign-in goes back to the form; no session, no sign-out.
        "POST /console/sign-in": .fixed(303),
        "POST /console/sign-out": .fixed(403),
        "POST /console/sign-out-everywhere": .fixed(403),
        // The console's pages take a session, never an API token: a page sends
        // the browser to the sign-in, a form is refused.
        "GET /": .fixed(303),
        "GET /console/sign-in": .fixed(200),
        "GET /console/language": .fixed(303),
        "GET /console/assets/{name}": .fixed(404),
        "GET /console": .fixed(303),
        "GET /console/records": .fixed(303),
        "GET /console/timeline": .fixed(303),
        "GET /console/timeline/export": .fixed(303),
        "GET /console/machines": .fixed(303),
        "GET /console/rooms": .fixed(303),
        "GET /console/rooms/{room}": .fixed(303),
        "GET /console/rooms/{room}/live": .fixed(303),
        "POST /console/rooms/{room}/rules": .fixed(403),
        "POST /console/rooms/{room}/end": .fixed(403),
        "GET /console/requests/live": .fixed(303),
        "POST /console/requests/{id}/approve": .fixed(403),
        "POST /console/requests/{id}/deny": .fixed(403),
        "GET /console/digests": .fixed(303),
        "GET /console/digests/preview": .fixed(303),
        "GET /console/digests/preview.pdf": .fixed(303),
        "GET /console/alerts": .fixed(303),
        "GET /console/alerts/{id}": .fixed(303),
        "POST /console/alerts/{id}/acknowledge": .fixed(403),
        "POST /console/alerts/{id}/escalate": .fixed(403),
        "POST /console/alerts/{id}/close": .fixed(403),
        "POST /console/machines/{id}/revoke": .fixed(403),
        "GET /console/policy": .fixed(303),
        "GET /console/policy/versions/{version}": .fixed(303),
        "GET /console/policy/diff": .fixed(303),
        "POST /console/policy": .fixed(403),
        "POST /console/policy/publish": .fixed(403),
        "POST /console/policy/form": .fixed(403),
        "POST /console/policy/rollback": .fixed(403),
        "GET /console/people": .fixed(303),
        "POST /console/people": .fixed(403),
        "POST /console/people/{login}": .fixed(403),
        "GET /console/audit": .fixed(303),
        "GET /console/review": .fixed(303),
        "GET /console/review.pdf": .fixed(303),
        "POST /console/review": .fixed(403),
        "GET /console/filtering-tests": .fixed(303),
        "GET /console/filtering-tests/{id}": .fixed(303),
        "POST /console/filtering-tests": .fixed(403),
    ]

    struct Caller: Sendable, CustomStringConvertible {
        let name: String
        let principal: Principal?
        let header: [(String, String)]
        var description: String { name }
    }

    static func callers(_ storage: SQLStorage) async throws -> [Caller] {
        var callers = [Caller(name: "no credential", principal: nil, header: [])]
        let made: [(String, Role, Scope)] = [
            ("admin", .admin, .school), ("safeguarding", .safeguarding, .school), ("teacher of lab2", .teacher, Scope(rooms: ["lab2"])),
            ("auditor", .auditor, .school), ("auditor of group 7a", .auditor, Scope(groups: ["7a"])), ("metrics", .metrics, .school),
        ]
        for (name, role, scope) in made {
            let token = try await ServerAdministration.createAPIToken(storage: storage, role: role, scope: scope, createdBy: "t", now: 0)
            callers.append(
                Caller(name: name, principal: Principal(kind: .token(token.id), role: role, scope: scope), header: [("Authorization", "Bearer \(token.token)")]))
        }
        return callers
    }

    /// The status `caller` must get from a route of `access`; nil: anything
    /// but 401 and 403 (the route's own answer to an empty request).
    static func expected(_ access: Access, _ caller: Caller) -> Int? {
        switch access {
        case .fixed(let status): return status
        case .token(let permission, let wholeSchool):
            guard let principal = caller.principal else { return 401 }
            guard principal.may(permission) else { return 403 }
            if wholeSchool && !principal.scope.isWholeSchool { return 403 }
            return nil
        }
    }

    static func concrete(_ path: String) -> String {
        path.replacingOccurrences(of: "{version}", with: "1").replacingOccurrences(of: "{category}", with: "gambling")
            .replacingOccurrences(of: "{name}", with: "manifest").replacingOccurrences(of: "{id}", with: "m-aaaaaaaaaaaaaaaaaaaa")
            .replacingOccurrences(of: "{login}", with: "ada").replacingOccurrences(of: "{room}", with: "lab2")
            .replacingOccurrences(of: "{rule}", with: "lr-aaaaaaaaaaaa").replacingOccurrences(of: "{user}", with: "alice")
    }

    @Test(arguments: Engine.allCases)
    func everyRouteAnswersEveryRoleAsTheTableSays(engine: Engine) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-roles-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let box = ConfigurationBox()
        try await withRunningServer(engine) { configuration in
            configuration.stateDirectoryOverride = folder
            box.set(configuration)
        } _: { server async throws in
            // The routes as the router has them: the same function `serve` builds it with.
            let router = try buildRouter(
                configuration: box.configuration,
                parts: ServerParts(storage: server.storage, certificate: nil, metrics: ServerMetrics(), logger: testLogger))
            let served = Set(router.routes.map { "\($0.method.rawValue) \($0.path.description)" })
            #expect(served == Set(Self.table.keys), "routes served but not in the table: \(served.subtracting(Self.table.keys).sorted())")

            let callers = try await Self.callers(server.storage)
            for route in served.sorted() {
                guard let access = Self.table[route] else { continue }
                let parts = route.split(separator: " ", maxSplits: 1)
                let method = HTTPMethod(rawValue: String(parts[0]))
                for caller in callers {
                    let answer = try await server.client.request(method, Self.concrete(String(parts[1])), headers: caller.header)
                    if let status = Self.expected(access, caller) {
                        #expect(answer.status == status, "\(route) as \(caller): \(answer.text.prefix(200))")
                    } else {
                        #expect(answer.status != 401 && answer.status != 403 && answer.status < 500, "\(route) as \(caller): \(answer.status) \(answer.text.prefix(200))")
                    }
                    if case .token = access, answer.status == 403 {
                        let code = caller.principal.map { $0.may(.viewMetrics) && !$0.scope.isWholeSchool && route == "GET /metrics" } == true
                            ? "scope-forbidden" : "role-forbidden"
                        #expect(answer.text.contains(#""error":"\#(code)""#), "\(route) as \(caller)")
                    }
                }
            }
        }
    }

    @Test func theTableOfPermissionsIsTheIssues() {
        // admin everything; safeguarding reads records, timelines, machines, the policy and the trail;
        // teacher their records and machines; auditor reads everything; metrics only /metrics.
        #expect(Permission.allCases.allSatisfy { Role.admin.may($0) })
        #expect(!Role.safeguarding.may(.editPolicy) && !Role.safeguarding.may(.managePeople) && Role.safeguarding.may(.viewTimeline))
        #expect(Permission.allCases.filter { Role.teacher.may($0) } == [.viewDashboard, .viewRecords, .viewTimeline, .viewMachines, .controlRoom, .answerRequests])
        // A room's live rules: the lesson's teacher, the safeguarding lead, the admin; never an auditor.
        #expect(Role.safeguarding.may(.controlRoom) && !Role.auditor.may(.controlRoom) && !Role.metrics.may(.controlRoom))
        // Students' access requests: the people who look after them answer, never an auditor or a scraper.
        #expect(Role.allCases.filter { $0.may(.answerRequests) } == [.admin, .safeguarding, .teacher])
        // Safeguarding alerts: the lead and the admin triage them, an auditor reads them; a teacher is told by the lead.
        #expect(Role.allCases.filter { $0.may(.viewAlerts) } == [.admin, .safeguarding, .auditor])
        #expect(Role.allCases.filter { $0.may(.triageAlerts) } == [.admin, .safeguarding])
        // The filtering test and the annual review: the admin runs the test; the lead, the admin and an auditor
        // read the results and the review; the lead and the admin record a review.
        #expect(Role.allCases.filter { $0.may(.runFilteringTest) } == [.admin])
        #expect(Role.allCases.filter { $0.may(.viewReview) } == [.admin, .safeguarding, .auditor])
        #expect(Role.allCases.filter { $0.may(.recordReview) } == [.admin, .safeguarding])
        #expect(Role.allCases.filter { $0.may(.exportPerson) } == [.admin, .safeguarding])
        #expect(Role.allCases.filter { $0.may(.viewDigests) } == [.admin, .safeguarding])
        #expect(!Permission.allCases.contains { Role.auditor.may($0) && [.editPolicy, .managePeople, .revokeMachine, .enrolMachines].contains($0) })
        #expect(Permission.allCases.filter { Role.metrics.may($0) } == [.viewMetrics])
    }

    // MARK: Scopes

    struct Listing: Decodable {
        struct Record: Decodable { let user: String?; let room: String }
        let records: [Record]
    }

    struct Machines: Decodable {
        struct Machine: Decodable { let id: String; let room: String }
        let machines: [Machine]
    }

    @Test(arguments: Engine.allCases)
    func aTeachersTokenSeesOnlyTheRecordsAndMachinesOfItsScope(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let lab2 = try await server.enrol(TestMachine(), room: "lab2")
            let lab3 = try await server.enrol(TestMachine(), room: "lab3")
            func records(_ machine: TestMachine, _ sequences: ClosedRange<Int>, user: String, group: String) async throws {
                let body = APITests.recordsBody(sequences).replacingOccurrences(of: #""user":"alice","group":"students""#, with: #""user":"\#(user)","group":"\#(group)""#)
                #expect(try await server.post("/api/v1/machine/records", body, signedBy: machine).status == 200)
            }
            try await records(lab2, 1...2, user: "alice", group: "7a")
            try await records(lab3, 1...2, user: "bob", group: "7b")
            try await records(lab3, 3...3, user: "carol", group: "7a")
            func token(_ role: Role, _ scope: Scope) async throws -> [(String, String)] {
                let made = try await ServerAdministration.createAPIToken(storage: server.storage, role: role, scope: scope, createdBy: "t", now: 0)
                return [("Authorization", "Bearer \(made.token)")]
            }
            func users(_ headers: [(String, String)], _ query: String = "") async throws -> [String] {
                let answer = try await server.client.request(.GET, "/api/v1/records" + query, headers: headers)
                #expect(answer.status == 200, "\(answer.text)")
                return try JSONDecoder().decode(Listing.self, from: Data(answer.body)).records.compactMap(\.user).sorted()
            }
            func rooms(_ headers: [(String, String)]) async throws -> [String] {
                let answer = try await server.client.request(.GET, "/api/v1/machines", headers: headers)
                #expect(answer.status == 200, "\(answer.text)")
                return try JSONDecoder().decode(Machines.self, from: Data(answer.body)).machines.map(\.room)
            }
            let lab2Teacher = try await token(.teacher, Scope(rooms: ["lab2"]))
            #expect(try await users(lab2Teacher) == ["alice", "alice"])
            #expect(try await users(lab2Teacher, "?user=bob") == [])
            #expect(try await users(lab2Teacher, "?room=lab2") == ["alice", "alice"])
            #expect(try await rooms(lab2Teacher) == ["lab2"])
            // Another room's records: refused, not answered empty.
            let refused = try await server.client.request(.GET, "/api/v1/records?room=lab3", headers: lab2Teacher)
            #expect(refused.status == 403)
            #expect(refused.text.contains(#""error":"scope-forbidden""#))
            #expect(try await server.client.request(.GET, "/api/v1/records?room=lab3&format=csv", headers: lab2Teacher).status == 403)

            let groupTeacher = try await token(.teacher, Scope(groups: ["7a"]))
            #expect(try await users(groupTeacher) == ["alice", "alice", "carol"])
            #expect(try await rooms(groupTeacher) == [])
            #expect(try await server.client.request(.GET, "/api/v1/records?group=7b", headers: groupTeacher).status == 403)
            // A room and a group: a record of either.
            let both = try await token(.teacher, Scope(rooms: ["lab3"], groups: ["7a"]))
            #expect(try await users(both) == ["alice", "alice", "bob", "bob", "carol"])
            #expect(try await users(both, "?room=lab2") == ["alice", "alice"])
            #expect(Set(try await rooms(both)) == ["lab3"])
            // CSV keeps to the scope too.
            let csv = try await server.client.request(.GET, "/api/v1/records?format=csv", headers: lab2Teacher)
            #expect(csv.text.contains(",alice,") && !csv.text.contains(",bob,") && !csv.text.contains(",carol,"), "as CSV fields: a random machine id can hold the letters")
            // The whole school.
            #expect(try await users(try await token(.safeguarding, .school)).count == 5)
            #expect(Set(try await rooms(try await token(.auditor, .school))) == ["lab2", "lab3"])
            _ = lab3
        }
    }

    @Test(arguments: Engine.allCases)
    func tokensAreRefusedARoleAndScopeThatDoNotGoTogether(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            for (role, scope) in [(Role.teacher, Scope.school), (.admin, Scope(rooms: ["lab2"])), (.metrics, Scope(groups: ["7a"]))] {
                await #expect(throws: ServerError.self, "\(role)") {
                    _ = try await ServerAdministration.createAPIToken(storage: storage, role: role, scope: scope, createdBy: "t", now: 0)
                }
            }
            #expect(try await storage.auditEvents(AuditQuery()).events.isEmpty)
            let made = try await ServerAdministration.createAPIToken(
                storage: storage, role: .teacher, scope: Scope(rooms: ["lab2"]), createdBy: "cli:alice", now: 5)
            let events = try await storage.auditEvents(AuditQuery()).events.map(\.event)
            #expect(events == [NewAuditEvent(time: 5, actor: "cli:alice", action: "token.create", target: "token:\(made.id)", detail: "role teacher, scope rooms lab2")])
            #expect(!"\(events)".contains(made.token))
        }
    }

    // MARK: The audit trail of the API's changes

    @Test(arguments: Engine.allCases)
    func everyChangeThroughTheAPIIsInTheAuditTrail(engine: Engine) async throws {
        try await withPublishingServer(engine) { publishing async throws in
            let server = publishing.server
            let admin = [("Authorization", "Bearer \(publishing.admin)")]
            let adminID = String(publishing.admin.split(separator: ".")[1])
            func send(_ method: HTTPMethod, _ path: String, _ body: String = "") async throws -> Int {
                try await server.client.request(method, path, headers: admin, body: Array(body.utf8)).status
            }
            #expect(try await send(.PUT, "/api/v1/policy", #"{"policy": "policy:\n  block: [gambling]\n", "reason": "first"}"#) == 201)
            #expect(
                try await server.client.request(
                    .PUT, "/api/v1/policy/lists/gambling?reason=lists", headers: admin + [("Content-Type", "text/plain")],
                    body: Array("casino.example\n".utf8)
                ).status == 201)
            #expect(try await send(.DELETE, "/api/v1/policy/lists/gambling?reason=gone") == 201)
            #expect(try await send(.POST, "/api/v1/policy/rollback", #"{"version": 2, "reason": "back"}"#) == 201)
            #expect(try await send(.POST, "/api/v1/policy/publish", #"{"reason": "go"}"#) == 201)
            // What the server wrote as the token (the tokens' own creation is the command line's).
            let events = try await server.storage.auditEvents(AuditQuery(actor: "token:\(adminID)")).events.map(\.event).reversed()
            #expect(events.map(\.action) == ["policy.set", "policy.set", "policy.set", "policy.rollback", "publish"])
            #expect(events.map(\.reason) == ["first", "lists", "gone", "back", "go"])
            #expect(events.map(\.target) == ["version 1", "version 2", "version 3", "version 4", "bundle 1"])
            // A refused change writes nothing.
            #expect(try await send(.PUT, "/api/v1/policy", #"{"policy": null, "reason": ""}"#) == 400)
            #expect(try await server.storage.auditEvents(AuditQuery(actor: "token:\(adminID)")).events.count == 5)
        }
    }
}
