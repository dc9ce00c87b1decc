import Foundation
import Hummingbird
import NIOCore

/// The console's rooms (docs/console.md, "Rooms"): the rooms of the
/// principal's scope, and a room's page with its rules in force, the form
/// that adds one (allow, block, focus, pause) and the buttons that end them,
/// and the room live: each machine with who is signed in on it (its last
/// check-in), what it was blocked on in the last 15 minutes (its records),
/// and whether it is stale or unfiltered. The page works without a script;
/// with the console's script it refreshes the room live every 2 seconds
/// from `/console/rooms/{room}/live` (JSON). Never screenshots, never keystrokes.
extension ConsoleRoutes {
    /// How far back the room live's blocks go.
    static let roomLiveWindow: Int64 = 15 * 60 * 1000

    func addRooms(to console: RouterGroup<ServerRequestContext>, control: RoomControl) {
        console.get("rooms") { request, context in try await page(request, context, .controlRoom) { try await rooms($0, $1) } }
        console.get("rooms/{room}") { request, context in
            try await page(request, context, .controlRoom) { try await room(context, $0, $1, control: control, typed: nil, status: .ok) }
        }
        console.get("rooms/{room}/live") { _, context in try await roomLive(context) }
        console.post("rooms/{room}/rules") { request, context in
            try await change(request, context, .controlRoom) { try await addRule(context, $0, $1, $2, control: control) }
        }
        console.post("rooms/{room}/end") { request, context in
            try await change(request, context, .controlRoom) { try await endRules(context, $0, $1, $2, control: control) }
        }
    }

    /// The room of the path (percent-decoded), if it is a room name.
    static func roomParameter(_ context: ServerRequestContext) -> String? {
        guard let raw = context.parameters.get("room"), let room = raw.removingPercentEncoding, RoomControl.isRoomName(room) else { return nil }
        return room
    }

    static func roomPath(_ room: String) -> String {
        "/console/rooms/" + (room.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? room)
    }

    func rooms(_ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        let now = clock()
        var rows: [RoomsPage.Row] = []
        for (room, machines) in try await storage.rooms() where principal.scope.contains(room: room) {
            let rules = try await storage.liveItems(scope: .room(room), now: now).count
            rows.append(.init(room: room, href: Self.roomPath(room), machines: String(machines), rules: String(rules)))
        }
        let page = RoomsPage(scopeText: scopeNote(principal.scope, t), hasRooms: !rows.isEmpty, rows: rows)
        return renderer.response("rooms", title: t["titleRooms"] ?? "", page: page, viewer: viewer, current: .rooms)
    }

    func room(
        _ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer, control: RoomControl, typed: RoomPage.Typed?,
        status: HTTPResponse.Status
    ) async throws -> Response {
        guard let room = Self.roomParameter(context) else { return renderer.notFound(viewer) }
        guard principal.scope.contains(room: room) else { return renderer.refused(viewer, scope: true) }
        let t = renderer.table(viewer)
        let now = clock()
        let policy = try? await control.bounds()
        let rules = try await storage.liveItems(scope: .room(room), now: now)
        let live = try await liveRows(room: room, principal: principal, t: t)
        var page = RoomPage.make(
            room: room, path: Self.roomPath(room), rules: rules, live: live, policy: policy, now: now, typed: typed, time: time, t: t)
        page.requests = try await requestsPanel(principal: principal, room: room, back: Self.roomPath(room), t: t)
        return renderer.response(
            "room", status: status, title: ConsoleText.fill(t["titleRoom"] ?? "", ["room": room]), page: page, viewer: viewer, current: .rooms)
    }

    /// The room's machines as the room live shows them.
    func liveRows(room: String, principal: Principal, t: [String: String]) async throws -> [RoomPage.Machine] {
        let nowMilliseconds = self.nowMilliseconds
        let now = nowMilliseconds / 1000
        let published = try await storage.publishedVersion()
        let names = try await names(for: principal)
        let machines = try await storage.machines().filter { $0.room == room && $0.revokedAt == nil }
        var blocked: [String: [String: Int]] = [:]
        let query = RecordQuery(
            since: nowMilliseconds - Self.roomLiveWindow, until: nowMilliseconds + 1, room: room, action: "block", limit: 1000,
            scope: principal.scope)
        for record in try await storage.queryRecords(query).records {
            let host = record.stored.record.host ?? record.stored.record.destination ?? "?"
            blocked[record.stored.machine, default: [:]][host, default: 0] += 1
        }
        return machines.map { machine in
            let state = MachineState.of(machine, now: now, staleAfter: staleAfter, publishedVersion: published)
            let users = (machine.lastCheckIn?.users ?? []).compactMap { names.show($0) }
            let hosts = (blocked[machine.id] ?? [:]).sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
            return RoomPage.Machine(
                id: machine.id, hostname: machine.hostname, state: state.rawValue, stateLabel: DashboardPage.stateLabel(state, t),
                users: users.isEmpty ? (t["roomNobody"] ?? "-") : users.joined(separator: ", "),
                blocked: hosts.isEmpty ? "" : hosts.prefix(10).map { $0.value > 1 ? "\($0.key) (\($0.value))" : $0.key }.joined(separator: ", "))
        }
    }

    struct LiveAnswer: Encodable {
        let machines: [RoomPage.Machine]
        let updated: String
    }

    /// The room live as JSON, for the page's script.
    func roomLive(_ context: ServerRequestContext) async throws -> Response {
        guard let principal = context.principal, principal.may(.controlRoom) else { return Self.jsonStatus(.forbidden) }
        guard let room = Self.roomParameter(context) else { return Self.jsonStatus(.notFound) }
        guard principal.scope.contains(room: room) else { return Self.jsonStatus(.forbidden) }
        let language = renderer.strings.choose(chosen: nil, acceptLanguage: nil)
        let t = renderer.strings.table(language)
        let answer = LiveAnswer(
            machines: try await liveRows(room: room, principal: principal, t: t), updated: time.dateTime(nowMilliseconds))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Response(
            status: .ok,
            headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store", .xContentTypeOptions: "nosniff"],
            body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(answer))))
    }

    static func jsonStatus(_ status: HTTPResponse.Status) -> Response {
        Response(status: status, headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"], body: .init(byteBuffer: ByteBuffer(string: "{}")))
    }

    func addRule(
        _ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm, control: RoomControl
    ) async throws -> Response {
        guard let room = Self.roomParameter(context) else { return renderer.notFound(viewer) }
        guard principal.scope.contains(room: room) else { return renderer.refused(viewer, scope: true) }
        let action = form["action"] ?? ""
        let targets = (form["targets"] ?? "").split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init)
        let duration = form["duration"] ?? ""
        var request = RoomControl.RuleRequest(action: action, targets: targets, reason: form["reason"])
        if duration == "lesson" {
            request.untilLessonEnds = true
        } else {
            request.minutes = Int(duration) ?? 0
        }
        do {
            _ = try await control.add(room: room, request, by: principal)
        } catch let error as APIError {
            let typed = RoomPage.Typed(action: action, targets: form["targets"] ?? "", duration: duration, reason: form["reason"] ?? "", error: error.message)
            return try await self.room(context, principal, viewer, control: control, typed: typed, status: error.status)
        }
        return Self.redirect(Self.roomPath(room) + "?done=rule-added")
    }

    func endRules(
        _ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm, control: RoomControl
    ) async throws -> Response {
        guard let room = Self.roomParameter(context) else { return renderer.notFound(viewer) }
        guard principal.scope.contains(room: room) else { return renderer.refused(viewer, scope: true) }
        let id = form["rule"].flatMap { $0.isEmpty ? nil : $0 }
        _ = try await control.end(room: room, id: id, by: principal)
        return Self.redirect(Self.roomPath(room) + "?done=rules-ended")
    }
}

struct RoomsPage {
    struct Row {
        let room: String
        let href: String
        let machines: String
        let rules: String
    }

    let scopeText: String?
    let hasRooms: Bool
    let rows: [Row]
}

struct RoomPage {
    struct Machine: Encodable {
        let id: String
        let hostname: String
        let state: String
        let stateLabel: String
        let users: String
        let blocked: String
    }

    struct Rule {
        let id: String
        let actionLabel: String
        let action: String
        let targets: String
        let until: String
        let by: String
        let reason: String
    }

    struct Option {
        let value: String
        let label: String
        let selected: Bool
    }

    /// What was typed into a refused form, kept.
    struct Typed {
        var action: String
        var targets: String
        var duration: String
        var reason: String
        var error: String
    }

    let room: String
    let path: String
    let livePath: String
    let hasRules: Bool
    let rules: [Rule]
    let actions: [Option]
    let durations: [Option]
    let targets: String
    let reason: String
    let error: String?
    /// Why nothing can be set (no live: in the published policy).
    let boundsNote: String?
    let hasMachines: Bool
    let machines: [Machine]
    /// The room's access requests waiting; nil when the principal answers none.
    var requests: RequestsPanel? = nil

    static func actionLabel(_ action: String, _ t: [String: String]) -> String {
        t["roomAction" + action.prefix(1).uppercased() + action.dropFirst()] ?? action
    }

    static func make(
        room: String, path: String, rules: [StoredLiveItem], live: [Machine], policy: LivePolicy?, now: Int64, typed: Typed?,
        time: ConsoleTime, t: [String: String]
    ) -> RoomPage {
        let bounds = policy?.live
        let allowed = bounds?.actions ?? LiveBounds.defaultActions
        let wanted = typed?.action ?? "allow"
        let actions = RoomControl.actions.filter { allowed.contains($0) }.map {
            Option(value: $0, label: actionLabel($0, t), selected: $0 == wanted)
        }
        let longest = (bounds?.longestSeconds ?? LiveBounds.defaultLongest) / 60
        var durations: [Option] = []
        if policy?.lessonEnd(now: now) != nil {
            durations.append(Option(value: "lesson", label: t["roomUntilLessonEnds"] ?? "lesson", selected: typed?.duration == "lesson"))
        }
        for minutes in [10, 15, 30, 45, 60, 90, 120, 180, 240] where Int64(minutes) <= longest {
            let selected = typed.map { $0.duration == String(minutes) } ?? (minutes == 30)
            durations.append(Option(value: String(minutes), label: ConsoleText.fill(t["roomMinutes"] ?? "", ["minutes": String(minutes)]), selected: selected))
        }
        let ruleRows = rules.map { item in
            Rule(
                id: item.id, actionLabel: actionLabel(item.item.action, t), action: item.item.action,
                targets: item.item.targets.joined(separator: ", "), until: time.dateTime(item.item.until * 1000), by: item.item.byName,
                reason: item.item.reason)
        }
        return RoomPage(
            room: room, path: path, livePath: path + "/live", hasRules: !ruleRows.isEmpty, rules: ruleRows, actions: actions,
            durations: durations, targets: typed?.targets ?? "", reason: typed?.reason ?? "", error: typed?.error,
            boundsNote: bounds == nil ? t["roomNoLivePolicy"] : nil, hasMachines: !live.isEmpty, machines: live)
    }
}
