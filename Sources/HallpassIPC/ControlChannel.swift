#if canImport(Glibc)
import Glibc
#endif
import HallpassWire
import SystemPackage

/// filter-control's end of the channel: it sends commands and receives events.
public typealias ControlEnd = ControlChannel<ControlCommand, DataEvent>
/// filter-data's end: it sends events and receives commands.
public typealias DataEnd = ControlChannel<DataEvent, ControlCommand>

/// One end of the socket pair between filter-control and filter-data
/// (AF_UNIX, SOCK_SEQPACKET). Non-blocking on both sides: a process never
/// waits on the other, it polls `descriptor` with its other work. Typed by
/// direction: an end sends only `Outgoing` and decodes only `Incoming`.
///
/// `send` may be called from any thread (one datagram, no shared state);
/// `receive` from one thread at a time.
public final class ControlChannel<Outgoing: ControlChannelMessage, Incoming: ControlChannelMessage>: @unchecked Sendable {
    public typealias Failure = ControlChannelFailure

    public let descriptor: Int32
    private let ownsDescriptor: Bool
    private var buffer = [UInt8](repeating: 0, count: controlMessageMaximumSize + 1)

    /// Wraps an open descriptor (filter-data: the one it inherited). With
    /// `owning`, `close()` and deinit close it.
    public init(descriptor: Int32, owning: Bool = true) {
        self.descriptor = descriptor
        self.ownsDescriptor = owning
    }

    deinit {
        if ownsDescriptor { Glibc.close(descriptor) }
    }

    /// Sends one message without waiting.
    public func send(_ message: Outgoing) throws(Failure) {
        let bytes = message.encoded
        // unsafe: send reads the message's own bytes inside the closure.
        let sent = unsafe bytes.withUnsafeBytes { unsafe Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        if sent < 0 {
            switch errno {
            case EAGAIN, EWOULDBLOCK: throw .wouldBlock
            case EPIPE, ECONNRESET: throw .closed
            default: throw .system(operation: "send", errno: errno)
            }
        }
    }

    /// The next message, nil when none is waiting. A message that does not
    /// decode is reported through `invalid` and skipped.
    public func receive(invalid: (ControlMessageError) -> Void = { _ in }) throws(Failure) -> Incoming? {
        while true {
            // unsafe: recv writes at most buffer.count bytes into the channel's own buffer.
            let count = unsafe buffer.withUnsafeMutableBytes { unsafe recv(descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0 {
                switch errno {
                case EINTR: continue
                case EAGAIN, EWOULDBLOCK: return nil
                case ECONNRESET: throw .closed
                default: throw .system(operation: "recv", errno: errno)
                }
            }
            if count == 0 { throw .closed }
            let received = buffer
            do {
                return try Incoming(decoding: received.span.extracting(0..<count))
            } catch {
                invalid(error)
            }
        }
    }

    /// Waits up to `timeoutMilliseconds` (-1: no limit) for a message.
    public func wait(timeoutMilliseconds: Int32) -> Bool {
        var descriptor = pollfd(fd: self.descriptor, events: Int16(POLLIN), revents: 0)
        // unsafe: poll reads and writes the one local pollfd.
        return unsafe poll(&descriptor, 1, timeoutMilliseconds) > 0
    }
}

/// Why a control channel's send or receive failed.
public enum ControlChannelFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// The other process closed its end (exited).
    case closed
    case system(operation: String, errno: Int32)
    /// The other side's buffer is full; the message was not sent.
    case wouldBlock

    public var description: String {
        switch self {
        case .closed: "the other process closed the control channel"
        case .system(let operation, let code): "control channel: \(operation) failed: \(Errno(rawValue: code))"
        case .wouldBlock: "control channel: the other process is not reading"
        }
    }
}

/// Makes the connected pair filter-control starts filter-data with.
public enum ControlChannelPair {
    /// Both ends close-on-exec (the child's end is dup2'ed into place, which
    /// clears the flag on the copy).
    public static func make() throws(ControlChannelFailure) -> (control: ControlEnd, data: DataEnd) {
        var descriptors: [Int32] = [-1, -1]
        let kind = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        // unsafe: socketpair writes the two descriptors into the two-element array.
        guard unsafe socketpair(AF_UNIX, kind, 0, &descriptors) == 0 else {
            throw .system(operation: "socketpair", errno: errno)
        }
        return (ControlEnd(descriptor: descriptors[0]), DataEnd(descriptor: descriptors[1]))
    }
}
