import Foundation
import Synchronization
@testable import SchoolServer
import Testing

/// Access requests on both engines: machines post them (once each, bounded),
/// the school's tools list them within a scope, and answer them; each answer
/// is in the audit trail and reaches the live channel.
@Suite struct AccessRequestTests {
    struct Listing: Decodable {
        struct Request: Decodable {
            let id: String
            let machine: String
            let room: String
            let user: String?
            let group: String?
            let host: String
            let reason: String
            let created: String
            let state: String
            let message: String?
            let scope: String?
            let scopeValue: String?
            let minutes: Int64?
        }
        let requests: [Request]
    }

    static func body(_ items: [(id: String, user: String, group: String, host: String)]) -> String {
        let requests = items.map { item in
            #"{"id":"\#(item.id)","user":"\#(item.user)","group":"\#(item.group)","host":"\#(item.host)","url":"http://\#(item.host)/","category":"games","reason":"for class","created":"2025-11-28T09:00:00.000Z"}"#
        }
        return #"{"requests":[\#(requests.joined(separator: ","))]}"#
    }

    static func token(_ server: RunningServer, _ role: Role, _ scope: Scope = .school) async throws -> [(String, String)] {
        let made = try await ServerAdministration.createAPIToken(storage: server.storage, role: role, scope: scope, createdBy: "t", now: 0)
        return [("Authorization", "Bearer \(made.token)")]
    }

    static func list(_ server: RunningServer, _ path: String, _ headers: [(String, String)]) async throws -> Listing {
        let answer = try await server.client.request(.GET, path, headers: headers)
        #expect(answer.status == 200, "\(answer.text)")
        return try JSONDecoder().decode(Listing.self, from: Data(answer.body))
    }

    @Test(arguments: Engine.allCases)
    func machinesPostRequestsOnceEachAndTheScopesSeeTheirs(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let lab2 = try await server.enrol(TestMachine(), room: "lab2")
            let lab3 = try await server.enrol(TestMachine(), room: "lab3")
            let first = Self.body([("0badc0de", "kim", "year9", "games.example"), ("0badc0df", "lee", "year10", "video.example")])
            let posted = try await server.post("/api/v1/machine/requests", first, signedBy: lab2)
            #expect(posted.status == 200, "\(posted.text)")
            #expect(posted.text.contains(#""stored":2"#))
            // Sent again (the machine did not hear the answer): kept once.
            #expect(try await server.post("/api/v1/machine/requests", first, signedBy: lab2).text.contains(#""stored":0"#))
            // Another machine may use the same id of its own.
            #expect(try await server.post("/api/v1/machine/requests", Self.body([("0badc0de", "ada", "year9", "maps.example")]), signedBy: lab3).status == 200)
            // Not signed: refused.
            #expect(try await server.post("/api/v1/machine/requests", first).status == 401)

            let admin = try await Self.token(server, .admin)
            let all = try await Self.list(server, "/api/v1/requests", admin).requests
            #expect(all.count == 3)
            #expect(Set(all.map(\.id)).count == 3 && all.allSatisfy { Secrets.isAccessRequestID($0.id) })
            let kim = try #require(all.first { $0.user == "kim" })
            #expect(kim.room == "lab2" && kim.machine == lab2.id && kim.group == "year9" && kim.host == "games.example")
            #expect(kim.reason == "for class" && kim.created == "2025-11-28T09:00:00.000Z" && kim.state == "pending")
            #expect(try await Self.list(server, "/api/v1/requests?room=lab3", admin).requests.map(\.user) == ["ada"])

            // A teacher of lab3 sees lab3's; a teacher of group year10 sees lee's, from lab2.
            let lab3Teacher = try await Self.token(server, .teacher, Scope(rooms: ["lab3"]))
            #expect(try await Self.list(server, "/api/v1/requests", lab3Teacher).requests.map(\.user) == ["ada"])
            let year10Teacher = try await Self.token(server, .teacher, Scope(groups: ["year10"]))
            #expect(try await Self.list(server, "/api/v1/requests", year10Teacher).requests.map(\.user) == ["lee"])
            // The roles: the safeguarding lead answers; an auditor and a scraper do not.
            #expect(try await server.client.request(.GET, "/api/v1/requests", headers: try await Self.token(server, .safeguarding)).status == 200)
            #expect(try await server.client.request(.GET, "/api/v1/requests", headers: try await Self.token(server, .auditor)).status == 403)
            #expect(try await server.client.request(.GET, "/api/v1/requests", headers: try await Self.token(server, .metrics)).status == 403)
            #expect(try await server.client.request(.GET, "/api/v1/requests?state=maybe", headers: admin).status == 400)
        }
    }

    @Test(arguments: Engine.allCases)
    func postsAreBounded(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let machine = try await server.enrol(TestMachine())
            let many = Self.body((0...100).map { ("r\($0)", "kim", "year9", "h\($0).example") })
            let refused = try await server.post("/api/v1/machine/requests", many, signedBy: machine)
            #expect(refused.status == 400 && refused.text.contains("at most 100 requests"))
            let longHost = Self.body([("r1", "kim", "year9", String(repeating: "a", count: 256))])
            #expect(try await server.post("/api/v1/machine/requests", longHost, signedBy: machine).status == 400)
            let noReason = #"{"requests":[{"id":"r1","host":"a.example","url":"","reason":"","created":"2025-11-28T09:00:00Z"}]}"#
            #expect(try await server.post("/api/v1/machine/requests", noReason, signedBy: machine).status == 400)
            let badTime = #"{"requests":[{"id":"r1","host":"a.example","url":"","reason":"r","created":"yesterday"}]}"#
            #expect(try await server.post("/api/v1/machine/requests", badTime, signedBy: machine).status == 400)
            // Only the required fields: a machine with log.users: none names no one.
            let bare = #"{"requests":[{"id":"r1","host":"a.example","url":"","reason":"r","created":"2025-11-28T09:00:00Z"}]}"#
            #expect(try await server.post("/api/v1/machine/requests", bare, signedBy: machine).status == 200)
            #expect(try await server.storage.accessRequests(AccessRequestQuery()).count == 1)
        }
    }

    @Test(arguments: Engine.allCases)
    func answersAreInScopeOnceEachAndInTheAuditTrail(engine: Engine) async throws {
        try await LiveTests.withLiveServer(engine) { setup async throws in
            let server = setup.server
            let machine = setup.machine
            let body = Self.body([("a1", "kim", "year9", "games.example"), ("a2", "lee", "year10", "video.example")])
            #expect(try await server.post("/api/v1/machine/requests", body, signedBy: machine).status == 200)
            let admin = try await Self.token(server, .admin)
            let waiting = try await Self.list(server, "/api/v1/requests", admin).requests
            let kim = try #require(waiting.first { $0.user == "kim" }).id
            let lee = try #require(waiting.first { $0.user == "lee" }).id

            let otherTeacher = try await Self.token(server, .teacher, Scope(rooms: ["lab9"]))
            let approve = #"{"scope":"room","minutes":30,"message":"for the lesson"}"#
            #expect(try await server.client.request(.POST, "/api/v1/requests/\(kim)/approve", headers: otherTeacher, body: Array(approve.utf8)).status == 404, "not in scope")
            let teacher = try await Self.token(server, .teacher, Scope(rooms: ["lab2"]))
            // Out of bounds: longer than the policy's live.longest (1 h), everyone for a teacher.
            #expect(try await server.client.request(.POST, "/api/v1/requests/\(kim)/approve", headers: teacher, body: Array(#"{"scope":"room","minutes":61}"#.utf8)).status == 422)
            #expect(try await server.client.request(.POST, "/api/v1/requests/\(kim)/approve", headers: teacher, body: Array(#"{"scope":"everyone","minutes":30}"#.utf8)).status == 403)
            #expect(try await server.client.request(.POST, "/api/v1/requests/\(kim)/approve", headers: teacher, body: Array(#"{"scope":"class","minutes":30}"#.utf8)).status == 400)

            let approved = try await server.client.request(.POST, "/api/v1/requests/\(kim)/approve", headers: teacher, body: Array(approve.utf8))
            #expect(approved.status == 200, "\(approved.text)")
            #expect(approved.text.contains(#""state":"approved""#) && approved.text.contains(#""scopeValue":"lab2""#))
            // Answered twice (two teachers at once): the second is told.
            let again = try await server.client.request(.POST, "/api/v1/requests/\(kim)/deny", headers: admin, body: Array("{}".utf8))
            #expect(again.status == 409 && again.text.contains("request-decided"))
            let denied = try await server.client.request(
                .POST, "/api/v1/requests/\(lee)/deny", headers: admin, body: Array(#"{"message":"not for class"}"#.utf8))
            #expect(denied.status == 200)
            #expect(try await Self.list(server, "/api/v1/requests", admin).requests.isEmpty, "none waits")
            let decided = try await Self.list(server, "/api/v1/requests?state=all", admin).requests
            #expect(decided.first { $0.id == lee }?.message == "not for class")
            #expect(decided.first { $0.id == kim }?.minutes == 30)

            let events = try await server.storage.auditEvents(AuditQuery()).events.map(\.event)
            let approval = try #require(events.first { $0.action == "request.approve" })
            #expect(approval.target == kim && approval.reason == "for the lesson")
            #expect(approval.detail?.contains("scope=room:lab2 minutes=30") == true && approval.detail?.contains("games.example") == true)
            #expect(events.first { $0.action == "request.deny" }?.target == lee)
            // The machine's live state reads the decisions on its requests.
            let decisions = try await server.storage.accessRequestDecisions(machine: machine.id, since: 0, limit: 10)
            #expect(decisions.map(\.request.machineRequest).sorted() == ["a1", "a2"])
        }
    }

    /// A live channel that keeps what it was asked.
    final class RecordingLive: AccessRequestLive {
        let approvals = Mutex<[(String, ApprovalScope, String, Int64, String)]>([])
        let decisions = Mutex<[String]>([])
        func longestMinutes() async throws -> Int64? { 90 }
        func checkApproval(_ request: StoredAccessRequest, scope: ApprovalScope, value: String, until: Int64, now: Int64) async throws {
            if request.request.host.hasSuffix("adult.example") { throw RoomControl.refused("locked") }
        }
        func addApproval(_ request: StoredAccessRequest, scope: ApprovalScope, value: String, until: Int64, by principal: Principal, now: Int64)
            async throws -> String?
        {
            approvals.withLock { $0.append((request.request.host, scope, value, until - now, principal.author)) }
            return "lr-test1"
        }
        func decided(_ request: StoredAccessRequest, now: Int64) async throws {
            decisions.withLock { $0.append("\(request.machine)/\(request.request.machineRequest)/\(request.state.rawValue)") }
        }
    }

    @Test(arguments: Engine.allCases)
    func anApprovalBecomesALiveItemAndEveryDecisionReachesTheMachine(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let machine = try await server.enrol(TestMachine(), room: "lab2")
            #expect(try await server.post("/api/v1/machine/requests", Self.body([("a1", "kim", "year9", "games.example"), ("a2", "lee", "year9", "b.example"), ("a3", "lee", "year9", "www.adult.example")]), signedBy: machine).status == 200)
            let live = RecordingLive()
            let desk = AccessRequestDesk(storage: server.storage, live: live, clock: { server.clock.now })
            let teacher = Principal(kind: .person("ada"), role: .teacher, scope: Scope(groups: ["year9"]))
            let waiting = try await server.storage.accessRequests(AccessRequestQuery())
            let kim = try #require(waiting.first { $0.request.user == "kim" })
            let lee = try #require(waiting.first { $0.request.user == "lee" && $0.request.host == "b.example" })
            let locked = try #require(waiting.first { $0.request.host == "www.adult.example" })
            // Refused by the bounds before it is decided: it still waits, and nothing reached the machine.
            await #expect(throws: APIError.self) { try await desk.approve(locked.id, scope: .user, minutes: 5, message: nil, by: teacher) }
            #expect(try await server.storage.accessRequest(id: locked.id)?.state == .pending)
            #expect(live.decisions.withLock { $0 }.isEmpty)
            await #expect(throws: APIError.self) { try await desk.approve(kim.id, scope: .user, minutes: 91, message: nil, by: teacher) }
            await #expect(throws: APIError.self) { try await desk.approve(kim.id, scope: .room, minutes: 30, message: nil, by: teacher) }
            let approved = try await desk.approve(kim.id, scope: .user, minutes: 45, message: nil, by: teacher)
            #expect(approved.liveItem == "lr-test1")
            #expect(try await server.storage.accessRequest(id: kim.id)?.liveItem == "lr-test1")
            let made = live.approvals.withLock { $0 }
            #expect(made.count == 1 && made[0].0 == "games.example" && made[0].1 == .user && made[0].2 == "kim" && made[0].3 == 2700 && made[0].4 == "person:ada")
            _ = try await desk.deny(lee.id, message: "no", by: teacher)
            #expect(live.decisions.withLock { $0 } == ["\(machine.id)/a1/approved", "\(machine.id)/a2/denied"])
            // An auditor answers nothing.
            let auditor = Principal(kind: .person("eve"), role: .auditor, scope: .school)
            await #expect(throws: APIError.self) { try await desk.deny(lee.id, message: nil, by: auditor) }
        }
    }

    @Test(arguments: Engine.allCases)
    func aDecisionReachesTheMachinesLiveStateAtOnceByItsOwnID(engine: Engine) async throws {
        try await LiveTests.withLiveServer(engine) { setup async throws in
            let server = setup.server
            let machine = setup.machine
            let other = try await server.enrol(TestMachine(), room: "lab2")
            let body = #"{"requests":[{"id":"a1","user":"kim","group":"year9","host":"games.example","url":"http://games.example/","category":"games","reason":"maths game","created":"2025-11-28T09:00:00Z"},{"id":"a2","user":"lee","group":"year9","host":"video.example","url":"","reason":"a film","created":"2025-11-28T09:00:00Z"},{"id":"a3","user":"kim","group":"year9","host":"www.adult.example","url":"","reason":"r","created":"2025-11-28T09:00:00Z"}]}"#
            #expect(try await server.post("/api/v1/machine/requests", body, signedBy: machine).status == 200)
            let teacher: [(String, String)] = [("Authorization", "Bearer \(setup.teacher2)")]
            let waiting = try await Self.list(server, "/api/v1/requests", teacher).requests
            let a1 = try #require(waiting.first { $0.host == "games.example" }).id
            let a2 = try #require(waiting.first { $0.host == "video.example" }).id
            let a3 = try #require(waiting.first { $0.host == "www.adult.example" }).id

            // Nothing live yet: held, and answered by the approval: the item for kim alone, and the decision by the machine's own id.
            #expect(try await LiveTests.poll(server, machine, after: 0, wait: 0).status == 204)
            async let held = LiveTests.poll(server, machine, after: 0, wait: 30)
            try await LiveTests.untilHeld(setup.live.hub)
            let approved = try await server.client.request(
                .POST, "/api/v1/requests/\(a1)/approve", headers: teacher, body: Array(#"{"scope":"user","minutes":30,"message":"for the lesson"}"#.utf8))
            #expect(approved.status == 200, "\(approved.text)")
            let woken = try LiveTests.payload(try await held, key: setup.live.key)
            #expect(woken.sequence > 0)
            let item = try #require(woken.items.first { $0.request == a1 })
            #expect(item.action == "allow" && item.targets == ["games.example"] && item.scope == .init(kind: "user", value: "kim"))
            #expect(item.until == server.clock.now + 1800 && item.by.hasPrefix("API token ") && item.reason == "for the lesson")
            #expect(woken.requests == [.init(id: "a1", state: "approved", message: "for the lesson", until: server.clock.now + 1800)])

            // A denial has no item; the machine's sequence moves all the same.
            async let heldAgain = LiveTests.poll(server, machine, after: woken.sequence, wait: 30)
            try await LiveTests.untilHeld(setup.live.hub)
            let denied = try await server.client.request(.POST, "/api/v1/requests/\(a2)/deny", headers: teacher, body: Array(#"{"message":"not now"}"#.utf8))
            #expect(denied.status == 200, "\(denied.text)")
            let after = try LiveTests.payload(try await heldAgain, key: setup.live.key)
            #expect(after.sequence > woken.sequence)
            #expect(after.requests.map(\.id).sorted() == ["a1", "a2"])
            #expect(after.requests.first { $0.id == "a2" } == .init(id: "a2", state: "denied", message: "not now", until: nil))

            // A locked name: refused as machines would, and it still waits.
            let locked = try await server.client.request(.POST, "/api/v1/requests/\(a3)/approve", headers: teacher, body: Array(#"{"scope":"user","minutes":5}"#.utf8))
            #expect(locked.status == 422 && locked.text.contains("live-refused") && locked.text.contains("locked"), "\(locked.text)")
            #expect(try await Self.list(server, "/api/v1/requests", teacher).requests.map(\.id) == [a3])

            // Another machine of the room hears of no decision of this one's.
            let others = try LiveTests.payload(try await LiveTests.poll(server, other, after: 0, wait: 0), key: setup.live.key)
            #expect(others.requests.isEmpty && others.items.contains { $0.request == a1 }, "the item for kim is sent to every machine")
            // A week on, a decision is no longer carried.
            server.clock.advance(8 * 86_400)
            #expect(try await server.storage.raiseMachineLiveSequence(machine: machine.id) == "lab2")
            let later = try LiveTests.payload(try await LiveTests.poll(server, machine, after: after.sequence, wait: 0), key: setup.live.key)
            #expect(later.requests.isEmpty && later.items.isEmpty)
        }
    }
}
