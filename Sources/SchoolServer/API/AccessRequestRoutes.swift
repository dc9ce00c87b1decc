import Foundation
import Hummingbird
import Logging

/// What answering a request does to the live channel: an approval becomes a
/// live item (allow the host, for the scope asked, until the end asked,
/// naming the request), and every decision goes into the live state of the
/// machine the request came from. `LiveAccessRequests` (Live/) is the
/// server's; tests put a recording one in its place.
public protocol AccessRequestLive: Sendable {
    /// The longest an approval may last, in minutes (the published policy's
    /// `live.longest`); nil when the policy has no `live:` (machines would
    /// refuse any approval's item).
    func longestMinutes() async throws -> Int64?
    /// Throws an `APIError` (422 `live-refused`) when the policy's bounds
    /// would make machines refuse the approval's item: a host in a locked
    /// category, a room or group out of `live.rooms` or `live.groups`, no
    /// `allow` in `live.actions`, longer than `live.longest`. Asked before
    /// the request is decided, so that a refused approval leaves it pending.
    func checkApproval(_ request: StoredAccessRequest, scope: ApprovalScope, value: String, until: Int64, now: Int64) async throws
    /// Makes the live item of a checked approval and returns its id.
    func addApproval(_ request: StoredAccessRequest, scope: ApprovalScope, value: String, until: Int64, by principal: Principal, now: Int64)
        async throws -> String?
    /// A decision on one of `request.machine`'s requests was made: its live state changes.
    func decided(_ request: StoredAccessRequest, now: Int64) async throws
}

/// Answering access requests, for the API and the console alike: the
/// request must be in the principal's scope (else it is not found), pending
/// (else 409), and an approval within the bounds; each decision goes to the
/// audit trail (`request.approve`, `request.deny`) and the live channel.
struct AccessRequestDesk: Sendable {
    let storage: any ServerStorage
    let live: any AccessRequestLive
    let clock: @Sendable () -> Int64

    /// The longest message kept with a decision.
    static let maximumMessage = 500

    /// The request `id` when `principal` may answer it; nil otherwise (not found, or not in scope).
    func request(_ id: String, for principal: Principal) async throws -> StoredAccessRequest? {
        guard Secrets.isAccessRequestID(id), let request = try await storage.accessRequest(id: id) else { return nil }
        return principal.scope.contains(room: request.room, group: request.request.group) ? request : nil
    }

    func approve(_ id: String, scope: ApprovalScope, minutes: Int64, message: String?, by principal: Principal) async throws
        -> StoredAccessRequest
    {
        guard principal.may(.answerRequests) else { throw APIError.roleForbidden(principal.role) }
        let message = try Self.message(message)
        guard let request = try await request(id, for: principal) else { throw Self.notFound }
        guard request.state == .pending else { throw Self.decided(request) }
        guard let longest = try await live.longestMinutes() else {
            throw APIError(
                .unprocessableContent, "live-refused",
                "the published policy has no live: section, so machines accept no approval; add live: with this server's key (hallpass-server live-key) and publish")
        }
        guard (1...longest).contains(minutes) else {
            throw APIError(.unprocessableContent, "live-refused", "minutes must be from 1 to \(longest) (the policy's live.longest)")
        }
        let value: String
        switch scope {
        case .user:
            guard let user = request.request.user else {
                throw APIError(.unprocessableContent, "live-refused", "the machine did not name the student (log.users: none); choose the room, the group or everyone")
            }
            value = user
        case .room: value = request.room
        case .group:
            guard let group = request.request.group else {
                throw APIError(.unprocessableContent, "live-refused", "the student was in no policy group; choose the student, the room or everyone")
            }
            value = group
        case .everyone: value = ""
        }
        // A teacher opens a site for their own room or group, or for the student who asked; the whole school is the admin's and the safeguarding lead's.
        if !principal.scope.isWholeSchool {
            let within =
                switch scope {
                case .user: true
                case .room: principal.scope.rooms.contains(value)
                case .group: principal.scope.groups.contains(value)
                case .everyone: false
                }
            guard within else {
                throw APIError.scopeForbidden("an approval for \(scope.rawValue) \(value) reaches beyond this account's rooms and groups")
            }
        }
        let now = clock()
        let until = now + minutes * 60
        try await live.checkApproval(request, scope: scope, value: value, until: until, now: now)
        let decision = AccessRequestDecision(
            state: .approved, decidedBy: principal.author, message: message, scope: scope, scopeValue: value, minutes: minutes, until: until)
        // Decided first, in one statement: of two people answering at once, one decides; only that one makes the live item.
        guard var decided = try await storage.decideAccessRequest(id: request.id, decision, now: now) else {
            throw Self.decided(try await storage.accessRequest(id: request.id) ?? request)
        }
        if let item = try await live.addApproval(decided, scope: scope, value: value, until: until, by: principal, now: now) {
            try await storage.setAccessRequestLiveItem(id: decided.id, liveItem: item)
            decided.liveItem = item
        }
        try await live.decided(decided, now: now)
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: principal.author, action: "request.approve", target: decided.id, reason: message,
                detail: "host=\(request.request.host) scope=\(scope.rawValue):\(value) minutes=\(minutes) machine=\(request.machine)"))
        return decided
    }

    func deny(_ id: String, message: String?, by principal: Principal) async throws -> StoredAccessRequest {
        guard principal.may(.answerRequests) else { throw APIError.roleForbidden(principal.role) }
        let message = try Self.message(message)
        guard let request = try await request(id, for: principal) else { throw Self.notFound }
        guard request.state == .pending else { throw Self.decided(request) }
        let now = clock()
        guard let decided = try await storage.decideAccessRequest(id: request.id, AccessRequestDecision(state: .denied, decidedBy: principal.author, message: message), now: now)
        else { throw Self.decided(try await storage.accessRequest(id: request.id) ?? request) }
        try await live.decided(decided, now: now)
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: principal.author, action: "request.deny", target: decided.id, reason: message,
                detail: "host=\(request.request.host) machine=\(request.machine)"))
        return decided
    }

    static let notFound = APIError(.notFound, "not-found", "no access request has this id in this account's rooms and groups")

    static func decided(_ request: StoredAccessRequest) -> APIError {
        APIError(.conflict, "request-decided", "the request was \(request.state.rawValue) already by \(request.decidedBy ?? "someone")")
    }

    /// Trimmed; nil when empty; at most `maximumMessage` characters, no control characters but line ends.
    static func message(_ text: String?) throws -> String? {
        guard let trimmed = text?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        guard trimmed.count <= maximumMessage else { throw APIError.badRequest("message is at most \(maximumMessage) characters") }
        guard !trimmed.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\n" && $0 != "\r" && $0 != "\t" })
        else { throw APIError.badRequest("message contains a control character") }
        return trimmed
    }
}

/// The access requests for the school's tools (`/api/v1/requests`), behind
/// an API token whose role may answer requests (`answerRequests`); a token
/// with a scope sees and answers the requests of its rooms and groups.
struct AccessRequestRoutes {
    let desk: AccessRequestDesk

    struct RequestView: ResponseEncodable, Decodable, Sendable {
        let id: String
        let machine: String
        let room: String
        let user: String?
        let group: String?
        let host: String
        let url: String
        let category: String?
        let reason: String
        let created: String
        let received: String
        let state: StoredAccessRequest.State
        let decidedBy: String?
        let decided: String?
        let message: String?
        let scope: ApprovalScope?
        let scopeValue: String?
        let minutes: Int64?
        let until: String?

        init(_ stored: StoredAccessRequest) {
            func time(_ seconds: Int64) -> String { RecordTime.format(milliseconds: seconds * 1000) }
            id = stored.id
            machine = stored.machine
            room = stored.room
            user = stored.request.user
            group = stored.request.group
            host = stored.request.host
            url = stored.request.url
            category = stored.request.category
            reason = stored.request.reason
            created = time(stored.request.createdAt)
            received = time(stored.receivedAt)
            state = stored.state
            decidedBy = stored.decidedBy
            decided = stored.decidedAt.map(time)
            message = stored.message
            scope = stored.approvalScope
            scopeValue = stored.approvalValue
            minutes = stored.approvalMinutes
            until = stored.approvalUntil.map(time)
        }
    }

    struct ListResponse: ResponseEncodable {
        let requests: [RequestView]
    }

    struct ApproveRequest: Decodable {
        let scope: ApprovalScope
        let minutes: Int64
        let message: String?
    }

    struct DenyRequest: Decodable {
        let message: String?
    }

    func add(to router: Router<ServerRequestContext>) {
        let group = router.group("/api/v1/requests").add(middleware: APITokenMiddleware(storage: desk.storage, permission: .answerRequests))
        group.get { request, context in try await list(request, context) }
        group.post(":id/approve") { request, context in
            let body = try await decode(ApproveRequest.self, request, context)
            let principal = try Self.principal(context)
            return RequestView(
                try await desk.approve(
                    try Self.id(context), scope: body.scope, minutes: body.minutes, message: body.message, by: principal))
        }
        group.post(":id/deny") { request, context in
            let body = try await decode(DenyRequest.self, request, context)
            return RequestView(try await desk.deny(try Self.id(context), message: body.message, by: try Self.principal(context)))
        }
    }

    static func principal(_ context: ServerRequestContext) throws -> Principal {
        guard let principal = context.principal else { throw APIError.unauthorized }
        return principal
    }

    static func id(_ context: ServerRequestContext) throws -> String {
        guard let id = context.parameters.get("id") else { throw AccessRequestDesk.notFound }
        return id
    }

    func list(_ request: Request, _ context: ServerRequestContext) async throws -> ListResponse {
        let principal = try Self.principal(context)
        var query = AccessRequestQuery(scope: principal.scope)
        if let state = request.uri.queryParameters.get("state") {
            if state == "all" {
                query.state = nil
            } else {
                guard let parsed = StoredAccessRequest.State(rawValue: state) else {
                    throw APIError.badRequest("state must be pending, approved, denied or all")
                }
                query.state = parsed
            }
        }
        if let room = request.uri.queryParameters.get("room") {
            guard (1...64).contains(room.utf8.count) else { throw APIError.badRequest("room must be 1 to 64 characters") }
            query.room = room
        }
        if let limit = request.uri.queryParameters.get("limit") {
            guard let value = Int(limit), (1...1000).contains(value) else { throw APIError.badRequest("limit must be from 1 to 1000") }
            query.limit = value
        }
        return ListResponse(requests: try await desk.storage.accessRequests(query).map(RequestView.init))
    }
}

extension MachineRoutes {
    /// The most requests one post may carry.
    static let maxAccessRequests = 100

    struct AccessRequestsPost: Decodable {
        struct Item: Decodable {
            let id: String
            let user: String?
            let group: String?
            let host: String
            let url: String
            let category: String?
            let reason: String
            let created: String
        }
        let requests: [Item]
    }

    struct AccessRequestsAnswer: ResponseEncodable {
        /// How many of the post were new to the server.
        let stored: Int
    }

    /// `POST /api/v1/machine/requests`: the block page's requests of a
    /// machine, kept once each by (machine, the machine's id): a post sent
    /// again stores nothing twice and is answered 200 as the first was.
    func accessRequests(_ request: Request, _ context: ServerRequestContext) async throws -> AccessRequestsAnswer {
        guard let machine = context.machine else { throw APIError.signatureInvalid }
        let body = try await decode(AccessRequestsPost.self, request, context)
        guard body.requests.count <= Self.maxAccessRequests else {
            throw APIError.badRequest("at most \(Self.maxAccessRequests) requests in one post, got \(body.requests.count)")
        }
        var requests: [NewAccessRequest] = []
        for (index, item) in body.requests.enumerated() {
            func check(_ value: String?, _ name: String, _ range: ClosedRange<Int>) throws {
                guard let value else { return }
                guard range.contains(value.utf8.count) else {
                    throw APIError.badRequest("requests[\(index)].\(name) must be \(range.lowerBound) to \(range.upperBound) bytes")
                }
                guard name == "reason" || !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                    throw APIError.badRequest("requests[\(index)].\(name) contains a control character")
                }
            }
            try check(item.id, "id", 1...64)
            try check(item.user, "user", 1...256)
            try check(item.group, "group", 1...256)
            try check(item.host, "host", 1...255)
            try check(item.url, "url", 0...4096)
            try check(item.category, "category", 1...128)
            // 500 characters of up to 4 bytes each.
            try check(item.reason, "reason", 1...2000)
            guard let created = RecordTime.milliseconds(item.created) else {
                throw APIError.badRequest("requests[\(index)].created is not an RFC 3339 time: '\(item.created.prefix(40))'")
            }
            requests.append(
                NewAccessRequest(
                    machineRequest: item.id, user: item.user, group: item.group, host: item.host.lowercased(), url: item.url,
                    category: item.category, reason: item.reason, createdAt: created / 1000))
        }
        let stored = try await storage.storeAccessRequests(machine: machine.id, room: machine.room, requests, now: clock())
        for request in stored {
            context.logger.notice(
                "an access request arrived",
                metadata: ["hallpass.request": "\(request.id)", "hallpass.room": "\(request.room)", "hallpass.host": "\(request.request.host)"])
        }
        return AccessRequestsAnswer(stored: stored.count)
    }
}
