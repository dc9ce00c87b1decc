import HallpassSystem
import SystemPackage

/// Records into the systemd journal over its native protocol: one datagram
/// per record to `/run/systemd/journal/socket`, never waiting (a journal
/// that cannot take a record now loses it, and it is counted).
public final class JournalOutput: Sendable {
    // Its properties never change after init; sendto on the one descriptor is safe from any thread.
    public static let defaultSocket = "/run/systemd/journal/socket"

    public let socketPath: String
    private let descriptor: FileDescriptor

    /// nil when the journal's socket does not exist (no journald on this machine).
    public init?(socketPath: String = JournalOutput.defaultSocket) {
        guard (try? FileSystem.status(socketPath))?.type == .socket, let descriptor = try? UnixSocket.open(.datagram) else { return nil }
        self.socketPath = socketPath
        self.descriptor = descriptor
    }

    deinit { descriptor.closeQuietly() }

    /// Sends one datagram; false (with the errno) when the journal did not take it.
    public func send(_ datagram: [UInt8]) -> (sent: Bool, errno: Int32) {
        do {
            let sent = try descriptor.send(datagram, toSocketAt: socketPath, flags: [.dontWait, .noSignal])
            // A datagram goes whole or not at all; a short count would be the kernel's oddity.
            return sent == datagram.count ? (true, 0) : (false, Errno.messageTooLong.rawValue)
        } catch {
            return (false, error.rawValue)
        }
    }
}
