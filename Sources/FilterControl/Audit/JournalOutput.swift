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
        var status = stat()
        guard stat(socketPath, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK else { return nil }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        self.socketPath = socketPath
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    /// Sends one datagram; false (with the errno) when the journal did not take it.
    public func send(_ datagram: [UInt8]) -> (sent: Bool, errno: Int32) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socketPath.utf8)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { return (false, ENAMETOOLONG) }
        // Safe: the path fits (checked above) and the pointers live only inside the closures.
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path + [0]) }
        let result = datagram.withUnsafeBytes { bytes in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL), $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
        }
        return result == datagram.count ? (true, 0) : (false, errno)
    }
}
