// Reads captures for `filterctl replay`: classic pcap and pcapng
// (draft-ietf-opsawg-pcap, draft-ietf-opsawg-pcapng), from bytes already in
// memory, and strips link-layer headers to get the IP packet that NFQUEUE
// would deliver. The format is recognised by its magic number only.
import HallpassWire

/// When a packet was captured.
public struct CaptureTimestamp: Hashable, Sendable, Comparable {
    public var seconds: Int64
    public var nanoseconds: UInt32

    public init(seconds: Int64, nanoseconds: UInt32) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    public static func < (lhs: CaptureTimestamp, rhs: CaptureTimestamp) -> Bool {
        (lhs.seconds, lhs.nanoseconds) < (rhs.seconds, rhs.nanoseconds)
    }
}

/// The capture file formats read.
public enum CaptureFormat: Hashable, Sendable {
    case pcap(bigEndian: Bool, nanosecondResolution: Bool)
    case pcapng
}

/// What a record carries after the link-layer header is removed.
public enum CapturePayload: Hashable, Sendable {
    /// An IPv4 or IPv6 packet, starting at the IP header.
    case ip(ArraySlice<UInt8>)
    /// Not an IP packet; `reason` says what it is or why it could not be read.
    case notIP(reason: String)
}

/// One captured packet.
public struct CaptureRecord: Hashable, Sendable {
    /// The record's position in the file (0-based).
    public var index: Int
    /// The byte offset of the record (its header) in the file.
    public var fileOffset: Int
    /// Nil for pcapng Simple Packet Blocks, which carry no time.
    public var timestamp: CaptureTimestamp?
    public var linkType: UInt32
    /// The captured bytes, link-layer header included.
    public var frame: ArraySlice<UInt8>
    /// The length of the packet on the wire (may exceed `frame.count`).
    public var originalLength: Int
    public var payload: CapturePayload
}

/// A capture that cannot be read further, with the offset where it went wrong.
public struct CaptureError: Error, Hashable, Sendable, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }
    public var description: String { "capture unreadable at byte offset \(offset): \(reason)" }
}

/// Reads the records of a pcap or pcapng capture held in memory.
///
/// ```swift
/// var reader = try CaptureReader(bytes: fileBytes)
/// while let record = try reader.next() { ... }
/// ```
public struct CaptureReader: Sendable {
    /// Records or blocks larger than this are refused as corrupt.
    public static let maximumRecordLength = 16 * 1024 * 1024

    public let bytes: [UInt8]
    public let format: CaptureFormat
    private var offset: Int
    private var recordIndex = 0
    // pcap
    private var pcapLinkType: UInt32 = 0
    // pcapng: per section
    private var bigEndian: Bool
    private var interfaces: [(linkType: UInt32, ticksPerSecond: UInt64)] = []

    /// Recognises the format from the first four bytes.
    public init(bytes: [UInt8]) throws(CaptureError) {
        self.bytes = bytes
        guard bytes.count >= 4 else { throw CaptureError(offset: 0, reason: "file shorter than a capture magic number") }
        let magicBE = UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])
        let magicLE = magicBE.byteSwapped
        switch (magicBE, magicLE) {
        case (0xa1b2_c3d4, _): format = .pcap(bigEndian: true, nanosecondResolution: false)
        case (0xa1b2_3c4d, _): format = .pcap(bigEndian: true, nanosecondResolution: true)
        case (_, 0xa1b2_c3d4): format = .pcap(bigEndian: false, nanosecondResolution: false)
        case (_, 0xa1b2_3c4d): format = .pcap(bigEndian: false, nanosecondResolution: true)
        case (0x0a0d_0d0a, _): format = .pcapng
        default:
            throw CaptureError(offset: 0, reason: "unknown magic number 0x\(String(magicBE, radix: 16)): neither pcap nor pcapng")
        }
        switch format {
        case .pcap(let isBigEndian, _):
            bigEndian = isBigEndian
            guard bytes.count >= 24 else { throw CaptureError(offset: 0, reason: "pcap file header truncated (\(bytes.count) of 24 bytes)") }
            offset = 24
            pcapLinkType = Self.load32(bytes, 20, bigEndian: isBigEndian) & 0x0FFF_FFFF  // upper bits carry FCS info
        case .pcapng:
            bigEndian = false
            offset = 0
        }
    }

    /// The next record, nil at the end of the file.
    public mutating func next() throws(CaptureError) -> CaptureRecord? {
        switch format {
        case .pcap(_, let nanoseconds): return try nextPcapRecord(nanoseconds: nanoseconds)
        case .pcapng: return try nextPcapngRecord()
        }
    }

    /// Reads every record (convenience for tests and small files).
    public mutating func readAll() throws(CaptureError) -> [CaptureRecord] {
        var records: [CaptureRecord] = []
        while let record = try next() { records.append(record) }
        return records
    }

    /// The 16-bit integer at `at`, in the file's byte order (bounds-checked).
    static func load16(_ bytes: [UInt8], _ at: Int, bigEndian: Bool) -> UInt16 {
        let value = bytes.span.bigEndianU16(at: at)
        return bigEndian ? value : value.byteSwapped
    }

    /// The 32-bit integer at `at`, in the file's byte order (bounds-checked).
    static func load32(_ bytes: [UInt8], _ at: Int, bigEndian: Bool) -> UInt32 {
        let value = bytes.span.bigEndianU32(at: at)
        return bigEndian ? value : value.byteSwapped
    }

    // MARK: pcap

    private mutating func nextPcapRecord(nanoseconds: Bool) throws(CaptureError) -> CaptureRecord? {
        guard offset < bytes.count else { return nil }
        guard bytes.count - offset >= 16 else {
            throw CaptureError(offset: offset, reason: "record header truncated (\(bytes.count - offset) of 16 bytes)")
        }
        let seconds = Self.load32(bytes, offset, bigEndian: bigEndian)
        let fraction = Self.load32(bytes, offset + 4, bigEndian: bigEndian)
        let capturedLength = Int(Self.load32(bytes, offset + 8, bigEndian: bigEndian))
        let originalLength = Int(Self.load32(bytes, offset + 12, bigEndian: bigEndian))
        guard capturedLength <= Self.maximumRecordLength else {
            throw CaptureError(offset: offset, reason: "record length \(capturedLength) is implausible (corrupt file?)")
        }
        guard bytes.count - offset - 16 >= capturedLength else {
            throw CaptureError(offset: offset, reason: "record data truncated (\(bytes.count - offset - 16) of \(capturedLength) bytes)")
        }
        let frame = bytes[(offset + 16)..<(offset + 16 + capturedLength)]
        let nanos = nanoseconds ? fraction : fraction &* 1000
        let record = CaptureRecord(index: recordIndex, fileOffset: offset,
                                   timestamp: CaptureTimestamp(seconds: Int64(seconds), nanoseconds: nanos),
                                   linkType: pcapLinkType, frame: frame, originalLength: originalLength,
                                   payload: LinkLayer.payload(of: frame, linkType: pcapLinkType))
        offset += 16 + capturedLength
        recordIndex += 1
        return record
    }

    // MARK: pcapng

    private mutating func nextPcapngRecord() throws(CaptureError) -> CaptureRecord? {
        while offset < bytes.count {
            let blockStart = offset
            guard bytes.count - blockStart >= 12 else {
                throw CaptureError(offset: blockStart, reason: "block header truncated (\(bytes.count - blockStart) bytes left)")
            }
            let rawType = Self.load32(bytes, blockStart, bigEndian: true)
            if rawType == 0x0a0d_0d0a {
                // Section Header Block: its byte-order magic fixes the byte order of the section.
                guard bytes.count - blockStart >= 28 else { throw CaptureError(offset: blockStart, reason: "section header truncated") }
                let magic = Self.load32(bytes, blockStart + 8, bigEndian: true)
                switch magic {
                case 0x1a2b_3c4d: bigEndian = true
                case 0x4d3c_2b1a: bigEndian = false
                default: throw CaptureError(offset: blockStart + 8, reason: "bad byte-order magic 0x\(String(magic, radix: 16)) in section header")
                }
                interfaces = []
            }
            let type = Self.load32(bytes, blockStart, bigEndian: bigEndian)
            let length = Int(Self.load32(bytes, blockStart + 4, bigEndian: bigEndian))
            guard length >= 12, length % 4 == 0, length <= Self.maximumRecordLength else {
                throw CaptureError(offset: blockStart, reason: "block length \(length) is invalid")
            }
            guard bytes.count - blockStart >= length else {
                throw CaptureError(offset: blockStart, reason: "block of \(length) bytes truncated (\(bytes.count - blockStart) left)")
            }
            guard Int(Self.load32(bytes, blockStart + length - 4, bigEndian: bigEndian)) == length else {
                throw CaptureError(offset: blockStart + length - 4, reason: "trailing block length does not match the leading one")
            }
            offset = blockStart + length
            let bodyStart = blockStart + 8
            let bodyEnd = blockStart + length - 4
            switch type {
            case 0x0a0d_0d0a:
                continue
            case 1:  // Interface Description Block
                guard bodyEnd - bodyStart >= 8 else { throw CaptureError(offset: blockStart, reason: "interface description truncated") }
                let linkType = UInt32(Self.load16(bytes, bodyStart, bigEndian: bigEndian))
                interfaces.append((linkType, ticksPerSecond(optionsFrom: bodyStart + 8, to: bodyEnd)))
            case 6, 2:  // Enhanced Packet Block, obsolete Packet Block
                guard bodyEnd - bodyStart >= 20 else { throw CaptureError(offset: blockStart, reason: "packet block truncated") }
                let interface = type == 6 ? Int(Self.load32(bytes, bodyStart, bigEndian: bigEndian))
                                          : Int(Self.load16(bytes, bodyStart, bigEndian: bigEndian))
                guard interface < interfaces.count else {
                    throw CaptureError(offset: blockStart, reason: "packet refers to undeclared interface \(interface)")
                }
                let high = UInt64(Self.load32(bytes, bodyStart + 4, bigEndian: bigEndian))
                let low = UInt64(Self.load32(bytes, bodyStart + 8, bigEndian: bigEndian))
                let capturedLength = Int(Self.load32(bytes, bodyStart + 12, bigEndian: bigEndian))
                let originalLength = Int(Self.load32(bytes, bodyStart + 16, bigEndian: bigEndian))
                let dataStart = bodyStart + 20
                guard capturedLength <= bodyEnd - dataStart else {
                    throw CaptureError(offset: blockStart, reason: "packet data length \(capturedLength) exceeds its block")
                }
                let frame = bytes[dataStart..<(dataStart + capturedLength)]
                let interfaceInfo = interfaces[interface]
                let ticks = high << 32 | low
                let perSecond = max(interfaceInfo.ticksPerSecond, 1)
                let subsecond = ticks % perSecond
                let nanos = perSecond >= 1_000_000_000 ? subsecond / (perSecond / 1_000_000_000)
                                                       : subsecond.multipliedReportingOverflow(by: 1_000_000_000 / perSecond).partialValue
                return makeRecord(blockStart, CaptureTimestamp(seconds: Int64(truncatingIfNeeded: ticks / perSecond),
                                                               nanoseconds: UInt32(truncatingIfNeeded: nanos)),
                                  interfaceInfo.linkType, frame, originalLength)
            case 3:  // Simple Packet Block: interface 0, no timestamp
                guard bodyEnd - bodyStart >= 4 else { throw CaptureError(offset: blockStart, reason: "simple packet block truncated") }
                guard let interfaceInfo = interfaces.first else {
                    throw CaptureError(offset: blockStart, reason: "simple packet block before any interface description")
                }
                let originalLength = Int(Self.load32(bytes, bodyStart, bigEndian: bigEndian))
                let capturedLength = min(originalLength, bodyEnd - bodyStart - 4)
                let frame = bytes[(bodyStart + 4)..<(bodyStart + 4 + capturedLength)]
                return makeRecord(blockStart, nil, interfaceInfo.linkType, frame, originalLength)
            default:
                continue  // statistics, name resolution, custom and unknown blocks
            }
        }
        return nil
    }

    private mutating func makeRecord(_ blockStart: Int, _ timestamp: CaptureTimestamp?, _ linkType: UInt32,
                                     _ frame: ArraySlice<UInt8>, _ originalLength: Int) -> CaptureRecord {
        defer { recordIndex += 1 }
        return CaptureRecord(index: recordIndex, fileOffset: blockStart, timestamp: timestamp, linkType: linkType,
                             frame: frame, originalLength: originalLength,
                             payload: LinkLayer.payload(of: frame, linkType: linkType))
    }

    /// The if_tsresol option (code 9) of an IDB; microseconds when absent.
    private func ticksPerSecond(optionsFrom start: Int, to end: Int) -> UInt64 {
        var position = start
        while end - position >= 4 {
            let code = Self.load16(bytes, position, bigEndian: bigEndian)
            let length = Int(Self.load16(bytes, position + 2, bigEndian: bigEndian))
            if code == 0 { break }
            if code == 9, length >= 1, end - position >= 5 {
                let value = bytes[position + 4]
                let exponent = UInt64(value & 0x7F)
                if value & 0x80 != 0 {
                    return exponent < 64 ? 1 << exponent : 1_000_000
                }
                guard exponent <= 18 else { return 1_000_000 }
                var result: UInt64 = 1
                for _ in 0..<exponent { result *= 10 }
                return result
            }
            position += 4 + ((length + 3) & ~3)
        }
        return 1_000_000
    }
}

/// Link-layer headers (LINKTYPE_ values of the tcpdump.org registry).
public enum LinkLayer {
    /// Stacked VLAN tags followed, at most.
    public static let maximumVLANTags = 8

    /// The IP packet inside `frame` of link type `linkType`.
    public static func payload(of frame: ArraySlice<UInt8>, linkType: UInt32) -> CapturePayload {
        let start = frame.startIndex
        switch linkType {
        case 1:  // Ethernet
            guard frame.count >= 14 else { return .notIP(reason: "Ethernet frame shorter than its header") }
            return etherType(frame, typeAt: start + 12)
        case 101, 12, 14:  // raw IP (12 and 14 on some BSDs)
            return rawIP(frame[start...])
        case 228:
            return ipOfVersion(frame[start...], 4)
        case 229:
            return ipOfVersion(frame[start...], 6)
        case 113:  // Linux cooked v1: protocol at bytes 14-15
            guard frame.count >= 16 else { return .notIP(reason: "Linux SLL header truncated") }
            return etherType(frame, typeAt: start + 14)
        case 276:  // Linux cooked v2: protocol at bytes 0-1, 20-byte header
            guard frame.count >= 20 else { return .notIP(reason: "Linux SLL2 header truncated") }
            return protocolType(frame, UInt16(frame[start]) << 8 | UInt16(frame[start + 1]), payloadAt: start + 20)
        case 0, 108:  // BSD null (host byte order) / OpenBSD loop (network order)
            guard frame.count >= 4 else { return .notIP(reason: "loopback header truncated") }
            let big = UInt32(frame[start]) << 24 | UInt32(frame[start + 1]) << 16 | UInt32(frame[start + 2]) << 8 | UInt32(frame[start + 3])
            let family = big & 0xFFFF_0000 != 0 ? big.byteSwapped : big
            switch family {
            case 2: return ipOfVersion(frame[(start + 4)...], 4)
            case 10, 24, 28, 30: return ipOfVersion(frame[(start + 4)...], 6)
            default: return .notIP(reason: "loopback address family \(family)")
            }
        case 9, 50:  // PPP, PPP in HDLC framing
            var position = start
            if frame.count >= 2, frame[start] == 0xFF, frame[start + 1] == 0x03 { position += 2 }
            guard frame.endIndex - position >= 1 else { return .notIP(reason: "PPP header truncated") }
            // The protocol field may be compressed to one byte (odd first byte).
            var protocolNumber = UInt16(frame[position])
            if protocolNumber & 1 == 0 {
                guard frame.endIndex - position >= 2 else { return .notIP(reason: "PPP header truncated") }
                protocolNumber = protocolNumber << 8 | UInt16(frame[position + 1])
                position += 2
            } else {
                position += 1
            }
            switch protocolNumber {
            case 0x0021: return ipOfVersion(frame[position...], 4)
            case 0x0057: return ipOfVersion(frame[position...], 6)
            default: return .notIP(reason: "PPP protocol 0x\(String(protocolNumber, radix: 16))")
            }
        default:
            return .notIP(reason: "unsupported link type \(linkType)")
        }
    }

    private static func etherType(_ frame: ArraySlice<UInt8>, typeAt typeOffset: Int) -> CapturePayload {
        var position = typeOffset
        var tags = 0
        while true {
            guard frame.endIndex - position >= 2 else { return .notIP(reason: "frame ends inside its EtherType") }
            let type = UInt16(frame[position]) << 8 | UInt16(frame[position + 1])
            switch type {
            case 0x8100, 0x88a8, 0x9100:  // 802.1Q, 802.1ad, old QinQ
                tags += 1
                guard tags <= maximumVLANTags else { return .notIP(reason: "more than \(maximumVLANTags) VLAN tags") }
                position += 4
            default:
                return protocolType(frame, type, payloadAt: position + 2)
            }
        }
    }

    private static func protocolType(_ frame: ArraySlice<UInt8>, _ type: UInt16, payloadAt position: Int) -> CapturePayload {
        guard position <= frame.endIndex else { return .notIP(reason: "frame ends inside its link header") }
        switch type {
        case 0x0800: return ipOfVersion(frame[position...], 4)
        case 0x86DD: return ipOfVersion(frame[position...], 6)
        case 0x8864:
            // PPPoE session stage (RFC 2516 section 4): 6-byte header, then the PPP protocol field.
            guard frame.endIndex - position >= 8 else { return .notIP(reason: "PPPoE header truncated") }
            let pppProtocol = UInt16(frame[position + 6]) << 8 | UInt16(frame[position + 7])
            switch pppProtocol {
            case 0x0021: return ipOfVersion(frame[(position + 8)...], 4)
            case 0x0057: return ipOfVersion(frame[(position + 8)...], 6)
            default: return .notIP(reason: "PPPoE carrying PPP protocol 0x\(String(pppProtocol, radix: 16))")
            }
        case 0x0806: return .notIP(reason: "ARP")
        default:
            if type < 0x0600 { return .notIP(reason: "802.3 frame with LLC") }
            return .notIP(reason: "EtherType 0x\(String(type, radix: 16))")
        }
    }

    private static func rawIP(_ packet: ArraySlice<UInt8>) -> CapturePayload {
        guard let first = packet.first else { return .notIP(reason: "empty packet") }
        switch first >> 4 {
        case 4, 6: return .ip(packet)
        default: return .notIP(reason: "raw packet with IP version \(first >> 4)")
        }
    }

    private static func ipOfVersion(_ packet: ArraySlice<UInt8>, _ version: UInt8) -> CapturePayload {
        guard let first = packet.first else { return .notIP(reason: "empty IPv\(version) packet") }
        guard first >> 4 == version else { return .notIP(reason: "IPv\(version) header with version \(first >> 4)") }
        return .ip(packet)
    }
}
