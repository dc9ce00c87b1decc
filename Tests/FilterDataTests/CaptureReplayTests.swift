// Replay of the shared capture corpus through the FlowInspector: per-flow
// names compared with nDPI's flows and tshark's, and a policy built from
// names in the captures blocks exactly those flows.
import Foundation
import SharedStore
import Testing
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

/// A flow endpoint pair, direction-free, with addresses compared as addresses
/// (nDPI writes `b00c::99` where RFC 5952 and `IPAddress` write `b00c:0:99`).
struct FlowIdentity: Hashable, CustomStringConvertible {
    var transport: String
    var endpoints: Set<Endpoint>

    struct Endpoint: Hashable {
        var address: IPAddress
        var port: UInt16
    }

    init(transport: String, _ a: Endpoint, _ b: Endpoint) {
        self.transport = transport.lowercased()
        self.endpoints = [a, b]
    }

    init(_ flow: ReplayedFlow) {
        self.init(transport: flow.transportName, Endpoint(address: flow.key.source, port: flow.key.sourcePort),
                  Endpoint(address: flow.key.destination, port: flow.key.destinationPort))
    }

    /// `1.2.3.4:80` or `[2001:db8::1]:443`.
    static func endpoint(_ text: Substring) -> Endpoint? {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        var host = text[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return IPAddress(host).map { Endpoint(address: $0, port: port) }
    }

    var description: String { "\(transport) " + endpoints.map { "\($0.address):\($0.port)" }.sorted().joined(separator: " <-> ") }
}

/// One flow that should show a name, with where the expectation came from.
struct ExpectedFlowName {
    var capture: String
    var flow: FlowIdentity
    var name: String
    var protocolLabel: String
}

/// Flows left out of the agreement, each with the reason.
enum AgreementExclusions {
    /// nDPI flows by capture and expected name.
    static let ndpiFlows: [String: [String: String]] = [
        "dns.pcap": ["www.l.google.com": "the flow's first packet is a response; nDPI names the flow by the response's question, replay by the first query (www.example.com)"],
        "dns-invalid-chars.pcap": ["www.allyourbasesare???ongto.cn": "non-printable bytes in the question: the DNS parser refuses the name, the query is judged nameless"],
        "dns_invert_query.pcapng": ["216.58.202.4": "inverse query (opcode 1): nDPI reports the answer's address, not a question name"],
        "dns-exf.pcap": ["4sicn03_2qaa3rlc3qudhh0aavjycxwakjehelu5klueow0zjxulgage-.4s2fgaaaa__-.test.txt": "nDPI rewrites '*' and '=' and drops the first byte of this exfiltration name; replay reports the wire name"],
        "dns_exfiltration.pcap": ["e1aa8f8fdb1bbe8d5e04952141f7d4f82c7e3b06dcc8b87fad7a.19e4d098dc8c618f8d81cfeb02": "nDPI keeps only the tail of this 200-byte dnscat2 name; replay reports the whole question"],
        "quic_q46.pcap": ["play.google.com": "Google QUIC Q046: the capture starts at the client's second CHLO (stream 1 at offset 1024); nDPI reads a CHLO in any STREAM frame, hallpass reads the handshake stream from offset 0 only, as the server does (GoogleQUICTests)"],
        "tls_certificate_too_long.pcap": ["60.21.149.52.in-addr.arpa": "nDPI names this 5-tuple by its second PTR query; replay names a DNS flow by its first query (121.1.168.192.in-addr.arpa)"],
    ]

    /// Why an nDPI flow with a name is not a TLS/HTTP/QUIC/DNS name flow for
    /// this comparison, or nil when it counts.
    static func reasonToSkip(protocolLabel: String) -> String? {
        // The master protocol id: 91 TLS, 188 QUIC, 5 DNS, 7 HTTP, 130 HTTP_Connect, 131 HTTP_Proxy.
        let last = protocolLabel.split(separator: ":").last.map(String.init) ?? protocolLabel
        let master = last.split(separator: "/").first?.split(separator: ".").first.map(String.init) ?? ""
        guard ["91", "188", "5", "7", "130", "131"].contains(master) else {
            return "not a TLS/HTTP/QUIC/DNS name (\(last): DHCP, NetBIOS, mDNS on 5353, SSDP, STUN...)"
        }
        return nil
    }
}

/// The names each corpus source expects, per flow.
enum ExpectedFlowNames {
    /// nDPI: one row per flow of `ndpi/expected/<capture>.ndpi_flows.tsv`.
    static func ndpi(capture: String, tsv: String) -> (expected: [ExpectedFlowName], skipped: [String: Int]) {
        var expected: [ExpectedFlowName] = []
        var skipped: [String: Int] = [:]
        for line in tsv.split(separator: "\n") where !line.hasPrefix("#") {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count >= 9, !fields[7].isEmpty,
                  let a = FlowIdentity.endpoint(fields[2]), let b = FlowIdentity.endpoint(fields[4]) else { continue }
            let name = String(fields[7])
            if let reason = AgreementExclusions.reasonToSkip(protocolLabel: String(fields[6])) {
                skipped[reason.components(separatedBy: " (").first!, default: 0] += 1
                continue
            }
            if let reason = AgreementExclusions.ndpiFlows[capture]?[name] {
                skipped["listed difference: " + reason, default: 0] += 1
                continue
            }
            expected.append(ExpectedFlowName(capture: capture, flow: FlowIdentity(transport: String(fields[1]), a, b),
                                             name: name, protocolLabel: String(fields[6])))
        }
        return (expected, skipped)
    }

    /// suricata-verify: tshark's per-packet names, the first name per flow.
    static func tshark(capture: String, tsv: String) -> [ExpectedFlowName] {
        var seen: Set<FlowIdentity> = []
        var expected: [ExpectedFlowName] = []
        for line in tsv.split(separator: "\n") where !line.hasPrefix("#") {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count >= 8, let sport = UInt16(fields[4]), let dport = UInt16(fields[6]),
                  let source = IPAddress(fields[3]), let destination = IPAddress(fields[5]) else { continue }
            // Several questions of one message are joined with commas: the first counts.
            let name = fields[7].split(separator: ",").first.map { String($0).lowercased() } ?? ""
            let flow = FlowIdentity(transport: String(fields[2]), .init(address: source, port: sport), .init(address: destination, port: dport))
            guard !name.isEmpty, seen.insert(flow).inserted else { continue }
            expected.append(ExpectedFlowName(capture: capture, flow: flow, name: ExpectedNames.hostWithoutPort(name), protocolLabel: String(fields[0])))
        }
        return expected
    }
}

/// The agreement this branch reaches; a regression below it fails the test.
let minimumAgreement = 1.0
/// Flows compared, so that a corpus change (fewer flows) shows up too.
let minimumComparedFlows = 724

@Suite("Capture replay")
struct CaptureReplayTests {
    static let emptyEngine = VerdictEngine(rules: try! makeStore([]), policy: Policy())

    func replay(_ relativePath: String) throws -> CaptureReplayReport {
        try CaptureReplay.run(bytes: try TestData.bytes(relativePath), engine: Self.emptyEngine)
    }

    @Test(.enabled(if: TestData.isAvailable))
    func namesAgreeWithNDPIAndTshark() throws {
        var compared = 0
        var matched = 0
        var mismatches: [String] = []
        var skipped: [String: Int] = [:]
        var cases: [(capture: String, expected: [ExpectedFlowName])] = []
        let fm = FileManager.default
        for file in try fm.contentsOfDirectory(atPath: TestData.root.appendingPathComponent("ndpi/pcap").path).sorted() {
            let tsv = String(decoding: try Data(contentsOf: TestData.root.appendingPathComponent("ndpi/expected/\(file).ndpi_flows.tsv")), as: UTF8.self)
            let (expected, skips) = ExpectedFlowNames.ndpi(capture: file, tsv: tsv)
            skipped.merge(skips, uniquingKeysWith: +)
            cases.append(("ndpi/pcap/\(file)", expected))
        }
        for test in try fm.contentsOfDirectory(atPath: TestData.root.appendingPathComponent("suricata-verify/tests").path).sorted() {
            let folder = "suricata-verify/tests/\(test)"
            guard let pcap = try fm.contentsOfDirectory(atPath: TestData.root.appendingPathComponent(folder).path).first(where: { $0.hasSuffix(".pcap") }) else { continue }
            let tsv = String(decoding: try Data(contentsOf: TestData.root.appendingPathComponent("suricata-verify/expected/\(test).tshark.tsv")), as: UTF8.self)
            cases.append(("\(folder)/\(pcap)", ExpectedFlowNames.tshark(capture: test, tsv: tsv)))
        }
        #expect(cases.count == 116, "96 nDPI captures and 20 suricata-verify tests")

        for (capture, expected) in cases {
            let report = try replay(capture)
            var found: [FlowIdentity: [ReplayedFlow]] = [:]
            for flow in report.flows { found[FlowIdentity(flow), default: []].append(flow) }
            for expectation in expected {
                compared += 1
                let candidates = found[expectation.flow] ?? []
                // nDPI lower-cases and writes '*' as '_'; HTTP hosts lose their port in both.
                let names = candidates.compactMap { $0.name?.lowercased().replacingOccurrences(of: "*", with: "_") }
                if names.contains(expectation.name) {
                    matched += 1
                } else {
                    mismatches.append("\(capture) \(expectation.flow) expected \(expectation.name) (\(expectation.protocolLabel)), replay: \(names)")
                }
            }
        }
        let agreement = Double(matched) / Double(max(compared, 1))
        let listed = skipped.filter { $0.key.hasPrefix("listed difference") }.values.reduce(0, +)
        print("AGREEMENT\t\(matched)/\(compared) flows\t\(String(format: "%.4f", agreement))\t(counting the \(listed) listed differences as misses: \(matched)/\(compared + listed))")
        for (reason, count) in skipped.sorted(by: { $0.key < $1.key }) { print("EXCLUDED\t\(count)\t\(reason)") }
        for line in mismatches { print("MISMATCH\t\(line)") }
        #expect(agreement >= minimumAgreement, "agreement fell to \(matched)/\(compared): \(mismatches)")
        #expect(compared >= minimumComparedFlows)
    }

    @Test(.enabled(if: TestData.isAvailable))
    func aStoreOfNamesFromTheCapturesBlocksExactlyThoseFlows() throws {
        let blocked: Set<String> = ["www.ntop.org", "www.wireshark.org", "quic.aiortc.org", "google.com"]
        let store = try makeStore(blocked.map { ("=" + $0, "test") })
        let engine = VerdictEngine(rules: store, policy: Policy())
        let captures = ["ndpi/pcap/443-curl.pcap", "ndpi/pcap/443-safari.pcap", "ndpi/pcap/http_ipv6.pcap", "ndpi/pcap/dns-google-nsid.pcapng",
                        "ndpi/pcap/quic-23.pcap", "ndpi/pcap/quic-28.pcap", "ndpi/pcap/http.pcapng", "ndpi/pcap/chrome.pcap"]
        var blockedFlows = 0
        for capture in captures {
            let report = try CaptureReplay.run(bytes: try TestData.bytes(capture), engine: engine)
            for flow in report.flows {
                let shouldBlock = flow.name.map { blocked.contains($0) } ?? false
                #expect((flow.decision.verdict == .drop) == shouldBlock, "\(capture): \(flow.key) \(flow.name ?? "-") -> \(flow.decision)")
                if shouldBlock {
                    blockedFlows += 1
                    #expect(flow.decision.reason.category == "test" && flow.decision.reason.rule == "=" + flow.name!)
                }
            }
        }
        #expect(blockedFlows >= 8)
    }

    @Test(.enabled(if: TestData.isAvailable))
    func flowsAreReportedOnceInTheOrderOfTheirFirstPacket() throws {
        let report = try replay("ndpi/pcap/chrome.pcap")
        #expect(report.flows.count == Set(report.flows.map(\.key)).count)
        #expect(report.flows.map(\.firstRecord) == report.flows.map(\.firstRecord).sorted())
        #expect(report.flows.filter { $0.name == "www.iit.cnr.it" }.count == 6)
        #expect(report.counters.packets == UInt64(report.records - report.nonIPRecords))
    }

    @Test(.enabled(if: TestData.isAvailable))
    func dnsFlowsCountTheirQueriesAndTunnelsAreUnwrapped() throws {
        let nsid = try replay("ndpi/pcap/dns-google-nsid.pcapng")
        #expect(nsid.flows.allSatisfy { $0.kind == .dns })
        #expect(nsid.flows.contains { $0.name == "www.ntop.org" && $0.queries >= 1 })
        let tunnel = try replay("ndpi/pcap/6in4tunnel.pcap")
        #expect(tunnel.tunnelledPackets > 0)
        #expect(tunnel.flows.contains { $0.name == "www.facebook.com" && !$0.key.source.isIPv4 })
    }

    @Test(.enabled(if: TestData.isAvailable))
    func incompleteFlowsAreReportedAsWaiting() throws {
        // The ClientHello's second segment is missing from the capture.
        let report = try replay("ndpi/pcap/tls_missing_ch_frag.pcap")
        let flow = try #require(report.flows.first { $0.key.destinationPort == 443 })
        #expect(!flow.isDecided && flow.decision.verdict == .needMoreData && flow.kind == .tls)
    }

    @Test func unreadableCapturesThrow() {
        #expect(throws: CaptureError.self) { try CaptureReplay.run(bytes: Array("not a capture at all".utf8), engine: Self.emptyEngine) }
        #expect(throws: CaptureError.self) { try CaptureReplay.run(bytes: [0xd4, 0xc3, 0xb2], engine: Self.emptyEngine) }
    }

    @Test func tunnelHeadersAreBounded() {
        // IP-in-IP nested deeper than the bound stops unwrapping without trouble.
        var packet = Build.ipv4(protocolNumber: 17, payload: Build.udp(payload: Build.dnsQuery("a.example")))
        for _ in 0..<10 { packet = Build.ipv4(protocolNumber: 4, payload: packet) }
        let inner = CaptureReplay.unwrapTunnels(packet[...])
        #expect(inner.count < packet.count && inner.count > 28)
    }
}
