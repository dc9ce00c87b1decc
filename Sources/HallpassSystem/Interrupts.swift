// The one place that retries a system call interrupted by a signal (EINTR).
// swift-system's own calls take `retryOnInterrupt:` (true by default) and
// retry in its `valueOrErrno`; every call this module makes directly goes
// through `retryingOnInterrupt`, so no other file of hallpass loops on EINTR.
#if canImport(Glibc)
public import Glibc
#elseif canImport(Darwin)
public import Darwin
#endif
public import SystemPackage

/// Runs a system call that returns -1 with `errno` set on failure until it
/// is not interrupted by a signal: its result, or the error it failed with.
///
/// Not for a wait that a signal must end (filter-data's poll returns on
/// SIGTERM so that it can stop): ``Poll/wait(_:timeoutMilliseconds:)``
/// reports an interruption instead of retrying.
@inlinable
public func retryingOnInterrupt<Result: FixedWidthInteger>(_ call: () -> Result) throws(Errno) -> Result {
    while true {
        let result = call()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw Errno(rawValue: code)
    }
}

/// The error swift-system's untyped `throws` carries (always an `Errno`).
@usableFromInline
func systemError(_ error: any Error) -> Errno {
    (error as? Errno) ?? .ioError
}
