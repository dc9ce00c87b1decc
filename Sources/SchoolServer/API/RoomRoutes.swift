import Foundation
import Hummingbird

/// Rooms and their live rules (docs/server.md, "The live channel"): API
/// tokens whose role may control a room, for the rooms of their scope.
/// Moving a machine to another room is the admin's (`enrolMachines`).
struct RoomRoutes {
    let storage: any ServerStorage
    let control: RoomControl
    let clock: @Sendable () -> Int64

    struct RoomView: Codable, Sendable {
        let room: String
        let machines: Int
        let rules: Int
    }

    struct RoomsResponse: ResponseEncodable {
        let rooms: [RoomView]
    }

    struct RuleView: Codable, Sendable, ResponseEncodable {
        let id: String
        let room: String
        let action: String
        let targets: [String]
        let from: Int64
        let until: Int64
        let by: String
        let author: String
        let reason: String
        let sequence: Int64
        let endedAt: Int64?

        init(_ stored: StoredLiveItem) {
            id = stored.id
            room = stored.item.scope.value
            action = stored.item.action
            targets = stored.item.targets
            from = stored.item.from
            until = stored.item.until
            by = stored.item.byName
            author = stored.item.byAuthor
            reason = stored.item.reason
            sequence = stored.sequence
            endedAt = stored.endedAt
        }
    }

    struct RulesResponse: ResponseEncodable {
        let room: String
        let rules: [RuleView]
    }

    struct EndedResponse: ResponseEncodable {
        let ended: [RuleView]
    }

    struct RoomChange: Decodable {
        let room: String
        let reason: String?
    }

    struct MachineRoomResponse: ResponseEncodable {
        let machine: String
        let room: String
        let previous: String
    }

    func add(to router: Router<ServerRequestContext>) {
        let rooms = router.group("/api/v1/rooms").add(middleware: APITokenMiddleware(storage: storage, permission: .controlRoom))
        rooms.get { _, context in try await list(principal(context)) }
        rooms.get(":room/rules") { _, context in
            let room = try self.room(context)
            return RulesResponse(room: room, rules: try await storage.liveItems(scope: .room(room), now: clock()).map(RuleView.init))
        }
        rooms.post(":room/rules") { request, context in
            let room = try self.room(context)
            let body = try await decode(RoomControl.RuleRequest.self, request, context)
            let item = try await control.add(room: room, body, by: try principal(context))
            return EditedResponse(status: .created, response: RuleView(item))
        }
        rooms.delete(":room/rules/:rule") { _, context in
            let room = try self.room(context)
            let id = context.parameters.get("rule") ?? ""
            let ended = try await control.end(room: room, id: id, by: try principal(context))
            guard !ended.isEmpty else { throw APIError(.notFound, "rule-unknown", "no rule \(id.prefix(40)) in force in room \(room)") }
            return EndedResponse(ended: ended.map(RuleView.init))
        }
        rooms.delete(":room/rules") { _, context in
            let room = try self.room(context)
            return EndedResponse(ended: try await control.end(room: room, id: nil, by: try principal(context)).map(RuleView.init))
        }
        router.group("/api/v1/machines/:id/room")
            .add(middleware: APITokenMiddleware(storage: storage, permission: .enrolMachines))
            .put { request, context in try await move(request, context) }
    }

    private func principal(_ context: ServerRequestContext) throws -> Principal {
        guard let principal = context.principal else { throw APIError.unauthorized }
        return principal
    }

    /// The room of the path, refused when the principal's scope does not hold it.
    private func room(_ context: ServerRequestContext) throws -> String {
        let room = context.parameters.get("room") ?? ""
        guard RoomControl.isRoomName(room) else { throw APIError.badRequest("a room is 1 to 64 characters without spaces") }
        guard try principal(context).scope.contains(room: room) else {
            throw APIError.scopeForbidden("room \(room.prefix(64)) is not in this token's scope")
        }
        return room
    }

    func list(_ principal: Principal) async throws -> RoomsResponse {
        let now = clock()
        var views: [RoomView] = []
        for (room, machines) in try await storage.rooms() where principal.scope.contains(room: room) {
            views.append(RoomView(room: room, machines: machines, rules: try await storage.liveItems(scope: .room(room), now: now).count))
        }
        return RoomsResponse(rooms: views)
    }

    func move(_ request: Request, _ context: ServerRequestContext) async throws -> MachineRoomResponse {
        let principal = try principal(context)
        let id = context.parameters.get("id") ?? ""
        let body = try await decode(RoomChange.self, request, context)
        guard RoomControl.isRoomName(body.room) else { throw APIError.badRequest("a room is 1 to 64 characters without spaces") }
        guard let previous = try await storage.setMachineRoom(id: id, room: body.room) else {
            throw APIError(.notFound, "machine-unknown", "no machine \(id.prefix(40))")
        }
        if previous != body.room {
            await control.live.hub.announce(room: previous)
            await control.live.hub.announce(room: body.room)
            try await storage.audit(
                NewAuditEvent(
                    time: clock(), actor: principal.author, action: "machine.room", target: id, reason: body.reason,
                    detail: "from \(previous) to \(body.room)"))
        }
        return MachineRoomResponse(machine: id, room: body.room, previous: previous)
    }
}
