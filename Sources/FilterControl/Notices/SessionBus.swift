#if canImport(Glibc)
import Glibc
#endif
import SharedStore
public import Foundation

/// One short conversation with a person's D-Bus session bus: connect as
/// that person, authenticate (SASL EXTERNAL), `Hello`, one method call,
/// its reply. Blocking calls with a deadline on every read and write; run
/// it on a thread of its own (`DesktopNotifier` does).
///
/// Why the uid switch: a session bus (dbus-daemon with the session
/// configuration) lets in only connections whose peer credentials
/// (SO_PEERCRED, recorded by the kernel at connect) carry the uid that owns
/// the bus. Root is turned away like anyone else (authentication as uid 0
/// succeeds, then the bus closes the connection), and EXTERNAL with another
/// uid than the socket's is rejected. So filter-control connects with the
/// person's uid and gid on the connecting thread only (`hp_connect_unix_as`)
/// and is root again before it sends a byte.
public struct SessionBus: Sendable {
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        public var code: String
        public var message: String
        public var description: String { "\(message) [\(code)]" }
    }

    /// `unix:path=/run/user/1000/bus` (the first `unix:path=` of a `;` list).
    public let socketPath: String
    public let uid: UInt32
    public let gid: UInt32
    public let timeout: Duration

    public init(address: String, uid: UInt32, gid: UInt32, timeout: Duration = .seconds(2)) throws(Failure) {
        guard let path = SessionBus.socketPath(address: address) else {
            throw Failure(code: "notify.address", message: "'\(address)' names no unix:path= socket")
        }
        self.socketPath = path
        self.uid = uid
        self.gid = gid
        self.timeout = timeout
    }

    static func socketPath(address: String) -> String? {
        for entry in address.split(separator: ";") where entry.hasPrefix("unix:") {
            for pair in entry.dropFirst(5).split(separator: ",") where pair.hasPrefix("path=") {
                return unescape(String(pair.dropFirst(5)))
            }
        }
        return nil
    }

    /// D-Bus addresses escape bytes as %XX.
    static func unescape(_ text: String) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Sends `call` (its serial is set here) and returns the reply's body.
    public func call(_ call: DBusMessage) throws(Failure) -> [DBusMessage.Value] {
        let deadline = ContinuousClock.now + timeout
        let descriptor: Int32
        if geteuid() == 0, uid != 0 {
            descriptor = UnixSocket.connect(to: socketPath, asUser: uid, group: gid)
        } else {
            descriptor = SessionBus.connectPlain(socketPath)
        }
        guard descriptor >= 0 else {
            throw Failure(code: "notify.connect", message: "cannot connect to \(socketPath) as uid \(uid): \(systemErrorText(errno))")
        }
        defer { close(descriptor) }
        var connection = Connection(descriptor: descriptor, deadline: deadline)
        // The credentials byte, then EXTERNAL with the uid as hex of its decimal digits.
        try connection.send([0] + Array("AUTH EXTERNAL \(Array(String(uid).utf8).map { String($0, radix: 16) }.joined())\r\n".utf8))
        let answer = try connection.readLine()
        guard answer.hasPrefix("OK ") else {
            throw Failure(code: "notify.auth", message: "the bus at \(socketPath) refused uid \(uid): \(answer)")
        }
        var hello = DBusMessage(
            serial: 1, path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "Hello", destination: "org.freedesktop.DBus")
        hello.type = .methodCall
        var message = call
        message.serial = 2
        try connection.send(Array("BEGIN\r\n".utf8) + hello.encoded() + message.encoded())
        while true {
            let reply = try connection.readMessage()
            guard reply.replySerial == 2 else { continue }  // Hello's reply, NameAcquired
            if reply.type == .error {
                var detail = ""
                if case .string(let text)? = reply.body.first { detail = ": " + text }
                throw Failure(code: "notify.error", message: "\(reply.errorName ?? "error")\(detail)")
            }
            return reply.body
        }
    }

    static func connectPlain(_ path: String) -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return -1 }
        if !UnixSocket.connect(descriptor, to: path) {
            let error = errno
            close(descriptor)
            errno = error
            return -1
        }
        return descriptor
    }

    /// Reads and writes with poll and the conversation's deadline; at most 64 KiB come in.
    struct Connection {
        let descriptor: Int32
        let deadline: ContinuousClock.Instant
        var received: [UInt8] = []
        var total = 0

        func wait(for events: Int16) throws(Failure) {
            while true {
                let left = deadline - ContinuousClock.now
                let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
                guard milliseconds > 0 else { throw Failure(code: "notify.timeout", message: "the session bus did not answer in time") }
                var entry = [pollfd(fd: descriptor, events: events, revents: 0)]
                let ready = FileSystem.poll(&entry, timeoutMilliseconds: Int32(min(milliseconds, 60_000)))
                if ready < 0, errno == EINTR { continue }
                guard ready >= 0 else { throw Failure(code: "notify.io", message: systemErrorText(errno)) }
                if ready > 0 { return }
            }
        }

        func send(_ bytes: [UInt8]) throws(Failure) {
            var offset = 0
            while offset < bytes.count {
                try wait(for: Int16(POLLOUT))
                let sent = UnixSocket.send(descriptor, bytes, from: offset, flags: Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
                if sent < 0 {
                    if errno == EINTR || errno == EAGAIN { continue }
                    throw Failure(code: "notify.io", message: "writing to the session bus: \(systemErrorText(errno))")
                }
                offset += sent
            }
        }

        mutating func fill() throws(Failure) {
            try wait(for: Int16(POLLIN))
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = UnixSocket.receive(descriptor, into: &chunk, flags: Int32(MSG_DONTWAIT))
            if count < 0, errno == EINTR || errno == EAGAIN { return }
            guard count > 0 else {
                throw Failure(code: "notify.closed", message: count == 0 ? "the session bus closed the connection" : systemErrorText(errno))
            }
            total += count
            guard total <= 64 * 1024 else { throw Failure(code: "notify.io", message: "the session bus sent more than 64 KiB") }
            received.append(contentsOf: chunk[0..<count])
        }

        mutating func readLine() throws(Failure) -> String {
            while true {
                if let end = received.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: received[..<end], as: UTF8.self)
                    received.removeSubrange(...end)
                    return line.hasSuffix("\r") ? String(line.dropLast()) : line
                }
                try fill()
            }
        }

        mutating func readMessage() throws(Failure) -> DBusMessage {
            while true {
                do {
                    if let length = try DBusMessage.messageLength(received[...]), received.count >= length {
                        let message = try DBusMessage(decoding: Array(received[0..<length]))
                        received.removeSubrange(0..<length)
                        return message
                    }
                } catch {
                    throw Failure(code: "notify.protocol", message: "the session bus sent a message that cannot be read: \(error)")
                }
                try fill()
            }
        }
    }
}
