#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SharedStore

/// The file-system calls of the rule installer, in one place: each retries
/// on EINTR and reports failures as ``RuleUpdateError/io(path:reason:)``
/// naming the path. Paths are plain strings; nothing here follows a symbolic
/// link it did not make itself.
///
/// The rest of filter-control (the audit log, the admin socket's folder, the
/// policy state, the readability check) makes its file-system calls through
/// the plain helpers here too, which return false or -1 with errno set, so
/// that no other file of the module needs unsafe code for them.
///
/// unsafe in this file: C calls that take a path (a Swift string passed as a
/// C string for that call only), a local by address (`stat`, the `pollfd`
/// array) or an array's storage inside its `withUnsafe...` closure, within
/// its count; no pointer outlives the call.
enum FileSystem {
    static func failure(_ path: String, _ what: String, _ code: Int32 = errno) -> RuleUpdateError {
        .io(path: path, reason: "\(what): \(systemErrorText(code))")
    }

    /// Runs a call until it does not fail with EINTR.
    @discardableResult
    static func retrying<T: SignedInteger>(_ call: () -> T) -> T {
        while true {
            let result = call()
            if result == -1 && errno == EINTR { continue }
            return result
        }
    }

    /// One read(2) into `buffer`, EINTR retried: the count read (0 at end of
    /// file), or -1 with errno set.
    static func readSome(_ descriptor: Int32, into buffer: inout [UInt8]) -> Int {
        // unsafe: read(2) writes at most buffer.count bytes into the array's own storage.
        unsafe buffer.withUnsafeMutableBytes { raw in retrying { unsafe Glibc.read(descriptor, raw.baseAddress, raw.count) } }
    }

    /// One write(2) of `bytes[offset...]`, EINTR retried: the count written, or -1 with errno set.
    static func writeSome(_ descriptor: Int32, _ bytes: [UInt8], from offset: Int) -> Int {
        precondition(offset >= 0 && offset <= bytes.count)
        // unsafe: write(2) reads the array's bytes from `offset` to its end, checked just above.
        return unsafe bytes.withUnsafeBytes { raw in retrying { unsafe Glibc.write(descriptor, raw.baseAddress! + offset, raw.count - offset) } }
    }

    /// poll(2): the number of descriptors ready, 0 on timeout, -1 with errno set.
    static func poll(_ descriptors: inout [pollfd], timeoutMilliseconds: Int32) -> Int32 {
        // unsafe: poll reads and writes exactly descriptors.count entries of the array.
        unsafe Glibc.poll(&descriptors, nfds_t(descriptors.count), timeoutMilliseconds)
    }

    /// Opens an existing file for reading, never through a symbolic link: the descriptor, or -1 with errno set.
    static func openForReading(_ path: String) -> Int32 {
        retrying { unsafe open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
    }

    /// The size of the open file when it is a regular file, else nil.
    static func regularFileSize(_ descriptor: Int32) -> UInt64? {
        var status = stat()
        // unsafe: fstat fills the local `status`.
        guard unsafe fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else { return nil }
        return UInt64(status.st_size)
    }

    /// Removes a file or link (not a folder); nothing when there is none.
    static func remove(_ path: String) {
        unsafe unlink(path)
    }

    /// What stat(2) says about a file, in the fields filter-control reads.
    struct Status {
        /// The file type bits (`S_IFREG`, `S_IFDIR`, `S_IFSOCK`, ...).
        var type: mode_t
        /// The permission bits (set-id and sticky bits included).
        var permissions: mode_t
        var owner: UInt32
        var group: UInt32
        var size: Int
        /// The last modification, in whole seconds since 1970.
        var modificationTime: Int
        /// The device and inode: which file this is, whatever its name now.
        var device: UInt64
        var inode: UInt64

        init(_ status: stat) {
            type = status.st_mode & S_IFMT
            permissions = status.st_mode & 0o7777
            owner = status.st_uid
            group = status.st_gid
            size = Int(status.st_size)
            modificationTime = Int(status.st_mtim.tv_sec)
            device = UInt64(status.st_dev)
            inode = UInt64(status.st_ino)
        }

        var isSocket: Bool { type == S_IFSOCK }
    }

    /// stat(2) of `path` (symbolic links followed); nil with errno set when it fails.
    static func status(_ path: String) -> Status? {
        var status = stat()
        // unsafe: stat fills the local `status`; the path is passed for the call only.
        guard unsafe stat(path, &status) == 0 else { return nil }
        return Status(status)
    }

    /// fstat(2) of an open file; nil with errno set when it fails.
    static func status(of descriptor: Int32) -> Status? {
        var status = stat()
        // unsafe: fstat fills the local `status`.
        guard unsafe fstat(descriptor, &status) == 0 else { return nil }
        return Status(status)
    }

    /// open(2), EINTR retried: the descriptor, or -1 with errno set.
    static func openFile(_ path: String, _ flags: Int32, mode: mode_t = 0) -> Int32 {
        retrying { unsafe Glibc.open(path, flags, mode) }
    }

    /// mkdir(2); false with errno set when it fails.
    static func createDirectory(_ path: String, mode: mode_t) -> Bool {
        unsafe mkdir(path, mode) == 0
    }

    /// A new folder named `prefix` and six random characters (mkdtemp(3),
    /// mode 0700); nil with errno set when it cannot be made.
    static func makeUniqueDirectory(prefix: String) -> String? {
        var template = Array((prefix + "XXXXXX").utf8CString)
        // unsafe: mkdtemp rewrites the six X of the NUL-terminated template in place, inside its
        // own storage, and returns a pointer into it that is copied before the closure ends.
        return unsafe template.withUnsafeMutableBufferPointer { buffer in
            unsafe mkdtemp(buffer.baseAddress!).map { unsafe String(cString: $0) }
        }
    }

    /// rmdir(2) of an empty folder; nothing when it fails.
    static func removeDirectory(_ path: String) {
        unsafe rmdir(path)
    }

    /// chmod(2); false with errno set when it fails.
    static func changeMode(_ path: String, _ mode: mode_t) -> Bool {
        unsafe chmod(path, mode) == 0
    }

    /// chown(2); false with errno set when it fails.
    static func changeOwner(_ path: String, uid: UInt32, gid: UInt32) -> Bool {
        unsafe chown(path, uid, gid) == 0
    }

    /// rename(2), replacing what `to` names; false with errno set when it fails.
    static func renameItem(_ from: String, to: String) -> Bool {
        unsafe Glibc.rename(from, to) == 0
    }

    /// The absolute path with every symbolic link, `.` and `..` resolved (realpath(3)); nil when it cannot be.
    static func canonicalPath(_ path: String) -> String? {
        // unsafe: realpath allocates the result, which is copied and then freed here.
        guard let resolved = unsafe realpath(path, nil) else { return nil }
        defer { unsafe free(resolved) }
        return unsafe String(cString: resolved)
    }

    /// Creates `path` and its missing parents with mode 0755 (whatever the
    /// umask: the unprivileged filter-data must get through them); an existing
    /// folder is left as it is.
    static func makeDirectories(_ path: String) throws(RuleUpdateError) {
        var prefix = ""
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if unsafe mkdir(prefix, 0o755) == 0 {
                try setMode(prefix, 0o755)
            } else if errno != EEXIST {
                throw failure(prefix, "cannot create the folder")
            }
        }
        guard isDirectory(path) else { throw .io(path: path, reason: "exists and is not a folder") }
    }

    static func isDirectory(_ path: String) -> Bool {
        var status = stat()
        return unsafe lstat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFDIR
    }

    static func exists(_ path: String) -> Bool {
        var status = stat()
        return unsafe lstat(path, &status) == 0
    }

    /// Creates a new folder (mode 0700 until ``setMode(_:_:)``); fails if it exists.
    static func makeDirectory(_ path: String, mode: mode_t = 0o700) throws(RuleUpdateError) {
        guard unsafe mkdir(path, mode) == 0 else { throw failure(path, "cannot create the folder") }
    }

    static func setMode(_ path: String, _ mode: mode_t) throws(RuleUpdateError) {
        guard changeMode(path, mode) else { throw failure(path, "cannot set permissions") }
    }

    /// Flushes a file or folder to disk (for a folder: the names in it).
    static func sync(_ path: String, directory: Bool) throws(RuleUpdateError) {
        let descriptor = retrying { unsafe open(path, (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW) }
        guard descriptor >= 0 else { throw failure(path, "cannot open to flush") }
        defer { close(descriptor) }
        guard retrying({ fsync(descriptor) }) == 0 else { throw failure(path, "cannot flush to disk") }
    }

    static func rename(_ from: String, _ to: String) throws(RuleUpdateError) {
        guard renameItem(from, to: to) else { throw failure(to, "cannot rename \(from) to it") }
    }

    static func symlink(target: String, at path: String) throws(RuleUpdateError) {
        guard unsafe Glibc.symlink(target, path) == 0 else { throw failure(path, "cannot create the link") }
    }

    /// The target of a symbolic link, or nil when `path` is not one.
    static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        // unsafe: readlink writes at most buffer.count - 1 bytes into the local array.
        let count = unsafe readlink(path, &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The names in a folder, without `.` and `..`; empty when it cannot be read.
    static func names(in path: String) -> [String] {
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

    /// Removes a file, a link, or a folder with everything in it (links are removed, not followed).
    static func removeTree(_ path: String) {
        var status = stat()
        guard unsafe lstat(path, &status) == 0 else { return }
        if (status.st_mode & S_IFMT) == S_IFDIR {
            for name in names(in: path) { removeTree(path + "/" + name) }
            unsafe rmdir(path)
        } else {
            unsafe unlink(path)
        }
    }

    /// A new file opened for writing (mode 0644, never an existing file or a link).
    final class NewFile {
        let path: String
        private var descriptor: Int32

        init(_ path: String) throws(RuleUpdateError) {
            self.path = path
            descriptor = FileSystem.retrying { unsafe open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644) }
            guard descriptor >= 0 else { throw FileSystem.failure(path, "cannot create the file") }
            // The umask may have taken bits away; the unprivileged filter-data must read the file.
            guard fchmod(descriptor, 0o644) == 0 else { throw FileSystem.failure(path, "cannot set permissions") }
        }

        deinit { if descriptor >= 0 { close(descriptor) } }

        func write(_ bytes: [UInt8]) throws(RuleUpdateError) {
            var offset = 0
            while offset < bytes.count {
                let written = FileSystem.writeSome(descriptor, bytes, from: offset)
                guard written > 0 else { throw FileSystem.failure(path, "cannot write") }
                offset += written
            }
        }

        /// Empties the file for another attempt.
        func reset() throws(RuleUpdateError) {
            guard ftruncate(descriptor, 0) == 0, lseek(descriptor, 0, SEEK_SET) == 0 else {
                throw FileSystem.failure(path, "cannot empty the file")
            }
        }

        /// Flushes and closes the file.
        func finish() throws(RuleUpdateError) {
            guard descriptor >= 0 else { return }
            let result = FileSystem.retrying { fsync(descriptor) }
            let code = errno
            close(descriptor)
            descriptor = -1
            guard result == 0 else { throw FileSystem.failure(path, "cannot flush to disk", code) }
        }
    }

    /// An exclusive `flock` on a file, held until ``release()`` or deinit.
    final class Lock {
        private var descriptor: Int32

        /// Takes the lock without waiting; nil when another process holds it.
        init?(_ path: String) throws(RuleUpdateError) {
            descriptor = FileSystem.retrying { unsafe open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
            guard descriptor >= 0 else { throw FileSystem.failure(path, "cannot open the lock file") }
            guard FileSystem.retrying({ flock(descriptor, LOCK_EX | LOCK_NB) }) == 0 else {
                let code = errno
                close(descriptor)
                if code == EWOULDBLOCK { return nil }
                throw FileSystem.failure(path, "cannot lock", code)
            }
        }

        deinit { release() }

        func release() {
            if descriptor >= 0 {
                close(descriptor)
                descriptor = -1
            }
        }
    }

    /// Reads a regular file of at most `limit` bytes without following links;
    /// nil when it does not exist.
    static func read(_ path: String, limit: Int) throws(RuleUpdateError) -> [UInt8]? {
        let descriptor = retrying { unsafe open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            throw failure(path, "cannot open")
        }
        defer { close(descriptor) }
        var contents: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = unsafe buffer.withUnsafeMutableBytes { raw in retrying { unsafe Glibc.read(descriptor, raw.baseAddress, raw.count) } }
            guard count >= 0 else { throw failure(path, "cannot read") }
            if count == 0 { return contents }
            contents.append(contentsOf: buffer[0..<count])
            guard contents.count <= limit else { throw .io(path: path, reason: "larger than \(limit) bytes") }
        }
    }

    /// Writes a small file atomically: a temporary file beside it, flushed,
    /// renamed over `path`, and the folder flushed.
    static func writeAtomically(_ bytes: [UInt8], to path: String, folder: String) throws(RuleUpdateError) {
        let temporary = path + ".new"
        unsafe unlink(temporary)
        let file = try NewFile(temporary)
        do {
            try file.write(bytes)
            try file.finish()
            try rename(temporary, path)
        } catch {
            unsafe unlink(temporary)
            throw error
        }
        try sync(folder, directory: true)
    }
}
