public import Foundation
public import Logging
public import NIOCore
public import NIOPosix
import Synchronization

/// What a machine tells the school's server every minute
/// (`POST /api/v1/machine/checkin`).
public struct CheckinReport: Sendable, Hashable, Codable {
    public enum FilterData: String, Sendable, Hashable, Codable {
        case running, restarting, down
    }

    public var version: String = HallpassVersion.current
    public var rulesVersion: UInt64
    /// When the rules in force were installed (RFC 3339, UTC).
    public var rulesSince: String?
    public var filterData: FilterData
    public var filterDataRestarts: Int
    public var failMode: String
    /// Packets the kernel dropped (queue full, socket overrun): the traffic that went unjudged in fail-open mode.
    public var queueDrops: UInt64
    public var recordsWaiting: UInt64
    public var recordsDropped: UInt64
    /// Who is logged in, named as `log.users` names people (none with `users: none`).
    public var users: [String]

    public init(
        rulesVersion: UInt64, rulesSince: Date?, filterData: FilterData, filterDataRestarts: Int, failMode: String, queueDrops: UInt64,
        recordsWaiting: UInt64, recordsDropped: UInt64, users: [String]
    ) {
        self.rulesVersion = rulesVersion
        self.rulesSince = rulesSince.map { AuditTime.format($0) }
        self.filterData = filterData
        self.filterDataRestarts = filterDataRestarts
        self.failMode = failMode
        self.queueDrops = queueDrops
        self.recordsWaiting = recordsWaiting
        self.recordsDropped = recordsDropped
        self.users = users
    }
}

/// Posts the outbox's records to the school's server and checks in every
/// minute, as one service of filter-control (`run` until cancelled).
///
/// **Records**: the oldest waiting records, at most 1,000 and a 1 MiB body,
/// in order; after a 200 the outbox's cursor moves to the answer's
/// `storedThrough` and the next batch follows at once while a full one
/// waits. With nothing waiting, it sleeps until the audit log appends
/// to the outbox, then gives others `gather` to arrive, so a busy
/// machine posts about once a second, not once a record. A failure (no
/// connection, a refusal, an answer without `storedThrough`, an answer that
/// stores nothing) waits `backoff` (1 s doubling to 5 min, ±20 %) and sends
/// the same records again.
///
/// **Check-ins**: `checkin()` every `interval`, whatever the records do; the
/// answer's `publishedVersion` is kept for `status`. When it is above the
/// rules version the check-in reported, `fetchRules` runs at once (the
/// machine takes a publication within a check-in, not at its next
/// `rules.refresh`), in a task of its own: a slow download never holds the
/// check-ins up, and a publication seen again while one is being fetched
/// waits for it (the newest one only).
///
/// It never holds the audit log or the data path up: the audit log only
/// appends to the outbox and signals; everything here happens in this
/// service's own tasks. Every wait is a relative timeout on NIO's event
/// loop (the monotonic clock), not a date: a step of the wall clock neither
/// stalls nor hurries it.
public final class SchoolReporter: Sendable {
    public struct Backoff: Sendable {
        public var initial: Duration
        public var maximum: Duration

        public init(initial: Duration = .seconds(1), maximum: Duration = .seconds(300)) {
            self.initial = initial
            self.maximum = maximum
        }

        /// The wait after `failures` failures in a row (the first is 1), ±20 %.
        func delay(afterFailures failures: Int) -> Duration {
            let base = initial * (1 << min(max(failures - 1, 0), 20))
            let capped = base > maximum ? maximum : base
            return capped * Double.random(in: 0.8...1.2)
        }
    }

    /// What `filterctl status` and the logs show.
    public struct Status: Sendable, Hashable {
        public var server: String
        public var machine: String
        public var lastPostAt: Date?
        public var lastCheckinAt: Date?
        public var publishedVersion: UInt64?
        /// The latest failure to post records, nil once a post succeeds.
        public var recordsError: String?
        /// The latest failure to check in, nil once a check-in succeeds.
        public var checkinError: String?
        public var posts: UInt64 = 0
        public var checkins: UInt64 = 0
    }

    private let transport: any SchoolTransport
    private let outbox: RecordOutbox
    private let checkin: @Sendable () async -> CheckinReport
    private let interval: Duration
    private let gather: Duration
    private let backoff: Backoff
    private let logger: Logger
    private let loop: any EventLoop
    private let shared: Mutex<Status>
    private let fetchRules: (@Sendable (_ published: UInt64) async -> Void)?
    /// Published versions newer than the rules in force, for the task that runs `fetchRules`.
    private let newerRules: (stream: AsyncStream<UInt64>, continuation: AsyncStream<UInt64>.Continuation)

    public init(
        transport: any SchoolTransport, outbox: RecordOutbox, server: String, checkin: @escaping @Sendable () async -> CheckinReport,
        interval: Duration = .seconds(60), gather: Duration = .seconds(1), backoff: Backoff = .init(), logger: Logger,
        loop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any(),
        fetchRules: (@Sendable (_ published: UInt64) async -> Void)? = nil
    ) {
        self.transport = transport
        self.outbox = outbox
        self.checkin = checkin
        self.interval = interval
        self.gather = gather
        self.backoff = backoff
        self.logger = logger
        self.loop = loop
        shared = Mutex(Status(server: server, machine: outbox.machine))
        self.fetchRules = fetchRules
        newerRules = AsyncStream.makeStream(of: UInt64.self, bufferingPolicy: .bufferingNewest(1))
    }

    public var status: Status { shared.withLock { $0 } }

    /// Posts and checks in until the calling task is cancelled.
    public func run() async {
        logger.info(
            "school: reporting to the school's server",
            metadata: ["hallpass.school.server": "\(status.server)", "hallpass.school.machine": "\(outbox.machine)"])
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.sendRecords() }
            group.addTask { await self.checkIn() }
            if let fetchRules = self.fetchRules {
                group.addTask {
                    for await published in self.newerRules.stream {
                        await fetchRules(published)
                    }
                }
            }
        }
    }

    // MARK: Records

    func sendRecords() async {
        var failures = 0
        while !Task.isCancelled {
            let batch = try? await NIOThreadPool.singleton.runIfActive { self.outbox.batch() }
            guard let batch = batch ?? nil else {
                // Nothing waits: until the audit log appends (or a minute, for the outbox's bounds).
                await outbox.appended.wait(timeout: .seconds(60), loop: loop)
                if Task.isCancelled { return }
                await Wakeup.sleep(gather, loop: loop)
                continue
            }
            let outcome = await post(batch)
            switch outcome {
            case .stored(let count):
                if failures > 0 {
                    logger.notice("school: records reach the server again", metadata: ["hallpass.school.stored": "\(count)"])
                }
                failures = 0
                if batch.count < RecordOutbox.maxRecords, (batch.body.count + 4096) < RecordOutbox.maxBodyBytes {
                    // A batch that was not full: let more records gather before the next post.
                    await Wakeup.sleep(gather, loop: loop)
                }
            case .failed(let error):
                failures += 1
                let first = shared.withLock { status in
                    defer { status.recordsError = error }
                    return status.recordsError == nil
                }
                if first {
                    logger.warning(
                        "school: cannot post records; they wait in the outbox and are sent again",
                        metadata: ["hallpass.error": "\(error)", "hallpass.school.waiting": "\(outbox.status.waiting)"])
                }
                await Wakeup.sleep(backoff.delay(afterFailures: failures), loop: loop)
            }
        }
    }

    enum PostOutcome: Sendable, Hashable {
        case stored(UInt64)
        case failed(String)
    }

    /// One post of `batch`; the cursor moves only to the server's `storedThrough`.
    func post(_ batch: RecordOutbox.Batch) async -> PostOutcome {
        let answer: (status: Int, body: [UInt8])
        do {
            answer = try await transport.post("/api/v1/machine/records", body: batch.body)
        } catch {
            return .failed("\(error) [\(error.code)]")
        }
        guard answer.status == 200 else {
            let error = SchoolConnection.refusal(status: answer.status, body: answer.body)
            return .failed("\(error) [\(error.code)]")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(answer.body))) as? [String: Any],
            let number = object["storedThrough"] as? NSNumber, number.int64Value >= 0
        else {
            return .failed("the server's answer to the records has no storedThrough")
        }
        let storedThrough = number.uint64Value
        let stored = (try? await NIOThreadPool.singleton.runIfActive { self.outbox.acknowledge(batch, storedThrough: storedThrough) }) ?? 0
        shared.withLock { status in
            status.lastPostAt = Date()
            status.posts += 1
            if stored > 0 { status.recordsError = nil }
        }
        guard stored > 0 else {
            // The server stored none of the batch: sending it again at once would go round in a circle.
            return .failed(
                "the server answered storedThrough \(storedThrough) to records \(batch.first) to \(batch.last): it stored none of them")
        }
        return .stored(stored)
    }

    // MARK: Check-ins

    func checkIn() async {
        while !Task.isCancelled {
            let report = await checkin()
            let error = await postCheckin(report)
            let changed: Bool = shared.withLock { status in
                defer {
                    status.checkinError = error
                    if error == nil {
                        status.lastCheckinAt = Date()
                        status.checkins += 1
                    }
                }
                return status.checkinError != error && (status.checkinError == nil || error == nil)
            }
            if changed, let error {
                logger.warning("school: cannot check in with the school's server", metadata: ["hallpass.error": "\(error)"])
            } else if changed {
                logger.notice("school: checking in with the school's server again")
            }
            _ = try? await NIOThreadPool.singleton.runIfActive { self.outbox.maintain() }
            await Wakeup.sleep(interval, loop: loop)
        }
    }

    /// One check-in; nil when the server took it.
    func postCheckin(_ report: CheckinReport) async -> String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let body = try? encoder.encode(report) else { return "cannot encode the check-in" }
        let answer: (status: Int, body: [UInt8])
        do {
            answer = try await transport.post("/api/v1/machine/checkin", body: Array(body))
        } catch {
            return "\(error) [\(error.code)]"
        }
        guard answer.status == 200 else {
            let error = SchoolConnection.refusal(status: answer.status, body: answer.body)
            return "\(error) [\(error.code)]"
        }
        let object = (try? JSONSerialization.jsonObject(with: Data(answer.body))) as? [String: Any]
        if let published = (object?["publishedVersion"] as? NSNumber)?.uint64Value {
            shared.withLock { $0.publishedVersion = published }
            if published > report.rulesVersion, fetchRules != nil {
                logger.info(
                    "school: the server publishes rules version \(published), newer than \(report.rulesVersion) in force; fetching it now",
                    metadata: ["hallpass.rules.version": "\(report.rulesVersion)", "hallpass.school.published": "\(published)"])
                newerRules.continuation.yield(published)
            }
        }
        return nil
    }
}
