// The IP and transport layer of a packet as NFQUEUE delivers it: the buffer
// starts at the IPv4 or IPv6 header (RFC 791, RFC 8200), followed by TCP
// (RFC 9293) or UDP (RFC 768).

public import HallpassWire
public import HallpassIPC
public import VerdictCore

/// TCP control bits (RFC 9293 section 3.1).
public struct TCPFlags: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let fin = TCPFlags(rawValue: 0x01)
    public static let syn = TCPFlags(rawValue: 0x02)
    public static let rst = TCPFlags(rawValue: 0x04)
    public static let psh = TCPFlags(rawValue: 0x08)
    public static let ack = TCPFlags(rawValue: 0x10)
    public static let urg = TCPFlags(rawValue: 0x20)
}

/// The TCP header fields the flow logic needs.
public struct TCPSegmentHeader: Hashable, Sendable {
    public var sequenceNumber: UInt32
    public var acknowledgmentNumber: UInt32
    public var flags: TCPFlags
    public var window: UInt16
    /// The header length in bytes (data offset times four), options included.
    public var headerLength: Int
}

/// Where a packet stands with respect to IP fragmentation
/// (RFC 791 section 3.2, RFC 8200 section 4.5).
public enum IPFragmentation: Hashable, Sendable {
    /// A whole datagram.
    case unfragmented
    /// The first fragment (offset 0, more fragments follow): the transport
    /// header may be present, but the payload is incomplete.
    case firstFragment(identification: UInt32)
    /// A later fragment: it carries no transport header; `payload` is the
    /// fragment data and the ports are absent.
    case laterFragment(identification: UInt32, offset: Int, moreFragments: Bool)

    public var isFragment: Bool { self != .unfragmented }
}

/// A parsed IP packet. Offsets refer to the buffer given to the parser.
public struct IPPacket: Hashable, Sendable {
    /// 4 or 6.
    public var version: UInt8
    public var source: IPAddress
    public var destination: IPAddress
    /// The upper-layer protocol (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, 50 ESP,
    /// 59 no next header, ...) after any IPv6 extension headers.
    public var protocolNumber: UInt8
    /// Ports for TCP and UDP when the transport header is present, else nil.
    public var sourcePort: UInt16?
    public var destinationPort: UInt16?
    /// TCP header fields; nil for anything that is not a TCP header.
    public var tcp: TCPSegmentHeader?
    /// The transport payload (TCP/UDP data), or for other protocols and
    /// later fragments, everything after the IP headers.
    public var payload: Range<Int>
    /// The offset of the transport header (after IP options and IPv6 extension headers).
    public var transportOffset: Int
    public var fragmentation: IPFragmentation
    /// The packet length the IP header declares, clipped to the buffer.
    public var length: Int

    /// The 5-tuple of this packet, when it has ports.
    public var flowKey: FlowKey? {
        guard let sourcePort, let destinationPort else { return nil }
        return FlowKey(protocolNumber: protocolNumber, source: source, sourcePort: sourcePort,
                       destination: destination, destinationPort: destinationPort)
    }
}

/// Why a buffer is not a usable IP packet.
public enum IPPacketError: Error, Hashable, Sendable, CustomStringConvertible {
    case empty
    case unknownVersion(UInt8)
    /// The buffer ends inside a header. `layer` names it.
    case truncated(layer: String, needed: Int, available: Int)
    case badHeaderLength(Int)
    /// IPv4 total length or IPv6 payload length smaller than the headers.
    case badTotalLength(Int)
    case tooManyExtensionHeaders(Int)
    case badTransportHeader(String)

    public var description: String {
        switch self {
        case .empty: return "empty packet"
        case .unknownVersion(let version): return "IP version \(version) is neither 4 nor 6"
        case .truncated(let layer, let needed, let available):
            return "\(layer) header truncated: needs \(needed) bytes, \(available) available"
        case .badHeaderLength(let length): return "IPv4 header length \(length) is below 20 bytes"
        case .badTotalLength(let length): return "declared packet length \(length) is shorter than its headers"
        case .tooManyExtensionHeaders(let count): return "more than \(count) IPv6 extension headers"
        case .badTransportHeader(let reason): return reason
        }
    }
}

/// Parses IP packets starting at the IP header.
public enum IPPacketParser {
    /// More IPv6 extension headers than this is refused (a chain that long is
    /// an evasion attempt, not a real packet).
    public static let maximumExtensionHeaders = 8

    /// Parses `bytes` as an IPv4 or IPv6 packet with its TCP or UDP header.
    public static func parse(_ bytes: Span<UInt8>) throws(IPPacketError) -> IPPacket {
        guard !bytes.isEmpty else { throw .empty }
        let first = bytes[0]
        switch first >> 4 {
        case 4: return try parseIPv4(bytes)
        case 6: return try parseIPv6(bytes)
        default: throw .unknownVersion(first >> 4)
        }
    }

    /// Convenience for a slice (for example a capture record); offsets in the
    /// result count from the slice's first byte.
    public static func parse(_ bytes: ArraySlice<UInt8>) throws(IPPacketError) -> IPPacket {
        try parse(bytes.span)
    }

    /// Convenience for an array; see ``parse(_:)-(Span<UInt8>)``.
    public static func parse(_ bytes: [UInt8]) throws(IPPacketError) -> IPPacket {
        try parse(bytes.span)
    }

    // MARK: IPv4 (RFC 791 section 3.1)

    private static func parseIPv4(_ bytes: Span<UInt8>) throws(IPPacketError) -> IPPacket {
        guard bytes.count >= 20 else { throw .truncated(layer: "IPv4", needed: 20, available: bytes.count) }
        let headerLength = Int(bytes[0] & 0x0F) * 4
        guard headerLength >= 20 else { throw .badHeaderLength(headerLength) }
        guard bytes.count >= headerLength else {
            throw .truncated(layer: "IPv4", needed: headerLength, available: bytes.count)
        }
        let totalLength = Int(bytes.bigEndianU16(at: 2))
        guard totalLength >= headerLength else { throw .badTotalLength(totalLength) }
        let end = min(totalLength, bytes.count)
        let identification = UInt32(bytes.bigEndianU16(at: 4))
        let flagsAndOffset = bytes.bigEndianU16(at: 6)
        let moreFragments = flagsAndOffset & 0x2000 != 0
        let fragmentOffset = Int(flagsAndOffset & 0x1FFF) * 8
        let protocolNumber = bytes[9]
        let source = IPAddress.v4(bytes.bigEndianU32(at: 12))
        let destination = IPAddress.v4(bytes.bigEndianU32(at: 16))
        let fragmentation: IPFragmentation
        if fragmentOffset != 0 {
            fragmentation = .laterFragment(identification: identification, offset: fragmentOffset, moreFragments: moreFragments)
        } else if moreFragments {
            fragmentation = .firstFragment(identification: identification)
        } else {
            fragmentation = .unfragmented
        }
        var packet = IPPacket(version: 4, source: source, destination: destination, protocolNumber: protocolNumber,
                              sourcePort: nil, destinationPort: nil, tcp: nil, payload: headerLength..<end,
                              transportOffset: headerLength, fragmentation: fragmentation, length: end)
        try parseTransport(bytes, into: &packet, end: end)
        return packet
    }

    // MARK: IPv6 (RFC 8200 sections 3 and 4)

    private static func parseIPv6(_ bytes: Span<UInt8>) throws(IPPacketError) -> IPPacket {
        guard bytes.count >= 40 else { throw .truncated(layer: "IPv6", needed: 40, available: bytes.count) }
        let payloadLength = Int(bytes.bigEndianU16(at: 4))
        // A payload length of 0 with a hop-by-hop header means a jumbogram (RFC 2675); use the buffer.
        let declaredEnd = payloadLength == 0 && bytes[6] == 0 ? bytes.count : 40 + payloadLength
        let end = min(declaredEnd, bytes.count)
        guard let source = IPAddress(networkBytes: bytes.extracting(8..<24)),
              let destination = IPAddress(networkBytes: bytes.extracting(24..<40))
        else { throw .truncated(layer: "IPv6", needed: 40, available: bytes.count) }

        var nextHeader = bytes[6]
        var offset = 40
        var fragmentation = IPFragmentation.unfragmented
        var headersSeen = 0
        walk: while true {
            switch nextHeader {
            case 0, 43, 60, 51, 44:
                headersSeen += 1
                guard headersSeen <= maximumExtensionHeaders else {
                    throw .tooManyExtensionHeaders(maximumExtensionHeaders)
                }
                guard end - offset >= 8 else {
                    throw .truncated(layer: "IPv6 extension", needed: offset + 8, available: end)
                }
                let following = bytes[offset]
                let length: Int
                switch nextHeader {
                case 44:
                    length = 8
                    let offsetAndFlags = bytes.bigEndianU16(at: offset + 2)
                    let identification = bytes.bigEndianU32(at: offset + 4)
                    let fragmentOffset = Int(offsetAndFlags >> 3) * 8
                    let more = offsetAndFlags & 1 != 0
                    if fragmentOffset != 0 {
                        fragmentation = .laterFragment(identification: identification, offset: fragmentOffset, moreFragments: more)
                    } else if more {
                        fragmentation = .firstFragment(identification: identification)
                    }
                case 51:
                    length = (Int(bytes[offset + 1]) + 2) * 4  // RFC 4302 section 2.2: in 4-octet units, minus 2
                default:
                    length = (Int(bytes[offset + 1]) + 1) * 8
                }
                guard end - offset >= length else {
                    throw .truncated(layer: "IPv6 extension", needed: offset + length, available: end)
                }
                offset += length
                nextHeader = following
                if case .laterFragment = fragmentation { break walk }
            default:
                break walk
            }
        }
        var packet = IPPacket(version: 6, source: source, destination: destination, protocolNumber: nextHeader,
                              sourcePort: nil, destinationPort: nil, tcp: nil, payload: offset..<end,
                              transportOffset: offset, fragmentation: fragmentation, length: end)
        try parseTransport(bytes, into: &packet, end: end)
        return packet
    }

    // MARK: TCP and UDP

    private static func parseTransport(_ bytes: Span<UInt8>, into packet: inout IPPacket, end: Int) throws(IPPacketError) {
        if case .laterFragment = packet.fragmentation { return }
        let start = packet.transportOffset
        let available = end - start
        switch packet.protocolNumber {
        case 6:
            // RFC 9293 section 3.1: 20 fixed bytes, data offset in 32-bit words.
            guard available >= 20 else {
                if case .firstFragment = packet.fragmentation { return }
                throw .truncated(layer: "TCP", needed: 20, available: available)
            }
            // One range check for the fixed header; the reads at constant offsets need none.
            let header = bytes.extracting(start..<(start + 20))
            let headerLength = Int(header[12] >> 4) * 4
            guard headerLength >= 20 else { throw .badTransportHeader("TCP data offset \(headerLength) is below 20 bytes") }
            guard available >= headerLength else { throw .truncated(layer: "TCP", needed: headerLength, available: available) }
            packet.sourcePort = header.bigEndianU16(at: 0)
            packet.destinationPort = header.bigEndianU16(at: 2)
            packet.tcp = TCPSegmentHeader(
                sequenceNumber: header.bigEndianU32(at: 4),
                acknowledgmentNumber: header.bigEndianU32(at: 8),
                flags: TCPFlags(rawValue: header[13] & 0x3F),
                window: header.bigEndianU16(at: 14),
                headerLength: headerLength)
            packet.payload = (start + headerLength)..<end
        case 17:
            guard available >= 8 else {
                if case .firstFragment = packet.fragmentation { return }
                throw .truncated(layer: "UDP", needed: 8, available: available)
            }
            let header = bytes.extracting(start..<(start + 8))
            packet.sourcePort = header.bigEndianU16(at: 0)
            packet.destinationPort = header.bigEndianU16(at: 2)
            let udpLength = Int(header.bigEndianU16(at: 4))
            // Length 0 is allowed for IPv6 jumbograms; otherwise trust the smaller value.
            let udpEnd: Int
            if case .firstFragment = packet.fragmentation {
                udpEnd = end
            } else if udpLength == 0 {
                udpEnd = end
            } else {
                guard udpLength >= 8 else { throw .badTransportHeader("UDP length \(udpLength) is below 8 bytes") }
                udpEnd = min(end, start + udpLength)
            }
            packet.payload = (start + 8)..<udpEnd
        default:
            break
        }
    }
}
