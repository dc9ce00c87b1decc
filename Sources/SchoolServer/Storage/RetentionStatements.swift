/// The kinds of what the server holds about people that retention removes
/// in batches, each from its own time column (Unix seconds). Records, by
/// whole days in Unix ms, go their own way (`removeRecords(before:)`).
public enum RetainedKind: String, Sendable, Hashable, CaseIterable {
    /// Room rules and answers to requests (a teacher's reason, a pupil's
    /// name for a rule for one person) that ended before the cutoff: kept
    /// as long as the records.
    case liveItems
    /// Access requests received before the cutoff, with their decisions.
    case accessRequests
    /// Alerts made before the cutoff, with their triage notes and their
    /// email and webhook deliveries.
    case alerts
    /// Digest claims made before the cutoff, with their emails.
    case digests
    /// Audit events written before the cutoff.
    case audit
}

/// Retention's statements (schema step 11 indexes access requests by time).
/// Each removes at most `limit` of the oldest rows, chosen by a sub-select
/// in the order of an index, so that a long backlog goes in bounded
/// transactions; the caller repeats until fewer than `limit` go.
extension SQLStorage {
    public func removeOld(_ kind: RetainedKind, before: Int64, limit: Int) async throws -> Int64 {
        let limit = SQLValue(Int64(max(1, min(limit, 10_000))))
        let before = SQLValue(before)
        switch kind {
        case .liveItems:
            // An item's end is `ends_at` (an item ended early has an earlier `ended_at`).
            return Int64(try await engine.run(
                "DELETE FROM live_items WHERE id IN (SELECT id FROM live_items WHERE ends_at < $1 ORDER BY ends_at, id LIMIT $2) RETURNING id",
                before, limit
            ).count)
        case .accessRequests:
            return Int64(try await engine.run(
                """
                DELETE FROM access_requests WHERE id IN
                    (SELECT id FROM access_requests WHERE received_at < $1 ORDER BY received_at, id LIMIT $2) RETURNING id
                """,
                before, limit
            ).count)
        case .alerts:
            // The deliveries first, of the same alerts: the sub-select reads the
            // same rows twice in one transaction (no alert is made in the past).
            let oldest = "SELECT id FROM alerts WHERE created_at < $1 ORDER BY created_at, id LIMIT $2"
            return try await engine.transaction { session in
                try await session.run("DELETE FROM alert_deliveries WHERE kind = 'alert' AND alert_id IN (\(oldest))", before, limit)
                return Int64(try await session.run("DELETE FROM alerts WHERE id IN (\(oldest)) RETURNING id", before, limit).count)
            }
        case .digests:
            let oldest = "SELECT kind, period_start, login FROM digest_claims WHERE created_at < $1 ORDER BY created_at, kind, period_start, login LIMIT $2"
            return try await engine.transaction { session in
                try await session.run(
                    """
                    DELETE FROM alert_deliveries WHERE kind = 'digest' AND id IN
                        (SELECT delivery_id FROM digest_claims WHERE (kind, period_start, login) IN (\(oldest)))
                    """,
                    before, limit)
                return Int64(
                    try await session.run(
                        "DELETE FROM digest_claims WHERE (kind, period_start, login) IN (\(oldest)) RETURNING login", before, limit
                    ).count)
            }
        case .audit:
            return Int64(try await engine.run(
                "DELETE FROM audit_events WHERE id IN (SELECT id FROM audit_events WHERE time < $1 ORDER BY time, id LIMIT $2) RETURNING id",
                before, limit
            ).count)
        }
    }
}
