import Foundation

/// A digest to be claimed and queued: for one person, one kind and one
/// period, the email already written.
public struct NewDigestClaim: Sendable, Hashable {
    public var kind: DigestKind
    /// The period, Unix ms.
    public var period: Range<Int64>
    public var login: String
    /// Where the email goes (the person's address when it was made).
    public var address: String
    /// The outbox row's id, which the email's Message-ID carries.
    public var deliveryID: String
    /// The whole email (RFC 5322, LF line ends).
    public var message: String

    public init(kind: DigestKind, period: Range<Int64>, login: String, address: String, deliveryID: String, message: String) {
        self.kind = kind
        self.period = period
        self.login = login
        self.address = address
        self.deliveryID = deliveryID
        self.message = message
    }

    /// The outbox row's `alert_id` for a digest: unique per claim, never an alert's (`al-...`).
    var outboxKey: String { "digest:\(kind.rawValue):\(period.lowerBound):\(login)" }
}

/// A digest claimed: who it was for, and its email's row in the outbox.
public struct StoredDigestClaim: Sendable, Hashable {
    public var kind: DigestKind
    public var period: Range<Int64>
    public var login: String
    public var address: String
    public var deliveryID: String
    public var createdAt: Int64
}

/// A digest made: its claim, and where its email stands in the outbox.
public struct SentDigest: Sendable, Hashable {
    public var claim: StoredDigestClaim
    /// nil once the email is gone from the outbox (30 days after it was sent or failed for good).
    public var state: AlertDeliveryState?
    public var sentAt: Int64?
    public var attempts: Int64
    public var lastError: String?
}

/// The digests' statements (schema step 9; docs/server.md, "Safeguarding digests").
extension SQLStorage {
    /// The newest `limit` digests made (by when they were made), each with its email's state.
    public func sentDigests(limit: Int) async throws -> [SentDigest] {
        try await engine.run(
            """
            SELECT c.kind AS kind, c.period_start AS period_start, c.period_end AS period_end, c.login AS login, c.address AS address,
                c.delivery_id AS delivery_id, c.created_at AS created_at, d.state AS state, d.sent_at AS sent_at, d.attempts AS attempts,
                d.last_error AS last_error
            FROM digest_claims c LEFT JOIN alert_deliveries d ON d.id = c.delivery_id
            ORDER BY c.created_at DESC, c.login, c.kind, c.period_start DESC LIMIT $1
            """,
            SQLValue(Int64(max(1, min(limit, 1000))))
        ).map { row in
            guard let kind = DigestKind(rawValue: try row.text("kind")) else { throw StorageError.unexpectedRow(column: "kind") }
            let start = try row.integer("period_start")
            let end = try row.integer("period_end")
            guard end >= start else { throw StorageError.unexpectedRow(column: "period_end") }
            let claim = StoredDigestClaim(
                kind: kind, period: start..<end, login: try row.text("login"), address: try row.text("address"),
                deliveryID: try row.text("delivery_id"), createdAt: try row.integer("created_at"))
            return SentDigest(
                claim: claim, state: row.optionalText("state").flatMap(AlertDeliveryState.init(rawValue:)), sentAt: row.optionalInteger("sent_at"),
                attempts: row.optionalInteger("attempts") ?? 0, lastError: row.optionalText("last_error"))
        }
    }

    /// Claims the digest and adds its email to the outbox, in one
    /// transaction: the claim by (kind, period start, login) with INSERT ...
    /// ON CONFLICT DO NOTHING, and the email only when this call made the
    /// claim. True when it did; false when the digest was claimed already
    /// (by this server before a restart, or by another instance).
    public func claimDigest(_ claim: NewDigestClaim, now: Int64) async throws -> Bool {
        try await engine.transaction { session in
            let claimed = try await session.run(
                """
                INSERT INTO digest_claims (kind, period_start, login, period_end, address, delivery_id, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING login
                """,
                SQLValue(claim.kind.rawValue), SQLValue(claim.period.lowerBound), SQLValue(claim.login), SQLValue(claim.period.upperBound),
                SQLValue(claim.address), SQLValue(claim.deliveryID), SQLValue(now))
            guard !claimed.isEmpty else { return false }
            try await session.run(
                """
                INSERT INTO alert_deliveries (id, alert_id, channel, target, state, attempts, next_attempt_at, created_at, message, kind)
                VALUES ($1, $2, 'email', $3, 'waiting', 0, $4, $4, $5, 'digest')
                """,
                SQLValue(claim.deliveryID), SQLValue(claim.outboxKey), SQLValue(claim.address), SQLValue(now), SQLValue(claim.message))
            return true
        }
    }

    /// The claims of one digest period, by login.
    public func digestClaims(kind: DigestKind, periodStart: Int64) async throws -> [StoredDigestClaim] {
        try await engine.run(
            "SELECT * FROM digest_claims WHERE kind = $1 AND period_start = $2 ORDER BY login", SQLValue(kind.rawValue), SQLValue(periodStart)
        ).map { row in
            guard let kind = DigestKind(rawValue: try row.text("kind")) else { throw StorageError.unexpectedRow(column: "kind") }
            let start = try row.integer("period_start")
            let end = try row.integer("period_end")
            guard end >= start else { throw StorageError.unexpectedRow(column: "period_end") }
            return StoredDigestClaim(
                kind: kind, period: start..<end, login: try row.text("login"), address: try row.text("address"),
                deliveryID: try row.text("delivery_id"), createdAt: try row.integer("created_at"))
        }
    }

    /// When the digests of `kind` began (Unix seconds): `now` the first
    /// time this is asked (kept in `server_state`; of two instances asking
    /// at once the first's insert wins and both read it). A digest due
    /// before then is not sent: a server installed on a Wednesday does not
    /// send last week's digest, and a daily digest turned on today starts
    /// with tomorrow's.
    public func digestsStart(kind: DigestKind, now: Int64) async throws -> Int64 {
        let name = "digests.\(kind.rawValue).since"
        try await engine.run(
            "INSERT INTO server_state (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", SQLValue(name), SQLValue(String(now)))
        guard let text = try await engine.run("SELECT value FROM server_state WHERE name = $1", SQLValue(name)).first?.text("value"),
            let since = Int64(text)
        else { throw StorageError.unexpectedRow(column: "value") }
        return since
    }

    /// The blocked attempts at ways round the filter (records blocked with
    /// reason `bypass`) from `since` to `until` (Unix ms) in `scope`, per
    /// person (the user, or `machine:ID` for a record that names no one) and
    /// group, most first, at most `limit`. On the records' time index.
    func bypassAttemptsStatement(since: Int64, until: Int64, scope: Scope, limit: Int) -> (sql: String, binds: [SQLValue]) {
        var binds: [SQLValue] = []
        func bind(_ value: SQLValue) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        var conditions = [
            "time >= \(bind(.integer(since)))", "time < \(bind(.integer(until)))", "action = \(bind(.text("block")))",
            "reason = \(bind(.text("bypass")))",
        ]
        if let scoped = Self.scopeCondition(scope, bind: bind) { conditions.append(scoped) }
        let person = "COALESCE(user_name, 'machine:' || machine)"
        let sql =
            "SELECT \(person) AS person, group_name, COUNT(*) AS count FROM records WHERE " + conditions.joined(separator: " AND ")
            + " GROUP BY \(person), group_name ORDER BY count DESC, person LIMIT \(bind(.integer(Int64(max(1, min(limit, 1000))))))"
        return (sql, binds)
    }

    public func bypassAttempts(since: Int64, until: Int64, scope: Scope, limit: Int) async throws -> [BypassAttempts] {
        let statement = bypassAttemptsStatement(since: since, until: until, scope: scope, limit: limit)
        return try await engine.query(statement.sql, statement.binds).map { row in
            BypassAttempts(user: try row.text("person"), group: row.optionalText("group_name"), count: try row.integer("count"))
        }
    }

    /// Removes the digests' emails made before `before` (Unix seconds) that
    /// are sent or failed: each is a few tens of kilobytes with its PDF, and a
    /// school's year of them would otherwise stay in the database. The claims
    /// stay, and they are what keeps a digest from being made twice. Returns how many.
    public func removeDigestEmails(before: Int64) async throws -> Int64 {
        try await engine.transaction { session in
            let condition = "kind = 'digest' AND state <> 'waiting' AND created_at < $1"
            let count =
                try await session.run("SELECT COUNT(*) AS count FROM alert_deliveries WHERE \(condition)", SQLValue(before)).first?
                .integer("count") ?? 0
            try await session.run("DELETE FROM alert_deliveries WHERE \(condition)", SQLValue(before))
            return count
        }
    }

    /// How many digest emails the outbox holds in each state.
    public func digestDeliveryCounts() async throws -> [AlertDeliveryState: Int64] {
        var counts: [AlertDeliveryState: Int64] = [:]
        for row in try await engine.run("SELECT state, COUNT(*) AS count FROM alert_deliveries WHERE kind = 'digest' GROUP BY state") {
            if let state = AlertDeliveryState(rawValue: try row.text("state")) { counts[state] = try row.integer("count") }
        }
        return counts
    }
}
