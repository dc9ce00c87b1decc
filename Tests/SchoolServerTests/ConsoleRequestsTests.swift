import Foundation
import NIOHTTP1
@testable import SchoolServer
import SharedStore
import Testing

/// Access requests in the console (docs/console.md, "Access requests"): the
/// list on the dashboard and a room's page within the principal's scope,
/// the approve and deny forms with their CSRF token and the policy's bound,
/// and the JSON the list's script reads.
@Suite struct ConsoleRequestsTests {
    @Test(arguments: Engine.allCases)
    func teachersSeeTheirRoomsRequestsAndAnswerThemWithinTheBounds(engine: Engine) async throws {
        let live = LiveChannel(key: LiveKey(signing: BundleSigningKey()), recheck: .seconds(3600))
        try await withConsoleServer(engine, live: live) { console async throws in
            let server = console.server
            let admin = try await ServerAdministration.createAPIToken(storage: server.storage, role: .admin, createdBy: "t", now: 0)
            @Sendable func send(_ method: HTTPMethod, _ path: String, _ body: String) async throws -> Int {
                try await server.client.request(method, path, headers: [("Authorization", "Bearer \(admin.token)")], body: Array(body.utf8)).status
            }
            let lab2 = try await server.enrol(TestMachine(), room: "lab2")
            let lab3 = try await server.enrol(TestMachine(), room: "lab3")
            #expect(try await server.post("/api/v1/machine/requests", AccessRequestTests.body([("a1", "kim", "year9", "games.example")]), signedBy: lab2).status == 200)
            #expect(try await server.post("/api/v1/machine/requests", AccessRequestTests.body([("b1", "lee", "year10", "video.example")]), signedBy: lab3).status == 200)
            let all = try await server.storage.accessRequests(AccessRequestQuery())
            let kim = try #require(all.first { $0.request.user == "kim" }).id
            let lee = try #require(all.first { $0.request.user == "lee" }).id

            // Before the policy has live:, requests are listed and can only be denied.
            let before = try await console.get("/console/", as: .teacher, rooms: ["lab2"])
            #expect(before.text.contains(#"id="requests-bounds""#) && before.text.contains(#"id="deny-\#(kim)""#))
            #expect(!before.text.contains(#"id="approve-\#(kim)""#))
            let policy = String(decoding: try JSONEncoder().encode(LiveTests.policy(key: live.key.publicText)), as: UTF8.self)
            #expect(try await send(.PUT, "/api/v1/policy", #"{"policy":\#(policy),"reason":"r"}"#) == 201)
            #expect(try await send(.POST, "/api/v1/policy/publish", #"{"reason":"r"}"#) == 201)

            // A teacher of lab2 sees lab2's request, with the scopes a teacher may choose and durations up to 1 h.
            let dashboard = try await console.get("/console/", as: .teacher, rooms: ["lab2"])
            #expect(dashboard.status == 200 && !dashboard.text.contains(#"id="requests-bounds""#))
            #expect(dashboard.text.contains(#"id="request-\#(kim)""#) && !dashboard.text.contains(#"id="request-\#(lee)""#))
            #expect(dashboard.text.contains(#"<form method="post" action="/console/requests/\#(kim)/approve" class="row-form" id="approve-\#(kim)">"#))
            #expect(dashboard.text.contains(#"id="deny-\#(kim)""#) && dashboard.text.contains(#"id="approve-scope-\#(kim)""#))
            // The student or the room; not everyone (that menu is the admin's).
            #expect(dashboard.text.contains(#"<select id="approve-scope-\#(kim)" name="scope">\#n<option value="user" selected>This student</option><option value="room">This room</option>\#n</select>"#))
            #expect(dashboard.text.contains(#"<option value="60">60 minutes</option>"#) && !dashboard.text.contains(#"<option value="90">"#))
            #expect(dashboard.text.contains(#"data-requests="/console/requests/live""#) && dashboard.text.contains(#"<template id="request-template">"#))
            // The admin sees both, and may open a site for everyone; an auditor answers none.
            let adminPage = try await console.get("/console/", as: .admin)
            #expect(adminPage.text.contains(#"id="request-\#(kim)""#) && adminPage.text.contains(#"id="request-\#(lee)""#))
            let leeMenu = try #require(adminPage.text.range(of: #"id="approve-scope-\#(lee)""#)).upperBound
            let leeOptions = String(adminPage.text[leeMenu...]).components(separatedBy: "</select>")[0]
            #expect(["user", "room", "group", "everyone"].allSatisfy { leeOptions.contains(#"<option value="\#($0)""#) }, "\(leeOptions)")
            let auditor = try await console.get("/console/", as: .auditor)
            #expect(auditor.status == 200 && auditor.text.contains(#"id="requests-unavailable""#) && !auditor.text.contains(#"id="request-rq-"#))

            // The room's page lists the room's own; the JSON for the script keeps to the scope too.
            let room = try await console.get("/console/rooms/lab2", as: .teacher, rooms: ["lab2"])
            #expect(room.text.contains(#"id="request-\#(kim)""#) && room.text.contains(#"data-requests="/console/requests/live?room=lab2""#))
            let json = try await console.get("/console/requests/live?room=lab2", as: .teacher, rooms: ["lab2"])
            #expect(json.status == 200 && json.header("Content-Type") == "application/json; charset=utf-8")
            struct Listing: Decodable {
                struct Item: Decodable {
                    let id: String
                    let user: String
                    let host: String
                    let machine: String
                    let scopes: [String]
                }
                let requests: [Item]
            }
            let listing = try JSONDecoder().decode(Listing.self, from: Data(json.body))
            #expect(listing.requests.map(\.id) == [kim] && listing.requests[0].scopes == ["user", "room"])
            #expect(listing.requests[0].host == "games.example" && listing.requests[0].machine == "lab2-pc07" && listing.requests[0].user == "kim")
            #expect(try await console.get("/console/requests/live?room=lab3", as: .teacher, rooms: ["lab2"]).status == 403)
            #expect(try await console.get("/console/requests/live", as: .auditor).status == 403)

            // Answers: the session's CSRF token is needed; another room's request is not found; the bound holds.
            let approve = [("scope", "user"), ("minutes", "30"), ("message", "for the lesson"), ("back", "/console/rooms/lab2")]
            #expect(try await console.post("/console/requests/\(kim)/approve", as: .teacher, rooms: ["lab2"], approve, csrf: false).status == 403)
            #expect(try await console.post("/console/requests/\(lee)/deny", as: .teacher, rooms: ["lab2"], [("message", "no")]).status == 404)
            let tooLong = try await console.post("/console/requests/\(kim)/approve", as: .teacher, rooms: ["lab2"], [("scope", "user"), ("minutes", "90")])
            #expect(tooLong.status == 422 && tooLong.text.contains("from 1 to 60"), "\(tooLong.text.prefix(300))")
            #expect(try await console.post("/console/requests/\(kim)/approve", as: .teacher, rooms: ["lab2"], [("scope", "everyone"), ("minutes", "30")]).status == 403)
            let approved = try await console.post("/console/requests/\(kim)/approve", as: .teacher, rooms: ["lab2"], approve)
            #expect(approved.status == 303 && approved.header("Location") == "/console/rooms/lab2?done=request-approved")
            let decided = try #require(try await server.storage.accessRequest(id: kim))
            #expect(decided.state == .approved && decided.approvalScope == .user && decided.approvalValue == "kim" && decided.liveItem != nil)
            #expect(decided.decidedBy == "person:t-teacher" && decided.message == "for the lesson")
            // Somewhere else than the console's own pages: back to the dashboard.
            let denied = try await console.post("/console/requests/\(lee)/deny", as: .admin, [("message", "not now"), ("back", "https://elsewhere.example/")])
            #expect(denied.status == 303 && denied.header("Location") == "/console/?done=request-denied")
            #expect(try await server.storage.accessRequest(id: lee)?.state == .denied)
            // Answered once.
            let again = try await console.post("/console/requests/\(lee)/deny", as: .admin, [("message", "x")])
            #expect(again.status == 409 && again.text.contains("already"))
            let events = try await server.storage.auditEvents(AuditQuery()).events.map(\.event)
            #expect(events.contains { $0.action == "request.approve" && $0.target == kim && $0.actor == "person:t-teacher" })
            #expect(events.contains { $0.action == "request.deny" && $0.target == lee && $0.reason == "not now" })

            // Nothing waits now.
            let after = try await console.get("/console/?done=request-denied", as: .admin)
            #expect(after.text.contains(#"<p id="requests-none">"#) && after.text.contains("The request is denied"))
        }
    }
}
