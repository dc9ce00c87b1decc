import CHallpassSys
public import HallpassIPC
public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

/// Cuts open connections that the policy in force now blocks (a lesson
/// starts, an exam, an override): the connection's mark says "blocked" from
/// now on, so any later packet of it meets the kernel rules' reject, and the
/// local socket is destroyed (sock_diag SOCK_DESTROY), so the program learns
/// at once, even from a connection that is idle: a TCP program sees its
/// connection reset, a UDP program an error. Needs CAP_NET_ADMIN in the
/// connection's network namespace (filter-control has it).
///
/// The two netlink requests (conntrack, sock_diag) are kernel calls in the C
/// shim, which takes the addresses by value.
public struct ConnectionCutter: Sendable {
    public let marks: FlowMarks

    public init(marks: FlowMarks = FlowMarks()) {
        self.marks = marks
    }

    public struct Outcome: Sendable, Hashable {
        /// The connection mark now says blocked (false: conntrack has no such connection any more).
        public var marked: Bool
        /// The local socket was destroyed (false: no such socket, or not ours to see).
        public var socketDestroyed: Bool
        /// Errors other than "no such connection", as errno values.
        public var errors: [Int32]
    }

    /// Cuts `connection`, keyed as the kernel's connection tracking keys it:
    /// its source is this machine's end (hallpass judges what leaves the machine).
    public func cut(_ connection: FlowKey) -> Outcome {
        let family = connection.source.isIPv4 ? AF_INET : AF_INET6
        let local = hp_ip_address(connection.source)
        let remote = hp_ip_address(connection.destination)
        let marked = hp_conntrack_set_mark(
            family, connection.protocolNumber, local, remote, connection.sourcePort, connection.destinationPort, marks.block, marks.mask)
        let destroyed = hp_socket_destroy(family, connection.protocolNumber, local, remote, connection.sourcePort, connection.destinationPort)
        let errors = [marked, destroyed].filter { $0 < 0 && $0 != -ENOENT }.map { -$0 }
        return Outcome(marked: marked == 0, socketDestroyed: destroyed == 0, errors: errors)
    }
}

extension hp_ip_address {
    /// The address's network-order bytes, an IPv4 address in the first 4.
    init(_ address: IPAddress) {
        let b = address.networkBytes + [UInt8](repeating: 0, count: 16 - address.networkBytes.count)
        self.init(bytes: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
    }
}
