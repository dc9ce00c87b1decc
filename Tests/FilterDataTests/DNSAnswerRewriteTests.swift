import FilterData
import HallpassWire
import HallpassIPC
import Testing
import VerdictCore

/// Whether the UDP checksum of a whole packet is right.
private func udpChecksumVerifies(_ packet: [UInt8]) throws -> Bool {
    let ip = try IPPacketParser.parse(packet)
    let udp = Array(packet[ip.transportOffset...])
    return Checksum.holds(udp, pseudo: Checksum.udpPseudoHeader(source: ip.source.networkBytes, destination: ip.destination.networkBytes, udpLength: udp.count))
}

/// A response for `name` with a CNAME, then an A and an AAAA record (names compressed), TTL 300.
private func response(_ name: String, a: [UInt8]? = [192, 0, 2, 7], aaaa: [UInt8]? = [UInt8](repeating: 0x20, count: 16)) -> [UInt8] {
    var message = Build.dnsQuery(name)
    message[2] |= 0x80
    var answers: [[UInt8]] = []
    let target = Build.dnsName("cdn.example")
    answers.append([0xC0, 12] + Build.be16(5) + Build.be16(1) + Build.be32(300) + Build.be16(target.count) + target)
    if let a { answers.append([0xC0, 12] + Build.be16(1) + Build.be16(1) + Build.be32(300) + Build.be16(4) + a) }
    if let aaaa { answers.append([0xC0, 12] + Build.be16(28) + Build.be16(1) + Build.be32(300) + Build.be16(16) + aaaa) }
    message[6...7] = ArraySlice(Build.be16(answers.count))
    return message + answers.flatMap { $0 }
}

/// Sets a correct UDP checksum on a built packet (the builders leave it zero):
/// the sum with a zero checksum field, complemented.
private func withChecksum(_ packet: [UInt8]) throws -> [UInt8] {
    var bytes = packet
    let ip = try IPPacketParser.parse(bytes)
    let udp = Array(bytes[ip.transportOffset...])
    let checksum = ~Checksum.folded(Checksum.udpPseudoHeader(source: ip.source.networkBytes, destination: ip.destination.networkBytes, udpLength: udp.count) + udp)
    bytes[ip.transportOffset + 6] = UInt8(checksum >> 8)
    bytes[ip.transportOffset + 7] = UInt8(checksum & 0xFF)
    #expect(try udpChecksumVerifies(bytes))
    return bytes
}

@Suite struct DNSAnswerRewriteTests {
    let rewrite = Policy.DNSRewrite(ipv4: IPAddress("127.0.0.1")!, ipv6: IPAddress("::1")!, timeToLive: 10)

    func rewritten(_ packet: [UInt8]) -> [UInt8]? {
        guard let response = DNSResponsePacket(packet.span) else { return nil }
        return DNSAnswerRewrite.rewrite(packet.span, response: response, to: rewrite)
    }

    @Test func addressesAndTTLsChangeAndTheIPv4ChecksumIsRight() throws {
        let packet = try withChecksum(Build.ipv4(source: [10, 0, 0, 2], destination: [10, 0, 0, 1], protocolNumber: 17,
            payload: Build.udp(sourcePort: 53, destinationPort: 40_000, payload: response("blocked.test"))))
        let question = DNSResponsePacket(packet.span)?.question?.description
        #expect(question == "blocked.test")
        let output = try #require(rewritten(packet))
        #expect(output.count == packet.count)
        #expect(try udpChecksumVerifies(output))
        let ip = try IPPacketParser.parse(output)
        let records = try DNSMessageParser.addressRecords(in: Array(output[ip.payload])).get()
        #expect(records.map(\.address) == [IPAddress("127.0.0.1")!, IPAddress("::1")!])
        #expect(records.map(\.timeToLive) == [10, 10])
        // The IP header, the DNS header, the question and the CNAME record are untouched.
        let cnameEnd = ip.payload.lowerBound + 12 + Build.dnsName("blocked.test").count + 4 + 12 + Build.dnsName("cdn.example").count
        #expect(output[..<ip.transportOffset] == packet[..<ip.transportOffset])
        #expect(output[ip.payload.lowerBound..<cnameEnd] == packet[ip.payload.lowerBound..<cnameEnd])
    }

    @Test func theIPv6ChecksumIsRight() throws {
        let packet = try withChecksum(Build.ipv6(nextHeader: 17,
            payload: Build.udp(sourcePort: 53, destinationPort: 40_000, payload: response("blocked.test"))))
        let output = try #require(rewritten(packet))
        #expect(try udpChecksumVerifies(output))
        #expect(output != packet)
    }

    @Test func anIPv4PacketWithoutChecksumKeepsNone() throws {
        let packet = Build.ipv4(source: [10, 0, 0, 2], destination: [10, 0, 0, 1], protocolNumber: 17,
            payload: Build.udp(sourcePort: 53, destinationPort: 40_000, payload: response("blocked.test")))
        let output = try #require(rewritten(packet))
        let ip = try IPPacketParser.parse(output)
        #expect(output[ip.transportOffset + 6] == 0 && output[ip.transportOffset + 7] == 0)
    }

    @Test func answersWithoutAddressesAndNonResponsesAreLeftAlone() throws {
        let noAddresses = Build.ipv4(protocolNumber: 17,
            payload: Build.udp(sourcePort: 53, destinationPort: 40_000, payload: response("blocked.test", a: nil, aaaa: nil)))
        #expect(rewritten(noAddresses) == nil)
        let query = Build.ipv4(protocolNumber: 17, payload: Build.udp(sourcePort: 53, destinationPort: 40_000, payload: Build.dnsQuery("x.test")))
        #expect(DNSResponsePacket(query.span) == nil)
        let otherPort = Build.ipv4(protocolNumber: 17, payload: Build.udp(sourcePort: 5353, destinationPort: 40_000, payload: response("x.test")))
        #expect(DNSResponsePacket(otherPort.span) == nil)
    }

    @Test func everyTruncationIsRefusedOrRewrittenInBounds() throws {
        let packet = Build.ipv4(protocolNumber: 17,
            payload: Build.udp(sourcePort: 53, destinationPort: 40_000, payload: response("blocked.test")))
        for length in 0..<packet.count {
            let cut = Array(packet[..<length])
            if let output = rewritten(cut) { #expect(output.count == cut.count) }
        }
    }
}
