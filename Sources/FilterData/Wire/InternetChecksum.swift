// The Internet checksum (RFC 1071) of the packets filter-data writes: the
// IPv4 header's (RFC 791 section 3.1) and UDP's over its pseudo-header
// (RFC 768; RFC 8200 section 8.1 for IPv6, where it is mandatory). The DNS
// rewrites (DNSAnswerRewrite.swift, DNSBypassRewrite.swift) set both here.

import VerdictCore

enum InternetChecksum {
    /// The 16-bit one's complement sum of `bytes` (an odd last byte padded
    /// with a zero) added to `initial`, not yet folded: 32 bits hold the sum
    /// of any IP packet's words without overflow (at most 32,768 words of
    /// at most 0xFFFF).
    static func sum(_ bytes: Span<UInt8>, adding initial: UInt32 = 0) -> UInt32 {
        var sum = initial
        // Byte by byte over the span's own indices, which leaves no bounds check in the loop: a
        // byte at an even offset is its word's high byte, at an odd one its low byte. (A choice
        // between two constant shifts; the compiler makes the loop vector code.)
        for index in bytes.indices {
            let byte = UInt32(bytes[index])
            sum &+= index & 1 == 0 ? byte << 8 : byte
        }
        return sum
    }

    /// A sum folded to 16 bits and complemented: the checksum field's value.
    static func checksum(ofSum sum: UInt32) -> UInt16 {
        var folded = sum
        while folded > 0xFFFF { folded = (folded & 0xFFFF) + (folded >> 16) }
        return ~UInt16(truncatingIfNeeded: folded)
    }

    /// Computes the header checksum of the IPv4 packet in `bytes` again.
    static func setIPv4HeaderChecksum(_ bytes: inout [UInt8]) {
        let headerLength = Int(bytes[0] & 0x0F) * 4
        bytes[10] = 0
        bytes[11] = 0
        let value = checksum(ofSum: sum(bytes.span.extracting(0..<headerLength)))
        bytes[10] = UInt8(truncatingIfNeeded: value >> 8)
        bytes[11] = UInt8(truncatingIfNeeded: value)
    }

    /// Computes the UDP checksum of `bytes` (a whole IP packet, `ip` its
    /// parse) again. An IPv4 sender may leave it zero (no checksum); it
    /// stays zero then. False when the UDP length does not fit the packet.
    static func setUDPChecksum(_ bytes: inout [UInt8], ip: IPPacket) -> Bool {
        let udp = ip.transportOffset
        guard udp + 8 <= bytes.count else { return false }
        let udpLength = Int(bytes[udp + 4]) << 8 | Int(bytes[udp + 5])
        guard udpLength >= 8, udp + udpLength <= bytes.count else { return false }
        if ip.version == 4, bytes[udp + 6] == 0, bytes[udp + 7] == 0 { return true }
        bytes[udp + 6] = 0
        bytes[udp + 7] = 0
        // The pseudo-header: addresses, protocol and UDP length.
        let source = ip.source.networkBytes, destination = ip.destination.networkBytes
        var total = sum(source.span, adding: 17 + UInt32(udpLength))
        total = sum(destination.span, adding: total)
        total = sum(bytes.span.extracting(udp..<(udp + udpLength)), adding: total)
        var value = checksum(ofSum: total)
        // Zero says "no checksum" (RFC 768): a computed zero is sent as all ones.
        if value == 0 { value = 0xFFFF }
        bytes[udp + 6] = UInt8(truncatingIfNeeded: value >> 8)
        bytes[udp + 7] = UInt8(truncatingIfNeeded: value)
        return true
    }
}
