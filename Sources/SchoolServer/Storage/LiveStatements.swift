import Foundation

/// Whom a live item is for: the machines of a room, everyone, the people of
/// a policy group, or one person (docs/server.md, "The live channel").
public struct LiveScope: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        case room, user, group, everyone
    }

    public var kind: Kind
    /// The room, user or group; empty for everyone.
    public var value: String

    public init(kind: Kind, value: String) {
        self.kind = kind
        self.value = kind == .everyone ? "" : value
    }

    public static func room(_ name: String) -> LiveScope { LiveScope(kind: .room, value: name) }
}

/// A live item about to be stored; the storage gives it its id and sequence.
public struct NewLiveItem: Sendable, Hashable {
    public var scope: LiveScope
    /// `allow`, `block`, `focus`, `pause`, `exam`.
    public var action: String
    /// RulePattern texts (focus: the sites allowed; pause and exam: none).
    public var targets: [String]
    /// Unix seconds.
    public var from: Int64
    public var until: Int64
    /// `Principal.author` of who set it, and their name as people read it.
    public var byAuthor: String
    public var byName: String
    public var reason: String
    /// The access request it answers, if any.
    public var request: String?

    public init(
        scope: LiveScope, action: String, targets: [String], from: Int64, until: Int64, byAuthor: String, byName: String, reason: String,
        request: String? = nil
    ) {
        self.scope = scope
        self.action = action
        self.targets = targets
        self.from = from
        self.until = until
        self.byAuthor = byAuthor
        self.byName = byName
        self.reason = reason
        self.request = request
    }
}

/// A live item as stored.
public struct StoredLiveItem: Sendable, Hashable {
    public var id: String
    public var item: NewLiveItem
    /// The live sequence of its last change (made, or ended).
    public var sequence: Int64
    public var createdAt: Int64
    public var endedAt: Int64?
    public var endedBy: String?

    /// Whether machines apply it at `now`: not ended, not past its end.
    public func isInForce(now: Int64) -> Bool { endedAt == nil && item.until > now }
}

/// What a machine's live state is made of: its room as the server knows it,
/// the highest live sequence of its view (the items of its room and every
/// item of everyone, a group or a person, ended ones too, and its own room
/// changes), and the items in force.
public struct LiveView: Sendable, Hashable {
    public var machine: String
    public var room: String
    public var sequence: Int64
    public var revoked: Bool
    /// Empty unless asked for.
    public var items: [StoredLiveItem]
}

/// The live channel's statements (Storage/Migrations.swift, step 5).
extension SQLStorage {
    static let liveNotifyChannel = "hallpass_live"
    /// The NOTIFY payload that wakes every room.
    static let everyRoom = "*"

    /// Takes the next live sequence number in `session`'s transaction: the
    /// counter row stays locked until the transaction ends, so changes commit
    /// in the order of their numbers (Migrations, step 5).
    func nextLiveSequence(_ session: any SQLSession) async throws -> Int64 {
        let rows = try await session.run("UPDATE live_sequence SET value = value + 1 WHERE name = 'live' RETURNING value")
        guard let value = try rows.first?.integer("value") else { throw StorageError.failed("the live_sequence row is missing") }
        return value
    }

    /// On PostgreSQL, tells every server instance listening (LISTEN
    /// hallpass_live) that `room` changed, when the transaction commits.
    func notifyLive(_ session: any SQLSession, room: String) async throws {
        guard engine.name == "postgres" else { return }
        try await session.run("SELECT pg_notify($1, $2)", SQLValue(Self.liveNotifyChannel), SQLValue(room))
    }

    public func addLiveItem(_ new: NewLiveItem, now: Int64) async throws -> StoredLiveItem {
        let id = "lr-" + Secrets.randomBase32(count: 12).lowercased()
        // Targets are kept one to a line: a target is a RulePattern's text, which never holds a
        // line break (RulePattern refuses control characters), so the lines read back as written.
        return try await engine.transaction { session in
            let sequence = try await nextLiveSequence(session)
            try await session.run(
                """
                INSERT INTO live_items (id, scope_kind, scope_value, action, targets, starts_at, ends_at, by_author, by_name, reason,
                    request, sequence, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                """,
                SQLValue(id), SQLValue(new.scope.kind.rawValue), SQLValue(new.scope.value), SQLValue(new.action),
                SQLValue(new.targets.joined(separator: "\n")), SQLValue(new.from), SQLValue(new.until), SQLValue(new.byAuthor),
                SQLValue(new.byName), SQLValue(new.reason), SQLValue(new.request), SQLValue(sequence), SQLValue(now))
            try await notifyLive(session, room: new.scope.kind == .room ? new.scope.value : Self.everyRoom)
            return StoredLiveItem(id: id, item: new, sequence: sequence, createdAt: now, endedAt: nil, endedBy: nil)
        }
    }

    public func endLiveItems(scope: LiveScope, id: String?, by author: String, now: Int64) async throws -> [StoredLiveItem] {
        try await engine.transaction { session in
            var sql = "SELECT * FROM live_items WHERE scope_kind = $1 AND scope_value = $2 AND ended_at IS NULL AND ends_at > $3"
            var binds = [SQLValue(scope.kind.rawValue), SQLValue(scope.value), SQLValue(now)]
            if let id {
                sql += " AND id = $4"
                binds.append(SQLValue(id))
            }
            let found = try await session.query(sql, binds).map(Self.liveItem)
            guard !found.isEmpty else { return [] }
            let sequence = try await nextLiveSequence(session)
            var ended: [StoredLiveItem] = []
            for var item in found {
                try await session.run(
                    "UPDATE live_items SET ended_at = $2, ended_by = $3, sequence = $4 WHERE id = $1", SQLValue(item.id), SQLValue(now),
                    SQLValue(author), SQLValue(sequence))
                item.endedAt = now
                item.endedBy = author
                item.sequence = sequence
                ended.append(item)
            }
            try await notifyLive(session, room: scope.kind == .room ? scope.value : Self.everyRoom)
            return ended
        }
    }

    public func liveItem(id: String) async throws -> StoredLiveItem? {
        try await engine.run("SELECT * FROM live_items WHERE id = $1", SQLValue(id)).first.map(Self.liveItem)
    }

    public func liveItems(scope: LiveScope, now: Int64) async throws -> [StoredLiveItem] {
        try await engine.run(
            "SELECT * FROM live_items WHERE scope_kind = $1 AND scope_value = $2 AND ended_at IS NULL AND ends_at > $3 ORDER BY sequence",
            SQLValue(scope.kind.rawValue), SQLValue(scope.value), SQLValue(now)
        ).map(Self.liveItem)
    }

    /// The view's sequence comes from one statement (the wait loop asks it on
    /// every wake); the items only when a state is to be sent.
    public func liveView(machine: String, now: Int64, items: Bool) async throws -> LiveView? {
        let rows = try await engine.run(
            """
            SELECT m.room AS room, m.live_sequence AS machine_sequence, m.revoked_at AS revoked_at,
                (SELECT MAX(i.sequence) FROM live_items i
                 WHERE (i.scope_kind = 'room' AND i.scope_value = m.room) OR i.scope_kind IN ('everyone', 'group', 'user')) AS items_sequence
            FROM machines m WHERE m.id = $1
            """,
            SQLValue(machine))
        guard let row = rows.first else { return nil }
        let room = try row.text("room")
        let sequence = max(row.optionalInteger("machine_sequence") ?? 0, row.optionalInteger("items_sequence") ?? 0)
        var view = LiveView(machine: machine, room: room, sequence: sequence, revoked: row.optionalInteger("revoked_at") != nil, items: [])
        if items {
            view.items = try await engine.run(
                """
                SELECT * FROM live_items
                WHERE ((scope_kind = 'room' AND scope_value = $1) OR scope_kind IN ('everyone', 'group', 'user'))
                    AND ended_at IS NULL AND ends_at > $2
                ORDER BY sequence, id
                """,
                SQLValue(room), SQLValue(now)
            ).map(Self.liveItem)
        }
        return view
    }

    public func liveSequence() async throws -> Int64 {
        try await engine.run("SELECT value FROM live_sequence WHERE name = 'live'").first?.integer("value") ?? 0
    }

    public func setMachineRoom(id: String, room: String) async throws -> String? {
        try await engine.transaction { session in
            guard let old = try await session.run("SELECT room FROM machines WHERE id = $1", SQLValue(id)).first?.text("room") else {
                return nil
            }
            guard old != room else { return old }
            let sequence = try await nextLiveSequence(session)
            try await session.run(
                "UPDATE machines SET room = $2, live_sequence = $3 WHERE id = $1", SQLValue(id), SQLValue(room), SQLValue(sequence))
            try await notifyLive(session, room: old)
            try await notifyLive(session, room: room)
            return old
        }
    }

    /// The rooms of the machines not revoked, with how many machines each holds.
    public func rooms() async throws -> [(room: String, machines: Int)] {
        try await engine.run("SELECT room, COUNT(*) AS count FROM machines WHERE revoked_at IS NULL GROUP BY room ORDER BY room").map {
            (try $0.text("room"), Int(try $0.integer("count")))
        }
    }

    public func listenForLiveChanges(ready: @Sendable () async -> Void, _ changed: @escaping @Sendable (String) async -> Void) async throws -> Bool {
        guard let engine = engine as? PostgresEngine else { return false }
        try await engine.listen(channel: Self.liveNotifyChannel, ready: ready, changed)
        return true
    }

    static func liveItem(_ row: SQLRow) throws -> StoredLiveItem {
        guard let kind = LiveScope.Kind(rawValue: try row.text("scope_kind")) else { throw StorageError.unexpectedRow(column: "scope_kind") }
        let targets = try row.text("targets")
        return StoredLiveItem(
            id: try row.text("id"),
            item: NewLiveItem(
                scope: LiveScope(kind: kind, value: try row.text("scope_value")), action: try row.text("action"),
                targets: targets.isEmpty ? [] : targets.split(separator: "\n").map(String.init), from: try row.integer("starts_at"),
                until: try row.integer("ends_at"), byAuthor: try row.text("by_author"), byName: try row.text("by_name"),
                reason: try row.text("reason"), request: row.optionalText("request")),
            sequence: try row.integer("sequence"), createdAt: try row.integer("created_at"), endedAt: row.optionalInteger("ended_at"),
            endedBy: row.optionalText("ended_by"))
    }
}
