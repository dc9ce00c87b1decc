public import VerdictCore

/// A directed 5-tuple: protocol, source address and port, destination address
/// and port. The one type for a connection's addresses in every part of
/// hallpass: filter-data's flow table, the reports it sends, filter-control's
/// record of open connections and the block page's look-up of who is asking.
///
/// `hash(into:)` and `==` are written out and inlinable: filter-data hashes a
/// key for every packet, from another module than this one.
public struct FlowKey: Hashable, Sendable, CustomStringConvertible {
    public var protocolNumber: UInt8
    public var source: IPAddress
    public var sourcePort: UInt16
    public var destination: IPAddress
    public var destinationPort: UInt16

    @inlinable
    public init(protocolNumber: UInt8, source: IPAddress, sourcePort: UInt16, destination: IPAddress, destinationPort: UInt16) {
        self.protocolNumber = protocolNumber
        self.source = source
        self.sourcePort = sourcePort
        self.destination = destination
        self.destinationPort = destinationPort
    }

    /// The same flow seen from the other end.
    @inlinable
    public var reversed: FlowKey {
        FlowKey(protocolNumber: protocolNumber, source: destination, sourcePort: destinationPort,
                destination: source, destinationPort: sourcePort)
    }

    /// The same key for both directions of a connection: the endpoint that
    /// sorts lower (address, then port) comes first.
    @inlinable
    public var directionIndependent: FlowKey {
        FlowKey.endpointPrecedes(source, sourcePort, destination, destinationPort) ? self : reversed
    }

    /// True when this key is already in its direction-independent order.
    @inlinable
    public var isCanonicalDirection: Bool {
        FlowKey.endpointPrecedes(source, sourcePort, destination, destinationPort)
    }

    @usableFromInline static func endpointPrecedes(_ a: IPAddress, _ aPort: UInt16, _ b: IPAddress, _ bPort: UInt16) -> Bool {
        switch (a, b) {
        case (.v4(let x), .v4(let y)): return x != y ? x < y : aPort <= bPort
        case (.v6(let xh, let xl), .v6(let yh, let yl)):
            if xh != yh { return xh < yh }
            if xl != yl { return xl < yl }
            return aPort <= bPort
        case (.v4, .v6): return true
        case (.v6, .v4): return false
        }
    }

    @inlinable
    public func hash(into hasher: inout Hasher) {
        hasher.combine(protocolNumber)
        hasher.combine(source)
        hasher.combine(sourcePort)
        hasher.combine(destination)
        hasher.combine(destinationPort)
    }

    @inlinable
    public static func == (a: FlowKey, b: FlowKey) -> Bool {
        a.protocolNumber == b.protocolNumber && a.sourcePort == b.sourcePort && a.destinationPort == b.destinationPort
            && a.source == b.source && a.destination == b.destination
    }

    /// `tcp 10.0.0.2:40000 -> 192.0.2.7:443` (`proto 50 ...` for a protocol without ports of its own name).
    public var description: String {
        (protocolNumber == 6 ? "tcp " : protocolNumber == 17 ? "udp " : "proto \(protocolNumber) ")
            + "\(source):\(sourcePort) -> \(destination):\(destinationPort)"
    }
}
