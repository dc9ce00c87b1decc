public import Foundation
import HallpassSystem
import SystemPackage

/// The JSON-lines audit file: appended to (mode 0640, its folder made 0750),
/// rotated when it would grow past `maxBytes` or once its first record is
/// older than `rotationAge` (the retention over `keepFiles`, at least a
/// day), and reopened on `reopen()` (after logrotate
/// moved it away and sent SIGUSR1). Rotated files are `PATH.1` (newest) to
/// `PATH.<keepFiles>`, logrotate's names, so `filterctl log` reads either's.
///
/// Not thread-safe, and not `Sendable`: one caller at a time (`AuditLog`
/// keeps it in a `Mutex` and calls it from one thread). The calls block on
/// the disk.
public final class AuditFile {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String { "audit file \(path): \(reason)" }
    }

    public let path: String
    public let maxBytes: Int
    public let keepFiles: Int
    /// Seconds a record is kept.
    public let retention: TimeInterval
    private var descriptor: FileDescriptor?
    private var size = 0
    private var firstRecordTime: Date?

    public init(path: String, maxBytes: Int, keepFiles: Int, retention: TimeInterval) {
        self.path = path
        self.maxBytes = maxBytes
        self.keepFiles = keepFiles
        self.retention = retention
    }

    deinit {
        descriptor?.closeQuietly()
    }

    /// Appends whole lines (each ends with a newline) in one write, rotating first when needed.
    public func append(_ lines: [UInt8], firstTime: Date, now: Date = Date()) throws(Failure) {
        try openIfNeeded(now: now)
        if size > 0, size + lines.count > maxBytes || (firstRecordTime.map { now.timeIntervalSince($0) > rotationAge } ?? false) {
            try rotate(now: now)
            try openIfNeeded(now: now)
        }
        do {
            try descriptor?.write(contentsOf: lines)
        } catch {
            reopen()
            throw Failure(path: path, reason: error.description)
        }
        if size == 0 { firstRecordTime = firstTime }
        size += lines.count
    }

    /// What the passing of time asks for when no record comes: the file in
    /// use rotated once its first record is older than `rotationAge`, and
    /// rotated files past the retention removed. `AuditLog` calls it hourly.
    public func maintain(now: Date = Date()) throws(Failure) {
        try openIfNeeded(now: now)
        if size > 0, let first = firstRecordTime, now.timeIntervalSince(first) > rotationAge {
            try rotate(now: now)
        } else {
            prune(now: now)
        }
    }

    /// Closes the file; the next record opens `path` again (a new file when logrotate moved the old one).
    public func reopen() {
        descriptor?.closeQuietly()
        descriptor = nil
        size = 0
        firstRecordTime = nil
    }

    /// Moves the file in use to `PATH.1` (and each older one a number up) and removes what retention and `keepFiles` drop.
    public func rotate(now: Date = Date()) throws(Failure) {
        reopen()
        FileSystem.remove(rotatedPath(keepFiles))
        if keepFiles > 1 {
            for number in stride(from: keepFiles - 1, through: 1, by: -1) {
                try? FileSystem.rename(rotatedPath(number), to: rotatedPath(number + 1))
            }
        }
        do {
            try FileSystem.rename(path, to: rotatedPath(1))
        } catch where error.errno == .noSuchFileOrDirectory {
            // Nothing to rotate yet.
        } catch {
            throw Failure(path: path, reason: "cannot rotate: \(error.errno?.description ?? error.reason)")
        }
        prune(now: now)
    }

    /// Removes rotated files last written before the retention began, and any numbered past `keepFiles`.
    public func prune(now: Date = Date()) {
        let cutoff = now.timeIntervalSince1970 - retention
        for number in 1...(keepFiles + 10) {
            let rotated = rotatedPath(number)
            guard let status = try? FileSystem.status(rotated) else { continue }
            if number > keepFiles || Double(status.st_mtim.tv_sec) < cutoff {
                FileSystem.remove(rotated)
            }
        }
    }

    public func rotatedPath(_ number: Int) -> String { "\(path).\(number)" }

    /// How old the first record of the file in use may get before it is
    /// rotated: a rotated file is removed once its last record is older than
    /// the retention, so a record is kept for at most the retention and this.
    public var rotationAge: TimeInterval { max(86_400, retention / Double(keepFiles)) }

    private func openIfNeeded(now: Date) throws(Failure) {
        guard descriptor == nil else { return }
        let folder = (path as NSString).deletingLastPathComponent
        if !folder.isEmpty, (try? FileSystem.status(folder)) == nil {
            try makeFolder(folder)
        }
        let opened: FileDescriptor
        do {
            opened = try FileSystem.open(path, .writeOnly, options: [.append, .create, .noFollow], permissions: FilePermissions(rawValue: 0o640))
        } catch {
            throw Failure(path: path, reason: error.description)
        }
        let status = try? opened.stat()
        // Created before with other bits, or under a umask that took some away.
        if let status, status.permissions.rawValue & 0o777 != 0o640 { try? opened.setMode(0o640) }
        descriptor = opened
        size = Int(status?.size ?? 0)
        firstRecordTime = size > 0 ? AuditFile.firstRecordTime(path) : nil
        prune(now: now)
    }

    private func makeFolder(_ folder: String) throws(Failure) {
        let parent = (folder as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != folder, (try? FileSystem.status(parent)) == nil { try makeFolder(parent) }
        do {
            try FileSystem.makeDirectory(folder, mode: 0o750)
        } catch where error.errno == .fileExists {
            // Made meanwhile: its mode is set below all the same.
        } catch {
            throw Failure(path: path, reason: "cannot make \(folder): \(error.errno?.description ?? error.reason)")
        }
        try? FileSystem.setMode(folder, 0o750)
    }

    /// The time of the first record in a file (its first line), if it has one.
    static func firstRecordTime(_ path: String) -> Date? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        let head = (try? handle.read(upToCount: 4096)) ?? Data()
        guard let end = head.firstIndex(of: UInt8(ascii: "\n")),
            let record = try? JSONDecoder().decode(AuditLine.self, from: head[head.startIndex..<end])
        else { return nil }
        return record.time
    }
}
