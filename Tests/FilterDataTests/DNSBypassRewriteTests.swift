// DNS answer rewrites against the ways around the filter: `ech` out of HTTPS and SVCB records
// (with RDLENGTH, compression pointers, UDP/IP lengths and checksums right, and length-keeping
// variants for DNS over TCP), NXDOMAIN for the canary names, SafeSearch answers; and every
// truncation of every vector refused without a crash.
import Foundation
import Testing
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

enum DNSVector {
    /// Cloudflare's ECHConfigList as published in its HTTPS records (public_name cloudflare-ech.com).
    static let cloudflareECHConfigList: [UInt8] = [UInt8](Data(base64Encoded: "AEX+DQBB8gAgACDCIaU3P6vz668J2oRRZtptSEwH+1IX8/3TOArEx0tRLAAEAAEAAQASY2xvdWRmbGFyZS1lY2guY29tAAA=")!)

    static func param(_ key: UInt16, _ value: [UInt8]) -> [UInt8] { Build.be16(Int(key)) + Build.be16(value.count) + value }

    /// HTTPS RDATA: priority, target name, the parameters (already in key order).
    static func svcbData(priority: Int = 1, target: String = "", _ params: [[UInt8]]) -> [UInt8] {
        Build.be16(priority) + (target.isEmpty ? [0] : Build.dnsName(target)) + params.flatMap { $0 }
    }

    static func record(owner: [UInt8], type: Int, ttl: UInt32 = 300, data: [UInt8]) -> [UInt8] {
        owner + Build.be16(type) + Build.be16(1) + Build.be32(ttl) + Build.be16(data.count) + data
    }

    static let opt: [UInt8] = [0] + Build.be16(41) + Build.be16(1232) + [0, 0, 0, 0] + Build.be16(0)

    /// A response for `www.example.com HTTPS`: (1) an HTTPS record with alpn, ipv4hint, ech, ipv6hint;
    /// (2) an HTTPS record owned by `svc.example.com` (written in full, after the first ech) with
    /// mandatory=alpn,ech and ech; an additional A record whose owner points at that name (so the
    /// pointer must move), and an OPT record when `withOPT`.
    static func httpsResponse(withOPT: Bool = true) -> (message: [UInt8], svcOwnerOffset: Int) {
        let question = Build.dnsName("www.example.com") + Build.be16(65) + Build.be16(1)
        var message = Build.be16(0xBEEF) + Build.be16(0x8180) + Build.be16(1) + Build.be16(2) + Build.be16(0) + Build.be16(withOPT ? 2 : 1)
        message += question
        let first = svcbData([param(1, [2] + Array("h2".utf8) + [2] + Array("h3".utf8)), param(4, [192, 0, 2, 1]),
                              param(5, cloudflareECHConfigList), param(6, [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1])])
        message += record(owner: [0xC0, 0x0C], type: 65, data: first)
        let svcOwnerOffset = message.count
        let second = svcbData(priority: 2, target: "backend.example.net",
                              [param(0, Build.be16(1) + Build.be16(5)), param(1, [2] + Array("h2".utf8)), param(5, cloudflareECHConfigList)])
        message += record(owner: Build.dnsName("svc.example.com"), type: 65, data: second)
        message += record(owner: [0xC0 | UInt8(svcOwnerOffset >> 8), UInt8(svcOwnerOffset & 0xFF)], type: 1, data: [192, 0, 2, 7])
        if withOPT { message += opt }
        return (message, svcOwnerOffset)
    }

    static func aQuery(_ name: String, type: Int = 1, withOPT: Bool = false) -> [UInt8] {
        var query = Build.dnsQuery(name, type: type)
        if withOPT {
            query[11] = 1
            query += opt
        }
        return query
    }
}

/// Reads back what a rewrite produced: every record, names decompressed.
struct DecodedRecord: Equatable {
    var owner: String
    var type: UInt16
    var data: [UInt8]
}

func decodeAll(_ message: [UInt8]) throws -> (layout: DNSRecordLayout, records: [DecodedRecord]) {
    let span = message.span
    let layout = try DNSBypassRewrite.readLayout(span)
    var records: [DecodedRecord] = []
    for record in layout.records {
        let owner = try DNSBypassRewrite.decompressedName(span, at: record.ownerOffset)
        records.append(DecodedRecord(owner: textName(owner), type: record.type, data: Array(message[record.data])))
    }
    return (layout, records)
}

/// `www.example.com` from wire labels.
func textName(_ wire: [UInt8]) -> String {
    var labels: [String] = []
    var index = 0
    while index < wire.count, wire[index] != 0 {
        let length = Int(wire[index])
        labels.append(String(decoding: wire[(index + 1)...(index + length)], as: UTF8.self))
        index += 1 + length
    }
    return labels.joined(separator: ".")
}

/// The SvcParamKeys of an HTTPS/SVCB RDATA.
func serviceParameterKeys(_ data: [UInt8]) -> [UInt16] {
    var index = 2
    while data[index] != 0 { index += 1 + Int(data[index]) }
    index += 1
    var keys: [UInt16] = []
    while index + 4 <= data.count {
        keys.append(UInt16(data[index]) << 8 | UInt16(data[index + 1]))
        index += 4 + (Int(data[index + 2]) << 8 | Int(data[index + 3]))
    }
    return keys
}

@Suite("DNS bypass rewrites")
struct DNSBypassRewriteTests {
    // MARK: ech out of HTTPS and SVCB

    @Test func echIsRemovedAndTheRestKept() throws {
        let (message, _) = DNSVector.httpsResponse()
        let before = try decodeAll(message).records
        let rewritten = try #require(try DNSBypassRewrite.removingECH(fromMessage: message))
        let removed = 2 * (4 + DNSVector.cloudflareECHConfigList.count) + 2  // two ech params and one mandatory entry
        #expect(rewritten.count == message.count - removed)
        let after = try decodeAll(rewritten).records
        #expect(after.count == before.count)
        #expect(serviceParameterKeys(after[0].data) == [1, 4, 6])
        #expect(serviceParameterKeys(after[1].data) == [0, 1])
        // mandatory now names alpn only.
        let expectedTail = DNSVector.param(0, Build.be16(1)) + DNSVector.param(1, [2] + Array("h2".utf8))
        #expect(Array(after[1].data.suffix(expectedTail.count)) == expectedTail)
        // The owner of the second record and the pointer to it in the additional section still read the same.
        #expect(after.map(\.owner) == before.map(\.owner))
        #expect(after[1].owner == "svc.example.com" && after[2].owner == "svc.example.com")
        // The existing parser reads the A record's address where it now is.
        let addresses = try DNSMessageParser.addressRecords(in: rewritten).get()
        #expect(addresses.isEmpty)  // the A record is in the additional section, not the answer
        #expect(after[2].data == [192, 0, 2, 7])
        // Nothing to do the second time.
        #expect(try DNSBypassRewrite.removingECH(fromMessage: rewritten) == nil)
    }

    /// dnsmasq 2.90's answer to `dig www.ech.test HTTPS` in scripts/bypass-matrix.sh (--dns-rr with
    /// alpn=h2 and Cloudflare's ECHConfigList; EDNS from dig), taken with tcpdump on the lab machine.
    static let dnsmasqAnswer = [UInt8](hex: """
        b4ea85800001000100000001037777770365636804746573740000410001c00c004100010000001e005500010000010003026832000500470045fe0d0041        f200200020c221a5373fabf3ebaf09da845166da6d484c07fb5217f3fdd3380ac4c74b512c0004000100010012636c6f7564666c6172652d6563682e63        6f6d000000002904d0000000000000
        """)

    @Test func aRealAnswerFromDnsmasqLosesItsECH() throws {
        let rewritten = try #require(try DNSBypassRewrite.removingECH(fromMessage: Self.dnsmasqAnswer))
        let (layout, records) = try decodeAll(rewritten)
        #expect(records.map(\.type) == [65, 41])
        #expect(serviceParameterKeys(records[0].data) == [1])
        #expect(rewritten.count == Self.dnsmasqAnswer.count - (4 + 0x47))
        #expect(layout.id == 0xB4EA && layout.flags == 0x8580)
        let same = try #require(try DNSBypassRewrite.removingECH(fromMessage: Self.dnsmasqAnswer, keepingLength: true))
        #expect(same.count == Self.dnsmasqAnswer.count)
        #expect(serviceParameterKeys(try decodeAll(same).records[0].data) == [1])
        for length in 0..<Self.dnsmasqAnswer.count {
            #expect(throws: DNSRewriteError.self) { try DNSBypassRewrite.removingECH(fromMessage: Array(Self.dnsmasqAnswer.prefix(length))) }
        }
    }

    @Test func keepingLengthPadsTheOPTRecord() throws {
        let (message, _) = DNSVector.httpsResponse(withOPT: true)
        let rewritten = try #require(try DNSBypassRewrite.removingECH(fromMessage: message, keepingLength: true))
        #expect(rewritten.count == message.count)
        let (layout, records) = try decodeAll(rewritten)
        #expect(!serviceParameterKeys(records[0].data).contains(5) && !serviceParameterKeys(records[1].data).contains(5))
        let opt = try #require(layout.records.last)
        #expect(opt.type == 41)
        // One Padding option (code 12) filling exactly what was removed, minus its 4-byte header.
        let data = Array(rewritten[opt.data])
        #expect(Array(data.prefix(2)) == [0, 12])
        #expect(Int(data[2]) << 8 | Int(data[3]) == data.count - 4)
        #expect(data.dropFirst(4).allSatisfy { $0 == 0 })
    }

    @Test func keepingLengthWithoutOPTMarksTheConfigsUnknown() throws {
        let (message, _) = DNSVector.httpsResponse(withOPT: false)
        let rewritten = try #require(try DNSBypassRewrite.removingECH(fromMessage: message, keepingLength: true))
        #expect(rewritten.count == message.count)
        let differing = zip(message, rewritten).enumerated().filter { $0.element.0 != $0.element.1 }.map(\.offset)
        // Two bytes per ECHConfig (its version), nothing else.
        #expect(differing.count == 4)
        for offset in stride(from: 0, to: differing.count, by: 2) {
            #expect(rewritten[differing[offset]] == 0xFF && rewritten[differing[offset] + 1] == 0xFF)
        }
    }

    @Test func recordsWithoutECHAndAliasModeAreLeftAlone() throws {
        var message = Build.be16(1) + Build.be16(0x8180) + Build.be16(1) + Build.be16(2) + Build.be16(0) + Build.be16(0)
        message += Build.dnsName("a.example") + Build.be16(65) + Build.be16(1)
        message += DNSVector.record(owner: [0xC0, 0x0C], type: 65, data: DNSVector.svcbData([DNSVector.param(1, [2, 0x68, 0x32])]))
        message += DNSVector.record(owner: [0xC0, 0x0C], type: 64, data: DNSVector.svcbData(priority: 0, target: "b.example", []))
        #expect(try DNSBypassRewrite.removingECH(fromMessage: message) == nil)
    }

    @Test func svcbRecordsLoseECHToo() throws {
        var message = Build.be16(1) + Build.be16(0x8180) + Build.be16(1) + Build.be16(1) + Build.be16(0) + Build.be16(0)
        message += Build.dnsName("_dns.resolver.arpa") + Build.be16(64) + Build.be16(1)
        message += DNSVector.record(owner: [0xC0, 0x0C], type: 64,
                                    data: DNSVector.svcbData(target: "dns.example", [DNSVector.param(5, [0, 0])]))
        let rewritten = try #require(try DNSBypassRewrite.removingECH(fromMessage: message))
        #expect(serviceParameterKeys(try decodeAll(rewritten).records[0].data).isEmpty)
    }

    @Test func badSVCBParametersAreRefused() {
        var message = Build.be16(1) + Build.be16(0x8180) + Build.be16(1) + Build.be16(1) + Build.be16(0) + Build.be16(0)
        message += Build.dnsName("a.example") + Build.be16(65) + Build.be16(1)
        // Keys out of order (5 before 1).
        message += DNSVector.record(owner: [0xC0, 0x0C], type: 65, data: DNSVector.svcbData([DNSVector.param(5, [0, 0]), DNSVector.param(1, [2, 0x68, 0x32])]))
        #expect(throws: DNSRewriteError.self) { try DNSBypassRewrite.removingECH(fromMessage: message) }
    }

    // MARK: Packets

    @Test func udpOverIPv4AndIPv6KeepsLengthsAndChecksumsRight() throws {
        let (message, _) = DNSVector.httpsResponse()
        for v6 in [false, true] {
            var udp = Build.udp(sourcePort: 53, destinationPort: 40000, payload: message)
            udp[6] = 0x12  // some checksum, so that IPv4 computes one too
            udp[7] = 0x34
            let source: [UInt8] = v6 ? [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [0x35] : [192, 0, 2, 53]
            let destination: [UInt8] = v6 ? [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [0x10] : [10, 0, 0, 1]
            let packetWithoutChecksum = v6 ? Build.ipv6(source: source, destination: destination, nextHeader: 17, payload: udp)
                : Build.ipv4(source: source, destination: destination, protocolNumber: 17, payload: udp)
            // A correct checksum on the original, so the test sees it recomputed, not left.
            let withChecksum = try DNSPacketRewrite.replacingUDPPayload(of: packetWithoutChecksum, with: message)
            udp = Array(withChecksum[(v6 ? 40 : 20)...])
            let original = v6 ? Build.ipv6(source: source, destination: destination, nextHeader: 17, payload: udp)
                : Build.ipv4(source: source, destination: destination, protocolNumber: 17, payload: udp)
            let payload = try DNSPacketRewrite.udpPayload(of: original)
            let rewritten = try DNSPacketRewrite.replacingUDPPayload(of: original, with: try #require(try DNSBypassRewrite.removingECH(fromMessage: payload)))
            let ip = try IPPacketParser.parse(rewritten)
            #expect(ip.length == rewritten.count)
            #expect(Array(rewritten[ip.payload]).count == payload.count - (rewritten.count < original.count ? original.count - rewritten.count : 0))
            let udpBytes = Array(rewritten[ip.transportOffset...])
            let udpLength = Int(udpBytes[4]) << 8 | Int(udpBytes[5])
            #expect(udpLength == udpBytes.count)
            let pseudo = Checksum.udpPseudoHeader(source: source, destination: destination, udpLength: udpBytes.count)
            #expect(Checksum.holds(udpBytes, pseudo: pseudo), "UDP checksum, IPv\(v6 ? 6 : 4)")
            if !v6 {
                #expect(Checksum.holds(Array(rewritten[0..<20])), "IPv4 header checksum")
                let total = Int(rewritten[2]) << 8 | Int(rewritten[3])
                #expect(total == rewritten.count)
            } else {
                let payloadLength = Int(rewritten[4]) << 8 | Int(rewritten[5])
                #expect(payloadLength == rewritten.count - 40)
            }
        }
    }

    @Test func anIPv4DatagramWithoutChecksumStaysWithout() throws {
        let (message, _) = DNSVector.httpsResponse()
        let packet = Build.ipv4(protocolNumber: 17, payload: Build.udp(sourcePort: 53, destinationPort: 40000, payload: message))
        let rewritten = try DNSPacketRewrite.replacingUDPPayload(of: packet, with: [1, 2, 3])
        #expect(rewritten[26] == 0 && rewritten[27] == 0)
        #expect(rewritten.count == 20 + 8 + 3)
    }

    @Test func dnsOverTCPGetsItsLengthPrefix() throws {
        let (message, _) = DNSVector.httpsResponse()
        let trailing: [UInt8] = [0, 12] + [UInt8](repeating: 9, count: 12)  // the next message of the stream
        let stream = Build.be16(message.count) + message + trailing
        let shorter = try #require(try DNSPacketRewrite.removingECH(fromTCPStream: stream))
        let length = Int(shorter[0]) << 8 | Int(shorter[1])
        #expect(length == shorter.count - 2 - trailing.count)
        #expect(Array(shorter.suffix(trailing.count)) == trailing)
        let same = try #require(try DNSPacketRewrite.removingECH(fromTCPStream: stream, keepingLength: true))
        #expect(same.count == stream.count && Array(same.prefix(2)) == Array(stream.prefix(2)))
    }

    // MARK: NXDOMAIN

    @Test func nxdomainKeepsTheQuestionAndEDNS() throws {
        for withOPT in [false, true] {
            let query = DNSVector.aQuery("use-application-dns.net", withOPT: withOPT)
            let answer = try DNSBypassRewrite.nxdomain(for: query)
            let parsed = try DNSMessageParser.parse(answer).get()
            #expect(parsed.header.isResponse && parsed.header.responseCode == 3 && parsed.header.id == 0x1234)
            #expect(parsed.header.flags & 0x0100 != 0 && parsed.header.flags & 0x0080 != 0)  // RD kept, RA set
            #expect(parsed.question?.name == Array("use-application-dns.net".utf8) && parsed.question?.type == 1)
            #expect(parsed.header.answerCount == 0 && parsed.header.additionalCount == (withOPT ? 1 : 0))
            #expect(answer.count == query.count)  // the question (and the OPT record) only
        }
        // From the real response (with answers) as well.
        let (response, _) = DNSVector.httpsResponse()
        let fromResponse = try DNSMessageParser.parse(try DNSBypassRewrite.nxdomain(for: response)).get()
        #expect(fromResponse.header.responseCode == 3 && fromResponse.question?.name == Array("www.example.com".utf8))
    }

    // MARK: SafeSearch

    @Test func safeSearchAnswersACNAMEAndTheEnforcementAddresses() throws {
        let addresses = [IPAddress("216.239.38.120")!, IPAddress("2001:4860:4802:32::78")!]
        for (type, expectedType) in [(1, 1), (28, 28), (65, 0)] {
            let answer = try DNSBypassRewrite.safeSearchAnswer(for: DNSVector.aQuery("www.google.com", type: type, withOPT: true),
                                                               target: Array("forcesafesearch.google.com".utf8), addresses: addresses, timeToLive: 60)
            let (layout, records) = try decodeAll(answer)
            #expect(layout.flags & 0x000F == 0)
            #expect(records.first?.type == 5 && records.first?.owner == "www.google.com")
            #expect(textName(try DNSBypassRewrite.decompressedName(answer.span, at: layout.records[0].data.lowerBound)) == "forcesafesearch.google.com")
            let addressRecords = records.filter { $0.type == 1 || $0.type == 28 }
            if expectedType == 0 {
                #expect(addressRecords.isEmpty)
            } else {
                #expect(addressRecords.count == 1 && addressRecords[0].type == UInt16(expectedType))
                #expect(addressRecords[0].owner == "forcesafesearch.google.com")
                #expect(addressRecords[0].data == (expectedType == 1 ? addresses[0] : addresses[1]).networkBytes)
                // The existing parser (the block page rewrite's) reads them in the answer section.
                let parsed = try DNSMessageParser.addressRecords(in: answer).get()
                #expect(parsed.map(\.address) == [expectedType == 1 ? addresses[0] : addresses[1]])
            }
            #expect(records.last?.type == 41)
        }
    }

    @Test func safeSearchAnswerForAForwardPointerQuestion() throws {
        // The question name reached through a pointer (suricata-verify dns-forward-pointer style).
        var message = Build.be16(7) + Build.be16(0x0100) + Build.be16(1) + Build.be16(0) + Build.be16(0) + Build.be16(0)
        message += [0xC0, 18] + Build.be16(1) + Build.be16(1)
        message += Build.dnsName("www.bing.com")
        let answer = try DNSBypassRewrite.safeSearchAnswer(for: message, target: Array("strict.bing.com".utf8), addresses: [IPAddress("204.79.197.220")!])
        let records = try decodeAll(answer).records
        #expect(records.map(\.owner) == ["www.bing.com", "strict.bing.com"])
    }

    @Test func rewritesOfAnythingButOneStandardQuestionAreRefused() {
        var twoQuestions = DNSVector.aQuery("a.example")
        twoQuestions[5] = 2
        twoQuestions += Build.dnsName("b.example") + Build.be16(1) + Build.be16(1)
        #expect(throws: DNSRewriteError.self) { try DNSBypassRewrite.nxdomain(for: twoQuestions) }
        var inverse = DNSVector.aQuery("a.example")
        inverse[2] |= 0x08  // opcode 1
        #expect(throws: DNSRewriteError.self) { try DNSBypassRewrite.nxdomain(for: inverse) }
        #expect(throws: DNSRewriteError.self) {
            try DNSBypassRewrite.safeSearchAnswer(for: DNSVector.aQuery("a.example"), target: Array("..".utf8), addresses: [])
        }
    }

    // MARK: Truncation and damage

    static func vectors() -> [[UInt8]] {
        [DNSVector.httpsResponse().message, DNSVector.httpsResponse(withOPT: false).message,
         DNSVector.aQuery("use-application-dns.net", withOPT: true), DNSVector.aQuery("www.google.com", type: 28)]
    }

    @Test func everyTruncationOfEveryVectorIsRefused() throws {
        for vector in Self.vectors() {
            for length in 0..<vector.count {
                let prefix = Array(vector.prefix(length))
                // A prefix either fails to read or (when it ends on a record boundary with fewer
                // records than the header counts) fails too: every count is checked.
                #expect(throws: DNSRewriteError.self) { try DNSBypassRewrite.removingECH(fromMessage: prefix) }
                #expect(throws: DNSRewriteError.self) { try DNSBypassRewrite.removingECH(fromMessage: prefix, keepingLength: true) }
                #expect(throws: DNSRewriteError.self) { try DNSBypassRewrite.nxdomain(for: prefix) }
                #expect(throws: DNSRewriteError.self) {
                    try DNSBypassRewrite.safeSearchAnswer(for: prefix, target: Array("safe.duckduckgo.com".utf8), addresses: [IPAddress("52.142.124.215")!])
                }
                #expect(throws: DNSRewriteError.self) { try DNSPacketRewrite.removingECH(fromTCPStream: Build.be16(vector.count) + prefix) }
                // The packet functions: a truncated IP packet is refused too.
                let packet = Build.ipv4(protocolNumber: 17, payload: Build.udp(sourcePort: 53, destinationPort: 4000, payload: vector))
                #expect(throws: DNSRewriteError.self) { try DNSPacketRewrite.replacingUDPPayload(of: Array(packet.prefix(min(length, 27))), with: vector) }
            }
        }
    }

    @Test func randomDamageNeverCrashesAndWhatComesOutReads() {
        for vector in Self.vectors() {
            forEachMutation(of: vector, rounds: 400) { mutant in
                if let output = try? DNSBypassRewrite.removingECH(fromMessage: mutant) {
                    #expect((try? DNSBypassRewrite.readLayout(output.span)) != nil, "a rewrite produced an unreadable message")
                }
                _ = try? DNSBypassRewrite.removingECH(fromMessage: mutant, keepingLength: true)
                if let output = try? DNSBypassRewrite.nxdomain(for: mutant) {
                    #expect((try? DNSBypassRewrite.readLayout(output.span)) != nil)
                }
                _ = try? DNSBypassRewrite.safeSearchAnswer(for: mutant, target: Array("restrict.youtube.com".utf8), addresses: [])
            }
        }
    }
}
