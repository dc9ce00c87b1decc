// Reads, writes and waits on open descriptors, for what swift-system's
// `FileDescriptor` does not do the way hallpass needs: into and out of
// arrays (swift-system reads into raw buffers), a write that goes on until
// every byte is out with a typed error, fsync, non-blocking mode, poll;
// and the monotonic clock the waits are timed on.
//
// Poll and the clock are on filter-data's packet path (one poll per turn of
// its loop, one clock read per packet): each is one system call, inlined
// into the caller, with nothing added around it.
//
// unsafe in this file: read(2) and write(2) touch an array's own storage
// inside its `withUnsafe...` closure, within its count; no pointer leaves
// the closure. poll(2) reads and writes exactly the array's count of
// entries, inside the call; clock_gettime fills a local `timespec`.
#if canImport(Glibc)
public import Glibc
#elseif canImport(Darwin)
public import Darwin
#endif
public import SystemPackage

extension FileDescriptor {
    /// One read(2) into `buffer` (at most its count), EINTR retried: the
    /// count read, 0 at the end of the file or when the peer closed.
    @inlinable
    public func readSome(into buffer: inout [UInt8]) throws(Errno) -> Int {
        let descriptor = rawValue
        // unsafe: read(2) writes at most buffer.count bytes into the array's own storage.
        return try unsafe buffer.withUnsafeMutableBytes { raw in
            Result { () throws(Errno) in try retryingOnInterrupt { unsafe Glibc.read(descriptor, raw.baseAddress, raw.count) } }
        }.get()
    }

    /// One write(2) of `bytes[offset...]`, EINTR retried: the count written.
    @inlinable
    public func writeSome(_ bytes: [UInt8], from offset: Int = 0) throws(Errno) -> Int {
        precondition(offset >= 0 && offset <= bytes.count)
        let descriptor = rawValue
        // unsafe: write(2) reads the array's bytes from `offset` to its end, checked just above.
        return try unsafe bytes.withUnsafeBytes { raw in
            Result { () throws(Errno) in try retryingOnInterrupt { unsafe Glibc.write(descriptor, raw.baseAddress! + offset, raw.count - offset) } }
        }.get()
    }

    /// write(2) until every byte of `bytes` is out. A failure after a part
    /// went out throws too: the caller learns that the whole did not.
    public func write(contentsOf bytes: [UInt8]) throws(Errno) {
        var offset = 0
        while offset < bytes.count {
            let written = try writeSome(bytes, from: offset)
            // A regular file or pipe that takes nothing is full (a write of 0 bytes repeats forever).
            guard written > 0 else { throw Errno.noSpace }
            offset += written
        }
    }

    /// fsync(2): the file's data, or a folder's names, reach the disk.
    public func sync() throws(Errno) {
        let descriptor = rawValue
        _ = try retryingOnInterrupt { fsync(descriptor) }
    }

    /// fchmod(2): exactly `mode`, whatever the umask took away at creation.
    public func setMode(_ mode: UInt32) throws(Errno) {
        let descriptor = rawValue
        _ = try retryingOnInterrupt { fchmod(descriptor, mode_t(mode)) }
    }

    /// Sets O_NONBLOCK on the open file (every copy of this descriptor shares it).
    public func setNonBlocking() throws(Errno) {
        let descriptor = rawValue
        let flags = try retryingOnInterrupt { fcntl(descriptor, F_GETFL) }
        _ = try retryingOnInterrupt { fcntl(descriptor, F_SETFL, flags | O_NONBLOCK) }
    }

    /// Closes the descriptor; a failure (EIO from a network file system, EBADF
    /// for one closed already) is not worth reporting where this is called:
    /// the data were flushed before, or the descriptor was only read.
    public func closeQuietly() {
        try? close()
    }
}

/// Standard error, for the processes that write their own lines there.
public enum StandardError {
    /// Writes `text` in one write(2) (a short line is not split among other writers').
    public static func write(_ text: String) {
        try? FileDescriptor.standardError.write(contentsOf: Array(text.utf8))
    }
}

public enum Poll {
    /// poll(2), once: the number of descriptors ready (0: the time ran out),
    /// or nil when a signal interrupted the wait. Not retried on EINTR: a
    /// signal (SIGTERM to filter-data) is how a waiting loop learns to stop.
    /// `timeoutMilliseconds` -1 waits without limit.
    @inlinable
    public static func wait(_ descriptors: inout [pollfd], timeoutMilliseconds: Int32) throws(Errno) -> Int? {
        // unsafe: poll reads and writes exactly descriptors.count entries of the array.
        let ready = unsafe poll(&descriptors, nfds_t(descriptors.count), timeoutMilliseconds)
        if ready >= 0 { return Int(ready) }
        let code = errno
        if code == EINTR { return nil }
        throw Errno(rawValue: code)
    }

    /// Waits for `events` (POLLIN, POLLOUT) on one descriptor: true when it
    /// came, false when the time ran out or a signal interrupted the wait.
    public static func wait(for events: Int16, on descriptor: FileDescriptor, timeoutMilliseconds: Int32) throws(Errno) -> Bool {
        var entry = [pollfd(fd: descriptor.rawValue, events: events, revents: 0)]
        return try wait(&entry, timeoutMilliseconds: timeoutMilliseconds).map { $0 > 0 } ?? false
    }
}

public enum MonotonicClock {
    /// CLOCK_MONOTONIC in nanoseconds: it does not step with the wall clock
    /// and does not count time suspended.
    @inlinable
    public static func nanoseconds() -> UInt64 {
        var time = timespec()
        // unsafe: clock_gettime fills the local `time`.
        unsafe clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
