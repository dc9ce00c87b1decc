// DNS messages (RFC 1035 section 4): the header, the first question, the
// A/AAAA records of a response with the offsets of their addresses, and the
// one reader of (possibly compressed) names every DNS parser of hallpass uses.

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
    /// The message ends where more of it belongs (a label, a pointer, a name cut off).
    public var isTruncation: Bool
    public init(_ reason: String, at offset: Int, truncation: Bool = false) {
        self.reason = reason
        self.offset = offset
        self.isTruncation = truncation
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

    /// Reads a name as the filter compares names: lower-case ASCII labels
    /// joined by dots (empty for the root); a byte that is not printable
    /// ASCII, or a dot inside a label, makes it malformed.
    static func readName(_ reader: inout WireReader, _ bytes: Span<UInt8>) -> Result<[UInt8], DNSMalformation> {
        var labels = DNSName.Labels(at: reader.offset, end: reader.end)
        var name: [UInt8] = []
        // Built in one allocation of its size (grown byte by byte, a name past 16 bytes took two):
        // the labels' bytes and a dot between each two.
        if let size = labels.size(in: bytes) { name.reserveCapacity(size.labelBytes + size.labels) }
        do throws(DNSMalformation) {
            while let label = try labels.next(in: bytes) {
                if !name.isEmpty { name.append(0x2E) }
                let part = bytes.extracting(label)
                for index in part.indices {
                    let byte = part[index]
                    // Printable ASCII only, and no dot inside a label (it would change the name's meaning).
                    guard byte > 0x20, byte < 0x7F, byte != 0x2E else {
                        return .failure(DNSMalformation("byte 0x\(String(byte, radix: 16)) in a label", at: label.lowerBound + index))
                    }
                    name.append(ASCII.lowercased(byte))
                }
            }
        } catch {
            return .failure(error)
        }
        _ = reader.skip(labels.fieldEnd - reader.offset)
        return .success(name)
    }

    /// Skips a name without building it.
    private static func skipName(_ reader: inout WireReader, _ bytes: Span<UInt8>) -> Bool {
        do {
            _ = try DNSName.skip(&reader, bytes)
            return true
        } catch {
            return false
        }
    }
}

/// Names in DNS messages (RFC 1035 sections 3.1 and 4.1.4): a sequence of
/// labels, each a length byte and that many bytes, ended by the root (a zero
/// byte) or by a compression pointer (two bytes, the top two bits set) to
/// where the rest of the name is. The one reader of names: the message
/// parser (names as the filter compares them) and the answer rewrites
/// (names copied as they are) both walk a name with it, under the same bounds.
public enum DNSName {
    // The bounds are inlinable constants, not stored globals: the inlined readers in other
    // modules then compare with a number instead of calling a global's accessor per label.

    /// RFC 1035 section 2.3.4: 255 octets on the wire, length bytes included.
    @inlinable public static var maximumLength: Int { 255 }
    /// Compression pointers followed per name, at most. Loops end here at the latest.
    @inlinable public static var maximumPointerJumps: Int { 32 }
    /// Labels skipped in place per name field, at most (a 255-byte name has at most 127).
    @inlinable public static var maximumLabels: Int { 128 }

    /// The labels of the name at a position, in order, compression
    /// pointers followed (forwards or backwards; loops are cut by the jump
    /// bound and the length bound). Positions only, like `WireReader`: each
    /// step is given the span.
    ///
    /// Inlinable, with its failures made out of line, so that reading a name
    /// stays one loop in the caller: every DNS query filter-data sees is read
    /// with it.
    public struct Labels {
        @usableFromInline var position: Int
        @usableFromInline let end: Int
        @usableFromInline var resumeAt: Int? = nil
        @usableFromInline var jumps = 0
        /// The labels' bytes so far on the wire, their length bytes included.
        @usableFromInline var wireLength = 0
        @usableFromInline var storedFieldEnd = 0

        /// The name at `start` of a message whose bytes end at `end`.
        @inlinable
        public init(at start: Int, end: Int) {
            self.position = start
            self.end = end
        }

        /// Where the name's field ends in place, once `next` returned nil:
        /// after its first compression pointer, or after its root byte.
        @inlinable public var fieldEnd: Int { storedFieldEnd }

        /// How many labels the name has and how many bytes they hold (length
        /// bytes aside), found by a walk of a copy that copies nothing: so a
        /// reader can make room for the name at once. Nil when the name
        /// cannot be read (`next` then says why, in the order it reads).
        @inlinable @inline(__always)
        public func size(in bytes: Span<UInt8>) -> (labels: Int, labelBytes: Int)? {
            var walk = self
            var labels = 0
            var labelBytes = 0
            do throws(DNSMalformation) {
                while let label = try walk.next(in: bytes) {
                    labels += 1
                    labelBytes += label.count
                }
            } catch {
                return nil
            }
            return (labels, labelBytes)
        }

        /// The range of the next label's bytes (without its length byte);
        /// nil at the root, when the name is complete.
        @inlinable @inline(__always)
        public mutating func next(in bytes: Span<UInt8>) throws(DNSMalformation) -> Range<Int>? {
            while true {
                guard position < end else { throw DNSName.malformation(.runsPast, at: position) }
                let length = bytes[position]
                switch length & 0xC0 {
                case 0xC0:
                    guard position + 1 < end else { throw DNSName.malformation(.truncatedPointer, at: position) }
                    jumps += 1
                    guard jumps <= DNSName.maximumPointerJumps else { throw DNSName.malformation(.pointerLoop, at: position) }
                    let target = Int(bytes.bigEndianU16(at: position) & 0x3FFF)
                    if resumeAt == nil { resumeAt = position + 2 }
                    guard target < end else { throw DNSName.malformation(.pointerPastTheEnd, at: position) }
                    position = target
                case 0x00:
                    if length == 0 {
                        storedFieldEnd = resumeAt ?? position + 1
                        return nil
                    }
                    wireLength += Int(length) + 1
                    // The root's byte counts too.
                    guard wireLength + 1 <= DNSName.maximumLength else { throw DNSName.malformation(.tooLong, at: position) }
                    let labelStart = position + 1
                    let labelEnd = labelStart + Int(length)
                    guard labelEnd <= end else { throw DNSName.malformation(.labelRunsPast, at: position) }
                    position = labelEnd
                    return labelStart..<labelEnd
                default:
                    throw DNSName.malformation(.labelType(length), at: position)
                }
            }
        }
    }

    /// Skips the name field at `reader` without following its pointer (nor
    /// checking where it points) and without building the name; returns the
    /// offset of the compression pointer it ends in, nil when it ends in the
    /// root. The reader stays where it was when the field cannot be read.
    @inlinable @inline(__always)
    public static func skip(_ reader: inout WireReader, _ bytes: Span<UInt8>) throws(DNSMalformation) -> Int? {
        var cursor = reader
        var labels = 0
        while true {
            let start = cursor.offset
            guard let length = cursor.readU8(in: bytes) else { throw malformation(.runsPast, at: start) }
            switch length & 0xC0 {
            case 0xC0:
                guard cursor.skip(1) else { throw malformation(.truncatedPointer, at: start) }
                reader = cursor
                return start
            case 0x00:
                if length == 0 {
                    reader = cursor
                    return nil
                }
                labels += 1
                guard labels <= maximumLabels else { throw malformation(.tooManyLabels, at: start) }
                guard cursor.skip(Int(length)) else { throw malformation(.labelRunsPast, at: start) }
            default:
                throw malformation(.labelType(length), at: start)
            }
        }
    }

    /// What is wrong with a name that cannot be read.
    @usableFromInline enum Problem {
        case runsPast, truncatedPointer, pointerLoop, pointerPastTheEnd, tooLong, labelRunsPast, labelType(UInt8), tooManyLabels
    }

    /// The failure for `problem`, made out of line: its text is not built on the way of every name read.
    @usableFromInline @inline(never)
    static func malformation(_ problem: Problem, at offset: Int) -> DNSMalformation {
        switch problem {
        case .runsPast: DNSMalformation("name runs past the message", at: offset, truncation: true)
        case .truncatedPointer: DNSMalformation("truncated compression pointer", at: offset, truncation: true)
        case .pointerLoop: DNSMalformation("more than \(maximumPointerJumps) compression pointers (a loop?)", at: offset)
        case .pointerPastTheEnd: DNSMalformation("compression pointer past the message", at: offset)
        case .tooLong: DNSMalformation("name longer than \(maximumLength) bytes", at: offset)
        case .labelRunsPast: DNSMalformation("label runs past the message", at: offset, truncation: true)
        case .labelType(let length): DNSMalformation("unsupported label type 0x\(String(length, radix: 16))", at: offset)
        case .tooManyLabels: DNSMalformation("more than \(maximumLabels) labels", at: offset)
        }
    }
}
