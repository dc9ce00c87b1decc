// DNS messages (RFC 1035 section 4): the header, the first question, and the
// A/AAAA records of a response with the offsets of their addresses.

public import VerdictCore

/// The fixed 12-byte DNS header (RFC 1035 section 4.1.1).
public struct DNSHeader: Hashable, Sendable {
    public var id: UInt16
    public var flags: UInt16
    public var questionCount: UInt16
    public var answerCount: UInt16
    public var authorityCount: UInt16
    public var additionalCount: UInt16

    public var isResponse: Bool { flags & 0x8000 != 0 }
    /// 0 standard query, 1 inverse query, 2 status, ...
    public var opcode: UInt8 { UInt8(truncatingIfNeeded: flags >> 11) & 0x0F }
    public var responseCode: UInt8 { UInt8(truncatingIfNeeded: flags) & 0x0F }
    public var isTruncated: Bool { flags & 0x0200 != 0 }
}

/// The first question of a message.
public struct DNSQuestion: Hashable, Sendable {
    /// Lower-case ASCII labels joined by dots, no trailing dot; empty for the root.
    public var name: [UInt8]
    public var type: UInt16
    public var `class`: UInt16
}

/// The parts of a message that the filter uses.
public struct DNSMessage: Hashable, Sendable {
    public var header: DNSHeader
    /// Nil when the message has no question.
    public var question: DNSQuestion?
}

/// An A or AAAA record in the answer section, with where its address sits,
/// so that the address can be rewritten in place.
public struct DNSAddressRecord: Hashable, Sendable {
    /// 1 (A) or 28 (AAAA).
    public var type: UInt16
    public var timeToLive: UInt32
    public var address: IPAddress
    /// The offset of the RDATA (the address bytes) in the buffer given to the parser.
    public var addressOffset: Int
    /// 4 or 16.
    public var addressLength: Int
    /// The offset of the TTL field (for a rewrite that also shortens TTLs).
    public var timeToLiveOffset: Int
}

/// Why a message cannot be used.
public struct DNSMalformation: Error, Hashable, Sendable, CustomStringConvertible {
    public var reason: String
    /// The offset where the problem was found.
    public var offset: Int
    public init(_ reason: String, at offset: Int) {
        self.reason = reason
        self.offset = offset
    }
    public var description: String { "malformed DNS message at offset \(offset): \(reason)" }
}

/// The result of reading a DNS message from a TCP stream (RFC 1035 section 4.2.2:
/// each message is preceded by its 2-byte length).
public enum DNSStreamOutcome: Hashable, Sendable {
    case needMoreData(totalBytes: Int)
    case malformed(DNSMalformation)
    /// `messageRange` is where the message lies in the stream buffer.
    case message(DNSMessage, messageRange: Range<Int>)
}

public enum DNSMessageParser {
    /// RFC 1035 section 2.3.4: 255 octets on the wire, length bytes included.
    public static let maximumNameLength = 255
    /// Compression pointers followed per name, at most. Loops end here at the latest.
    public static let maximumPointerJumps = 32
    /// Answer records examined per message, at most.
    public static let maximumRecords = 256

    /// Parses the header and first question of a message (UDP payload, or a
    /// TCP message without its length prefix).
    public static func parse(_ bytes: Span<UInt8>) -> Result<DNSMessage, DNSMalformation> {
        var reader = WireReader(bytes)
        guard let header = readHeader(&reader, bytes) else { return .failure(DNSMalformation("shorter than the 12-byte header", at: 0)) }
        guard header.questionCount > 0 else { return .success(DNSMessage(header: header, question: nil)) }
        switch readQuestion(&reader, bytes) {
        case .success(let question): return .success(DNSMessage(header: header, question: question))
        case .failure(let error): return .failure(error)
        }
    }

    /// Convenience for an array.
    public static func parse(_ bytes: [UInt8]) -> Result<DNSMessage, DNSMalformation> {
        parse(bytes.span)
    }

    /// Parses the first message of a DNS-over-TCP stream prefix.
    public static func parse(tcpStream bytes: Span<UInt8>) -> DNSStreamOutcome {
        guard bytes.count >= 2 else { return .needMoreData(totalBytes: 2) }
        let length = Int(bytes.bigEndianU16(at: 0))
        guard length >= 12 else { return .malformed(DNSMalformation("TCP length prefix \(length) is below the header size", at: 0)) }
        guard bytes.count >= 2 + length else { return .needMoreData(totalBytes: 2 + length) }
        let range = 2..<(2 + length)
        switch parse(bytes.extracting(range)) {
        case .success(let message): return .message(message, messageRange: range)
        case .failure(var error):
            error.offset += 2
            return .malformed(error)
        }
    }

    /// Convenience for an array.
    public static func parse(tcpStream bytes: [UInt8]) -> DNSStreamOutcome {
        parse(tcpStream: bytes.span)
    }

    /// Lists the A and AAAA records of the answer section (class IN), with the
    /// offsets of their addresses in `bytes`. Other records are skipped.
    public static func addressRecords(in bytes: Span<UInt8>) -> Result<[DNSAddressRecord], DNSMalformation> {
        var reader = WireReader(bytes)
        guard let header = readHeader(&reader, bytes) else { return .failure(DNSMalformation("shorter than the 12-byte header", at: 0)) }
        for _ in 0..<header.questionCount {
            guard skipName(&reader, bytes) else { return .failure(DNSMalformation("bad name in question section", at: reader.offset)) }
            guard reader.skip(4) else { return .failure(DNSMalformation("question ends early", at: reader.offset)) }
        }
        var records: [DNSAddressRecord] = []
        let count = min(Int(header.answerCount), maximumRecords)
        for _ in 0..<count {
            guard skipName(&reader, bytes) else { return .failure(DNSMalformation("bad owner name in answer", at: reader.offset)) }
            guard let type = reader.readU16(in: bytes), let recordClass = reader.readU16(in: bytes) else {
                return .failure(DNSMalformation("answer ends inside its fixed fields", at: reader.offset))
            }
            let ttlOffset = reader.offset
            guard let ttl = reader.readU32(in: bytes), let dataLength = reader.readU16(in: bytes),
                  let data = reader.readRange(Int(dataLength)) else {
                return .failure(DNSMalformation("answer data runs past the message", at: reader.offset))
            }
            guard recordClass & 0x7FFF == 1 else { continue }
            if (type == 1 && dataLength == 4) || (type == 28 && dataLength == 16),
               let address = IPAddress(networkBytes: bytes.extracting(data)) {
                records.append(DNSAddressRecord(type: type, timeToLive: ttl, address: address,
                                                addressOffset: data.lowerBound, addressLength: data.count,
                                                timeToLiveOffset: ttlOffset))
            } else if type == 1 || type == 28 {
                return .failure(DNSMalformation("A/AAAA record with \(dataLength) bytes of data", at: data.lowerBound))
            }
        }
        return .success(records)
    }

    /// Convenience for an array.
    public static func addressRecords(in bytes: [UInt8]) -> Result<[DNSAddressRecord], DNSMalformation> {
        addressRecords(in: bytes.span)
    }

    // MARK: Pieces

    private static func readHeader(_ reader: inout WireReader, _ bytes: Span<UInt8>) -> DNSHeader? {
        guard let range = reader.readRange(12) else { return nil }
        // One range check for the 12 bytes; the fields at constant offsets need none.
        let header = bytes.extracting(range)
        return DNSHeader(id: header.bigEndianU16(at: 0), flags: header.bigEndianU16(at: 2),
                         questionCount: header.bigEndianU16(at: 4), answerCount: header.bigEndianU16(at: 6),
                         authorityCount: header.bigEndianU16(at: 8), additionalCount: header.bigEndianU16(at: 10))
    }

    private static func readQuestion(_ reader: inout WireReader, _ bytes: Span<UInt8>) -> Result<DNSQuestion, DNSMalformation> {
        let name: [UInt8]
        switch readName(&reader, bytes) {
        case .success(let value): name = value
        case .failure(let error): return .failure(error)
        }
        guard let range = reader.readRange(4) else {
            return .failure(DNSMalformation("question ends before QTYPE/QCLASS", at: reader.offset))
        }
        let fields = bytes.extracting(range)
        return .success(DNSQuestion(name: name, type: fields.bigEndianU16(at: 0), class: fields.bigEndianU16(at: 2)))
    }

    /// Reads a possibly compressed name (RFC 1035 section 4.1.4). Pointers
    /// may go forwards or backwards; loops are cut by the jump bound.
    static func readName(_ reader: inout WireReader, _ bytes: Span<UInt8>) -> Result<[UInt8], DNSMalformation> {
        var name: [UInt8] = []
        var position = reader.offset
        var resumeAt: Int? = nil  // where the reader continues after the first pointer
        var jumps = 0
        var wireLength = 0
        while true {
            guard position < reader.end else { return .failure(DNSMalformation("name runs past the message", at: position)) }
            let length = bytes[position]
            switch length & 0xC0 {
            case 0xC0:
                guard position + 1 < reader.end else { return .failure(DNSMalformation("truncated compression pointer", at: position)) }
                jumps += 1
                guard jumps <= maximumPointerJumps else {
                    return .failure(DNSMalformation("more than \(maximumPointerJumps) compression pointers (a loop?)", at: position))
                }
                let target = Int(bytes.bigEndianU16(at: position) & 0x3FFF)
                if resumeAt == nil { resumeAt = position + 2 }
                guard target < reader.end else { return .failure(DNSMalformation("compression pointer past the message", at: position)) }
                position = target
            case 0x00:
                if length == 0 {
                    let after = resumeAt ?? position + 1
                    _ = reader.skip(after - reader.offset)
                    return .success(name)
                }
                wireLength += Int(length) + 1
                guard wireLength + 1 <= maximumNameLength else {
                    return .failure(DNSMalformation("name longer than \(maximumNameLength) bytes", at: position))
                }
                let labelStart = position + 1
                let labelEnd = labelStart + Int(length)
                guard labelEnd <= reader.end else { return .failure(DNSMalformation("label runs past the message", at: position)) }
                if !name.isEmpty { name.append(0x2E) }
                let label = bytes.extracting(labelStart..<labelEnd)
                for index in label.indices {
                    let byte = label[index]
                    // Printable ASCII only, and no dot inside a label (it would change the name's meaning).
                    guard byte > 0x20, byte < 0x7F, byte != 0x2E else {
                        return .failure(DNSMalformation("byte 0x\(String(byte, radix: 16)) in a label", at: labelStart + index))
                    }
                    name.append(ASCII.lowercased(byte))
                }
                position = labelEnd
            default:
                return .failure(DNSMalformation("unsupported label type 0x\(String(length, radix: 16))", at: position))
            }
        }
    }

    /// Skips a name without building it (bounded the same way).
    private static func skipName(_ reader: inout WireReader, _ bytes: Span<UInt8>) -> Bool {
        var labels = 0
        while let length = reader.readU8(in: bytes) {
            switch length & 0xC0 {
            case 0xC0: return reader.skip(1)
            case 0x00:
                if length == 0 { return true }
                labels += 1
                guard labels <= 128, reader.skip(Int(length)) else { return false }
            default: return false
            }
        }
        return false
    }
}
