// Whole-file writes. No unsafe code: built on `FileSystem` and
// `FileDescriptor.write(contentsOf:)`.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

/// Writes a whole file so that readers see the old content or the new,
/// never a part, and a crash leaves one or the other: a temporary file
/// beside it created with its final mode (no moment with wider
/// permissions), written, flushed, renamed over the path, and then the
/// folder flushed so that the rename itself is on disk.
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

    /// The temporary file a write goes through (`path` + ".new"); a failed
    /// write removes it.
    public static func temporaryPath(for path: String) -> String { path + ".new" }

    /// Replaces the file at `path` with `bytes`, mode exactly `mode`.
    public static func write(_ bytes: [UInt8], to path: String, mode: UInt32) throws(Failure) {
        try write(to: path, mode: mode) { part in part(bytes) }
    }

    /// The same for content made in parts: `fill` hands each part to `part`,
    /// in order, so that a file of many MB need not be one array first.
    public static func write(to path: String, mode: UInt32, _ fill: (_ part: ([UInt8]) -> Void) -> Void) throws(Failure) {
        let temporary = temporaryPath(for: path)
        FileSystem.remove(temporary)
        do throws(FileError) {
            let file = try NewFile(temporary, mode: mode)
            var failure: FileError? = nil
            fill { bytes in
                guard failure == nil else { return }
                do throws(FileError) {
                    try file.write(bytes)
                } catch {
                    failure = error
                }
            }
            if let failure { throw failure }
            try file.finish()
            try FileSystem.rename(temporary, to: path)
        } catch {
            FileSystem.remove(temporary)
            throw Failure(path: error.path == temporary ? temporary : path, reason: error.reason)
        }
        let folder = FilePath(path).removingLastComponent()
        do {
            try FileSystem.sync(folder.isEmpty ? "." : folder.string, directory: true)
        } catch where error.errno == .invalidArgument {
            // A file system that cannot flush a folder (EINVAL): the rename is as durable as it gets there.
        } catch {
            throw Failure(path: path, reason: "written, but the folder was not flushed: \(error.reason)")
        }
    }

    /// Writes a new file that must not exist yet (O_EXCL: a file or link at
    /// `path` is never replaced), created with `mode` and flushed to disk.
    public static func createNew(_ bytes: [UInt8], at path: String, mode: UInt32) throws(Failure) {
        let file: NewFile
        do {
            file = try NewFile(path, mode: mode)
        } catch {
            throw Failure(path: path, reason: error.errno.map(\.description) ?? error.reason, alreadyExists: error.errno == .fileExists)
        }
        do {
            try file.write(bytes)
            try file.finish()
        } catch {
            throw Failure(path: path, reason: error.errno.map(\.description) ?? error.reason, written: true)
        }
    }
}
