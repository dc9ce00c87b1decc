public import Logging
public import ServiceLifecycle

/// Removes what is older than its kind's retention (`retention:`, with
/// `records.retentionDays`): at start and then every hour, records a day at
/// a time from the oldest and the other kinds a batch at a time, so that a
/// long backlog is removed in bounded steps.
public struct RetentionService: Service {
    let storage: any ServerStorage
    let ready: StorageReadiness
    let periods: ServerConfiguration.Retention
    let metrics: ServerMetrics
    let logger: Logger
    let clock: @Sendable () -> Int64
    let interval: Duration

    public init(
        storage: any ServerStorage, ready: StorageReadiness, periods: ServerConfiguration.Retention, metrics: ServerMetrics, logger: Logger,
        clock: @escaping @Sendable () -> Int64, interval: Duration = .seconds(3600)
    ) {
        self.storage = storage
        self.ready = ready
        self.periods = periods
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
                    let removed = try await Retention.apply(
                        storage: storage, periods: periods, now: clock(), stop: { Task.isCancelled || Task.isShuttingDownGracefully })
                    metrics.countRemoved(removed)
                    if removed.total > 0 {
                        var metadata: Logger.Metadata = ["hallpass.records.removed": "\(removed.records)"]
                        for (kind, count) in removed.kinds { metadata["hallpass.\(kind.rawValue).removed"] = "\(count)" }
                        logger.info("removed what is past its retention", metadata: metadata)
                    }
                } catch {
                    logger.error("could not remove what is past its retention: \(error)")
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}
