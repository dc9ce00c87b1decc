/// filter-data's counters, as its `pong` carries them to filter-control.
///
/// Both processes compile against these fields: filter-data fills them,
/// filter-control reads them by name in Swift, never by a string, so a
/// renamed or removed counter is a build error on both sides, not a value
/// that silently reads 0. On the wire every field travels as NAME=VALUE in
/// the order of `layout`, and a `pong` decodes only with exactly these names
/// in this order (both programs come from one build).
public struct FilterDataCounters: Sendable, Hashable {
    /// The version of the rule store in force.
    public var rulesVersion: UInt64 = 0
    /// Packets inspected.
    public var packets: UInt64 = 0
    /// Flows entered into the flow table.
    public var flows: UInt64 = 0
    /// TCP SYNs the kernel rules queued as reopened (a new connection on a decided one's ports).
    public var reopenedConnections: UInt64 = 0
    /// Reads after a turn's verdicts that found more packets.
    public var lateReads: UInt64 = 0
    /// Decided TCP flows forgotten because a SYN opened a new connection on their addresses and ports.
    public var reopenedFlows: UInt64 = 0
    /// Decided UDP flows judged again because a QUIC connection's first Initial came on their ports.
    public var reopenedQUICFlows: UInt64 = 0
    /// Decided TCP flows forgotten once the packets queued before their verdict were in.
    public var decidedForgotten: UInt64 = 0
    /// Packets by verdict.
    public var allowed: UInt64 = 0
    public var dropped: UInt64 = 0
    public var neededRules: UInt64 = 0
    public var neededMoreData: UInt64 = 0
    /// Packets that are not IPv4/IPv6 with a readable header.
    public var parseErrors: UInt64 = 0
    /// Packets and flows waiting for needRules answers now.
    public var heldPackets: UInt64 = 0
    public var heldFlows: UInt64 = 0
    /// needRules questions sent, and answers applied.
    public var questions: UInt64 = 0
    public var answers: UInt64 = 0
    /// Held flows that got `policy.askDefault` because no answer came in time.
    public var askTimeouts: UInt64 = 0
    /// Packets not held because the hold was full.
    public var holdOverflows: UInt64 = 0
    /// Rule swaps applied and refused.
    public var ruleSwaps: UInt64 = 0
    public var ruleSwapsRefused: UInt64 = 0
    /// Control messages that did not decode or came from the wrong side.
    public var invalidControlMessages: UInt64 = 0
    /// DNS answers for blocked names pointed at the block page, and those with no address to rewrite.
    public var dnsRewrites: UInt64 = 0
    public var dnsRewritesEmpty: UInt64 = 0
    /// Addresses of inspected names put into the kernel sets that send their connections to the proxy.
    public var inspectionAddresses: UInt64 = 0
    /// Connections that showed an inspected name outside the redirect, refused so their next try reaches the proxy.
    public var outsideRedirect: UInt64 = 0
    /// Decisions reported to filter-control, and those dropped because the channel stayed full.
    public var reportsSent: UInt64 = 0
    public var reportsDropped: UInt64 = 0
    /// Verdicts sent to the kernel, netlink error replies, lost netlink messages.
    public var verdictsSent: UInt64 = 0
    public var netlinkErrors: UInt64 = 0
    public var receiveOverruns: UInt64 = 0
    /// The needRules round trips kept for percentiles, and their median and 99th percentile.
    public var roundTrips: UInt64 = 0
    public var roundTripP50Micros: UInt64 = 0
    public var roundTripP99Micros: UInt64 = 0

    public init() {}

    /// Every field with its name, in the wire's order: the one list both the
    /// encoder and the decoder walk.
    public static let layout: [(name: String, field: any WritableKeyPath<FilterDataCounters, UInt64> & Sendable)] = [
        ("rulesVersion", \.rulesVersion), ("packets", \.packets), ("flows", \.flows),
        ("reopenedConnections", \.reopenedConnections), ("lateReads", \.lateReads), ("reopenedFlows", \.reopenedFlows),
        ("reopenedQUICFlows", \.reopenedQUICFlows), ("decidedForgotten", \.decidedForgotten), ("allowed", \.allowed),
        ("dropped", \.dropped), ("neededRules", \.neededRules), ("neededMoreData", \.neededMoreData),
        ("parseErrors", \.parseErrors), ("heldPackets", \.heldPackets), ("heldFlows", \.heldFlows),
        ("questions", \.questions), ("answers", \.answers), ("askTimeouts", \.askTimeouts),
        ("holdOverflows", \.holdOverflows), ("ruleSwaps", \.ruleSwaps), ("ruleSwapsRefused", \.ruleSwapsRefused),
        ("invalidControlMessages", \.invalidControlMessages), ("dnsRewrites", \.dnsRewrites),
        ("dnsRewritesEmpty", \.dnsRewritesEmpty), ("inspectionAddresses", \.inspectionAddresses), ("outsideRedirect", \.outsideRedirect),
        ("reportsSent", \.reportsSent), ("reportsDropped", \.reportsDropped),
        ("verdictsSent", \.verdictsSent), ("netlinkErrors", \.netlinkErrors), ("receiveOverruns", \.receiveOverruns),
        ("roundTrips", \.roundTrips), ("roundTripP50Micros", \.roundTripP50Micros), ("roundTripP99Micros", \.roundTripP99Micros),
    ]

    /// The counters by name, in the wire's order (for `filterctl status`).
    public var fields: [(name: String, value: UInt64)] {
        FilterDataCounters.layout.map { ($0.name, self[keyPath: $0.field]) }
    }

    /// Reads the NAME=VALUE fields of a `pong`: exactly the fields of
    /// `layout`, in its order.
    public init(fields: some Collection<String>) throws(ControlMessageError) {
        guard fields.count == FilterDataCounters.layout.count else {
            throw ControlMessageError(reason: "'pong' carries \(fields.count) counters, \(FilterDataCounters.layout.count) expected")
        }
        for (text, entry) in zip(fields, FilterDataCounters.layout) {
            guard let equals = text.firstIndex(of: "="), text[..<equals] == entry.name,
                let value = UInt64(text[text.index(after: equals)...])
            else {
                throw ControlMessageError(reason: "'\(text.prefix(64))' is not \(entry.name)=NUMBER")
            }
            self[keyPath: entry.field] = value
        }
    }
}
