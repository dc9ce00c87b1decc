public import Logging
public import ServiceLifecycle

/// Removes records older than `records.retentionDays`, by whole days (UTC):
/// at start and then every hour, a day at a time from the oldest, so that a
/// long backlog is removed in bounded steps.
public struct RetentionService: Service {
    let storage: any ServerStorage
    let ready: StorageReadiness
    let retentionDays: Int
    let metrics: ServerMetrics
    let logger: Logger
    let clock: @Sendable () -> Int64
    let interval: Duration

    public init(
        storage: any ServerStorage, ready: StorageReadiness, retentionDays: Int, metrics: ServerMetrics, logger: Logger,
        clock: @escaping @Sendable () -> Int64, interval: Duration = .seconds(3600)
    ) {
        self.storage = storage
        self.ready = ready
        self.retentionDays = retentionDays
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        self.interval = interval
    }

    public func run() async throws {
        try await ready.wait()
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                do {
                    let removed = try await Retention.apply(storage: storage, retentionDays: retentionDays, now: clock())
                    if removed > 0 {
                        metrics.recordsRemoved.increment(by: removed)
                        logger.info("removed old records", metadata: ["hallpass.records.removed": "\(removed)"])
                    }
                } catch {
                    logger.error("could not remove old records: \(error)")
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}
