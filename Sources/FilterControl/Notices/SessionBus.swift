#if canImport(Glibc)
import Glibc
#endif
import HallpassSystem
import SharedStore
public import Foundation
import SystemPackage

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
        let descriptor: FileDescriptor
        do {
            if geteuid() == 0, uid != 0 {
                descriptor = try UnixSocket.connect(to: socketPath, asUser: uid, group: gid)
            } else {
                descriptor = try UnixSocket.connect(to: socketPath)
            }
        } catch {
            throw Failure(code: "notify.connect", message: "cannot connect to \(socketPath) as uid \(uid): \(error)")
        }
        defer { descriptor.closeQuietly() }
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

    /// Reads and writes with poll and the conversation's deadline; at most 64 KiB come in.
    struct Connection {
        let descriptor: FileDescriptor
        let deadline: ContinuousClock.Instant
        var received: [UInt8] = []
        var total = 0

        func wait(for events: Int16) throws(Failure) {
            while true {
                let left = deadline - ContinuousClock.now
                let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
                guard milliseconds > 0 else { throw Failure(code: "notify.timeout", message: "the session bus did not answer in time") }
                do {
                    if try Poll.wait(for: events, on: descriptor, timeoutMilliseconds: Int32(min(milliseconds, 60_000))) { return }
                } catch {
                    throw Failure(code: "notify.io", message: error.description)
                }
            }
        }

        func send(_ bytes: [UInt8]) throws(Failure) {
            var offset = 0
            while offset < bytes.count {
                try wait(for: Int16(POLLOUT))
                do {
                    offset += try descriptor.send(bytes, from: offset, flags: [.noSignal, .dontWait])
                } catch .resourceTemporarilyUnavailable {
                    continue
                } catch {
                    throw Failure(code: "notify.io", message: "writing to the session bus: \(error)")
                }
            }
        }

        mutating func fill() throws(Failure) {
            try wait(for: Int16(POLLIN))
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count: Int
            do {
                count = try descriptor.receive(into: &chunk, flags: .dontWait)
            } catch .resourceTemporarilyUnavailable {
                return
            } catch {
                throw Failure(code: "notify.closed", message: error.description)
            }
            guard count > 0 else { throw Failure(code: "notify.closed", message: "the session bus closed the connection") }
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
