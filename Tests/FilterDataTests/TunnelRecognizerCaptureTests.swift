// The bypass recognizers on real captures: per capture of ../shared/testdata/ndpi-bypass, which
// flows they recognize from what the filter sees before its verdict and which they cannot (and
// why), against nDPI's classification; and over every capture of ndpi/ and suricata-verify/,
// that no ordinary flow (TLS, HTTP, QUIC, DNS, ...) is taken for a tunnel.
import Foundation
import Testing
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

/// Flows nDPI labels as a bypass that the recognizers cannot see before a verdict, with the reason.
/// Keyed by capture, then nDPI flow number.
enum KnownMisses {
    static let reasons: [String: [Int: String]] = [
        "openvpn_obfuscated.pcapng": [
            2: "OpenVPN scrambled with an XOR key (NordVPN 'obfuscated' servers): opcode and session ID are masked; only the lengths (86, 88 with the TCP prefix) match a tls-auth SHA-512 hard reset",
            3: "the same XOR scrambling over UDP",
        ],
    ]

    /// Bypass flows that no recognizer handles by design (nDPI labels them otherwise or by address), with the reason.
    static func reasonWithoutRecognizer(capture: String, label: String, evidence: FlowVerdictEvidence) -> String? {
        let name = label.split(separator: "/").dropFirst().joined(separator: "/")
        switch true {
        case name.contains("Tor"), capture == "tor.pcap" && name.hasPrefix("TLS"):
            return "Tor: a TLS ClientHello like any other (\(evidence.appearance)); known by the relay's address, from the school's `tor` list"
        case name.contains("CloudflareWarp"):
            return "Cloudflare WARP: nDPI goes by Cloudflare's WARP addresses and ports; a modified WireGuard (message types 0xC1-0xC4) the WireGuard recognizer does not take"
        case name.contains("Psiphon"):
            return "Psiphon: TLS to a fronting name (\(evidence.appearance)): judged by that name"
        case name.contains("UltraSurf"), capture == "ultrasurf.pcap":
            return "UltraSurf: TLS-like bytes to a fixed port, judged by name or address"
        case name.contains("Softether"):
            return "SoftEther: its UDP keepalive is one byte ('A'), its HTTP is plain HTTP with a Host: judged by that name"
        case name.contains("DNScrypt"):
            return "DNSCrypt: random-looking padded queries; its resolvers' names (certificate queries for 2.dnscrypt-cert.*) are visible in DNS"
        case name.contains("NordVPN"):
            return "NordVPN by address (nDPI's IP list); the bytes are scrambled OpenVPN"
        case name.contains("DoH_DoT") && !(evidence.recognition != nil):
            return "DNS over HTTPS on port 443: judged by the resolver's name (rules/bypass/doh)"
        case name == "Unknown" && capture == "shadowsocks.pcap":
            return "Shadowsocks: random bytes by design"
        default:
            return nil
        }
    }
}

@Suite("Bypass recognizers on the shared captures")
struct TunnelRecognizerCaptureTests {
    struct Row {
        var capture: String
        var flow: NDPIFlowLabel?
        var client: ClientFlow
        var evidence: FlowVerdictEvidence
    }

    static func rows(folder: String, resultFolder: String?) throws -> [Row] {
        var rows: [Row] = []
        let captures = try FileManager.default.contentsOfDirectory(atPath: TestData.root.appendingPathComponent(folder).path).sorted()
        for capture in captures where capture.hasSuffix(".pcap") || capture.hasSuffix(".pcapng") {
            let labels = try resultFolder.map { try NDPIFlowLabel.read(resultFile: "\($0)/\(capture).out") } ?? []
            for client in try ClientFlows.read("\(folder)/\(capture)") {
                let label = labels.first { $0.identity == client.identity }
                rows.append(Row(capture: capture, flow: label, client: client, evidence: BypassEvidence.examine(client)))
            }
        }
        return rows
    }

    @Test(.enabled(if: TestData.isAvailable))
    func perCaptureReportOnTheBypassCaptures() throws {
        let rows = try Self.rows(folder: "ndpi-bypass/pcap", resultFolder: "ndpi-bypass/result")
        var recognized = 0
        var expectedAndRecognized = 0
        var expected = 0
        var failures: [String] = []
        print("BYPASS-REPORT\tcapture\tnDPI#\tflow\tnDPI label\thallpass\tpayloads\twhy / what it is")
        for row in rows {
            let label = row.flow?.label ?? "(no nDPI flow)"
            let number = row.flow.map { String($0.number) } ?? "-"
            let expectedKind = row.flow?.expectedKind
            var verdict = "-"
            var why = row.evidence.appearance
            if let recognition = row.evidence.recognition {
                recognized += 1
                verdict = "\(recognition.kind.rawValue) (\(recognition.detail)\(recognition.target.map { ", target \($0)" } ?? ""))"
                if let expectedKind {
                    if expectedKind == recognition.kind { expectedAndRecognized += 1 } else {
                        failures.append("\(row.capture) #\(number): recognized \(recognition.kind) but nDPI says \(label)")
                    }
                } else {
                    // Recognized where nDPI does not see this bypass: acceptable only with a reason.
                    why = "nDPI: \(label); " + why
                }
            } else if let known = row.flow.flatMap({ KnownMisses.reasons[row.capture]?[$0.number] }) {
                why = "not recognized: " + known
            } else if let reason = KnownMisses.reasonWithoutRecognizer(capture: row.capture, label: label, evidence: row.evidence) {
                why = "not recognized: " + reason
            } else if expectedKind != nil {
                failures.append("\(row.capture) #\(number) \(row.client.key): nDPI says \(label), not recognized (\(row.evidence.appearance))")
            }
            if expectedKind != nil { expected += 1 }
            print("BYPASS-REPORT\t\(row.capture)\t\(number)\t\(row.client.key)\t\(label)\t\(verdict)\t\(row.evidence.payloadsSeen)\t\(why)")
        }
        print("BYPASS-SUMMARY\t\(rows.count) flows, \(recognized) recognized, \(expectedAndRecognized) of the \(expected) that nDPI labels with a recognizer's kind")
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        // What this branch reaches on the shared captures (a regression fails).
        #expect(expectedAndRecognized >= 45)
    }

    /// No flow of the ordinary captures may be taken for a tunnel unless nDPI
    /// labels it that way too (DNS over TLS on 853, DNS over QUIC, HTTP CONNECT).
    @Test(.enabled(if: TestData.isAvailable))
    func noOrdinaryFlowIsTakenForATunnel() throws {
        var flows = 0
        var recognized: [String] = []
        var falsePositives: [String] = []
        let ndpi = try Self.rows(folder: "ndpi/pcap", resultFolder: "ndpi/result")
        for row in ndpi {
            flows += 1
            guard let recognition = row.evidence.recognition else { continue }
            let line = "\(row.capture) \(row.client.key) nDPI \(row.flow?.label ?? "-"): \(recognition.kind) (\(recognition.detail))"
            recognized.append(line)
            if row.flow?.expectedKind != recognition.kind { falsePositives.append(line) }
        }
        for test in try FileManager.default.contentsOfDirectory(atPath: TestData.root.appendingPathComponent("suricata-verify/tests").path).sorted() {
            for row in try Self.rows(folder: "suricata-verify/tests/\(test)", resultFolder: nil) {
                flows += 1
                if let recognition = row.evidence.recognition {
                    // suricata-verify holds TLS, QUIC and DNS only: any recognition is a false positive.
                    falsePositives.append("suricata-verify/\(test) \(row.client.key): \(recognition.kind) (\(recognition.detail))")
                }
            }
        }
        for line in recognized { print("ORDINARY-RECOGNIZED\t\(line)") }
        print("ORDINARY-SUMMARY\t\(flows) flows of ndpi/ and suricata-verify/, \(recognized.count) recognized, \(falsePositives.count) false positives")
        #expect(falsePositives.isEmpty, "\(falsePositives.joined(separator: "\n"))")
        #expect(flows >= 940)
    }
}

/// The recognizers on any capture (`HALLPASS_BYPASS_CAPTURE=/path/to.pcapng swift test --filter
/// anyCapture`), e.g. one taken on the lab machine's side of scripts/bypass-matrix.sh, whose
/// clients are the real ones (OpenVPN 2.6, kdig, aioquic, curl, wireguard-go).
@Test(.enabled(if: ProcessInfo.processInfo.environment["HALLPASS_BYPASS_CAPTURE"] != nil))
func anyCapture() throws {
    let path = ProcessInfo.processInfo.environment["HALLPASS_BYPASS_CAPTURE"]!
    let root = TestData.root.path
    // ClientFlows reads paths below the test data; a path elsewhere is reached from there.
    let relative = String(repeating: "../", count: root.split(separator: "/").count) + path.drop { $0 == "/" }
    for flow in try ClientFlows.read(relative) {
        let evidence = BypassEvidence.examine(flow)
        let verdict = evidence.recognition.map { "\($0.kind.rawValue) (\($0.detail)\($0.target.map { ", target \($0)" } ?? ""))" } ?? "-"
        print("CAPTURE\t\(flow.key)\t\(verdict)\tafter \(evidence.payloadsSeen)\t\(evidence.appearance)")
    }
}
