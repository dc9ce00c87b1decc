#if canImport(Glibc)
import Glibc
#endif

/// Records into the systemd journal over its native protocol: one datagram
/// per record to `/run/systemd/journal/socket`, never waiting (a journal
/// that cannot take a record now loses it, and it is counted).
public final class JournalOutput: @unchecked Sendable {
    // @unchecked Sendable: `descriptor` is set once in init; sendto on it is thread-safe.
    public static let defaultSocket = "/run/systemd/journal/socket"

    public let socketPath: String
    private let descriptor: Int32

    /// nil when the journal's socket does not exist (no journald on this machine).
    public init?(socketPath: String = JournalOutput.defaultSocket) {
        guard FileSystem.status(socketPath)?.isSocket == true else { return nil }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        self.socketPath = socketPath
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    /// Sends one datagram; false (with the errno) when the journal did not take it.
    public func send(_ datagram: [UInt8]) -> (sent: Bool, errno: Int32) {
        let result = UnixSocket.send(descriptor, datagram, to: socketPath, flags: Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL))
        return result == datagram.count ? (true, 0) : (false, errno)
    }
}
