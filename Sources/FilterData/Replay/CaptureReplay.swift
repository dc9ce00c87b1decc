// `filterctl replay`: every packet of a capture goes through the same
// FlowInspector the data path uses, with the capture's timestamps as the
// clock, and each flow is reported once with its decision. Pure: the caller
// reads the file and hands over its bytes.
//
// Tunnels: a host with a tunnel interface hands netfilter the inner packets
// (on the tunnel device) as well as the outer ones, and only the inner
// packets carry names. A capture taken on the physical link holds only the
// outer packets, so the replay unwraps IPv4/IPv6-in-IP (protocols 4 and 41),
// Teredo (UDP 3544), VXLAN (UDP 4789) and GTP-U (UDP 2152) and inspects the
// inner packet in place of the outer one.

import HallpassWire
public import HallpassIPC
public import VerdictCore

/// One flow of a replayed capture, as first seen.
public struct ReplayedFlow: Sendable, Hashable {
    /// The 5-tuple in the client's direction.
    public var key: FlowKey
    public var kind: FlowKind
    /// The name the flow showed (for DNS, the first question), as on the wire.
    public var name: String?
    /// For plain HTTP: `http://HOST/PATH`.
    public var url: String?
    public var encryptedClientHello: Bool
    /// The flow's final decision; for DNS the first query's; for a flow still
    /// undecided at the end of the capture, the last answer (needMoreData or needRules).
    public var decision: Decision
    /// The decision is final (false: the capture ended before the flow was decided).
    public var isDecided: Bool
    /// DNS queries seen on the flow (0 for other flows).
    public var queries: Int
    /// Packets of the flow, both directions.
    public var packets: Int
    /// The index of the capture record that created the flow.
    public var firstRecord: Int

    public var transportName: String {
        switch key.protocolNumber {
        case 6: "tcp"
        case 17: "udp"
        default: "ip\(key.protocolNumber)"
        }
    }
}

/// What a replay of one capture found.
public struct CaptureReplayReport: Sendable {
    /// Flows in the order of their first packet.
    public var flows: [ReplayedFlow] = []
    public var counters = InspectorCounters()
    public var records = 0
    /// Records that hold no IP packet (ARP, other link protocols).
    public var nonIPRecords = 0
    /// Inner packets unwrapped from tunnels.
    public var tunnelledPackets = 0
}

/// Replays captures through a `FlowInspector`.
public enum CaptureReplay {
    /// Tunnels nested deeper than this are not unwrapped further.
    public static let maximumTunnelDepth = 3

    /// Replays the capture in `bytes` (pcap or pcapng, recognised by its magic number).
    public static func run<Rules: RuleSource>(
        bytes: [UInt8], engine: VerdictEngine<Rules>, settings: FlowInspectorSettings = FlowInspectorSettings()
    ) throws(CaptureError) -> CaptureReplayReport {
        var reader = try CaptureReader(bytes: bytes)
        var inspector = FlowInspector(engine: engine, settings: settings)
        var report = CaptureReplayReport()
        var flowIndex: [FlowKey: Int] = [:]
        var now: UInt64 = 0
        while let record = try reader.next() {
            report.records += 1
            if let timestamp = record.timestamp { now = max(now, nanoseconds(timestamp)) }
            guard case .ip(let packet) = record.payload else {
                report.nonIPRecords += 1
                continue
            }
            let inner = unwrapTunnels(packet)
            if inner.count != packet.count || inner.startIndex != packet.startIndex { report.tunnelledPackets += 1 }
            let inspection = inspector.inspect(inner, now: now)
            note(inspection, record: record.index, in: &report, index: &flowIndex)
        }
        report.counters = inspector.counters
        return report
    }

    /// Capture time in nanoseconds since the epoch (0 before it).
    static func nanoseconds(_ timestamp: CaptureTimestamp) -> UInt64 {
        guard timestamp.seconds >= 0 else { return 0 }
        let (whole, overflow) = UInt64(timestamp.seconds).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : whole &+ UInt64(timestamp.nanoseconds)
    }

    private static func note(_ inspection: Inspection, record: Int, in report: inout CaptureReplayReport, index: inout [FlowKey: Int]) {
        guard let key = inspection.flow else { return }
        if inspection.createdFlow || index[key] == nil {
            index[key] = report.flows.count
            report.flows.append(ReplayedFlow(
                key: key, kind: inspection.kind, name: nil, url: nil, encryptedClientHello: false,
                decision: inspection.decision, isDecided: false, queries: 0, packets: 0, firstRecord: record))
        }
        let position = index[key]!
        var flow = report.flows[position]
        flow.packets += 1
        switch inspection.finality {
        case .firstDecision:
            adopt(inspection, in: &flow)
        case .packetDecision where inspection.direction == .clientToServer:
            // A DNS query: the first one decides the line; the first readable question names it.
            flow.queries += 1
            if flow.queries == 1 || !flow.isDecided { adopt(inspection, in: &flow) }
            if flow.name == nil, inspection.findings.name != nil { apply(inspection.findings, to: &flow) }
        case .packetDecision:
            // A DNS response before any query.
            if !flow.isDecided { adopt(inspection, in: &flow) }
        case .undecided:
            if !flow.isDecided {
                flow.decision = inspection.decision
                flow.kind = inspection.kind
            }
        case .repeatedDecision, .untracked:
            break
        }
        report.flows[position] = flow
    }

    private static func adopt(_ inspection: Inspection, in flow: inout ReplayedFlow) {
        flow.decision = inspection.decision
        flow.kind = inspection.kind
        flow.isDecided = inspection.finality != .undecided
        apply(inspection.findings, to: &flow)
    }

    private static func apply(_ findings: FlowFindings, to flow: inout ReplayedFlow) {
        flow.name = findings.name
        flow.encryptedClientHello = findings.encryptedClientHello
        if findings.kind == .http, let name = findings.name {
            flow.url = "http://" + name + (findings.path ?? "")
        } else {
            flow.url = nil
        }
    }

    // MARK: Tunnels

    /// The innermost IP packet of a supported tunnel, or `packet` itself.
    static func unwrapTunnels(_ packet: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var current = packet
        for _ in 0..<maximumTunnelDepth {
            guard let inner = innerPacket(current) else { break }
            current = inner
        }
        return current
    }

    private static func innerPacket(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        guard let packet = try? IPPacketParser.parse(bytes), packet.fragmentation == .unfragmented else { return nil }
        let base = bytes.startIndex
        let payload = bytes[(base + packet.payload.lowerBound)..<(base + packet.payload.upperBound)]
        switch packet.protocolNumber {
        case 4, 41:
            return payload.first.map { $0 >> 4 == 4 || $0 >> 4 == 6 } == true ? payload : nil
        case 17:
            guard let source = packet.sourcePort, let destination = packet.destinationPort else { return nil }
            let ports = (source, destination)
            if ports.0 == 3544 || ports.1 == 3544 { return teredoInner(payload) }
            if ports.0 == 4789 || ports.1 == 4789 { return vxlanInner(payload) }
            if ports.0 == 2152 || ports.1 == 2152 { return gtpInner(payload) }
            return nil
        default:
            return nil
        }
    }

    /// Teredo (RFC 4380 section 5.1.1): an optional origin indication (8 bytes,
    /// starting 0x0000), then an IPv6 packet. Authentication headers (0x0001) are skipped.
    private static func teredoInner(_ payload: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        var inner = payload
        if inner.count >= 4, inner[inner.startIndex] == 0, inner[inner.startIndex + 1] == 1 {
            // Authentication indicator: 0x0001, id-len, au-len, id, auth, nonce (8), confirmation (1).
            let idLength = Int(inner[inner.startIndex + 2])
            let authLength = Int(inner[inner.startIndex + 3])
            let length = 4 + idLength + authLength + 9
            guard inner.count >= length else { return nil }
            inner = inner.dropFirst(length)
        }
        if inner.count >= 8, inner[inner.startIndex] == 0, inner[inner.startIndex + 1] == 0 {
            inner = inner.dropFirst(8)
        }
        guard inner.count >= 40, inner[inner.startIndex] >> 4 == 6 else { return nil }
        return inner
    }

    /// VXLAN (RFC 7348 section 5): an 8-byte header, then an Ethernet frame.
    private static func vxlanInner(_ payload: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        guard payload.count > 8, payload[payload.startIndex] & 0x08 != 0 else { return nil }
        if case .ip(let inner) = LinkLayer.payload(of: payload.dropFirst(8), linkType: 1) { return inner }
        return nil
    }

    /// GTP-U (3GPP TS 29.281 section 5): an 8-byte header, 4 more bytes when
    /// any of E, S, PN is set, then extension headers, then the user's IP packet.
    private static func gtpInner(_ payload: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        guard payload.count > 8, let flags = payload.first, flags >> 5 == 1, payload[payload.startIndex + 1] == 0xFF else { return nil }
        var position = payload.startIndex + 8
        if flags & 0x07 != 0 {
            guard payload.endIndex - position >= 4 else { return nil }
            var nextType = payload[position + 3]
            position += 4
            var extensions = 0
            while nextType != 0 {
                extensions += 1
                guard extensions <= 8, position < payload.endIndex else { return nil }
                let length = Int(payload[position]) * 4
                guard length > 0, payload.endIndex - position >= length else { return nil }
                nextType = payload[position + length - 1]
                position += length
            }
        }
        let inner = payload[position...]
        guard let first = inner.first, first >> 4 == 4 || first >> 4 == 6 else { return nil }
        return inner
    }
}
