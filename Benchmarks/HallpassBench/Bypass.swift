// hallpass-bench bypass: the per-payload cost of the bypass parsers (the
// tunnel recognizers, Google QUIC, the DNS rewrites) on the payloads of the
// shared captures, each payload parsed once per round. For instruction
// counts under `valgrind --tool=callgrind`: run it with two values of
// --rounds, and the difference over the extra rounds leaves out reading the
// captures (scripts/bench-parsers.sh does this).
//
//   hallpass-bench bypass [--testdata DIR] [--kind tunnel|gquic|dns] [--rounds R]
//       tunnel: every TCP and UDP payload of ndpi-bypass/pcap, through
//               TunnelRecognizer (a stream or a datagram, with its server port)
//       gquic:  every UDP payload of nDPI's Google QUIC captures, through its flow's
//               GoogleQUICHandshake (a new one per flow and round)
//       dns:    every DNS message to or from port 53 of nDPI's DNS captures, and
//               dnsmasq's answer with ech: removingECH, and for each query an
//               NXDOMAIN answer put back into its packet
import FilterData
import HallpassWire
import HallpassIPC
import Foundation
import VerdictCore

/// A transport payload of a capture, with the IP packet that carried it.
struct CapturedPayload {
    var packet: [UInt8]
    var payload: [UInt8]
    var isTCP: Bool
    var sourcePort: UInt16
    var destinationPort: UInt16
}

func capturedPayloads(_ path: String) -> [CapturedPayload] {
    guard let data = FileManager.default.contents(atPath: path) else { fail("cannot read \(path)") }
    let bytes = [UInt8](data)
    var payloads: [CapturedPayload] = []
    do {
        var reader = try CaptureReader(bytes: bytes)
        while let record = try reader.next() {
            guard case .ip(let slice) = record.payload else { continue }
            let packet = Array(slice)
            guard let ip = try? IPPacketParser.parse(packet), !ip.fragmentation.isFragment, let source = ip.sourcePort,
                let destination = ip.destinationPort, !ip.payload.isEmpty
            else { continue }
            payloads.append(CapturedPayload(packet: packet, payload: Array(packet[ip.payload]), isTCP: ip.protocolNumber == 6,
                                            sourcePort: source, destinationPort: destination))
        }
    } catch {
        fail("\(path): \(error)")
    }
    return payloads
}

/// dnsmasq 2.90's answer to `dig www.ech.test HTTPS` with Cloudflare's ECHConfigList (Tests/FilterDataTests/DNSBypassRewriteTests.swift).
let dnsmasqHTTPSAnswer: [UInt8] = {
    let hex = "b4ea85800001000100000001037777770365636804746573740000410001c00c004100010000001e005500010000010003026832000500470045fe0d0041"
        + "f200200020c221a5373fabf3ebaf09da845166da6d484c07fb5217f3fdd3380ac4c74b512c0004000100010012636c6f7564666c6172652d6563682e63"
        + "6f6d000000002904d0000000000000"
    let digits = Array(hex.utf8)
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<($0 + 2)], as: UTF8.self), radix: 16)! }
}()

func bypass(_ arguments: [String]) {
    let root = option("--testdata", in: arguments) ?? "../shared/testdata"
    let kind = option("--kind", in: arguments) ?? "tunnel"
    let rounds = option("--rounds", in: arguments).flatMap { Int($0) } ?? 5
    let files: [String]
    switch kind {
    case "tunnel":
        files = ["cloudflare-warp.pcap", "dns_dot.pcap", "dnscrypt-v2.pcap", "doq.pcapng", "doq_adguard.pcapng", "ipsec_isakmp_esp.pcap",
                 "mullvad_wireguard.pcap", "openvpn-tlscrypt.pcap", "openvpn.pcap", "openvpn_nohmac.pcapng", "openvpn_nohmac_tcp.pcapng",
                 "openvpn_obfuscated.pcapng", "psiphon3.pcap", "shadowsocks.pcap", "socks.pcap", "softether.pcap", "tailscale.pcap",
                 "tls_ech.pcapng", "tor.pcap", "ultrasurf.pcap", "wireguard.pcap"].map { "\(root)/ndpi-bypass/pcap/\($0)" }
    case "gquic":
        files = ["gquic.pcap", "quic046.pcap", "quic_q39.pcap", "quic_q43.pcap", "quic_q46.pcap", "quic_q46_b.pcap", "quic_q50.pcap",
                 "quic_t50.pcap", "quic_t51.pcap"].map { "\(root)/ndpi/pcap/\($0)" }
    case "dns":
        files = ["dns.pcap", "dns-google-nsid.pcapng", "dns_long_domainname.pcap", "googledns_android10.pcap", "mullvad_dns.pcap",
                 "dns_ambiguous_names.pcap", "dns-invalid-chars.pcap", "malformed_dns.pcap"].map { "\(root)/ndpi/pcap/\($0)" }
    default:
        fail("--kind is tunnel, gquic or dns")
    }
    var payloads = files.flatMap(capturedPayloads)
    if kind == "gquic" { payloads.removeAll { $0.isTCP } }
    if kind == "dns" {
        payloads.removeAll { $0.isTCP || ($0.sourcePort != 53 && $0.destinationPort != 53) }
        payloads.append(CapturedPayload(packet: [], payload: dnsmasqHTTPSAnswer, isTCP: false, sourcePort: 53, destinationPort: 40_000))
    }
    var outcomes = 0
    var times: [Double] = []
    for _ in 0..<rounds {
        var handshakes: [UInt32: GoogleQUICHandshake] = [:]
        let start = nanoseconds()
        for item in payloads {
            switch kind {
            case "tunnel":
                let outcome = item.isTCP
                    ? TunnelRecognizer.examine(stream: item.payload, serverPort: item.destinationPort)
                    : TunnelRecognizer.examine(datagram: item.payload, serverPort: item.destinationPort)
                if case .recognized = outcome { outcomes += 1 }
            case "gquic":
                let flow = UInt32(item.sourcePort) << 16 | UInt32(item.destinationPort)
                if case .hello = handshakes[flow, default: GoogleQUICHandshake()].add(datagram: item.payload) { outcomes += 1 }
            default:
                if (try? DNSBypassRewrite.removingECH(fromMessage: item.payload)) != nil { outcomes += 1 }
                // A query (QR clear): the NXDOMAIN answer a canary name gets, in the packet the query came in.
                if item.payload.count > 2, item.payload[2] & 0x80 == 0, !item.packet.isEmpty,
                    let answer = try? DNSBypassRewrite.nxdomain(for: item.payload),
                    (try? DNSPacketRewrite.replacingUDPPayload(of: item.packet, with: answer)) != nil
                {
                    outcomes += 1
                }
            }
        }
        times.append(Double(nanoseconds() - start) / Double(max(1, payloads.count)))
    }
    times.sort()
    print("bypass \(kind): \(payloads.count) payloads x \(rounds) rounds, median \(decimal(times[rounds / 2], places: 1)) ns per payload (\(outcomes / max(1, rounds)) recognized or rewritten per round)")
}
