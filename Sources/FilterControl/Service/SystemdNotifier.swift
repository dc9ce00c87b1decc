import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Tells systemd how the service is doing (sd_notify(3)'s protocol): one
/// datagram of `KEY=value` lines to the unix socket `$NOTIFY_SOCKET` names
/// (abstract when the name starts with `@`). systemd sets the variable for
/// a `Type=notify` unit; without it, nothing is sent.
///
/// unsafe in this file: the `sockaddr_un` is a local filled with a
/// bounds-checked copy of the name and passed by address for one call;
/// the datagram is an array's bytes read within its count.
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
        // unsafe: the name is a C string for this call only.
        unsafe unsetenv("NOTIFY_SOCKET")
        return SystemdNotifier(socketPath: path)
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Sends `state` (e.g. "READY=1\nSTATUS=filtering") in one datagram.
    public func notify(_ state: String) throws(Failure) {
        var path = Array(socketPath.utf8)
        let abstract = path.first == UInt8(ascii: "@")
        if abstract { path[0] = 0 }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.first == UInt8(ascii: "/") || abstract, path.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw Failure(description: "NOTIFY_SOCKET \(socketPath) is not a socket's path")
        }
        // unsafe: the copy fits `sun_path` (checked above; the rest stays zero, so a path ends with its NUL);
        // the pointer stays in the closure.
        unsafe withUnsafeMutableBytes(of: &address.sun_path) { buffer in unsafe buffer.copyBytes(from: path) }
        // An abstract name is exactly as long as given; a path is counted with its NUL, as sd_notify does.
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (abstract ? 0 : 1))
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        defer { close(descriptor) }
        let message = Array(state.utf8)
        // unsafe: sendto reads the message's bytes and the local address, each within its size, for this call only.
        let sent = unsafe message.withUnsafeBytes { bytes in
            unsafe withUnsafePointer(to: &address) {
                unsafe $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    unsafe sendto(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        guard sent == message.count else { throw Failure(description: "sendto \(socketPath): errno \(errno)") }
    }
}
