#if canImport(Glibc)
import Glibc
#endif

/// Writes a whole file so that readers see the old content or the new,
/// never a part: a temporary file created with its final mode (no moment
/// with wider permissions), written, fsynced, then renamed over the path.
public enum AtomicFile {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String { "cannot write \(path): \(reason)" }
    }

    public static func write(_ bytes: [UInt8], to path: String, mode: UInt32) throws(Failure) {
        let temporary = path + ".new"
        unlink(temporary)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(mode))
        guard descriptor >= 0 else { throw Failure(path: temporary, reason: String(cString: strerror(errno))) }
        var offset = 0
        while offset < bytes.count {
            // Safe: the pointer is used only inside the closure, within the array's bounds.
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { break }
            offset += written
        }
        let synced = fsync(descriptor)
        close(descriptor)
        guard offset == bytes.count, synced == 0, rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw Failure(path: path, reason: offset == bytes.count ? reason : "short write")
        }
    }
}
