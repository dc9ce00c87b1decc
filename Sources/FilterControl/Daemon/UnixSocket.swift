import CHallpassSys
#if canImport(Glibc)
import Glibc
#endif

/// The Unix-domain socket calls of filter-control's clients, in one place:
/// the admin client, the systemd journal (log messages and audit records)
/// and the users' session buses (notices). Each returns what the system call
/// does (-1 or false with errno set), so the protocols above it stay free of
/// unsafe code.
///
/// unsafe in this file: the `sockaddr_un` is a local filled with a
/// bounds-checked copy of the path (NUL included) and passed by address for
/// one call; sends and receives touch an array's storage inside its closure,
/// within its count; a path handed to the C shim is a Swift string passed as
/// a C string for that call only.
enum UnixSocket {
    /// The address of the socket at `path`; nil when the path does not fit `sun_path`.
    static func address(_ path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        // unsafe: the copy and its NUL fit `sun_path` (checked above); the pointer stays in the closure.
        unsafe withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            unsafe buffer.copyBytes(from: bytes)
            unsafe buffer[bytes.count] = 0
        }
        return address
    }

    /// connect(2) to the socket at `path`; false with errno set when it fails
    /// (ENAMETOOLONG for a path that does not fit).
    static func connect(_ descriptor: Int32, to path: String) -> Bool {
        guard var address = address(path) else {
            errno = ENAMETOOLONG
            return false
        }
        // unsafe: the local address is passed by address, with its own size, for this call only.
        return unsafe withUnsafePointer(to: &address) {
            unsafe $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                unsafe Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        } == 0
    }

    /// A stream socket connected to `path` with the credentials of `uid` and
    /// `gid` (the C shim switches them for the connect only, so a user's bus
    /// sees the user); -1 with errno set when it fails.
    static func connect(to path: String, asUser uid: UInt32, group gid: UInt32) -> Int32 {
        // unsafe: the path is a C string for the call only; the shim keeps no pointer.
        unsafe hp_connect_unix_as(path, uid, gid)
    }

    /// send(2) of `bytes[offset...]`: the count sent, or -1 with errno set.
    static func send(_ descriptor: Int32, _ bytes: [UInt8], from offset: Int = 0, flags: Int32) -> Int {
        precondition(offset >= 0 && offset <= bytes.count)
        // unsafe: send reads the array's bytes from `offset` to its end, checked just above.
        return unsafe bytes.withUnsafeBytes { unsafe Glibc.send(descriptor, $0.baseAddress! + offset, $0.count - offset, flags) }
    }

    /// sendto(2) of one datagram to the socket at `path`: the count sent, or
    /// -1 with errno set (ENAMETOOLONG for a path that does not fit).
    static func send(_ descriptor: Int32, _ datagram: [UInt8], to path: String, flags: Int32) -> Int {
        guard var address = address(path) else {
            errno = ENAMETOOLONG
            return -1
        }
        // unsafe: sendto reads the array's bytes and the local address, each within its size, for this call only.
        return unsafe datagram.withUnsafeBytes { bytes in
            unsafe withUnsafePointer(to: &address) {
                unsafe $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    unsafe sendto(descriptor, bytes.baseAddress, bytes.count, flags, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
        }
    }

    /// recv(2) into `buffer`: the count received (0 when the peer closed), or -1 with errno set.
    static func receive(_ descriptor: Int32, into buffer: inout [UInt8], flags: Int32) -> Int {
        // unsafe: recv writes at most buffer.count bytes into the array's own storage.
        unsafe buffer.withUnsafeMutableBytes { unsafe recv(descriptor, $0.baseAddress, $0.count, flags) }
    }
}
