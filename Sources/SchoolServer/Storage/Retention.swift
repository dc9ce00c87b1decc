import VerdictCore

/// Retention's arithmetic and its one pass, apart from the service's timer.
public enum Retention {
    /// Rows a statement removes at most, for the kinds removed in batches.
    public static let batch = 1000

    /// Records from before this moment (Unix ms) are removed: the start of
    /// the UTC day `days` days before today. With 30 days, today and the 30
    /// whole days before it are kept.
    public static func cutoff(now: Int64, days: Int) -> Int64 {
        RecordTime.startOfDay(now * 1000) - Int64(days) * RecordTime.millisecondsPerDay
    }

    /// The days each kind is kept: live items go with the records.
    static func days(_ kind: RetainedKind, _ periods: ServerConfiguration.Retention) -> Int {
        switch kind {
        case .liveItems: periods.records
        case .accessRequests: periods.accessRequests
        case .alerts: periods.alerts
        case .digests: periods.digests
        case .audit: periods.audit
        }
    }

    /// What one pass removed: the records, and each other kind's rows.
    public struct Removed: Sendable, Hashable {
        public var records: Int64 = 0
        public var kinds: [RetainedKind: Int64] = [:]
        public var total: Int64 { records + kinds.values.reduce(0, +) }

        public init() {}
    }

    /// Removes every record older than its cutoff, one day at a time from
    /// the oldest, then each other kind older than its own, a batch at a
    /// time from the oldest; returns how many of each. `stop` is asked
    /// between steps (the server shutting down).
    public static func apply(
        storage: any ServerStorage, periods: ServerConfiguration.Retention, now: Int64, stop: @Sendable () -> Bool = { false }
    ) async throws -> Removed {
        var removed = Removed()
        let cutoff = cutoff(now: now, days: periods.records)
        while !stop(), let oldest = try await storage.oldestRecordTime(), oldest < cutoff {
            let endOfDay = RecordTime.startOfDay(oldest) + RecordTime.millisecondsPerDay
            removed.records += try await storage.removeRecords(before: min(endOfDay, cutoff))
        }
        for kind in RetainedKind.allCases {
            // The same whole UTC days as the records, in the kind's Unix seconds.
            let before = Self.cutoff(now: now, days: days(kind, periods)) / 1000
            var count: Int64 = 0
            while !stop() {
                let step = try await storage.removeOld(kind, before: before, limit: batch)
                count += step
                if step < batch { break }
            }
            if count > 0 { removed.kinds[kind] = count }
        }
        // Attempts of people who stopped short of a rule's count: no `attempts.within` is longer than a day.
        _ = try await storage.pruneAlertAttempts(before: now * 1000 - SafeguardingPolicy.durationRange.upperBound * 1000)
        return removed
    }
}
