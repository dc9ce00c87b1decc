// Paths and folders: open, create, rename, link, remove, list, flush. Every
// call retries on EINTR (through swift-system or `retryingOnInterrupt`) and
// fails with the path it was about, what it tried and the system's reason.
// Nothing here follows a symbolic link it was not asked to.
//
// unsafe in this file: C calls that take a path (a Swift string passed as a
// C string for that call only); mkdtemp and readlink write into a local
// array within its count; realpath's result and readdir's entry are copied
// before they go. No pointer outlives the call.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
public import SystemPackage

/// A file-system call that failed: the path, what was being done, and the
/// system's reason (nil when the failure is not a system error).
public struct FileError: Error, Sendable, Hashable, CustomStringConvertible {
    public var path: String
    /// What was tried, as a person says it: "cannot create the folder".
    public var what: String
    public var errno: Errno?

    public init(path: String, _ what: String, _ errno: Errno? = nil) {
        self.path = path
        self.what = what
        self.errno = errno
    }

    /// "cannot create the folder: Permission denied".
    public var reason: String { errno.map { "\(what): \($0)" } ?? what }
    public var description: String { "\(path): \(reason)" }
}

public enum FileSystem {
    /// open(2) of `path`, close-on-exec always, EINTR retried.
    public static func open(
        _ path: String, _ mode: FileDescriptor.AccessMode, options: FileDescriptor.OpenOptions = [], permissions: FilePermissions? = nil
    ) throws(Errno) -> FileDescriptor {
        do {
            return try FileDescriptor.open(FilePath(path), mode, options: options.union(.closeOnExec), permissions: permissions)
        } catch {
            throw systemError(error)
        }
    }

    /// stat(2) of `path` (`followingLinks` false: lstat, the link itself).
    public static func status(_ path: String, followingLinks: Bool = true) throws(Errno) -> Stat {
        try FilePath(path).stat(followTargetSymlink: followingLinks)
    }

    /// Whether anything (a link included, not followed) is at `path`.
    public static func exists(_ path: String) -> Bool {
        (try? status(path, followingLinks: false)) != nil
    }

    /// Whether `path` is a folder itself (a link to one is not).
    public static func isDirectory(_ path: String) -> Bool {
        (try? status(path, followingLinks: false))?.type == .directory
    }

    /// mkdir(2) of a new folder with `mode` (less the umask; see ``setMode(_:_:)``).
    public static func makeDirectory(_ path: String, mode: UInt32 = 0o700) throws(FileError) {
        do {
            _ = try retryingOnInterrupt { unsafe mkdir(path, mode_t(mode)) }
        } catch {
            throw FileError(path: path, "cannot create the folder", error)
        }
    }

    /// Creates `path` and its missing parents with `mode` whatever the umask
    /// (the unprivileged filter-data must get through them); an existing
    /// folder is left as it is.
    public static func makeDirectories(_ path: String, mode: UInt32 = 0o755) throws(FileError) {
        var prefix = ""
        for component in path.split(separator: "/") {
            prefix += "/" + component
            let made: Bool
            do {
                _ = try retryingOnInterrupt { unsafe mkdir(prefix, mode_t(mode)) }
                made = true
            } catch where error == .fileExists {
                made = false
            } catch {
                throw FileError(path: prefix, "cannot create the folder", error)
            }
            if made { try setMode(prefix, mode) }
        }
        guard isDirectory(path) else { throw FileError(path: path, "exists and is not a folder") }
    }

    /// A new folder named `prefix` and six random characters (mkdtemp(3), mode 0700): its path.
    public static func makeUniqueDirectory(prefix: String) throws(FileError) -> String {
        var template = Array((prefix + "XXXXXX").utf8CString)
        // unsafe: mkdtemp rewrites the six X of the NUL-terminated template in place, inside its
        // own storage, and returns a pointer into it that is copied before the closure ends.
        let made = unsafe template.withUnsafeMutableBufferPointer { buffer in
            unsafe mkdtemp(buffer.baseAddress!).map { unsafe String(cString: $0) }
        }
        guard let made else { throw FileError(path: prefix + "XXXXXX", "cannot make a private folder", Errno(rawValue: errno)) }
        return made
    }

    /// chmod(2): exactly `mode` (set-id and sticky bits included).
    public static func setMode(_ path: String, _ mode: UInt32) throws(FileError) {
        do {
            _ = try retryingOnInterrupt { unsafe chmod(path, mode_t(mode)) }
        } catch {
            throw FileError(path: path, "cannot set permissions", error)
        }
    }

    /// chown(2) (a link is followed).
    public static func setOwner(_ path: String, uid: UInt32, gid: UInt32) throws(FileError) {
        do {
            _ = try retryingOnInterrupt { unsafe chown(path, uid, gid) }
        } catch {
            throw FileError(path: path, "cannot set the owner", error)
        }
    }

    /// rename(2), replacing what `to` names. The error names `to`.
    public static func rename(_ from: String, to: String) throws(FileError) {
        do {
            _ = try retryingOnInterrupt { unsafe Glibc.rename(from, to) }
        } catch {
            throw FileError(path: to, "cannot rename \(from) to it", error)
        }
    }

    /// Removes a file or link (not a folder); nothing when there is none.
    public static func remove(_ path: String) {
        _ = try? retryingOnInterrupt { unsafe unlink(path) }
    }

    /// rmdir(2) of an empty folder; nothing when it fails.
    public static func removeDirectory(_ path: String) {
        _ = try? retryingOnInterrupt { unsafe rmdir(path) }
    }

    /// Removes a file, a link, or a folder with everything in it (links are removed, not followed).
    public static func removeTree(_ path: String) {
        guard let status = try? status(path, followingLinks: false) else { return }
        if status.type == .directory {
            for name in names(in: path) { removeTree(path + "/" + name) }
            removeDirectory(path)
        } else {
            remove(path)
        }
    }

    /// A symbolic link at `path` that points to `target`.
    public static func symlink(target: String, at path: String) throws(FileError) {
        do {
            _ = try retryingOnInterrupt { unsafe Glibc.symlink(target, path) }
        } catch {
            throw FileError(path: path, "cannot create the link", error)
        }
    }

    /// A second name, `path`, for the file `existing` (link(2): the same inode, so only
    /// for files nobody changes in place; both on one file system). Links are not followed.
    public static func hardLink(_ existing: String, at path: String) throws(FileError) {
        do {
            _ = try retryingOnInterrupt { unsafe Glibc.link(existing, path) }
        } catch {
            throw FileError(path: path, "cannot link \(existing) to it", error)
        }
    }

    /// The target of a symbolic link, or nil when `path` is not one.
    public static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        // unsafe: readlink writes at most buffer.count - 1 bytes into the local array.
        let count = unsafe readlink(path, &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The absolute path with every symbolic link, `.` and `..` resolved (realpath(3)); nil when it cannot be.
    public static func canonicalPath(_ path: String) -> String? {
        // unsafe: realpath allocates the result, which is copied and then freed here.
        guard let resolved = unsafe realpath(path, nil) else { return nil }
        defer { unsafe free(resolved) }
        return unsafe String(cString: resolved)
    }

    /// The names in a folder, without `.` and `..`; empty when it cannot be read.
    public static func names(in path: String) -> [String] {
        guard let directory = unsafe opendir(path) else { return [] }
        defer { unsafe closedir(directory) }
        var names: [String] = []
        while let entry = unsafe readdir(directory) {
            // unsafe: d_name is a NUL-terminated array inside the dirent readdir returned, copied
            // before the next readdir; the directory stream is closed by the defer above.
            let name = unsafe withUnsafeBytes(of: entry.pointee.d_name) { raw in
                unsafe String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Flushes a file or a folder (its names) to disk; a link is not followed.
    public static func sync(_ path: String, directory: Bool) throws(FileError) {
        let descriptor: FileDescriptor
        do {
            descriptor = try open(path, .readOnly, options: directory ? [.directory, .noFollow] : [.noFollow])
        } catch {
            throw FileError(path: path, "cannot open to flush", error)
        }
        defer { descriptor.closeQuietly() }
        do {
            try descriptor.sync()
        } catch {
            throw FileError(path: path, "cannot flush to disk", error)
        }
    }
}

/// A new file opened for writing: never an existing file or a link, with
/// exactly the mode asked for (the umask may not take bits away: the
/// unprivileged filter-data must read what filter-control writes).
public final class NewFile {
    public let path: String
    private var descriptor: FileDescriptor?

    public init(_ path: String, mode: UInt32 = 0o644) throws(FileError) {
        self.path = path
        let descriptor: FileDescriptor
        do {
            descriptor = try FileSystem.open(
                path, .writeOnly, options: [.create, .exclusiveCreate, .noFollow], permissions: FilePermissions(rawValue: mode_t(mode)))
        } catch {
            throw FileError(path: path, "cannot create the file", error)
        }
        self.descriptor = descriptor
        do {
            try descriptor.setMode(mode)
        } catch {
            throw FileError(path: path, "cannot set permissions", error)
        }
    }

    deinit { descriptor?.closeQuietly() }

    public func write(_ bytes: [UInt8]) throws(FileError) {
        guard let descriptor else { throw FileError(path: path, "cannot write", .badFileDescriptor) }
        do {
            try descriptor.write(contentsOf: bytes)
        } catch {
            throw FileError(path: path, "cannot write", error)
        }
    }

    /// Empties the file for another attempt.
    public func reset() throws(FileError) {
        guard let descriptor else { throw FileError(path: path, "cannot empty the file", .badFileDescriptor) }
        do {
            try descriptor.resize(to: 0)
            _ = try descriptor.seek(offset: 0, from: .start)
        } catch {
            throw FileError(path: path, "cannot empty the file", systemError(error))
        }
    }

    /// Flushes and closes the file.
    public func finish() throws(FileError) {
        guard let descriptor else { return }
        self.descriptor = nil
        defer { descriptor.closeQuietly() }
        do {
            try descriptor.sync()
        } catch {
            throw FileError(path: path, "cannot flush to disk", error)
        }
    }
}

/// An exclusive `flock` on a file, held until ``release()`` or deinit.
public final class FileLock {
    private var descriptor: FileDescriptor?

    /// Takes the lock without waiting; nil when another process holds it.
    public init?(_ path: String) throws(FileError) {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileSystem.open(path, .readWrite, options: [.create, .noFollow], permissions: [.ownerReadWrite])
        } catch {
            throw FileError(path: path, "cannot open the lock file", error)
        }
        do {
            _ = try retryingOnInterrupt { flock(descriptor.rawValue, LOCK_EX | LOCK_NB) }
        } catch {
            descriptor.closeQuietly()
            if error == .wouldBlock { return nil }
            throw FileError(path: path, "cannot lock", error)
        }
        self.descriptor = descriptor
    }

    deinit { release() }

    public func release() {
        descriptor?.closeQuietly()
        descriptor = nil
    }
}
