// Which answers of judged DNS queries change, and how the changed answer
// packet is made. Pure: DataPath asks on the way out and rewrites on the way in.
import HallpassWire
public import VerdictCore

extension DNSAnswerAction {
    /// How the answer to a query on its way out is to be changed, nil when
    /// not at all: a blocked name's points at the block page (with
    /// `blockedDNS: rewrite`), a canary name's becomes NXDOMAIN, a SafeSearch
    /// name's points at the enforcement host (once filter-control gave its
    /// addresses), and an HTTPS or SVCB answer loses `ech` (`bypass.ech: block`).
    public init?<Rules>(for inspection: Inspection, engines: PolicyEngines<Rules>) {
        guard inspection.finality == .packetDecision, inspection.kind == .dns, inspection.direction == .clientToServer,
            let host = inspection.facts.host
        else { return nil }
        let policy = (engines.engine(for: inspection.facts.uid) ?? engines.fallback).policy
        switch inspection.verdict {
        case .drop:
            let reason = inspection.decision.reason
            if reason.source == .bypass, reason.rule == VerdictEngine<Rules>.canaryRule {
                self = .nxdomain
                return
            }
            guard policy.dnsRewrite != nil else { return nil }
            self = .pointAtBlockPage
        case .allow:
            if !policy.bypass.safeSearch.isEmpty, let engine = SafeSearch.engine(for: host, among: policy.bypass.safeSearch),
                engines.set.safeSearchTargets[engine] != nil
            {
                self = .safeSearch(engine)
                return
            }
            let type = inspection.findings.dnsType
            guard policy.bypass.ech == .block, type == 65 || type == 64 else { return nil }
            self = .removeECH
        case .needRules, .needMoreData:
            return nil
        }
    }

    /// The answer packet changed for a bypass action; nil when there is
    /// nothing to change (and for `pointAtBlockPage`, which DNSAnswerRewrite makes).
    public func rewrite(_ bytes: Span<UInt8>, targets: [SafeSearchEngine: SafeSearchTarget]) throws(DNSRewriteError) -> [UInt8]? {
        let message = try DNSPacketRewrite.udpPayload(of: bytes)
        let changed: [UInt8]?
        switch self {
        case .nxdomain:
            changed = try DNSBypassRewrite.nxdomain(for: message)
        case .safeSearch(let engine):
            guard let target = targets[engine] else { return nil }
            changed = try DNSBypassRewrite.safeSearchAnswer(
                for: message, target: Array(engine.enforcementHost.utf8), addresses: target.addresses, timeToLive: target.timeToLive)
        case .removeECH:
            changed = try DNSBypassRewrite.removingECH(fromMessage: message)
        case .pointAtBlockPage:
            return nil
        }
        guard let changed else { return nil }
        return try DNSPacketRewrite.replacingUDPPayload(of: bytes, with: changed)
    }

    /// Convenience for an array.
    public func rewrite(_ packet: [UInt8], targets: [SafeSearchEngine: SafeSearchTarget]) throws(DNSRewriteError) -> [UInt8]? {
        try rewrite(packet.span, targets: targets)
    }
}

extension Inspection {
    /// Whether the answer to this DNS query selects its addresses for the
    /// inspection proxy: an allowed A or AAAA query for a name some
    /// audience inspects (`PolicyEngines.inspectedForSomeone`). One check
    /// of a flag when no audience inspects anything.
    public func selectsForInspection<Rules>(engines: PolicyEngines<Rules>) -> Bool {
        guard kind == .dns, engines.inspectsAnything, finality == .packetDecision, direction == .clientToServer, verdict == .allow,
            findings.dnsType == 1 || findings.dnsType == 28, let host = facts.host
        else { return false }
        return engines.inspectedForSomeone(host)
    }
}
