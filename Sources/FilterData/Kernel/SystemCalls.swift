// The data path's system calls that are not the queue socket's, the control
// channel's or the sandbox's: waiting on descriptors, the monotonic clock,
// and a line to standard error. Like the other files of Kernel/, the unsafe
// calls stay here, each with its reason.
import HallpassWire
#if canImport(Glibc)
import Glibc
#endif

public enum SystemCalls {
    /// poll(2): the number of descriptors ready, 0 on timeout, -1 with errno set.
    static func poll(_ descriptors: inout [pollfd], timeoutMilliseconds: Int32) -> Int32 {
        // unsafe: poll reads and writes exactly descriptors.count entries of the array.
        unsafe Glibc.poll(&descriptors, nfds_t(descriptors.count), timeoutMilliseconds)
    }

    /// CLOCK_MONOTONIC in nanoseconds.
    public static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        // unsafe: clock_gettime fills the local `time`.
        unsafe clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }

    /// Writes `text` to standard error in one write(2) (a short line is not split).
    public static func writeToStandardError(_ text: String) {
        let bytes = Array(text.utf8)
        // unsafe: write(2) reads the array's bytes inside the closure.
        _ = unsafe bytes.withUnsafeBytes { unsafe write(2, $0.baseAddress, $0.count) }
    }
}
