// The proxy's calls into the kernel about sockets: its listeners, where a
// redirected connection was going (SO_ORIGINAL_DST, IP6T_SO_ORIGINAL_DST),
// and who opened it (sock_diag). The only file of the proxy with unsafe code.
import CHallpassSys
public import NIOCore
import SystemPackage
public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

public enum ProxySockets {
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var what: String
        public var errno: Int32
        public var description: String { "\(what): \(Errno(rawValue: errno))" }
    }

    /// A listening socket on `address` (127.0.0.1 or ::1) and `port`, made
    /// before the sandbox (which has no bind or listen).
    public static func listen(on address: IPAddress, port: UInt16) throws(Failure) -> Int32 {
        let fd = hp_tcp_listener(address.isIPv4 ? AF_INET : AF_INET6, hp_ip_address(address), port, 1024)
        guard fd >= 0 else { throw Failure(what: "listen on \(address) port \(port)", errno: -fd) }
        return fd
    }

    /// Where the client of a connection the kernel redirected meant to go.
    public static func originalDestination(of channel: any Channel, ipv6: Bool) -> EventLoopFuture<SocketAddress> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(Failure(what: "the connection's original destination", errno: ENOTSOCK))
        }
        // SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST are both 80, at SOL_IP and SOL_IPV6.
        let name = NIOBSDSocket.Option(rawValue: 80)
        if ipv6 {
            // unsafe: getsockopt fills a sockaddr_in6 of the size asked for.
            let future: EventLoopFuture<sockaddr_in6> = unsafe provider.unsafeGetSocketOption(level: .init(rawValue: SOL_IPV6), name: name)
            return future.map { SocketAddress($0, host: "") }
        }
        // unsafe: getsockopt fills a sockaddr_in of the size asked for.
        let future: EventLoopFuture<sockaddr_in> = unsafe provider.unsafeGetSocketOption(level: .init(rawValue: SOL_IP), name: name)
        return future.map { SocketAddress($0, host: "") }
    }

    /// The uid of the local socket that opened the connection from `client`
    /// to `destination` (its own view: the kernel redirected it without its
    /// knowing); nil when no local socket has that 4-tuple.
    public static func uid(client: SocketAddress, destination: SocketAddress) -> UInt32? {
        guard let local = address(client), let remote = address(destination), local.address.isIPv4 == remote.address.isIPv4 else { return nil }
        let result = hp_socket_uid(
            local.address.isIPv4 ? AF_INET : AF_INET6, UInt8(IPPROTO_TCP), hp_ip_address(local.address), hp_ip_address(remote.address), local.port,
            remote.port)
        return result >= 0 ? UInt32(truncatingIfNeeded: result) : nil
    }

    /// An IP socket address as hallpass's address and port.
    public static func address(_ socketAddress: SocketAddress) -> (address: IPAddress, port: UInt16)? {
        switch socketAddress {
        case .v4(let v4):
            let value = UInt32(bigEndian: v4.address.sin_addr.s_addr)
            let bytes = [UInt8(truncatingIfNeeded: value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
            guard let address = IPAddress(networkBytes: bytes) else { return nil }
            return (address, UInt16(bigEndian: v4.address.sin_port))
        case .v6(let v6):
            var storage = v6.address.sin6_addr
            // unsafe: the 16 bytes of a local in6_addr, copied out inside the closure.
            let bytes = unsafe withUnsafeBytes(of: &storage) { unsafe Array($0) }
            guard let address = IPAddress(networkBytes: bytes) else { return nil }
            return (address, UInt16(bigEndian: v6.address.sin6_port))
        default:
            return nil
        }
    }
}

extension hp_ip_address {
    /// The address's network-order bytes, an IPv4 address in the first 4.
    init(_ address: IPAddress) {
        let b = address.networkBytes + [UInt8](repeating: 0, count: 16 - address.networkBytes.count)
        self.init(bytes: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
    }
}
