import Foundation

/// A student's request for a blocked site as a machine sends it
/// (`POST /api/v1/machine/requests`).
public struct NewAccessRequest: Sendable, Hashable {
    /// The machine's own id of the request (eight hex digits today).
    public var machineRequest: String
    public var user: String?
    public var group: String?
    public var host: String
    public var url: String
    public var category: String?
    public var reason: String
    /// When the student asked (Unix seconds, the machine's clock).
    public var createdAt: Int64

    public init(
        machineRequest: String, user: String?, group: String?, host: String, url: String, category: String?, reason: String, createdAt: Int64
    ) {
        self.machineRequest = machineRequest
        self.user = user
        self.group = group
        self.host = host
        self.url = url
        self.category = category
        self.reason = reason
        self.createdAt = createdAt
    }
}

/// Whom an approval opens the site for (the live item's scope): the
/// student alone, the request's room, the student's group, or everyone.
public enum ApprovalScope: String, Sendable, Hashable, Codable, CaseIterable {
    case user, room, group, everyone
}

/// An access request as the server keeps it (Migrations, step 6).
public struct StoredAccessRequest: Sendable, Hashable {
    public enum State: String, Sendable, Hashable, Codable, CaseIterable {
        case pending, approved, denied
    }

    /// The server's id (`rq-...`), for the API and the console.
    public var id: String
    public var machine: String
    /// The machine's room when the request arrived.
    public var room: String
    public var request: NewAccessRequest
    public var receivedAt: Int64
    public var state: State
    /// `Principal.author` of who decided it.
    public var decidedBy: String?
    public var decidedAt: Int64?
    public var message: String?
    /// An approval's scope, its value (the user, room or group; empty for everyone), and its end.
    public var approvalScope: ApprovalScope?
    public var approvalValue: String?
    public var approvalMinutes: Int64?
    public var approvalUntil: Int64?
    /// The live item the approval made, once made.
    public var liveItem: String?
}

/// A decision on a pending request.
public struct AccessRequestDecision: Sendable, Hashable {
    public var state: StoredAccessRequest.State
    public var decidedBy: String
    public var message: String?
    public var scope: ApprovalScope?
    public var scopeValue: String?
    public var minutes: Int64?
    public var until: Int64?

    public init(
        state: StoredAccessRequest.State, decidedBy: String, message: String?, scope: ApprovalScope? = nil, scopeValue: String? = nil,
        minutes: Int64? = nil, until: Int64? = nil
    ) {
        self.state = state
        self.decidedBy = decidedBy
        self.message = message
        self.scope = scope
        self.scopeValue = scopeValue
        self.minutes = minutes
        self.until = until
    }
}

/// Which requests a list shows: one state (nil: all), one room (nil: any),
/// one student (nil: any), within a principal's scope (by the request's
/// room or the student's group), newest first, at most `limit`, older than
/// `before` (the last of a page before) when given.
public struct AccessRequestQuery: Sendable, Hashable {
    public var state: StoredAccessRequest.State?
    public var room: String?
    public var user: String?
    public var scope: Scope
    public var limit: Int
    /// The received time (Unix seconds) and id of the last request of the page before.
    public var before: AccessRequestCursor?

    public init(
        state: StoredAccessRequest.State? = .pending, room: String? = nil, user: String? = nil, scope: Scope = .school, limit: Int = 200,
        before: AccessRequestCursor? = nil
    ) {
        self.state = state
        self.room = room
        self.user = user
        self.scope = scope
        self.limit = limit
        self.before = before
    }
}

/// Where a page of access requests ended: its last request's arrival and id.
public struct AccessRequestCursor: Sendable, Hashable {
    public var receivedAt: Int64
    public var id: String

    public init(_ request: StoredAccessRequest) {
        receivedAt = request.receivedAt
        id = request.id
    }
}

/// The access requests' statements (docs/server.md, "Access requests").
extension SQLStorage {
    static let accessRequestColumns = [
        "id", "machine", "machine_request", "room", "user_name", "group_name", "host", "url", "category", "reason", "created_at",
        "received_at", "state",
    ]

    /// Stores each request once: one the server has (the same machine and
    /// machine id) is left as it is, so a machine may send again what it
    /// is not sure arrived. Returns the requests stored now.
    public func storeAccessRequests(machine: String, room: String, _ requests: [NewAccessRequest], now: Int64) async throws
        -> [StoredAccessRequest]
    {
        guard !requests.isEmpty else { return [] }
        return try await engine.transaction { session in
            var stored: [StoredAccessRequest] = []
            for request in requests {
                let id = Secrets.newAccessRequestID()
                let rows = try await session.query(
                    "INSERT INTO access_requests (\(Self.accessRequestColumns.joined(separator: ", "))) VALUES "
                        + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'pending')"
                        + " ON CONFLICT (machine, machine_request) DO NOTHING RETURNING *",
                    [
                        SQLValue(id), SQLValue(machine), SQLValue(request.machineRequest), SQLValue(room), SQLValue(request.user),
                        SQLValue(request.group), SQLValue(request.host), SQLValue(request.url), SQLValue(request.category),
                        SQLValue(request.reason), SQLValue(request.createdAt), SQLValue(now),
                    ])
                stored += try rows.map(Self.accessRequest)
            }
            return stored
        }
    }

    public func accessRequest(id: String) async throws -> StoredAccessRequest? {
        try await engine.run("SELECT * FROM access_requests WHERE id = $1", SQLValue(id)).first.map(Self.accessRequest)
    }

    public func accessRequests(_ query: AccessRequestQuery) async throws -> [StoredAccessRequest] {
        var binds: [SQLValue] = []
        func bind(_ value: SQLValue) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        var conditions: [String] = []
        if let state = query.state { conditions.append("state = \(bind(.text(state.rawValue)))") }
        if let room = query.room { conditions.append("room = \(bind(.text(room)))") }
        if let user = query.user { conditions.append("user_name = \(bind(.text(user)))") }
        if let before = query.before {
            let received = bind(.integer(before.receivedAt))
            conditions.append("received_at <= \(received) AND (received_at < \(received) OR id < \(bind(.text(before.id))))")
        }
        if !query.scope.isWholeSchool {
            var either: [String] = []
            if !query.scope.rooms.isEmpty { either.append("room IN (\(query.scope.rooms.map { bind(.text($0)) }.joined(separator: ", ")))") }
            if !query.scope.groups.isEmpty {
                either.append("group_name IN (\(query.scope.groups.map { bind(.text($0)) }.joined(separator: ", ")))")
            }
            conditions.append("(" + either.joined(separator: " OR ") + ")")
        }
        let sql =
            "SELECT * FROM access_requests" + (conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND "))
            + " ORDER BY received_at DESC, id DESC LIMIT \(bind(.integer(Int64(max(1, min(query.limit, 1000))))))"
        return try await engine.query(sql, binds).map(Self.accessRequest)
    }

    /// Decides a pending request, in one statement (two people answering at
    /// once: the first decides, the second gets nil). nil: no such request,
    /// or it is decided already.
    public func decideAccessRequest(id: String, _ decision: AccessRequestDecision, now: Int64) async throws -> StoredAccessRequest? {
        try await engine.run(
            """
            UPDATE access_requests SET state = $2, decided_by = $3, decided_at = $4, message = $5, approval_scope = $6,
                approval_value = $7, approval_minutes = $8, approval_until = $9
            WHERE id = $1 AND state = 'pending' RETURNING *
            """,
            SQLValue(id), SQLValue(decision.state.rawValue), SQLValue(decision.decidedBy), SQLValue(now), SQLValue(decision.message),
            SQLValue(decision.scope?.rawValue), SQLValue(decision.scopeValue), SQLValue(decision.minutes), SQLValue(decision.until)
        ).first.map(Self.accessRequest)
    }

    /// Notes the live item an approval made.
    public func setAccessRequestLiveItem(id: String, liveItem: String) async throws {
        try await engine.run("UPDATE access_requests SET live_item = $2 WHERE id = $1", SQLValue(id), SQLValue(liveItem))
    }

    /// The decisions on `machine`'s requests that its live state carries:
    /// the newest `limit` made since `since` (Unix seconds), oldest first.
    /// A decision is carried for the whole window, whatever its end, so
    /// that a machine that was off when it was made still learns it.
    public func accessRequestDecisions(machine: String, since: Int64, limit: Int) async throws -> [StoredAccessRequest] {
        try await engine.run(
            """
            SELECT * FROM (
                SELECT * FROM access_requests WHERE machine = $1 AND state <> 'pending' AND decided_at >= $2
                ORDER BY decided_at DESC, id DESC LIMIT $3
            ) AS newest ORDER BY decided_at, id
            """,
            SQLValue(machine), SQLValue(since), SQLValue(Int64(max(0, limit)))
        ).map(Self.accessRequest)
    }

    /// A decision on one of `machine`'s requests changed its live state:
    /// the machine's view takes the next live sequence (so a held request
    /// answers at once, here and, through NOTIFY, on every instance).
    /// Returns the machine's room; nil when there is no such machine.
    public func raiseMachineLiveSequence(machine: String) async throws -> String? {
        try await engine.transaction { session in
            guard let room = try await session.run("SELECT room FROM machines WHERE id = $1", SQLValue(machine)).first?.text("room") else {
                return nil
            }
            let sequence = try await nextLiveSequence(session)
            try await session.run("UPDATE machines SET live_sequence = $2 WHERE id = $1", SQLValue(machine), SQLValue(sequence))
            try await notifyLive(session, room: room)
            return room
        }
    }

    /// Removes the requests received before `before` (Unix seconds); returns how many.
    public func removeAccessRequests(before: Int64) async throws -> Int64 {
        try await engine.transaction { session in
            let count =
                try await session.run("SELECT COUNT(*) AS count FROM access_requests WHERE received_at < $1", SQLValue(before)).first?
                .integer("count") ?? 0
            try await session.run("DELETE FROM access_requests WHERE received_at < $1", SQLValue(before))
            return count
        }
    }

    static func accessRequest(_ row: SQLRow) throws -> StoredAccessRequest {
        guard let state = StoredAccessRequest.State(rawValue: try row.text("state")) else { throw StorageError.unexpectedRow(column: "state") }
        return StoredAccessRequest(
            id: try row.text("id"), machine: try row.text("machine"), room: try row.text("room"),
            request: NewAccessRequest(
                machineRequest: try row.text("machine_request"), user: row.optionalText("user_name"), group: row.optionalText("group_name"),
                host: try row.text("host"), url: try row.text("url"), category: row.optionalText("category"), reason: try row.text("reason"),
                createdAt: try row.integer("created_at")),
            receivedAt: try row.integer("received_at"), state: state, decidedBy: row.optionalText("decided_by"),
            decidedAt: row.optionalInteger("decided_at"), message: row.optionalText("message"),
            approvalScope: row.optionalText("approval_scope").flatMap(ApprovalScope.init(rawValue:)),
            approvalValue: row.optionalText("approval_value"), approvalMinutes: row.optionalInteger("approval_minutes"),
            approvalUntil: row.optionalInteger("approval_until"), liveItem: row.optionalText("live_item"))
    }
}
