#if canImport(Glibc)
import Glibc
#endif
import Foundation
import HallpassSystem
public import Logging
public import NIOCore
public import NIOPosix
import SharedStore
import Synchronization
import SystemPackage

/// filter-control's audit writer: takes `AuditRecord`s (filter-data's
/// reports) without ever making the caller wait, and writes each as an `AuditLine` to the
/// outputs `log:` turns on (the JSON-lines file, the journal, the school's
/// syslog collector).
///
/// `record` puts the decision in a bounded queue (`queueCapacity`); when it
/// is full the decision is dropped and counted. `run` takes them off in
/// order, names the user (NSS, cached), writes the file on a thread of its
/// own, sends the journal datagram and hands the message to the
/// `SyslogForwarder`, which has its own bounded buffer for a collector that
/// is down. `counters` says what each step did and dropped.
///
/// To run it as a service: `run()` until shutdown, with `finish()` on
/// graceful shutdown (the queue is drained, the collector gets up to two
/// seconds for what it holds, then `run` returns); `reopen()` on SIGUSR1.
public final class AuditLog: Sendable {
    public struct Counters: Sendable, Hashable, Codable {
        /// Decisions taken into the queue.
        public var queued: UInt64 = 0
        /// Decisions dropped because the queue was full (or the log was finished).
        public var droppedQueue: UInt64 = 0
        /// Allowed decisions not recorded (`log.allowed: none`).
        public var skippedAllowed: UInt64 = 0
        /// Records written by every output that is on.
        public var written: UInt64 = 0
        public var fileWritten: UInt64 = 0
        public var fileFailed: UInt64 = 0
        public var fileLastError: String?
        public var journalSent: UInt64 = 0
        public var journalDropped: UInt64 = 0
        public var syslog: SyslogForwarder.Counters?
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// Who a uid is: the user's name and the group's name, when known.
    public typealias PersonLookup = @Sendable (_ uid: UInt32?) async -> (user: String?, group: String?)

    public static let queueCapacity = 4096

    public let settings: AuditSettings
    private let maker: AuditLineMaker
    private let logger: Logger
    private let lookup: PersonLookup
    private let stream: AsyncStream<AuditRecord>
    private let continuation: AsyncStream<AuditRecord>.Continuation
    private let state = Mutex(Counters())
    private let file: FileWriter?
    private let reopenRequested = Mutex(false)
    private let journal: JournalOutput?
    private let forwarder: SyslogForwarder?
    /// The records for the school's server (`school:`), nil without one.
    public let outbox: RecordOutbox?
    private let processID = getpid()

    /// Checks the settings and opens nothing yet but the pseudonym key
    /// (made when missing). `socketMark` goes on the collector's sockets
    /// (filter-control's allow mark). `journalSocket`, `lookup` and
    /// `eventLoopGroup` (where the collector's connection lives) are for tests.
    public init(
        settings: AuditSettings, rulesDirectory: String, logger: Logger, journalSocket: String = JournalOutput.defaultSocket,
        syslogBackoff: SyslogForwarder.Backoff = .init(), lookup: PersonLookup? = nil, queueCapacity: Int = AuditLog.queueCapacity,
        socketMark: UInt32? = nil, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, outbox: RecordOutbox? = nil
    ) throws(Failure) {
        self.settings = settings
        self.outbox = outbox
        self.logger = logger
        var pseudonyms: Pseudonyms?
        if settings.users == .pseudonym {
            let path = settings.pseudonymKeyPath(rulesDirectory: rulesDirectory)
            do {
                pseudonyms = Pseudonyms(key: try Pseudonyms.loadKey(path: path, create: true))
            } catch {
                throw Failure(message: "log.users is pseudonym, but \(error)")
            }
        }
        maker = AuditLineMaker(machine: settings.machine ?? AuditLineMaker.hostName(), users: settings.users, pseudonyms: pseudonyms)
        self.lookup = lookup ?? AuditLog.systemLookup()
        (stream, continuation) = AsyncStream.makeStream(of: AuditRecord.self, bufferingPolicy: .bufferingOldest(max(1, queueCapacity)))
        file = settings.file.map { path in
            FileWriter(
                AuditFile(path: path, maxBytes: settings.maxFileBytes, keepFiles: settings.keepFiles, retention: Double(settings.retentionDays) * 86_400))
        }
        journal = settings.journald ? JournalOutput(socketPath: journalSocket) : nil
        if settings.journald, journal == nil {
            logger.info("audit: no journal socket; records go to the other outputs", metadata: ["hallpass.audit.journal": "\(journalSocket)"])
        }
        forwarder = settings.syslog.map {
            SyslogForwarder(
                target: $0, caFile: settings.caFile, capacity: settings.syslogBuffer, backoff: syslogBackoff, logger: logger,
                socketMark: socketMark, group: eventLoopGroup)
        }
    }

    /// A login name as the records name people (`log.users`): the name, its pseudonym, or nil (`users: none`).
    public func personName(_ user: String) -> String? {
        switch settings.users {
        case .name: user
        case .pseudonym: maker.pseudonyms?.pseudonym(for: user)
        case .none: nil
        }
    }

    /// Takes one decision; never waits. Allowed ones only with `log.allowed: all`,
    /// or when `flagged`: the school's safeguarding rules look at the flow
    /// (`SafeguardingPolicy.recordsAllowedFlow`), so that its server sees it.
    public func record(_ decision: AuditRecord, flagged: Bool = false) {
        if decision.action == .allow, settings.allowed == .none, !flagged {
            state.withLock { $0.skippedAllowed += 1 }
            return
        }
        switch continuation.yield(decision) {
        case .enqueued: state.withLock { $0.queued += 1 }
        case .dropped, .terminated: state.withLock { $0.droppedQueue += 1 }
        @unknown default: state.withLock { $0.droppedQueue += 1 }
        }
    }

    /// Counts allowed decisions not recorded (`log.allowed: none`) that the caller left out itself.
    public func skipAllowed(_ count: Int) {
        state.withLock { $0.skippedAllowed += UInt64(count) }
    }

    /// Closes the file; the next record opens the path again (logrotate's SIGUSR1).
    public func reopen() {
        reopenRequested.withLock { $0 = true }
    }

    /// Stops taking decisions; `run` writes what is queued and returns.
    public func finish() {
        continuation.finish()
    }

    public func counters() async -> Counters {
        var result = state.withLock { $0 }
        result.syslog = await forwarder?.currentCounters()
        return result
    }

    /// Writes records until `finish()` (then drains the queue) or cancellation.
    public func run() async {
        file?.thread.start()
        logger.info(
            "audit: writing records",
            metadata: [
                "hallpass.audit.file": "\(settings.file ?? "none")", "hallpass.audit.journal": "\(journal != nil)",
                "hallpass.audit.syslog": "\(settings.syslog.map(String.init(describing:)) ?? "none")",
                "hallpass.audit.users": "\(settings.users.rawValue)",
            ])
        await withTaskGroup(of: Void.self) { group in
            if let forwarder { group.addTask { await forwarder.run() } }
            if file != nil {
                // Retention holds while nothing is blocked too.
                group.addTask {
                    while !Task.isCancelled {
                        await self.maintainFile(now: Date())
                        try? await Task.sleep(for: .seconds(3600))
                    }
                }
            }
            var cache = PersonCache()
            for await record in stream {
                let person = await cache.person(uid: record.report.uid, now: Date(), lookup: lookup)
                await write(maker.line(record, person: person), firstTime: record.time)
            }
            if let forwarder {
                await forwarder.finish()
                // The collector gets two seconds for what it still holds
                // (the first child to end is the forwarder or this sleep).
                group.addTask {
                    try? await Task.sleep(for: .seconds(2))
                }
                _ = await group.next()
            }
            group.cancelAll()
        }
        try? await file?.thread.shutdownGracefully()
        logger.info("audit: stopped", metadata: ["hallpass.audit.written": "\(state.withLock { $0.written })"])
    }

    func maintainFile(now: Date) async {
        guard let file else { return }
        let outcome = try? await file.thread.runIfActive {
            file.file.withLock { file in Result { () throws(AuditFile.Failure) in try file.maintain(now: now) } }
        }
        if case .failure(let error)? = outcome {
            logger.error("audit: cannot rotate or prune the audit file", metadata: ["hallpass.error": "\(error)"])
        }
    }

    /// Writes `line` to every output that is on; `firstTime` is its record's time, for the file's retention.
    private func write(_ line: AuditLine, firstTime: Date) async {
        if let file {
            let reopen = reopenRequested.withLock { value in
                defer { value = false }
                return value
            }
            let json = AuditFormat.jsonLine(line)
            let outcome: Result<Void, AuditFile.Failure>
            do {
                outcome = try await file.thread.runIfActive {
                    file.file.withLock { file in
                        if reopen { file.reopen() }
                        return Result { () throws(AuditFile.Failure) in try file.append(json, firstTime: firstTime) }
                    }
                }
            } catch {
                outcome = .failure(AuditFile.Failure(path: settings.file ?? "", reason: "the writer is stopped"))
            }
            let firstFailure: Bool = state.withLock { counters in
                switch outcome {
                case .success:
                    counters.fileWritten += 1
                    counters.fileLastError = nil
                    return false
                case .failure(let error):
                    counters.fileFailed += 1
                    defer { counters.fileLastError = error.description }
                    return counters.fileLastError == nil
                }
            }
            if firstFailure, case .failure(let error) = outcome {
                logger.error("audit: cannot write the audit file", metadata: ["hallpass.error": "\(error)"])
            }
        }
        if let journal {
            let (sent, error) = journal.send(AuditFormat.journalDatagram(line))
            let firstFailure: Bool = state.withLock { counters in
                if sent {
                    counters.journalSent += 1
                    return false
                }
                counters.journalDropped += 1
                return counters.journalDropped == 1
            }
            if firstFailure {
                logger.warning(
                    "audit: the journal did not take a record (counted; later ones are not logged)",
                    metadata: ["hallpass.error": "\(Errno(rawValue: error).description)"])
            }
        }
        if let forwarder {
            await forwarder.enqueue(AuditFormat.syslogMessage(line, facility: settings.facility, processID: processID))
        }
        if let outbox {
            // Numbered and kept for the school's server; the sender is another service.
            await outbox.append([line])
        }
        state.withLock { $0.written += 1 }
    }

    /// Names from the system's user and group databases (NSS), asked on NIO's
    /// thread pool: a directory service (LDAP, SSSD) may be slow. The group
    /// is the user's primary group (filter-data reports the socket's uid only).
    public static func systemLookup() -> PersonLookup {
        { uid in
            // getpwuid_r and getgrgid_r block (NSS may ask a directory service): on NIO's thread pool.
            (try? await NIOThreadPool.singleton.runIfActive {
                let user = uid.flatMap(UserDatabase.user(uid:))
                return (user?.name, user.flatMap { UserDatabase.groupName(gid: $0.primaryGroup) })
            }) ?? (nil, nil)
        }
    }
}

/// The audit file and the thread that writes it, shared with the closures
/// that run there.
private final class FileWriter: Sendable {
    /// `AuditFile` is not `Sendable`: the closures on the thread take it from here.
    let file: Mutex<AuditFile>
    /// One thread: `AuditFile`'s append, rotation and pruning block on the
    /// disk (write, rename, unlink) and must stay in order.
    let thread = NIOThreadPool(numberOfThreads: 1)

    init(_ file: consuming sending AuditFile) {
        self.file = Mutex(file)
    }
}

/// Names of uids for ten minutes, at most 4096 of them.
struct PersonCache {
    private var entries: [UInt32: (person: (user: String?, group: String?), at: Date)] = [:]

    mutating func person(uid: UInt32?, now: Date, lookup: AuditLog.PersonLookup) async -> (user: String?, group: String?) {
        guard let uid else { return (nil, nil) }
        if let entry = entries[uid], now.timeIntervalSince(entry.at) < 600 { return entry.person }
        let person = await lookup(uid)
        if entries.count >= 4096 { entries.removeAll() }
        entries[uid] = (person, now)
        return person
    }
}
