import Foundation
import NIOHTTP1
@testable import SchoolServer
import SharedStore
import Testing

/// The console's rooms (docs/console.md, "Rooms"): who sees which room,
/// the rule form with its CSRF token and the policy's bounds, ending, and
/// the room live's JSON.
@Suite struct ConsoleRoomsTests {
    @Test(arguments: Engine.allCases)
    func aTeacherSetsAndEndsTheirRoomsRulesAndSeesTheRoomLive(engine: Engine) async throws {
        let live = LiveChannel(key: LiveKey(signing: BundleSigningKey()), recheck: .seconds(3600))
        try await withConsoleServer(engine, live: live) { console async throws in
            let server = console.server
            let admin = try await ServerAdministration.createAPIToken(storage: server.storage, role: .admin, createdBy: "t", now: 0)
            @Sendable func send(_ method: HTTPMethod, _ path: String, _ body: String) async throws -> Int {
                try await server.client.request(method, path, headers: [("Authorization", "Bearer \(admin.token)")], body: Array(body.utf8)).status
            }
            // Before the policy has live:, the page says machines take no rule.
            _ = try await server.enrol(TestMachine(), room: "lab2")
            let before = try await console.get("/console/rooms/lab2", as: .teacher, rooms: ["lab2"])
            #expect(before.status == 200 && before.text.contains(#"id="bounds""#), "\(before.text.prefix(400))")
            let policy = String(decoding: try JSONEncoder().encode(LiveTests.policy(key: live.key.publicText)), as: UTF8.self)
            #expect(try await send(.PUT, "/api/v1/policy/lists/gambling?reason=r", "casino.example\n") == 201)
            #expect(try await send(.PUT, "/api/v1/policy", #"{"policy":\#(policy),"reason":"r"}"#) == 201)
            #expect(try await send(.POST, "/api/v1/policy/publish", #"{"reason":"r"}"#) == 201)

            // The rooms of the scope; another room's page is refused.
            let rooms = try await console.get("/console/rooms", as: .teacher, rooms: ["lab2"])
            #expect(rooms.status == 200 && rooms.text.contains(#"href="/console/rooms/lab2""#))
            #expect(try await console.get("/console/rooms", as: .auditor).status == 403)
            #expect(try await console.get("/console/rooms/lab2", as: .teacher, rooms: ["lab3"]).status == 403)
            let page = try await console.get("/console/rooms/lab2", as: .teacher, rooms: ["lab2"])
            #expect(page.status == 200 && !page.text.contains(#"id="bounds""#) && page.text.contains(#"data-live="/console/rooms/lab2/live""#))
            // The durations offered stop at the policy's live.longest (1h).
            #expect(page.text.contains(#"<option value="60""#) && !page.text.contains(#"<option value="90""#))

            // A form without the session's token changes nothing.
            let fields = [("action", "block"), ("targets", "games.example, video.example"), ("duration", "30"), ("reason", "the lesson")]
            #expect(try await console.post("/console/rooms/lab2/rules", as: .teacher, rooms: ["lab2"], fields, csrf: false).status == 403)
            let added = try await console.post("/console/rooms/lab2/rules", as: .teacher, rooms: ["lab2"], fields)
            #expect(added.status == 303 && added.header("Location") == "/console/rooms/lab2?done=rule-added")
            let rules = try await server.storage.liveItems(scope: .room("lab2"), now: server.clock.now)
            #expect(rules.map(\.item.targets) == [["games.example", "video.example"]] && rules.first?.item.byAuthor == "person:t-teacher")
            // Beyond the bounds: the form again, with why and what was typed.
            let refused = try await console.post(
                "/console/rooms/lab2/rules", as: .teacher, rooms: ["lab2"], [("action", "pause"), ("targets", ""), ("duration", "30")])
            #expect(refused.status == 422 && refused.text.contains(#"id="rule-error""#) && refused.text.contains("live.actions"))
            #expect(try await console.post("/console/rooms/lab2/rules", as: .teacher, rooms: ["lab3"], fields).status == 403)

            // The room live, as the page's script reads it.
            let json = try await console.get("/console/rooms/lab2/live", as: .teacher, rooms: ["lab2"])
            #expect(json.status == 200 && json.header("Content-Type") == "application/json; charset=utf-8")
            #expect(json.text.contains(#""hostname":"lab2-pc07""#), "\(json.text)")
            #expect(try await console.get("/console/rooms/lab2/live", as: .teacher, rooms: ["lab3"]).status == 403)

            // Ending every rule of the room.
            let ended = try await console.post("/console/rooms/lab2/end", as: .teacher, rooms: ["lab2"])
            #expect(ended.status == 303)
            #expect(try await server.storage.liveItems(scope: .room("lab2"), now: server.clock.now).isEmpty)
            let events = try await server.storage.auditEvents(AuditQuery(actor: "person:t-teacher")).events.map(\.event.action)
            #expect(events.sorted() == ["room.rule.add", "room.rule.end"])
        }
    }
}
