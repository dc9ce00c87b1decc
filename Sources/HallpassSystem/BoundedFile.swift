// Bounded reads of whole files. No unsafe code: built on `FileSystem.open`,
// swift-system's `Stat` and `FileDescriptor.readSome`.
public import SystemPackage

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
        case system(Errno)

        public var description: String {
            switch self {
            case .missing: "no such file"
            case .tooLarge: "the file is too large"
            case .notRegular: "not a regular file"
            case .symbolicLink: "a symbolic link, which is not followed here"
            case .system(let code): code.description
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
        let descriptor: FileDescriptor
        do {
            // O_NONBLOCK: a FIFO put where a file should be opens at once (and is refused below), not when a writer comes.
            descriptor = try FileSystem.open(path, .readOnly, options: followingLinks ? [.nonBlocking] : [.nonBlocking, .noFollow])
        } catch {
            if error == .noSuchFileOrDirectory { throw .missing }
            if error == .tooManySymbolicLinkLevels, !followingLinks { throw .symbolicLink }
            throw .system(error)
        }
        defer { descriptor.closeQuietly() }
        let status: Stat
        do {
            status = try descriptor.stat()
        } catch {
            throw .system(error)
        }
        guard status.type == .regular else { throw .notRegular }
        var total: UInt64 = 0
        // As large as the file, one byte more to see its end (or one more than the limit, to see
        // that it is too large), at least a page (a /proc file's size reads as 0), at most 1 MiB.
        // Not the limit's size: the configuration, a few hundred bytes read under a limit of 1 MiB,
        // took a zeroed MiB at every read, and freeing it raised glibc's mmap threshold, so later
        // buffers of up to 1 MiB stayed in filter-control's malloc arenas (BENCHMARKS.md, Memory).
        let size = UInt64(max(0, status.size))
        var buffer = [UInt8](repeating: 0, count: Int(max(4096, min(min(limit, size) + 1, 1 << 20))))
        while true {
            let count: Int
            do {
                count = try descriptor.readSome(into: &buffer)
            } catch {
                throw .system(error)
            }
            if count == 0 { break }
            total += UInt64(count)
            guard total <= limit else { throw .tooLarge }
            body(buffer[0..<count])
        }
        return total
    }
}
