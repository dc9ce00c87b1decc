public import Foundation
import HallpassSystem
import NIOPosix
import Synchronization
import SystemPackage

/// The durable queue of audit records for the school's server, in
/// `<rules.directory>/outbox` (mode 0700; the records name people):
///
/// - **Segments** `<first sequence, 20 digits>.jsonl`: each line one record as
///   the server takes it (`AuditFormat.serverRecord`), in sequence order. A
///   record gets its sequence number as it is appended, one more than the
///   last, and no number is ever given twice: the next number is kept in
///   `state` whenever a segment goes, and is otherwise read back from the
///   newest segment. A segment takes appends until it holds `segmentBytes`.
/// - **`state`** (JSON, replaced whole): the machine the numbers belong to,
///   `storedThrough` (the server's last answer: the cursor), the next
///   number, and the drops not yet reported and in all.
///
/// The cursor moves only to what the server said it stored, so a post that
/// fails, or a restart between a post and its answer, sends the same
/// records again (the server keeps each sequence once). A segment whose
/// records are all stored is removed. Bounds: past `maxBytes` the oldest
/// segment goes, and a segment last written more than `maxAge` ago goes;
/// the records of it not yet stored are counted as dropped, reported in the
/// next post's `dropped` and in the check-in. A torn last line (a crash
/// mid-write) is cut off when the outbox opens.
///
/// Thread-safe (one `Mutex`); the calls block on the disk, so the async
/// ones run on NIO's thread pool. Not a journal with fsync: what the kernel
/// had not written when the power went is lost, as for the audit file.
public final class RecordOutbox: Sendable {
    /// The contract's bounds of one post of records.
    public static let maxRecords = 1000
    public static let maxBodyBytes = 1 << 20

    public struct Settings: Sendable, Hashable {
        public var maxBytes: Int
        /// Seconds.
        public var maxAge: TimeInterval
        public var segmentBytes: Int

        public init(maxBytes: Int = 256 << 20, maxAge: TimeInterval = 30 * 86_400, segmentBytes: Int = 1 << 20) {
            self.maxBytes = maxBytes
            self.maxAge = maxAge
            // At least four segments fit in the bound, so the size bound drops a quarter at most.
            self.segmentBytes = max(4096, min(segmentBytes, maxBytes / 4))
        }
    }

    /// Records to post, in order: their JSON objects joined by commas.
    public struct Batch: Sendable, Hashable {
        public var first: UInt64
        public var last: UInt64
        public var count: Int
        public var records: [UInt8]
        /// Drops not yet reported, for the post's `dropped`.
        public var dropped: UInt64

        /// The body of `POST /api/v1/machine/records`.
        public var body: [UInt8] {
            Array(#"{"records":["#.utf8) + records + Array(#"],"dropped":\#(dropped)}"#.utf8)
        }

        /// What the body adds to the records' own bytes (with a 20-digit `dropped`).
        static let overhead = 40
    }

    public struct Status: Sendable, Hashable {
        /// Records queued and not yet stored by the server.
        public var waiting: UInt64
        /// The server's last `storedThrough`.
        public var storedThrough: UInt64
        public var nextSequence: UInt64
        /// Dropped and not yet reported in an accepted post.
        public var droppedUnreported: UInt64
        /// Dropped since the outbox was made (for this machine).
        public var droppedTotal: UInt64
        /// Records the server said it stored, since filter-control started.
        public var stored: UInt64
        public var bytes: Int
        public var lastError: String?
    }

    public let folder: String
    public let machine: String
    public let settings: Settings
    private let state: Mutex<State>
    /// Signalled after each append, for the sender that waits for records.
    let appended = Wakeup()

    private struct Segment {
        var first: UInt64
        var size: Int
        var lastWrite: Date
    }

    private struct State {
        var segments: [Segment] = []
        /// The newest segment, open for appending.
        var writer: FileDescriptor?
        var nextSequence: UInt64 = 1
        var storedThrough: UInt64 = 0
        var droppedUnreported: UInt64 = 0
        var droppedTotal: UInt64 = 0
        var stored: UInt64 = 0
        var lastError: String?
    }

    /// The persisted part of `State`.
    private struct Saved: Codable {
        var machine: String
        var storedThrough: UInt64
        var nextSequence: UInt64
        var droppedUnreported: UInt64
        var droppedTotal: UInt64
    }

    /// Opens (or makes) the outbox of `machine` in `folder`. An outbox of
    /// another machine (the machine enrolled again) is emptied: its numbers
    /// belong to the old identity. `log` hears what was repaired or emptied.
    public init(folder: String, machine: String, settings: Settings, now: Date = Date(), log: (String) -> Void = { _ in }) throws(SchoolError) {
        self.folder = folder
        self.machine = machine
        self.settings = settings
        do {
            try FileSystem.makeDirectories(folder, mode: 0o700)
            try FileSystem.setMode(folder, 0o700)
        } catch {
            throw .io(path: folder, reason: error.reason)
        }
        var state = State()
        let saved = Self.readSaved(folder + "/state")
        var names = Self.segmentNames(in: folder)
        if let saved, saved.machine != machine {
            log("outbox: its records belong to \(saved.machine), not \(machine) (enrolled again); they are removed")
            for name in names { FileSystem.remove(folder + "/" + name.file) }
            names = []
        } else if let saved {
            state.storedThrough = saved.storedThrough
            state.nextSequence = max(1, saved.nextSequence)
            state.droppedUnreported = saved.droppedUnreported
            state.droppedTotal = saved.droppedTotal
        }
        for name in names {
            guard let status = try? FileSystem.status(folder + "/" + name.file) else { continue }
            state.segments.append(
                Segment(first: name.first, size: Int(status.size), lastWrite: Date(timeIntervalSince1970: TimeInterval(status.st_mtim.tv_sec))))
        }
        if let newest = state.segments.last {
            let (last, keep) = Self.repairTail(path: folder + "/" + Self.fileName(newest.first), log: log)
            state.segments[state.segments.count - 1].size = keep
            state.nextSequence = max(state.nextSequence, newest.first, last.map { $0 + 1 } ?? 0)
        }
        self.state = Mutex(state)
        self.state.withLock { state in
            enforceBounds(&state, now: now)
            save(&state)
        }
    }

    deinit {
        state.withLock { $0.writer?.closeQuietly() }
    }

    // MARK: Appending

    /// Gives each line the next sequence number and appends them, then
    /// applies the bounds. A record that cannot be written is dropped, counted.
    public func append(_ lines: [AuditLine], now: Date = Date()) {
        state.withLock { state in
            var bytes: [UInt8] = []
            var sequence = state.nextSequence
            for line in lines {
                let record = AuditFormat.serverRecord(line, sequence: sequence)
                guard record.count + Batch.overhead <= RecordOutbox.maxBodyBytes else {
                    // It could never be posted (a body is at most 1 MiB): counted, no number used.
                    drop(&state, count: 1, reason: "a record of \(record.count) bytes is too large to post")
                    continue
                }
                bytes += record
                bytes.append(UInt8(ascii: "\n"))
                sequence += 1
            }
            guard !bytes.isEmpty else { return }
            let count = sequence - state.nextSequence
            do throws(SchoolError) {
                let writer = try openWriter(&state, now: now)
                let before = state.segments[state.segments.count - 1].size
                do {
                    try writer.write(contentsOf: bytes)
                } catch {
                    // A part may have reached the file: cut it back to whole lines.
                    _ = try? writer.resize(to: Int64(before))
                    throw SchoolError.io(path: folder, reason: "cannot append to the outbox: \(error)")
                }
                state.segments[state.segments.count - 1].size += bytes.count
                state.segments[state.segments.count - 1].lastWrite = now
                state.nextSequence = sequence
                state.lastError = nil
            } catch {
                drop(&state, count: count, reason: error.description)
                return
            }
            enforceBounds(&state, now: now)
        }
    }

    /// `append` on NIO's thread pool (the caller's task does not block on the disk); wakes the sender.
    public func append(_ lines: [AuditLine]) async {
        _ = try? await NIOThreadPool.singleton.runIfActive { self.append(lines, now: Date()) }
        appended.signal()
    }

    // MARK: Sending

    /// The oldest records the server has not stored, at most `maxRecords`
    /// and a body of at most `maxBytes`; nil when none wait.
    public func batch(maxRecords: Int = RecordOutbox.maxRecords, maxBytes: Int = RecordOutbox.maxBodyBytes) -> Batch? {
        state.withLock { state -> Batch? in
            let from = readFrom(state)
            guard from < state.nextSequence, let start = state.segments.lastIndex(where: { $0.first <= from }) ?? state.segments.indices.first
            else { return nil }
            var batch = Batch(first: 0, last: 0, count: 0, records: [], dropped: state.droppedUnreported)
            var budget = maxBytes - Batch.overhead
            segments: for segment in state.segments[start...] {
                guard let content = try? BoundedFile.read(folder + "/" + Self.fileName(segment.first), limit: UInt64(max(segment.size, 1) + (1 << 20)))
                else { continue }
                var lineStart = 0
                for index in content.indices where content[index] == UInt8(ascii: "\n") {
                    let line = content[lineStart..<index]
                    lineStart = index + 1
                    guard let sequence = Self.sequence(of: line), sequence >= from, sequence > batch.last else { continue }
                    let cost = line.count + (batch.count > 0 ? 1 : 0)
                    guard batch.count < maxRecords, cost <= budget else { break segments }
                    if batch.count > 0 { batch.records.append(UInt8(ascii: ",")) } else { batch.first = sequence }
                    batch.records += line
                    batch.last = sequence
                    batch.count += 1
                    budget -= cost
                }
            }
            return batch.count > 0 ? batch : nil
        }
    }

    /// The server answered a post of `batch` with `storedThrough`: the
    /// cursor moves to it (never past the batch, never back), the drops the
    /// post reported are reported, and segments wholly stored are removed.
    /// Returns the records this answer stored.
    @discardableResult
    public func acknowledge(_ batch: Batch, storedThrough: UInt64, now: Date = Date()) -> UInt64 {
        state.withLock { state in
            let reached = min(storedThrough, batch.last)
            var stored: UInt64 = 0
            if reached > state.storedThrough {
                // Records of the batch now stored; none when the answer stops short of the batch.
                stored = reached >= batch.first ? reached - max(state.storedThrough, batch.first - 1) : 0
                state.storedThrough = reached
                state.stored += stored
            }
            state.droppedUnreported -= min(batch.dropped, state.droppedUnreported)
            enforceBounds(&state, now: now)
            save(&state)
            return stored
        }
    }

    /// The bounds, applied when nothing is appended too (the age bound holds on a quiet machine).
    public func maintain(now: Date = Date()) {
        state.withLock { state in
            enforceBounds(&state, now: now)
        }
    }

    public var status: Status {
        state.withLock { state in
            Status(
                waiting: state.nextSequence - readFrom(state), storedThrough: state.storedThrough, nextSequence: state.nextSequence,
                droppedUnreported: state.droppedUnreported, droppedTotal: state.droppedTotal, stored: state.stored,
                bytes: state.segments.reduce(0) { $0 + $1.size }, lastError: state.lastError)
        }
    }

    // MARK: Inside

    /// The first sequence still to send: after the cursor, and not before the oldest kept.
    private func readFrom(_ state: State) -> UInt64 {
        max(state.storedThrough + 1, state.segments.first?.first ?? state.nextSequence)
    }

    private func openWriter(_ state: inout State, now: Date) throws(SchoolError) -> FileDescriptor {
        if let writer = state.writer, let newest = state.segments.last, newest.size < settings.segmentBytes { return writer }
        state.writer?.closeQuietly()
        state.writer = nil
        let reuse = state.segments.last.map { $0.size < settings.segmentBytes } ?? false
        let first = reuse ? state.segments[state.segments.count - 1].first : state.nextSequence
        let path = folder + "/" + Self.fileName(first)
        let descriptor: FileDescriptor
        do {
            descriptor = try FileSystem.open(
                path, .writeOnly, options: reuse ? [.append, .noFollow] : [.append, .create, .noFollow], permissions: FilePermissions(rawValue: 0o600))
        } catch {
            throw .io(path: path, reason: error.description)
        }
        if !reuse {
            state.segments.append(Segment(first: first, size: 0, lastWrite: now))
            // The next number is kept beside the segments, so none is given twice should every segment go.
            save(&state)
        }
        state.writer = descriptor
        return descriptor
    }

    /// Removes what the bounds and the cursor let go: segments wholly stored
    /// (not the one being written), the oldest past `maxBytes`, those last
    /// written before `maxAge`.
    private func enforceBounds(_ state: inout State, now: Date) {
        var changed = false
        while state.segments.count > 1, state.segments[1].first - 1 <= state.storedThrough {
            removeOldest(&state)
            changed = true
        }
        while !state.segments.isEmpty {
            let total = state.segments.reduce(0) { $0 + $1.size }
            let oldest = state.segments[0]
            let tooOld = now.timeIntervalSince(oldest.lastWrite) > settings.maxAge
            guard tooOld || (total > settings.maxBytes && state.segments.count > 1) else { break }
            let end = state.segments.count > 1 ? state.segments[1].first : state.nextSequence
            let unsent = end > max(oldest.first, state.storedThrough + 1) ? end - max(oldest.first, state.storedThrough + 1) : 0
            removeOldest(&state)
            if unsent > 0 {
                drop(
                    &state, count: unsent,
                    reason: tooOld ? "records older than school.queueMaxAge were dropped unsent" : "the outbox passed school.queueMaxSize; its oldest records were dropped")
            }
            changed = true
        }
        if changed { save(&state) }
    }

    private func removeOldest(_ state: inout State) {
        let oldest = state.segments.removeFirst()
        if state.segments.isEmpty {
            state.writer?.closeQuietly()
            state.writer = nil
        }
        FileSystem.remove(folder + "/" + Self.fileName(oldest.first))
    }

    private func drop(_ state: inout State, count: UInt64, reason: String) {
        state.droppedUnreported += count
        state.droppedTotal += count
        state.lastError = reason
        save(&state)
    }

    private func save(_ state: inout State) {
        let saved = Saved(
            machine: machine, storedThrough: state.storedThrough, nextSequence: state.nextSequence, droppedUnreported: state.droppedUnreported,
            droppedTotal: state.droppedTotal)
        guard let bytes = try? JSONEncoder().encode(saved) else { return }
        do {
            try AtomicFile.write(Array(bytes) + [UInt8(ascii: "\n")], to: folder + "/state", mode: 0o600)
        } catch {
            state.lastError = error.description
        }
    }

    private static func readSaved(_ path: String) -> Saved? {
        guard let bytes = try? BoundedFile.read(path, limit: 4096) else { return nil }
        return try? JSONDecoder().decode(Saved.self, from: Data(bytes))
    }

    static func fileName(_ first: UInt64) -> String {
        let digits = String(first)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".jsonl"
    }

    private static func segmentNames(in folder: String) -> [(first: UInt64, file: String)] {
        FileSystem.names(in: folder).compactMap { name -> (UInt64, String)? in
            guard name.hasSuffix(".jsonl"), name.utf8.count == 26, let first = UInt64(name.prefix(20)) else { return nil }
            return (first, name)
        }.sorted { $0.0 < $1.0 }
    }

    /// Cuts a torn last line off the newest segment; returns the last whole line's sequence and the size kept.
    private static func repairTail(path: String, log: (String) -> Void) -> (last: UInt64?, size: Int) {
        guard let content = try? BoundedFile.read(path, limit: UInt64(1 << 30)) else { return (nil, 0) }
        let keep = (content.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 }) ?? 0
        if keep < content.count {
            log("outbox: \(path) ended in a torn line (a crash while writing); it was cut off")
            if let descriptor = try? FileSystem.open(path, .writeOnly, options: [.noFollow]) {
                _ = try? descriptor.resize(to: Int64(keep))
                descriptor.closeQuietly()
            }
        }
        var last: UInt64?
        if keep > 0 {
            let body = content[..<(keep - 1)]
            let start = (body.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 }) ?? 0
            last = sequence(of: content[start..<(keep - 1)])
        }
        return (last, keep)
    }

    /// The sequence of a record line: it starts `{"sequence":N`.
    static func sequence(of line: ArraySlice<UInt8>) -> UInt64? {
        let prefix = Array(#"{"sequence":"#.utf8)
        guard line.count > prefix.count, line.prefix(prefix.count).elementsEqual(prefix) else { return nil }
        var value: UInt64 = 0
        var digits = 0
        for byte in line.dropFirst(prefix.count) {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { break }
            let (scaled, overflow) = value.multipliedReportingOverflow(by: 10)
            guard !overflow else { return nil }
            value = scaled + UInt64(byte - UInt8(ascii: "0"))
            digits += 1
        }
        return digits > 0 ? value : nil
    }
}
