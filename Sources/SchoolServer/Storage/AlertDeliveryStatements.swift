import Foundation

/// The statements of the alerts' outbox (schema step 8): deliveries added
/// once each, taken with a lease, finished by the lease's holder only.
extension SQLStorage {
    public func addAlertDeliveries(_ deliveries: [NewAlertDelivery], now: Int64) async throws -> Int {
        guard !deliveries.isEmpty else { return 0 }
        return try await engine.transaction { session in
            var added = 0
            for delivery in deliveries {
                // ON CONFLICT DO NOTHING on (alert_id, channel, target): the same alert
                // enqueued again adds nothing; RETURNING lists only what was added.
                let rows = try await session.run(
                    """
                    INSERT INTO alert_deliveries (id, alert_id, channel, target, state, attempts, next_attempt_at, created_at, message)
                    VALUES ($1, $2, $3, $4, 'waiting', 0, $5, $5, $6) ON CONFLICT DO NOTHING RETURNING id
                    """,
                    SQLValue(AlertDeliveryID.make()), SQLValue(delivery.alertID), SQLValue(delivery.channel.rawValue),
                    SQLValue(delivery.target), SQLValue(now), SQLValue(delivery.message))
                added += rows.count
            }
            return added
        }
    }

    public func claimAlertDeliveries(owner: String, now: Int64, leaseUntil: Int64, limit: Int) async throws -> [StoredAlertDelivery] {
        // One statement. The subquery picks the candidates; the outer WHERE
        // checks each row again as it is updated: in PostgreSQL a second
        // worker that picked the same row waits for the first's commit and
        // then reads the row as the first left it (leased until later),
        // which no longer matches, so it skips the row instead of taking it
        // too. SQLite has one writer at a time. Both engines' read committed
        // and serialized writes give the same promise: one holder at a time.
        try await engine.run(
            """
            UPDATE alert_deliveries SET lease_until = $3, lease_owner = $1
            WHERE id IN (
                SELECT id FROM alert_deliveries
                WHERE state = 'waiting' AND next_attempt_at <= $2 AND (lease_until IS NULL OR lease_until < $2)
                ORDER BY next_attempt_at, id LIMIT $4)
            AND state = 'waiting' AND next_attempt_at <= $2 AND (lease_until IS NULL OR lease_until < $2)
            RETURNING *
            """,
            SQLValue(owner), SQLValue(now), SQLValue(leaseUntil), SQLValue(limit)
        ).map(Self.alertDelivery).sorted { ($0.nextAttemptAt, $0.id) < ($1.nextAttemptAt, $1.id) }
    }

    public func finishAlertDelivery(id: String, owner: String, _ outcome: AlertDeliveryOutcome, now: Int64) async throws -> Bool {
        let held = "id = $1 AND lease_owner = $2 AND state = 'waiting'"
        let rows: [SQLRow]
        switch outcome {
        case .sent:
            rows = try await engine.run(
                """
                UPDATE alert_deliveries SET state = 'sent', attempts = attempts + 1, sent_at = $3, last_error = NULL,
                    lease_until = NULL, lease_owner = NULL
                WHERE \(held) RETURNING id
                """,
                SQLValue(id), SQLValue(owner), SQLValue(now))
        case .retry(let error, let next):
            rows = try await engine.run(
                """
                UPDATE alert_deliveries SET attempts = attempts + 1, next_attempt_at = $3, last_error = $4,
                    lease_until = NULL, lease_owner = NULL
                WHERE \(held) RETURNING id
                """,
                SQLValue(id), SQLValue(owner), SQLValue(next), SQLValue(error))
        case .failed(let error):
            rows = try await engine.run(
                """
                UPDATE alert_deliveries SET state = 'failed', attempts = attempts + 1, last_error = $3,
                    lease_until = NULL, lease_owner = NULL
                WHERE \(held) RETURNING id
                """,
                SQLValue(id), SQLValue(owner), SQLValue(error))
        }
        return !rows.isEmpty
    }

    public func alertDeliveries(alertID: String) async throws -> [StoredAlertDelivery] {
        try await engine.run("SELECT * FROM alert_deliveries WHERE alert_id = $1 ORDER BY created_at, id", SQLValue(alertID))
            .map(Self.alertDelivery)
    }

    public func alertDeliveryCounts() async throws -> [AlertDeliveryCount] {
        try await engine.run("SELECT channel, state, COUNT(*) AS count FROM alert_deliveries WHERE kind = 'alert' GROUP BY channel, state").compactMap { row in
            guard let channel = AlertChannel(rawValue: try row.text("channel")), let state = AlertDeliveryState(rawValue: try row.text("state"))
            else { return nil }
            return AlertDeliveryCount(channel: channel, state: state, count: try row.integer("count"))
        }
    }

    static func alertDelivery(_ row: SQLRow) throws -> StoredAlertDelivery {
        guard let channel = AlertChannel(rawValue: try row.text("channel")) else { throw StorageError.unexpectedRow(column: "channel") }
        guard let state = AlertDeliveryState(rawValue: try row.text("state")) else { throw StorageError.unexpectedRow(column: "state") }
        guard let kind = DeliveryKind(rawValue: try row.text("kind")) else { throw StorageError.unexpectedRow(column: "kind") }
        return StoredAlertDelivery(
            id: try row.text("id"), alertID: try row.text("alert_id"), channel: channel, target: try row.text("target"), state: state,
            attempts: Int(try row.integer("attempts")), nextAttemptAt: try row.integer("next_attempt_at"), lastError: row.optionalText("last_error"),
            sentAt: row.optionalInteger("sent_at"), leaseUntil: row.optionalInteger("lease_until"), leaseOwner: row.optionalText("lease_owner"),
            createdAt: try row.integer("created_at"), message: try row.text("message"),
            kind: kind)
    }
}

/// Deliveries' ids: `ad-` and 20 characters of base32 (100 random bits).
enum AlertDeliveryID {
    static func make() -> String { "ad-" + Secrets.randomBase32(count: 20) }
}
