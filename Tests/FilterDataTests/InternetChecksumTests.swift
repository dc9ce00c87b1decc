// The one Internet checksum filter-data writes (RFC 1071): the IPv4 header's and UDP's
// over its pseudo-header, checked against the tests' own sum.
@testable import FilterData
import Testing

@Suite struct InternetChecksumTests {
    let source: [UInt8] = [192, 0, 2, 53]
    let destination: [UInt8] = [10, 0, 0, 1]

    func packet(payload: [UInt8], checksum: [UInt8] = [0x12, 0x34]) -> [UInt8] {
        var udp = Build.udp(sourcePort: 53, destinationPort: 40_000, payload: payload)
        udp[6] = checksum[0]
        udp[7] = checksum[1]
        return Build.ipv4(source: source, destination: destination, protocolNumber: 17, payload: udp)
    }

    func udpChecksumHolds(_ bytes: [UInt8]) -> Bool {
        let udp = Array(bytes[20...])
        return Checksum.holds(udp, pseudo: Checksum.udpPseudoHeader(source: source, destination: destination, udpLength: udp.count))
    }

    @Test func udpAndIPv4HeaderChecksumsAreMadeRightForOddAndEvenLengths() throws {
        for length in [0, 1, 2, 3, 511, 512] {
            var bytes = packet(payload: (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
            let ip = try IPPacketParser.parse(bytes)
            #expect(InternetChecksum.setUDPChecksum(&bytes, ip: ip))
            #expect(udpChecksumHolds(bytes), "payload of \(length) bytes")
            InternetChecksum.setIPv4HeaderChecksum(&bytes)
            #expect(Checksum.holds(Array(bytes[0..<20])))
        }
    }

    @Test func aComputedZeroIsSentAsAllOnesAndAnIPv4ZeroStaysZero() throws {
        // The last payload word chosen so that the sum folds to 0xFFFF: the checksum computes to zero.
        var bytes = packet(payload: [1, 2, 3, 4, 0, 0], checksum: [0, 0])
        let sum = Checksum.folded(Checksum.udpPseudoHeader(source: source, destination: destination, udpLength: 14) + Array(bytes[20...]))
        let word = 0xFFFF - sum
        bytes[bytes.count - 2] = UInt8(word >> 8)
        bytes[bytes.count - 1] = UInt8(word & 0xFF)
        let ip = try IPPacketParser.parse(bytes)
        var unchanged = bytes
        #expect(InternetChecksum.setUDPChecksum(&unchanged, ip: ip))
        #expect(unchanged == bytes, "an IPv4 sender's zero (no checksum) stays zero")
        bytes[26] = 0x55
        #expect(InternetChecksum.setUDPChecksum(&bytes, ip: ip))
        #expect(bytes[26] == 0xFF && bytes[27] == 0xFF)
        #expect(udpChecksumHolds(bytes))
    }

    @Test func aUDPLengthPastThePacketIsRefused() throws {
        var bytes = packet(payload: [1, 2, 3, 4])
        let ip = try IPPacketParser.parse(bytes)
        bytes[25] = 40
        #expect(!InternetChecksum.setUDPChecksum(&bytes, ip: ip))
    }
}
