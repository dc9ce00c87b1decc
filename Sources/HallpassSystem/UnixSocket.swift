// Unix-domain sockets: the control channel's socket pair, the admin
// socket's client, the systemd journal and notify sockets, and the users'
// session buses. swift-system has no socket calls yet; these follow its
// shape (a `FileDescriptor`, a typed `Errno`, EINTR retried).
//
// unsafe in this file: the `sockaddr_un` is a local filled with a
// bounds-checked copy of the path and passed by address for one call;
// sends and receives touch an array's storage inside its closure, within
// its count; socketpair writes into a local two-element array; a path
// handed to the C shim is a Swift string passed as a C string for that call
// only; the socket timeouts are locals passed by address for one call.
import CHallpassSys
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
public import SystemPackage

public enum UnixSocket {
    public enum Kind: Sendable {
        case stream, datagram
        /// Datagrams on a connection, in order (the control channel).
        case sequencedPacket

        var rawValue: Int32 {
            switch self {
            case .stream: Int32(SOCK_STREAM.rawValue)
            case .datagram: Int32(SOCK_DGRAM.rawValue)
            case .sequencedPacket: Int32(SOCK_SEQPACKET.rawValue)
            }
        }
    }

    /// A new socket, close-on-exec.
    public static func open(_ kind: Kind) throws(Errno) -> FileDescriptor {
        let raw = try retryingOnInterrupt { socket(AF_UNIX, kind.rawValue | Int32(SOCK_CLOEXEC.rawValue), 0) }
        return FileDescriptor(rawValue: raw)
    }

    /// A connected pair, both ends close-on-exec (a child's end is dup2'ed
    /// into place, which clears the flag on the copy).
    public static func pair(_ kind: Kind) throws(Errno) -> (FileDescriptor, FileDescriptor) {
        var descriptors: [Int32] = [-1, -1]
        // unsafe: socketpair writes the two descriptors into the two-element array.
        _ = try retryingOnInterrupt { unsafe socketpair(AF_UNIX, kind.rawValue | Int32(SOCK_CLOEXEC.rawValue), 0, &descriptors) }
        return (FileDescriptor(rawValue: descriptors[0]), FileDescriptor(rawValue: descriptors[1]))
    }

    /// A new stream or datagram socket connected to `path`.
    public static func connect(to path: String, _ kind: Kind = .stream) throws(Errno) -> FileDescriptor {
        let descriptor = try open(kind)
        do {
            try descriptor.connect(toSocketAt: path)
        } catch {
            descriptor.closeQuietly()
            throw error
        }
        return descriptor
    }

    /// A stream socket connected to `path` with the credentials of `uid` and
    /// `gid` (the C shim switches them for the connect only, on this thread,
    /// so a user's bus sees the user).
    public static func connect(to path: String, asUser uid: UInt32, group gid: UInt32) throws(Errno) -> FileDescriptor {
        // unsafe: the path is a C string for the call only; the shim keeps no pointer. Not retried
        // on EINTR, like any connect.
        let descriptor = unsafe hp_connect_unix_as(path, uid, gid)
        guard descriptor >= 0 else { throw Errno(rawValue: errno) }
        return FileDescriptor(rawValue: descriptor)
    }

    /// Whether `path` fits a socket's address (108 bytes with its NUL on Linux).
    public static func fits(_ path: String) -> Bool {
        Address(path) != nil
    }

    /// A `sockaddr_un` and its length. A name that starts with `@` is in the
    /// abstract namespace (sd_notify's convention): the `@` becomes a NUL and
    /// the length counts no NUL at the end.
    struct Address {
        var storage = sockaddr_un()
        var length: socklen_t

        init?(_ path: String) {
            var bytes = Array(path.utf8)
            let abstract = bytes.first == UInt8(ascii: "@")
            if abstract { bytes[0] = 0 }
            guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: storage.sun_path) else { return nil }
            storage.sun_family = sa_family_t(AF_UNIX)
            // unsafe: the copy fits `sun_path` (checked above; the rest stays zero, so a path ends
            // with its NUL); the pointer stays in the closure.
            unsafe withUnsafeMutableBytes(of: &storage.sun_path) { buffer in unsafe buffer.copyBytes(from: bytes) }
            length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
        }

        /// Runs `body` with the address as the `sockaddr` the calls take.
        mutating func withSocketAddress<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
            let length = length
            // unsafe: the local address is passed by address, with its own length, for this call only.
            return unsafe withUnsafePointer(to: &storage) { pointer in
                unsafe pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { unsafe body($0, length) }
            }
        }
    }
}

/// The flags of a send or receive.
public struct MessageFlags: OptionSet, Sendable {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// Fail with EAGAIN rather than wait.
    public static let dontWait = MessageFlags(rawValue: Int32(MSG_DONTWAIT))
    /// A closed peer is EPIPE, not SIGPIPE.
    public static let noSignal = MessageFlags(rawValue: Int32(MSG_NOSIGNAL))
}

extension FileDescriptor {
    /// connect(2) to the socket at `path` (ENAMETOOLONG when it does not fit).
    public func connect(toSocketAt path: String) throws(Errno) {
        guard var address = UnixSocket.Address(path) else { throw .fileNameTooLong }
        let descriptor = rawValue
        // Not retried on EINTR: an interrupted connect goes on in the kernel, and a second one fails.
        let result = unsafe address.withSocketAddress { unsafe Glibc.connect(descriptor, $0, $1) }
        guard result == 0 else { throw Errno(rawValue: errno) }
    }

    /// send(2) of `bytes[offset...]`, EINTR retried: the count sent.
    public func send(_ bytes: [UInt8], from offset: Int = 0, flags: MessageFlags) throws(Errno) -> Int {
        precondition(offset >= 0 && offset <= bytes.count)
        let descriptor = rawValue
        // unsafe: send reads the array's bytes from `offset` to its end, checked just above.
        return try unsafe bytes.withUnsafeBytes { raw in
            Result { () throws(Errno) in
                try retryingOnInterrupt { unsafe Glibc.send(descriptor, raw.baseAddress! + offset, raw.count - offset, flags.rawValue) }
            }
        }.get()
    }

    /// sendto(2) of one datagram to the socket at `path` (`@name`: abstract), EINTR retried: the count sent.
    public func send(_ datagram: [UInt8], toSocketAt path: String, flags: MessageFlags) throws(Errno) -> Int {
        guard var address = UnixSocket.Address(path) else { throw .fileNameTooLong }
        let descriptor = rawValue
        // unsafe: sendto reads the array's bytes and the local address, each within its size, for this call only.
        return try unsafe datagram.withUnsafeBytes { bytes in
            Result { () throws(Errno) in
                try retryingOnInterrupt {
                    unsafe address.withSocketAddress { unsafe sendto(descriptor, bytes.baseAddress, bytes.count, flags.rawValue, $0, $1) }
                }
            }
        }.get()
    }

    /// recv(2) into `buffer` (at most its count), EINTR retried: the count
    /// received, 0 when the peer closed.
    public func receive(into buffer: inout [UInt8], flags: MessageFlags) throws(Errno) -> Int {
        let descriptor = rawValue
        // unsafe: recv writes at most buffer.count bytes into the array's own storage.
        return try unsafe buffer.withUnsafeMutableBytes { raw in
            Result { () throws(Errno) in try retryingOnInterrupt { unsafe recv(descriptor, raw.baseAddress, raw.count, flags.rawValue) } }
        }.get()
    }

    /// SO_RCVTIMEO and SO_SNDTIMEO: a blocking receive or send fails with
    /// EAGAIN after `seconds`.
    public func setTimeouts(seconds: Int) throws(Errno) {
        var time = timeval(tv_sec: seconds, tv_usec: 0)
        let descriptor = rawValue
        for option in [SO_RCVTIMEO, SO_SNDTIMEO] {
            // unsafe: the local `time` is passed by address with its size for this call only.
            _ = try retryingOnInterrupt { unsafe setsockopt(descriptor, SOL_SOCKET, option, &time, socklen_t(MemoryLayout<timeval>.size)) }
        }
    }

    /// shutdown(2) of the sending side: the peer reads the end of the stream.
    public func shutdownWrites() throws(Errno) {
        let descriptor = rawValue
        _ = try retryingOnInterrupt { shutdown(descriptor, Int32(SHUT_WR)) }
    }
}
