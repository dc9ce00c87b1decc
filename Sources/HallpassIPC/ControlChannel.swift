#if canImport(Glibc)
import Glibc
#endif
import HallpassSystem
import HallpassWire
public import SystemPackage

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

    public let descriptor: FileDescriptor
    private let ownsDescriptor: Bool
    private var buffer = [UInt8](repeating: 0, count: controlMessageMaximumSize + 1)

    /// Wraps an open descriptor (filter-data: the one it inherited). With
    /// `owning`, `close()` and deinit close it.
    public init(descriptor: FileDescriptor, owning: Bool = true) {
        self.descriptor = descriptor
        self.ownsDescriptor = owning
    }

    deinit {
        if ownsDescriptor { descriptor.closeQuietly() }
    }

    /// Sends one message without waiting.
    public func send(_ message: Outgoing) throws(Failure) {
        do {
            _ = try descriptor.send(message.encoded, flags: [.dontWait, .noSignal])
        } catch {
            switch error {
            case .resourceTemporarilyUnavailable: throw .wouldBlock
            case .brokenPipe, .connectionReset: throw .closed
            default: throw .system(operation: "send", errno: error.rawValue)
            }
        }
    }

    /// The next message, nil when none is waiting. A message that does not
    /// decode is reported through `invalid` and skipped.
    public func receive(invalid: (ControlMessageError) -> Void = { _ in }) throws(Failure) -> Incoming? {
        while true {
            let count: Int
            do {
                count = try descriptor.receive(into: &buffer, flags: .dontWait)
            } catch {
                switch error {
                case .resourceTemporarilyUnavailable: return nil
                case .connectionReset: throw .closed
                default: throw .system(operation: "recv", errno: error.rawValue)
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
        (try? Poll.wait(for: Int16(POLLIN), on: descriptor, timeoutMilliseconds: timeoutMilliseconds)) ?? false
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
        do {
            let (control, data) = try UnixSocket.pair(.sequencedPacket)
            return (ControlEnd(descriptor: control), DataEnd(descriptor: data))
        } catch {
            throw .system(operation: "socketpair", errno: error.rawValue)
        }
    }
}
