// A bundle file's delta: one zstd frame compressed with the previous version
// of the file as its prefix, what `zstd --patch-from=OLD NEW` writes (and
// `zstd -d --patch-from=OLD` reads). Measured on stores of 1 and 5 million
// names with 1 % of the names changed, level 19 with match tables the size
// of the window gives 1.0 to 1.4 times the changed names compressed, where
// zstd's own level 19 tables give 7 times and levels 3 and 9 sixteen times
// as much, and fixed-size chunks of the store change in two thirds of their
// number (BENCHMARKS.md, "Updates").
//
// The only file that talks to libzstd. Making a delta (filterctl, on the
// school's side) reads both files through read-only mappings. Applying it
// (filter-control) decompresses in one call into a shared, writable mapping
// of the new file, with the old file mapped read-only as the prefix: the
// frame's window is the output itself, so libzstd allocates no window buffer
// and what the machine holds is file pages that the kernel can write back
// and drop, whatever the size of the store.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CZstd

public enum ZstdPatch {
    /// Why a delta could not be made or applied.
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// The compression level of deltas: level 19's optimal parser finds the
    /// long matches a store's sorted tables keep; faster levels miss most.
    public static let defaultLevel: Int32 = 19
    /// Files larger than this are not patched (the bundle's limit).
    public static let maximumFileBytes: UInt64 = 1 << 30

    /// The zstd frame that turns the file at `base` into the file at `target`.
    public static func make(base: String, target: String, level: Int32 = defaultLevel) throws(Failure) -> [UInt8] {
        let old = try ReadMapping(path: base)
        let new = try ReadMapping(path: target)
        // unsafe: libzstd's context, an opaque pointer used only inside this function and freed on the way out.
        guard let context = unsafe ZSTD_createCCtx() else { throw Failure("libzstd: cannot make a compression context") }
        defer { unsafe ZSTD_freeCCtx(context) }
        // As zstd's --patch-from: a window that holds the old file, long-distance matching on.
        let largest = max(old.length, new.length, 1)
        let windowLog = Int32(min(max(10, Int.bitWidth - largest.leadingZeroBitCount), 31))
        try check(unsafe ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, level), "level")
        try check(unsafe ZSTD_CCtx_setParameter(context, ZSTD_c_windowLog, windowLog), "window")
        try check(unsafe ZSTD_CCtx_setParameter(context, ZSTD_c_enableLongDistanceMatching, 1), "long-distance matching")
        // Beyond --patch-from: match tables as large as the window (chain) and half of it
        // (hash), so that the search reaches the earlier file across the whole window and
        // finds the short runs between a store's changes. On 5 million names, 1 % changed:
        // 5.7 MB with level 19's own tables, 1.1 MB with these, for about 0.9 GB of memory
        // while making it (BENCHMARKS.md, "Updates").
        try check(unsafe ZSTD_CCtx_setParameter(context, ZSTD_c_chainLog, min(windowLog, 30)), "chain table")
        try check(unsafe ZSTD_CCtx_setParameter(context, ZSTD_c_hashLog, min(windowLog - 1, 30)), "hash table")
        try check(unsafe ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1), "checksum")
        try check(unsafe ZSTD_CCtx_setPledgedSrcSize(context, UInt64(new.length)), "size")
        // unsafe: the prefix is the old file's mapping, alive until this function returns,
        // which is after the one compression call that reads it.
        try check(unsafe ZSTD_CCtx_refPrefix(context, old.base, old.length), "prefix")
        var output = [UInt8](repeating: 0, count: ZSTD_compressBound(new.length))
        // unsafe: the output is the array's own storage of `capacity` bytes; the source the
        // new file's mapping of `new.length` bytes, alive for the call.
        let written = unsafe output.withUnsafeMutableBytes { buffer in
            unsafe ZSTD_compress2(context, buffer.baseAddress, buffer.count, new.base, new.length)
        }
        try check(written, "compression")
        output.removeSubrange(written...)
        return output
    }

    /// Writes the file that the delta at `patch` makes of the file at `base`
    /// into `output` (a new file, mode 0644, flushed to disk), which must come
    /// out exactly `size` bytes long; otherwise `output` is removed and the
    /// failure says why. The caller still checks the result's SHA-256.
    public static func apply(patch: String, base: String, output: String, size: UInt64) throws(Failure) {
        guard size > 0, size <= maximumFileBytes else { throw Failure("a patched file must be 1 byte to 1 GiB, not \(size)") }
        let frame = try ReadMapping(path: patch)
        let old = try ReadMapping(path: base)
        // unsafe: the frame's header lies within the mapping of `frame.length` bytes.
        let declared = unsafe ZSTD_getFrameContentSize(frame.base, frame.length)
        guard declared == size else {
            throw Failure(
                // ZSTD_CONTENTSIZE_UNKNOWN and _ERROR (0ULL - 1 and - 2; macros Swift does not import).
                declared >= UInt64.max - 1 ? "the delta is not a zstd frame with its size" : "the delta makes \(declared) bytes, not \(size)")
        }
        let target = try WriteMapping(path: output, length: Int(size))
        var finished = false
        // unsafe: the path as a C string for unlink.
        defer { if !finished { unsafe unlink(output) } }
        // unsafe: as for making a delta, an opaque context freed on the way out.
        guard let context = unsafe ZSTD_createDCtx() else { throw Failure("libzstd: cannot make a decompression context") }
        defer { unsafe ZSTD_freeDCtx(context) }
        // One-shot decompression keeps no window of its own; the limit only keeps a
        // frame from asking for more than the largest bundle file.
        try check(unsafe ZSTD_DCtx_setParameter(context, ZSTD_d_windowLogMax, 31), "window limit")
        // unsafe: the prefix is the old file's mapping, alive until the decompression below returns.
        try check(unsafe ZSTD_DCtx_refPrefix(context, old.base, old.length), "prefix")
        // unsafe: the destination is the new file's writable mapping of exactly `size` bytes,
        // the source the frame's mapping; libzstd writes within the capacity it is given.
        let produced = unsafe ZSTD_decompressDCtx(context, target.base, target.length, frame.base, frame.length)
        try check(produced, "decompression")
        guard produced == Int(size) else { throw Failure("the delta made \(produced) bytes, not \(size)") }
        try target.finish()
        finished = true
    }

    private static func check(_ code: Int, _ step: String) throws(Failure) {
        if ZSTD_isError(code) != 0 {
            // unsafe: libzstd's error names are static C strings.
            throw Failure("libzstd (\(step)): \(unsafe String(cString: ZSTD_getErrorName(code)))")
        }
    }
}

/// A whole file mapped read-only; an empty file is one zero byte in memory.
@safe private final class ReadMapping {
    let base: UnsafeRawPointer
    let length: Int
    private let mapped: Bool

    /// unsafe: the path is a C string for open; the mapping is released only by deinit.
    init(path: String) throws(ZstdPatch.Failure) {
        let descriptor = unsafe open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { throw ZstdPatch.Failure("cannot open \(path): \(describe(errno))") }
        defer { close(descriptor) }
        var status = stat()
        guard unsafe fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
            throw ZstdPatch.Failure("\(path) is not a regular file")
        }
        guard UInt64(status.st_size) <= ZstdPatch.maximumFileBytes else { throw ZstdPatch.Failure("\(path) is larger than 1 GiB") }
        length = Int(status.st_size)
        guard length > 0 else {
            unsafe base = UnsafeRawPointer(UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1))
            mapped = false
            return
        }
        guard let address = unsafe mmap(nil, length, PROT_READ, MAP_PRIVATE, descriptor, 0), unsafe address != MAP_FAILED else {
            throw ZstdPatch.Failure("cannot map \(path): \(describe(errno))")
        }
        unsafe base = UnsafeRawPointer(address)
        mapped = true
    }

    deinit {
        // unsafe: the last reference to the memory is going; nothing reads it after this.
        if mapped { unsafe munmap(UnsafeMutableRawPointer(mutating: base), length) } else { unsafe UnsafeMutableRawPointer(mutating: base).deallocate() }
    }
}

/// A new file of `length` bytes mapped shared and writable: what is written
/// into the mapping is the file's page cache, not the process's own memory.
@safe private final class WriteMapping {
    let base: UnsafeMutableRawPointer
    let length: Int
    private let descriptor: Int32
    private var unmapped = false

    /// unsafe: the path is a C string for open; the mapping is released by finish or deinit.
    init(path: String, length: Int) throws(ZstdPatch.Failure) {
        let descriptor = unsafe open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else { throw ZstdPatch.Failure("cannot create \(path): \(describe(errno))") }
        guard fchmod(descriptor, 0o644) == 0, ftruncate(descriptor, off_t(length)) == 0 else {
            let error = errno
            close(descriptor)
            unsafe unlink(path)
            throw ZstdPatch.Failure("cannot size \(path): \(describe(error))")
        }
        guard let address = unsafe mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0), unsafe address != MAP_FAILED
        else {
            let error = errno
            close(descriptor)
            unsafe unlink(path)
            throw ZstdPatch.Failure("cannot map \(path): \(describe(error))")
        }
        unsafe base = address
        self.length = length
        self.descriptor = descriptor
    }

    /// Unmaps the file and flushes it to disk.
    func finish() throws(ZstdPatch.Failure) {
        // unsafe: the mapping is dropped once; nothing writes through it after this.
        unsafe munmap(base, length)
        unmapped = true
        guard fsync(descriptor) == 0 else { throw ZstdPatch.Failure("cannot flush the patched file: \(describe(errno))") }
    }

    deinit {
        // unsafe: as in finish, if it did not run.
        if !unmapped { unsafe munmap(base, length) }
        close(descriptor)
    }
}

private func describe(_ code: Int32) -> String {
    // unsafe: strerror returns a C string that is copied at once.
    unsafe String(cString: strerror(code))
}
