// SharedStore's file system calls, in one place (with RuleStore's mapping,
// the only unsafe code of the module): whole-file writes, bounded reads.
#if canImport(Glibc)
import Glibc
#endif

/// The text of a system error number (strerror), for messages.
public func systemErrorText(_ code: Int32) -> String {
    // unsafe: strerror returns a NUL-terminated static string, copied at once.
    unsafe String(cString: strerror(code))
}

/// Writes a whole file so that readers see the old content or the new,
/// never a part: a temporary file created with its final mode (no moment
/// with wider permissions), written, fsynced, then renamed over the path.
public enum AtomicFile {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var reason: String
        /// `createNew` found a file at the path.
        public var alreadyExists = false
        /// The file was created but could not be written in full.
        public var written = false
        public var description: String { "cannot write \(path): \(reason)" }
    }

    public static func write(_ bytes: [UInt8], to path: String, mode: UInt32) throws(Failure) {
        let temporary = path + ".new"
        unsafe unlink(temporary)
        let descriptor = unsafe open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(mode))
        guard descriptor >= 0 else { throw Failure(path: temporary, reason: systemErrorText(errno)) }
        let offset = writeAll(bytes, to: descriptor)
        let synced = fsync(descriptor)
        close(descriptor)
        guard offset == bytes.count, synced == 0, unsafe rename(temporary, path) == 0 else {
            let reason = systemErrorText(errno)
            unsafe unlink(temporary)
            throw Failure(path: path, reason: offset == bytes.count ? reason : "short write")
        }
    }

    /// Writes a new file that must not exist yet (O_EXCL: a file or link at
    /// `path` is never replaced), created with `mode` and flushed to disk.
    public static func createNew(_ bytes: [UInt8], at path: String, mode: UInt32) throws(Failure) {
        let descriptor = unsafe open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode_t(mode))
        guard descriptor >= 0 else {
            throw Failure(path: path, reason: systemErrorText(errno), alreadyExists: errno == EEXIST)
        }
        let offset = writeAll(bytes, to: descriptor)
        let synced = fsync(descriptor)
        let code = errno
        close(descriptor)
        guard offset == bytes.count, synced == 0 else {
            throw Failure(path: path, reason: offset == bytes.count ? systemErrorText(code) : "short write", written: true)
        }
    }

    /// write(2) until every byte is out or a write fails; the count written.
    private static func writeAll(_ bytes: [UInt8], to descriptor: Int32) -> Int {
        var offset = 0
        while offset < bytes.count {
            // unsafe: the pointer is used only inside the closure, within the array's bounds.
            let written = unsafe bytes.withUnsafeBytes { unsafe Glibc.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { break }
            offset += written
        }
        return offset
    }
}

/// Reads regular files with a size limit, to their end, and through a
/// symbolic link only when asked.
///
/// Use it, not Foundation, for /proc files and for files read again and
/// again: on this toolchain (Swift 6.3.1) `Data(contentsOf:)`,
/// `String(contentsOfFile:)` and `FileManager.contents(atPath:)` stop after
/// about 4 KB of a /proc file (its size reads as 0), and leak 4 KiB on every
/// read of an empty file (found by the templates fuzz target under
/// LeakSanitizer).
public enum BoundedFile {
    public enum Failure: Error, Equatable, CustomStringConvertible {
        case missing
        case tooLarge
        /// A folder, device, FIFO, socket, ...
        case notRegular
        /// A symbolic link, where links are not followed.
        case symbolicLink
        case system(Int32)

        public var description: String {
            switch self {
            case .missing: "no such file"
            case .tooLarge: "the file is too large"
            case .notRegular: "not a regular file"
            case .symbolicLink: "a symbolic link, which is not followed here"
            case .system(let code): systemErrorText(code)
            }
        }
    }

    /// The whole file. `followingLinks`: a symbolic link at `path` is read
    /// through (as /etc/resolv.conf often is one); otherwise it is `symbolicLink`.
    public static func read(_ path: String, limit: UInt64, followingLinks: Bool = false) throws(Failure) -> [UInt8] {
        var contents: [UInt8] = []
        _ = try stream(path, limit: limit, followingLinks: followingLinks) { chunk in contents.append(contentsOf: chunk) }
        return contents
    }

    /// Feeds the file to `body` in chunks and returns its size.
    public static func stream(
        _ path: String, limit: UInt64, followingLinks: Bool = false, _ body: (ArraySlice<UInt8>) -> Void
    ) throws(Failure) -> UInt64 {
        // O_NONBLOCK: a FIFO put where a file should be opens at once (and is refused below), not when a writer comes.
        let descriptor = unsafe open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (followingLinks ? 0 : O_NOFOLLOW))
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { throw .missing }
            if code == ELOOP, !followingLinks { throw .symbolicLink }
            throw .system(code)
        }
        defer { close(descriptor) }
        var status = stat()
        // unsafe: fstat fills the local `status`.
        guard unsafe fstat(descriptor, &status) == 0 else { throw .system(errno) }
        guard (status.st_mode & S_IFMT) == S_IFREG else { throw .notRegular }
        var total: UInt64 = 0
        // One byte more than the limit is enough to see that a file is too large.
        var buffer = [UInt8](repeating: 0, count: limit < 1 << 20 ? Int(limit) + 1 : 1 << 20)
        while true {
            // unsafe: read(2) writes at most buffer.count bytes into the array's own storage.
            let count = unsafe buffer.withUnsafeMutableBytes { unsafe Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .system(errno)
            }
            if count == 0 { break }
            total += UInt64(count)
            guard total <= limit else { throw .tooLarge }
            body(buffer[0..<count])
        }
        return total
    }
}
