import VerdictCore

/// Retention's arithmetic and its one pass, apart from the service's timer.
public enum Retention {
    /// Records from before this moment (Unix ms) are removed: the start of
    /// the UTC day `days` days before today. With 30 days, today and the 30
    /// whole days before it are kept.
    public static func cutoff(now: Int64, days: Int) -> Int64 {
        RecordTime.startOfDay(now * 1000) - Int64(days) * RecordTime.millisecondsPerDay
    }

    /// Removes every record older than the cutoff, one day at a time from
    /// the oldest, and the access requests received before it (reasons and
    /// names are personal too); returns how many records.
    public static func apply(storage: any ServerStorage, retentionDays: Int, now: Int64) async throws -> Int64 {
        let cutoff = cutoff(now: now, days: retentionDays)
        var removed: Int64 = 0
        while let oldest = try await storage.oldestRecordTime(), oldest < cutoff {
            let endOfDay = RecordTime.startOfDay(oldest) + RecordTime.millisecondsPerDay
            removed += try await storage.removeRecords(before: min(endOfDay, cutoff))
        }
        _ = try await storage.removeAccessRequests(before: cutoff / 1000)
        // Attempts of people who stopped short of a rule's count: no `attempts.within` is longer than a day.
        _ = try await storage.pruneAlertAttempts(before: now * 1000 - SafeguardingPolicy.durationRange.upperBound * 1000)
        return removed
    }
}
