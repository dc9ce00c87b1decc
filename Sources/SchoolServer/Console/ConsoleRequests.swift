import Foundation
import Hummingbird
import NIOCore

/// Students' access requests in the console (docs/console.md, "Access
/// requests"): the requests waiting in the principal's scope, on the
/// dashboard and (that room's) on a room's page, each with a form that
/// approves it for a scope and a duration within the policy's bound and a
/// form that denies it with a message. The forms work without a script;
/// with the console's script the list takes new requests, and drops those
/// answered elsewhere, every 2 seconds from `/console/requests/live` (JSON).
extension ConsoleRoutes {
    /// The most requests a list shows.
    static let requestsShown = 50

    func addRequests(to console: RouterGroup<ServerRequestContext>, desk: AccessRequestDesk) {
        console.get("requests/live") { request, context in try await requestsLive(request, context) }
        console.post("requests/{id}/approve") { request, context in
            try await change(request, context, .answerRequests) { try await approve(context, $0, $1, $2, desk: desk) }
        }
        console.post("requests/{id}/deny") { request, context in
            try await change(request, context, .answerRequests) { try await deny(context, $0, $1, $2, desk: desk) }
        }
    }

    /// The requests waiting for `principal` (of `room`, if given), with
    /// the forms' choices; nil when the principal answers no requests.
    func requestsPanel(principal: Principal, room: String?, back: String, t: [String: String]) async throws -> RequestsPanel? {
        guard let desk = requestDesk, principal.may(.answerRequests) else { return nil }
        let longest = try await desk.live.longestMinutes()
        let items = try await requestItems(principal: principal, room: room)
        return RequestsPanel.make(items: items, longest: longest, livePath: Self.requestsLivePath(room: room), back: back, t: t)
    }

    static func requestsLivePath(room: String?) -> String {
        guard let room else { return "/console/requests/live" }
        return "/console/requests/live?room=" + (room.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? room)
    }

    /// The requests waiting, newest first, as the list and its script show them.
    func requestItems(principal: Principal, room: String?) async throws -> [RequestsPanel.Item] {
        let waiting = try await storage.accessRequests(
            AccessRequestQuery(state: .pending, room: room, scope: principal.scope, limit: Self.requestsShown))
        let names = try await names(for: principal)
        var hostnames: [String: String] = [:]
        var items: [RequestsPanel.Item] = []
        for stored in waiting {
            if hostnames[stored.machine] == nil {
                hostnames[stored.machine] = try await storage.machine(id: stored.machine)?.hostname ?? stored.machine
            }
            var scopes: [String] = []
            if stored.request.user != nil { scopes.append(ApprovalScope.user.rawValue) }
            if principal.scope.isWholeSchool || principal.scope.rooms.contains(stored.room) { scopes.append(ApprovalScope.room.rawValue) }
            if let group = stored.request.group, principal.scope.isWholeSchool || principal.scope.groups.contains(group) {
                scopes.append(ApprovalScope.group.rawValue)
            }
            if principal.scope.isWholeSchool { scopes.append(ApprovalScope.everyone.rawValue) }
            items.append(
                RequestsPanel.Item(
                    id: stored.id, user: names.show(stored.request.user) ?? "-", group: stored.request.group ?? "-", room: stored.room,
                    machine: hostnames[stored.machine] ?? stored.machine, host: stored.request.host, url: stored.request.url,
                    category: stored.request.category ?? "", reason: stored.request.reason,
                    created: time.dateTime(stored.request.createdAt * 1000), scopes: scopes))
        }
        return items
    }

    struct RequestsAnswer: Encodable {
        let requests: [RequestsPanel.Item]
        let updated: String
    }

    /// The requests waiting as JSON, for the list's script.
    func requestsLive(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        guard let principal = context.principal, principal.may(.answerRequests) else { return Self.jsonStatus(.forbidden) }
        var room: String? = nil
        if let text = request.uri.queryParameters.get("room") {
            guard let decoded = text.removingPercentEncoding, RoomControl.isRoomName(decoded) else { return Self.jsonStatus(.notFound) }
            guard principal.scope.contains(room: decoded) else { return Self.jsonStatus(.forbidden) }
            room = decoded
        }
        let answer = RequestsAnswer(requests: try await requestItems(principal: principal, room: room), updated: time.dateTime(nowMilliseconds))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Response(
            status: .ok,
            headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store", .xContentTypeOptions: "nosniff"],
            body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(answer))))
    }

    /// Where a form goes back to: the dashboard or a room's page, nothing else.
    static func requestsBack(_ form: ConsoleForm) -> String {
        guard let back = form["back"], back == "/console/" || (back.hasPrefix("/console/rooms/") && !back.contains("?") && !back.contains("//"))
        else { return "/console/" }
        return back
    }

    func approve(
        _ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm, desk: AccessRequestDesk
    ) async throws -> Response {
        let back = Self.requestsBack(form)
        guard let id = context.parameters.get("id") else { return renderer.notFound(viewer) }
        guard let scope = form["scope"].flatMap(ApprovalScope.init(rawValue:)), let minutes = form["minutes"].flatMap({ Int64($0) }) else {
            return renderer.message(status: .badRequest, titleKey: "titleRefused", messageKey: "errorForm", viewer: viewer)
        }
        do {
            _ = try await desk.approve(id, scope: scope, minutes: minutes, message: form["message"], by: principal)
        } catch let error as APIError {
            return refusedAnswer(error, back: back, viewer: viewer)
        }
        return Self.redirect(back + "?done=request-approved")
    }

    func deny(
        _ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm, desk: AccessRequestDesk
    ) async throws -> Response {
        let back = Self.requestsBack(form)
        guard let id = context.parameters.get("id") else { return renderer.notFound(viewer) }
        do {
            _ = try await desk.deny(id, message: form["message"], by: principal)
        } catch let error as APIError {
            return refusedAnswer(error, back: back, viewer: viewer)
        }
        return Self.redirect(back + "?done=request-denied")
    }

    /// Why an answer was refused (beyond the bounds, answered already, not in scope), with the way back.
    func refusedAnswer(_ error: APIError, back: String, viewer: ConsoleViewer) -> Response {
        let t = renderer.table(viewer)
        return renderer.response(
            "message", status: error.status, title: t["titleRequestRefused"] ?? "",
            page: ConsoleRenderer.MessagePage(message: error.message, back: back), viewer: viewer, current: nil)
    }
}

/// The list of access requests waiting, with the forms that answer them.
struct RequestsPanel {
    struct Option {
        let value: String
        let label: String
        let selected: Bool
    }

    struct Item: Encodable {
        let id: String
        let user: String
        let group: String
        let room: String
        /// The machine's hostname.
        let machine: String
        let host: String
        let url: String
        let category: String
        let reason: String
        let created: String
        /// The scopes this principal may approve it for.
        let scopes: [String]
        // For the page only (the templates read stored properties).
        var approvePath = ""
        var denyPath = ""
        /// The scope menu: the scopes allowed, the narrowest chosen.
        var scopeOptions: [Option] = []

        enum CodingKeys: String, CodingKey {
            case id, user, group, room, machine, host, url, category, reason, created, scopes
        }
    }

    let livePath: String
    let back: String
    let hasItems: Bool
    let items: [Item]
    /// Approvals can be made (the published policy has live:).
    let canApprove: Bool
    let durations: [Option]
    /// Why nothing can be approved (no live: in the published policy).
    let boundsNote: String?
    /// The item the script copies for a request that arrives: `__id__` in
    /// its ids and paths, every scope in its menu (the script keeps the
    /// request's own).
    let template: Item

    static let templateID = "__id__"

    static func make(
        items: [Item], longest: Int64?, livePath: String, back: String, t: [String: String]
    ) -> RequestsPanel {
        func scopeOptions(_ scopes: [String]) -> [Option] {
            scopes.enumerated().map { index, scope in
                Option(value: scope, label: t["requestsScope" + scope.prefix(1).uppercased() + scope.dropFirst()] ?? scope, selected: index == 0)
            }
        }
        var durations: [Option] = []
        if let longest {
            let choices = [10, 15, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720, 1440].filter { Int64($0) <= longest }
            let chosen = choices.last { $0 <= 30 } ?? choices.first
            durations = choices.map { minutes in
                Option(value: String(minutes), label: ConsoleText.fill(t["roomMinutes"] ?? "", ["minutes": String(minutes)]), selected: minutes == chosen)
            }
        }
        func forPage(_ item: Item) -> Item {
            var item = item
            item.scopeOptions = scopeOptions(item.scopes)
            item.approvePath = "/console/requests/\(item.id)/approve"
            item.denyPath = "/console/requests/\(item.id)/deny"
            return item
        }
        let shown = items.map(forPage)
        let template = forPage(
            Item(
                id: templateID, user: "", group: "", room: "", machine: "", host: "", url: "", category: "", reason: "", created: "",
                scopes: ApprovalScope.allCases.map(\.rawValue)))
        return RequestsPanel(
            livePath: livePath, back: back, hasItems: !shown.isEmpty, items: shown, canApprove: !durations.isEmpty, durations: durations,
            boundsNote: longest == nil ? t["requestsNoLivePolicy"] : nil, template: template)
    }
}
