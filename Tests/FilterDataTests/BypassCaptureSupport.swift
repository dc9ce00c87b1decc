// What the filter sees of each flow of a capture before its verdict (the
// client's datagrams, the client's TCP stream prefix), what the bypass
// recognizers and the Google QUIC parser make of it, and nDPI's label for
// the flow, for the per-capture reports of TunnelRecognizerCaptureTests and
// GoogleQUICTests.
import Foundation
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

/// One flow of a capture, from the client's side.
struct ClientFlow {
    /// Client to server.
    var key: FlowKey
    var firstRecord: Int
    /// The first client datagrams (UDP).
    var datagrams: [[UInt8]] = []
    /// The client's TCP segments in capture order (sequence number, SYN flag, payload).
    var segments: [(sequence: UInt32, syn: Bool, payload: [UInt8])] = []
    var packets = 0

    var isTCP: Bool { key.protocolNumber == 6 }
    var identity: FlowIdentity { FlowIdentity(transport: isTCP ? "tcp" : "udp", .init(address: key.source, port: key.sourcePort),
                                              .init(address: key.destination, port: key.destinationPort)) }
}

enum ClientFlows {
    /// Datagrams and segments kept per flow (what a filter would look at, and more).
    static let datagramBound = 16
    static let segmentBound = 64

    /// The TCP and UDP flows of a capture (tunnels unwrapped as the replay does). The client is
    /// the sender of the flow's first packet, or the receiver of a first SYN-ACK.
    static func read(_ relativePath: String) throws -> [ClientFlow] {
        var reader = try CaptureReader(bytes: try TestData.bytes(relativePath))
        var flows: [ClientFlow] = []
        var index: [FlowKey: Int] = [:]
        while let record = try reader.next() {
            guard case .ip(let packet) = record.payload else { continue }
            let inner = CaptureReplay.unwrapTunnels(packet)
            guard let ip = try? IPPacketParser.parse(inner), ip.fragmentation == .unfragmented, let key = ip.flowKey,
                  ip.protocolNumber == 6 || ip.protocolNumber == 17 else { continue }
            let base = inner.startIndex
            let payload = Array(inner[(base + ip.payload.lowerBound)..<(base + ip.payload.upperBound)])
            let position: Int
            let fromClient: Bool
            if let known = index[key.directionIndependent] {
                position = known
                fromClient = flows[known].key == key
            } else {
                let synAck = ip.tcp.map { $0.flags.contains(.syn) && $0.flags.contains(.ack) } ?? false
                position = flows.count
                index[key.directionIndependent] = position
                flows.append(ClientFlow(key: synAck ? key.reversed : key, firstRecord: record.index))
                fromClient = !synAck
            }
            flows[position].packets += 1
            guard fromClient else { continue }
            if let tcp = ip.tcp {
                if (!payload.isEmpty || tcp.flags.contains(.syn)), flows[position].segments.count < segmentBound {
                    flows[position].segments.append((tcp.sequenceNumber, tcp.flags.contains(.syn), payload))
                }
            } else if !payload.isEmpty, flows[position].datagrams.count < datagramBound {
                flows[position].datagrams.append(payload)
            }
        }
        return flows
    }
}

/// What the recognizers make of a flow, and what it otherwise looks like.
struct FlowVerdictEvidence {
    var recognition: BypassRecognition?
    /// How many client payloads (datagrams, or segments that grew the prefix) were needed.
    var payloadsSeen: Int
    /// TLS with its SNI, QUIC, HTTP, DNS, or what the first bytes are.
    var appearance: String
}

enum BypassEvidence {
    static func examine(_ flow: ClientFlow) -> FlowVerdictEvidence {
        flow.isTCP ? examineTCP(flow) : examineUDP(flow)
    }

    static func examineTCP(_ flow: ClientFlow) -> FlowVerdictEvidence {
        var peek = StreamPeek()
        var seen = 0
        var last: BypassOutcome = .needMoreData
        for segment in flow.segments {
            guard peek.add(sequenceNumber: segment.sequence, isSYN: segment.syn, payload: segment.payload) else {
                if segment.syn, flow.key.destinationPort == TunnelRecognizer.Ports.encryptedDNS { break }
                continue
            }
            seen += 1
            last = TunnelRecognizer.examine(stream: Array(peek.contiguousPrefix), serverPort: flow.key.destinationPort)
            if case .needMoreData = last { continue }
            break
        }
        if case .needMoreData = last, flow.key.destinationPort == TunnelRecognizer.Ports.encryptedDNS {
            last = TunnelRecognizer.examine(stream: [], serverPort: flow.key.destinationPort)
        }
        let prefix = Array(peek.contiguousPrefix)
        let appearance = describeStream(prefix)
        if case .recognized(let recognition) = last { return FlowVerdictEvidence(recognition: recognition, payloadsSeen: seen, appearance: appearance) }
        // DNS over TLS on another port, by ALPN.
        if case .clientHello(let hello) = ClientHelloParser.parse(recordStream: prefix),
           let recognition = TunnelRecognizer.encryptedDNS(alpnProtocols: hello.alpnProtocols, quic: false) {
            return FlowVerdictEvidence(recognition: recognition, payloadsSeen: seen, appearance: appearance)
        }
        return FlowVerdictEvidence(recognition: nil, payloadsSeen: seen, appearance: appearance)
    }

    static func examineUDP(_ flow: ClientFlow) -> FlowVerdictEvidence {
        var recognizer = DatagramTunnelRecognizer(serverPort: flow.key.destinationPort)
        var seen = 0
        for datagram in flow.datagrams {
            seen += 1
            if case .recognized(let recognition) = recognizer.add(datagram: datagram) {
                return FlowVerdictEvidence(recognition: recognition, payloadsSeen: seen, appearance: describeDatagrams(flow))
            }
        }
        // DNS over QUIC on another port, by ALPN.
        var assembler = QUICCryptoAssembler()
        for datagram in flow.datagrams where datagram.first.map({ $0 & 0x80 != 0 }) == true {
            _ = assembler.add(datagram: datagram)
            if case .clientHello(let hello) = assembler.clientHello() {
                if let recognition = TunnelRecognizer.encryptedDNS(alpnProtocols: hello.alpnProtocols, quic: true) {
                    return FlowVerdictEvidence(recognition: recognition, payloadsSeen: seen, appearance: describeDatagrams(flow))
                }
                break
            }
        }
        return FlowVerdictEvidence(recognition: nil, payloadsSeen: seen, appearance: describeDatagrams(flow))
    }

    static func describeStream(_ prefix: [UInt8]) -> String {
        if prefix.isEmpty { return "no client bytes" }
        switch ClientHelloParser.parse(recordStream: prefix) {
        case .clientHello(let hello):
            let alpn = hello.alpnProtocols.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ",")
            return "TLS, SNI \(hello.serverName.map { String(decoding: $0, as: UTF8.self) } ?? "none")" + (alpn.isEmpty ? "" : ", ALPN \(alpn)")
                + (hello.hasEncryptedClientHello ? ", ECH extension" : "")
        case .needMoreData: return "TLS, ClientHello incomplete"
        case .malformed(let reason): return "TLS framing, \(reason)"
        case .tooLarge(let declared): return "TLS, ClientHello of \(declared) bytes, too large to read"
        case .notTLS: break
        }
        if case .request(let head) = HTTPRequestHeadParser.parse(prefix) {
            return "HTTP, Host \(head.host.map { String(decoding: $0, as: UTF8.self) } ?? "none")"
        }
        return "first bytes " + prefix.prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    static func describeDatagrams(_ flow: ClientFlow) -> String {
        guard let first = flow.datagrams.first else { return "no client datagrams" }
        // A Google QUIC version tag ('Q' or 'T' and three digits) after a long header's first byte or a public header's connection ID.
        for offset in [1, 9] where first.count >= offset + 4 && (first[offset] == 0x51 || first[offset] == 0x54)
            && first[(offset + 1)...(offset + 3)].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            return "Google QUIC " + String(decoding: first[offset...(offset + 3)], as: UTF8.self)
        }
        if first.first.map({ $0 & 0x80 != 0 }) == true, first.count >= 5 {
            let version = QUICVersion(rawValue: UInt32(first[1]) << 24 | UInt32(first[2]) << 16 | UInt32(first[3]) << 8 | UInt32(first[4]))
            if version.isSupported || version.rawValue == 0 { return "QUIC \(version)" }
        }
        if case .success(let message) = DNSMessageParser.parse(first), message.question != nil,
           flow.key.destinationPort == 53 || flow.key.destinationPort == 5353 || flow.key.sourcePort == 53 {
            return "DNS"
        }
        return "\(flow.datagrams.count) datagram(s), first \(first.count) bytes " + first.prefix(8).map { String(format: "%02x", $0) }.joined()
    }
}

/// nDPI's flows and labels from `result/<capture>.out`.
struct NDPIFlowLabel {
    var number: Int
    var identity: FlowIdentity
    /// `159/OpenVPN`, `91.196/TLS.DoH_DoT`.
    var label: String

    /// The recognizer kind this label calls for, if any.
    var expectedKind: BypassKind? {
        let name = label.split(separator: "/").dropFirst().joined(separator: "/")
        if name.contains("OpenVPN") { return .openvpn }
        if name.contains("WireGuard") || name.contains("Tailscale") { return .wireguard }
        if name.contains("IPSec") { return .ike }
        if name.hasPrefix("SOCKS") { return .socks }
        if name.contains("HTTP_Connect") { return .connect }
        if name.hasPrefix("SSH") { return .ssh }
        if name.contains("DoH_DoT") {
            if identity.transport == "udp" { return .doq }
            if identity.endpoints.contains(where: { $0.port == 853 }) { return .dot }
        }
        return nil
    }

    static func read(resultFile relativePath: String) throws -> [NDPIFlowLabel] {
        let text = String(decoding: try TestData.bytes(relativePath), as: UTF8.self)
        var flows: [NDPIFlowLabel] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // "\t1\tTCP a:p <-> b:q [VLAN: 200][proto: 91/TLS]..."
            let head = line.split(separator: "\t", omittingEmptySubsequences: true)
            guard head.count >= 2, let number = Int(head[0].trimmingCharacters(in: .whitespaces)),
                  fields.count >= 4, let transportField = head[1].split(separator: " ").first,
                  transportField == "TCP" || transportField == "UDP" else { continue }
            let parts = head[1].split(separator: " ")
            guard parts.count >= 4, let a = FlowIdentity.endpoint(parts[1]), let b = FlowIdentity.endpoint(parts[3]),
                  let protoStart = line.range(of: "[proto: "), let protoEnd = line[protoStart.upperBound...].firstIndex(of: "]") else { continue }
            flows.append(NDPIFlowLabel(number: number, identity: FlowIdentity(transport: String(transportField), a, b),
                                       label: String(line[protoStart.upperBound..<protoEnd])))
        }
        return flows
    }
}
