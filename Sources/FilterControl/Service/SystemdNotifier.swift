import Foundation
#if canImport(Glibc)
import Glibc
#endif
import HallpassSystem
import SystemPackage

/// Tells systemd how the service is doing (sd_notify(3)'s protocol): one
/// datagram of `KEY=value` lines to the unix socket `$NOTIFY_SOCKET` names
/// (abstract when the name starts with `@`). systemd sets the variable for
/// a `Type=notify` unit; without it, nothing is sent.
public struct SystemdNotifier: Sendable {
    public let socketPath: String

    public init(socketPath: String) {
        self.socketPath = socketPath
    }

    /// The notifier for `$NOTIFY_SOCKET`, which is then taken out of the
    /// environment so that filter-data and other children do not inherit
    /// it (systemd would take their messages for the service's, or log them
    /// as refused). Nil when the variable is not set.
    public static func fromEnvironment() -> SystemdNotifier? {
        guard let path = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !path.isEmpty else { return nil }
        Environment.remove("NOTIFY_SOCKET")
        return SystemdNotifier(socketPath: path)
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Sends `state` (e.g. "READY=1\nSTATUS=filtering") in one datagram.
    public func notify(_ state: String) throws(Failure) {
        // A path, or a name in the abstract namespace (`@name`, which the address keeps without a NUL, as sd_notify does).
        guard socketPath.hasPrefix("/") || socketPath.hasPrefix("@"), UnixSocket.fits(socketPath) else {
            throw Failure(description: "NOTIFY_SOCKET \(socketPath) is not a socket's path")
        }
        let descriptor: FileDescriptor
        do {
            descriptor = try UnixSocket.open(.datagram)
        } catch {
            throw Failure(description: "socket: \(error)")
        }
        defer { descriptor.closeQuietly() }
        let message = Array(state.utf8)
        do {
            let sent = try descriptor.send(message, toSocketAt: socketPath, flags: .noSignal)
            guard sent == message.count else { throw Errno.messageTooLong }
        } catch {
            throw Failure(description: "sendto \(socketPath): \(error)")
        }
    }
}
