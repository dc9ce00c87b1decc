/// The packet marks that carry a flow's decision to the kernel rules, which
/// save them to the connection so later packets never reach user space.
public struct FlowMarks: Sendable, Hashable {
    public var allow: UInt32 = 0x0010_0000
    public var block: UInt32 = 0x0020_0000
    /// The bits of a flow's decision in the packet and connection marks.
    public var mask: UInt32 = 0x0030_0000
    /// A DNS query whose answer filter-data must see (to point it at the
    /// block page): set on the query's connection, never cleared, so the
    /// answers of that socket are queued on the input hook and all others
    /// pass in the kernel. One queue trip per lookup in the common case.
    public var dnsAnswer: UInt32 = 0x0040_0000
    /// Set by the kernel rules on a SYN, or a QUIC client Initial, whose
    /// connection already carries a decision (a new connection reusing a
    /// decided one's addresses and ports): the decision is cleared and the
    /// packet queued, so filter-data judges the new connection on its own.
    public var reopened: UInt32 = 0x0080_0000

    public init() {}
}
