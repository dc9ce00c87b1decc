// Google QUIC: the server name of Q024-Q046 (CHLO in the clear), Q050 (protected Initial,
// CHLO) and T050/T051 (protected Initial, TLS ClientHello), against nDPI on the shared captures,
// and the parser's behaviour on every truncation and on random damage.
import Foundation
import Testing
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

@Suite("Google QUIC")
struct GoogleQUICTests {
    // MARK: The shared captures

    /// nDPI's Google QUIC flows with a name (ndpi/expected/*.ndpi_flows.tsv, column quic_ver Q... or T...).
    static func expectedGoogleQUICFlows() throws -> [(capture: String, flow: FlowIdentity, name: String, version: String)] {
        var expected: [(String, FlowIdentity, String, String)] = []
        let folder = TestData.root.appendingPathComponent("ndpi/expected").path
        for file in try FileManager.default.contentsOfDirectory(atPath: folder).sorted() where file.hasSuffix(".ndpi_flows.tsv") {
            let text = String(decoding: try TestData.bytes("ndpi/expected/\(file)"), as: UTF8.self)
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
                guard fields.count >= 9, fields[8].hasPrefix("Q") || fields[8].hasPrefix("T"), !fields[7].isEmpty,
                      let a = FlowIdentity.endpoint(fields[2]), let b = FlowIdentity.endpoint(fields[4]) else { continue }
                expected.append((String(file.dropLast(".ndpi_flows.tsv".count)), FlowIdentity(transport: String(fields[1]), a, b),
                                 String(fields[7]), String(fields[8])))
            }
        }
        return expected
    }

    /// What a flow's client datagrams give, in order, until a name (or the end).
    static func hello(of flow: ClientFlow) -> (outcome: GoogleQUICOutcome, datagrams: Int) {
        var handshake = GoogleQUICHandshake()
        var last: GoogleQUICOutcome = .notGoogleQUIC
        for (index, datagram) in flow.datagrams.enumerated() {
            last = handshake.add(datagram: datagram)
            if case .hello = last { return (last, index + 1) }
        }
        return (last, flow.datagrams.count)
    }

    /// nDPI names these flows by a CHLO hallpass does not read, with the reason.
    static let listedDifferences: [String: String] = [
        "quic_q46.pcap": """
            the capture starts at the client's second CHLO (packet number 4, stream 1 at offset 1024); nDPI reads \
            the CHLO in any STREAM frame, hallpass reads the handshake stream from offset 0 only, as the server \
            does, so that a CHLO sent at a later offset cannot choose the name the flow is judged by
            """,
    ]

    @Test(.enabled(if: TestData.isAvailable))
    func googleQUICFlowsAreNamedAsNDPINamesThem() throws {
        let expected = try Self.expectedGoogleQUICFlows()
        var flowsByCapture: [String: [ClientFlow]] = [:]
        var matched = 0
        var listed = 0
        var mismatches: [String] = []
        for expectation in expected {
            if flowsByCapture[expectation.capture] == nil {
                flowsByCapture[expectation.capture] = try ClientFlows.read("ndpi/pcap/\(expectation.capture)")
            }
            guard let flow = flowsByCapture[expectation.capture]!.first(where: { $0.identity == expectation.flow }) else {
                mismatches.append("\(expectation.capture) \(expectation.flow): flow not found")
                continue
            }
            let (outcome, datagrams) = Self.hello(of: flow)
            var name = "-"
            if case .hello(let hello) = outcome {
                name = hello.serverName.map { String(decoding: $0, as: UTF8.self) } ?? "(no SNI)"
                #expect(hello.version.description == expectation.version, "\(expectation.capture): \(hello.version) vs nDPI \(expectation.version)")
            }
            let agrees = name == expectation.name
            if !agrees, let reason = Self.listedDifferences[expectation.capture] {
                print("GQUIC-LISTED\t\(expectation.capture)\t\(expectation.flow)\tnDPI \(expectation.name)\thallpass \(outcome)\t\(reason)")
                listed += 1
                continue
            }
            if agrees { matched += 1 } else { mismatches.append("\(expectation.capture) \(expectation.flow) \(expectation.version): nDPI \(expectation.name), hallpass \(outcome)") }
            print("GQUIC\t\(expectation.capture)\t\(expectation.version)\t\(expectation.flow)\tnDPI \(expectation.name)\thallpass \(name)\tafter \(datagrams) datagram(s)")
        }
        // The replay (CaptureReplayTests) counts these flows too, through the live path's state machine.
        print("GQUIC-AGREEMENT\t\(matched)/\(expected.count) Google QUIC flows (\(listed) listed difference)")
        // 22 Google QUIC flows in nDPI's tables, 21 of them with a name.
        #expect(expected.count == 21)
        #expect(matched == 20)
        #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
    }

    @Test(.enabled(if: TestData.isAvailable))
    func everyTruncationOfTheCapturedFirstPacketsIsHandled() throws {
        for capture in ["quic046.pcap", "quic_q46_b.pcap", "quic_q50.pcap", "quic_t50.pcap", "quic_t51.pcap", "quic_q43.pcap", "quic.pcap", "gquic.pcap"] {
            let flows = try ClientFlows.read("ndpi/pcap/\(capture)")
            let first = try #require(flows.first { GoogleQUICParser.version(ofClientDatagram: $0.datagrams.first ?? []) != nil }?.datagrams.first)
            // The whole packet gives its name; every prefix gives no name at all, never a wrong one.
            var whole = GoogleQUICHandshake()
            guard case .hello(let hello) = whole.add(datagram: first) else {
                Issue.record("\(capture): first datagram gives no hello")
                continue
            }
            for length in 0..<first.count {
                var handshake = GoogleQUICHandshake()
                let outcome = handshake.add(datagram: Array(first.prefix(length)))
                if case .hello(let partial) = outcome {
                    // A CHLO may end before the padding: a prefix that still holds all of it is fine.
                    #expect(partial.serverName == hello.serverName, "\(capture): prefix \(length) gave \(partial)")
                }
            }
            forEachMutation(of: first, rounds: 200) { mutant in
                var handshake = GoogleQUICHandshake()
                _ = handshake.add(datagram: mutant)
            }
        }
    }

    // MARK: Hand-made packets

    /// A CHLO with the given tags (values in order).
    static func chlo(_ tags: [(String, [UInt8])]) -> [UInt8] {
        var out = Array("CHLO".utf8) + [UInt8(tags.count), 0, 0, 0]
        var end = 0
        var values: [UInt8] = []
        for (tag, value) in tags {
            end += value.count
            out += Array(tag.utf8) + [UInt8(end & 0xFF), UInt8(end >> 8 & 0xFF), 0, 0]
            values += value
        }
        return out + values
    }

    /// A Q046 client Initial: long header, CIDs 8/0, 4-byte packet number, clear hash, a STREAM frame of stream 1.
    static func q046Packet(_ message: [UInt8], offset: Int = 0) -> [UInt8] {
        var packet: [UInt8] = [0xC3] + Array("Q046".utf8) + [0x50] + [1, 2, 3, 4, 5, 6, 7, 8] + [0, 0, 0, 1]
        packet += [UInt8](repeating: 0xAA, count: 12)
        if offset == 0 {
            packet += [0xA0, 0x01] + Build.be16(message.count) + message
        } else {
            // Offset length code 1: two bytes.
            packet += [0xA4, 0x01] + Build.be16(offset) + Build.be16(message.count) + message
        }
        return packet + [UInt8](repeating: 0, count: 40)
    }

    @Test func q046HelloInOnePacket() throws {
        let message = Self.chlo([("PAD\u{0}", [UInt8](repeating: 0x2D, count: 20)), ("SNI\u{0}", Array("Play.Google.com".utf8)), ("VER\u{0}", Array("Q046".utf8))])
        var handshake = GoogleQUICHandshake()
        let outcome = handshake.add(datagram: Self.q046Packet(message))
        guard case .hello(let hello) = outcome else { Issue.record("\(outcome)"); return }
        #expect(hello.version == .q046)
        #expect(hello.serverName == Array("play.google.com".utf8))
    }

    @Test func q046HelloAcrossTwoPacketsInAnyOrder() throws {
        let message = Self.chlo([("PAD\u{0}", [UInt8](repeating: 0x2D, count: 300)), ("SNI\u{0}", Array("www.example.com".utf8))])
        let first = Self.q046Packet(Array(message.prefix(200)))
        let second = Self.q046Packet(Array(message.dropFirst(200)), offset: 200)
        var handshake = GoogleQUICHandshake()
        #expect(handshake.add(datagram: second) == .needMoreData)
        guard case .hello(let hello) = handshake.add(datagram: first) else { Issue.record("no hello"); return }
        #expect(hello.serverName == Array("www.example.com".utf8))
    }

    @Test func aCHLOWithoutSNIIsAHelloWithoutAName() {
        var handshake = GoogleQUICHandshake()
        let outcome = handshake.add(datagram: Self.q046Packet(Self.chlo([("PAD\u{0}", [0x2D, 0x2D])])))
        #expect(outcome == .hello(GoogleQUICHello(version: .q046, serverName: nil, alpnProtocols: [], encryptedClientHello: false)))
    }

    @Test func versionsAreTold() {
        #expect(GoogleQUICVersion(rawValue: 0x5130_3436)?.description == "Q046")
        #expect(GoogleQUICVersion(rawValue: 0x5430_3531)?.usesTLS == true)
        #expect(GoogleQUICVersion(rawValue: 0x0000_0001) == nil)
        #expect(GoogleQUICVersion(rawValue: 0x5130_3A30) == nil)
        #expect(GoogleQUICVersion.q050.isReadable && GoogleQUICVersion.t051.isReadable && GoogleQUICVersion.q046.isReadable)
        #expect(GoogleQUICVersion(rawValue: 0x5130_3434)!.isReadable == false)  // Q044
        #expect(GoogleQUICVersion(rawValue: 0x5130_3438)!.isReadable == false)  // Q048
        #expect(GoogleQUICVersion(rawValue: 0x5130_3433)!.number == 43)
    }

    @Test func otherTrafficIsNotGoogleQUIC() {
        var handshake = GoogleQUICHandshake()
        #expect(handshake.add(datagram: [0xC0, 0, 0, 0, 1] + [UInt8](repeating: 0, count: 40)) == .notGoogleQUIC)  // QUIC v1
        #expect(handshake.add(datagram: Build.dnsQuery("example.com")) == .notGoogleQUIC)
        #expect(handshake.add(datagram: []) == .notGoogleQUIC)
        #expect(GoogleQUICParser.parse(datagram: [0xC3] + Array("Q048".utf8) + [0x50]) == .unreadableVersion(GoogleQUICVersion(rawValue: 0x5130_3438)!))
    }

    @Test func aProtectedInitialThatDoesNotOpenIsMalformed() {
        var packet: [UInt8] = [0xC3] + Array("T051".utf8) + [8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0] + [0x44, 0x00]
        packet += [UInt8](repeating: 0x5A, count: 0x400)
        guard case .malformed(let version, _) = GoogleQUICParser.parse(datagram: packet) else { Issue.record("not malformed"); return }
        #expect(version == .t051)
    }

    @Test func everyTruncationOfAHandMadeHelloIsHandled() {
        let packet = Self.q046Packet(Self.chlo([("SNI\u{0}", Array("a.example".utf8)), ("VER\u{0}", Array("Q046".utf8))]))
        for length in 0...packet.count {
            var handshake = GoogleQUICHandshake()
            let outcome = handshake.add(datagram: Array(packet.prefix(length)))
            if case .hello(let hello) = outcome { #expect(hello.serverName == Array("a.example".utf8)) }
        }
    }
}

@Suite("QUIC version readability")
struct QUICVersionReadabilityTests {
    @Test func versionsAreSortedByWhatHallpassCanRead() {
        #expect(QUICVersionReadability(version: 0x0000_0001) == .ietf)
        #expect(QUICVersionReadability(version: 0x6b33_43cf) == .ietf)
        #expect(QUICVersionReadability(version: 0xff00_001d) == .ietf)
        #expect(QUICVersionReadability(version: 0x5130_3436) == .googleQUIC)
        #expect(QUICVersionReadability(version: 0x5430_3531) == .googleQUIC)
        #expect(QUICVersionReadability(version: 0x5130_3438) == .unreadable)  // Q048
        #expect(QUICVersionReadability(version: 0x1a2b_3c4d) == .unreadable)
        #expect(QUICVersionReadability(version: 0x0a0a_0a0a) == .forcingNegotiation)
        #expect(QUICVersionReadability(version: 0x5a6a_7a8a) == .forcingNegotiation)
        #expect(QUICVersionReadability(version: 0) == .negotiation)
    }
}
