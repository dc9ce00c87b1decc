// Bounds-checked big-endian reads over a span of wire bytes.
//
// Every parser of wire bytes (this module's DNS reader, and filter-data's
// Wire/ parsers) reads through this cursor, so every read of wire data
// goes through one length check, and then through `Span`'s own bounds-checked
// subscript. It never traps on short input: reads past the end return nil and
// leave the cursor where it was.
//
// The cursor holds positions only, no pointer and no span: each read is given
// the span it reads from. A span cannot be stored in a struct without
// lifetime annotations, which are an experimental compiler feature; positions
// plus a borrowed span need nothing beyond Swift 6.2, and the cursor stays a
// plain value that can be copied, kept and handed to helpers.

/// A read position in a `Span<UInt8>`. Made for one span (its bounds are
/// clamped to that span's count) and given that span on every read. Given
/// another, shorter span by mistake, a read traps in `Span`'s subscript: it
/// never reads outside the span.
public struct WireReader {
    /// The next byte to read.
    @inlinable public var offset: Int { storedOffset }
    @usableFromInline var storedOffset: Int
    /// One past the last byte this reader may read (at most the span's count).
    public let end: Int

    @inlinable
    public init(_ bytes: Span<UInt8>, from start: Int = 0, to end: Int? = nil) {
        let limit = min(end ?? bytes.count, bytes.count)
        self.end = max(0, limit)
        self.storedOffset = max(0, min(start, self.end))
    }

    /// A reader over `range`, which lies inside this reader's span.
    @usableFromInline init(range: Range<Int>) {
        storedOffset = range.lowerBound
        end = range.upperBound
    }

    @inlinable @inline(__always)
    public var remaining: Int { end - offset }
    @inlinable @inline(__always)
    public var isAtEnd: Bool { offset >= end }

    @inlinable @inline(__always)
    public func peekU8(in bytes: Span<UInt8>) -> UInt8? {
        offset < end ? bytes[offset] : nil
    }

    @inlinable @inline(__always)
    public mutating func readU8(in bytes: Span<UInt8>) -> UInt8? {
        guard offset < end else { return nil }
        defer { storedOffset += 1 }
        return bytes[offset]
    }

    @inlinable @inline(__always)
    public mutating func readU16(in bytes: Span<UInt8>) -> UInt16? {
        guard remaining >= 2 else { return nil }
        defer { storedOffset += 2 }
        return bytes.bigEndianU16(at: offset)
    }

    @inlinable @inline(__always)
    public mutating func readU24(in bytes: Span<UInt8>) -> Int? {
        guard remaining >= 3 else { return nil }
        defer { storedOffset += 3 }
        return Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
    }

    @inlinable @inline(__always)
    public mutating func readU32(in bytes: Span<UInt8>) -> UInt32? {
        guard remaining >= 4 else { return nil }
        defer { storedOffset += 4 }
        return bytes.bigEndianU32(at: offset)
    }

    /// An unsigned integer of `count` bytes (1...8), big- or little-endian.
    @inlinable @inline(__always)
    public mutating func readUInt(_ count: Int, littleEndian: Bool = false, in bytes: Span<UInt8>) -> UInt64? {
        guard count >= 1, count <= 8, remaining >= count else { return nil }
        let field = bytes.extracting(offset..<(offset + count))
        var value: UInt64 = 0
        for index in 0..<count {
            value = value << 8 | UInt64(field[littleEndian ? count - 1 - index : index])
        }
        storedOffset += count
        return value
    }

    /// A QUIC variable-length integer (RFC 9000 section 16).
    @inlinable @inline(__always)
    public mutating func readQUICVarInt(in bytes: Span<UInt8>) -> UInt64? {
        guard let first = peekU8(in: bytes) else { return nil }
        let length = 1 << Int(first >> 6)
        guard remaining >= length else { return nil }
        var value = UInt64(first & 0x3F)
        for index in 1..<length {
            value = value << 8 | UInt64(bytes[offset + index])
        }
        storedOffset += length
        return value
    }

    /// Skips `count` bytes; false (and no move) if fewer remain.
    @inlinable @inline(__always)
    public mutating func skip(_ count: Int) -> Bool {
        guard count >= 0, count <= remaining else { return false }
        storedOffset += count
        return true
    }

    /// The offsets of the next `count` bytes, consumed; nil if fewer remain.
    @inlinable @inline(__always)
    public mutating func readRange(_ count: Int) -> Range<Int>? {
        guard count >= 0, count <= remaining else { return nil }
        defer { storedOffset += count }
        return offset..<(offset + count)
    }

    /// A reader over the next `count` bytes (of the same span), which this
    /// reader skips; nil if fewer remain.
    @inlinable @inline(__always)
    public mutating func readSubReader(_ count: Int) -> WireReader? {
        guard let range = readRange(count) else { return nil }
        return WireReader(range: range)
    }

    /// The next `count` bytes copied out; nil if fewer remain.
    @inlinable
    public mutating func readBytes(_ count: Int, in bytes: Span<UInt8>) -> [UInt8]? {
        guard let range = readRange(count) else { return nil }
        return bytes.copied(range)
    }
}

extension Span where Element == UInt8 {
    /// The big-endian 16-bit integer at `offset` (bounds-checked).
    @inlinable @inline(__always)
    public func bigEndianU16(at offset: Int) -> UInt16 {
        let pair = extracting(offset..<(offset + 2))
        return UInt16(pair[0]) << 8 | UInt16(pair[1])
    }

    /// The big-endian 32-bit integer at `offset` (bounds-checked).
    @inlinable @inline(__always)
    public func bigEndianU32(at offset: Int) -> UInt32 {
        // One range check for the four bytes; the constant indices below are then known in bounds.
        let word = extracting(offset..<(offset + 4))
        return UInt32(word[0]) << 24 | UInt32(word[1]) << 16 | UInt32(word[2]) << 8 | UInt32(word[3])
    }

    /// The little-endian 32-bit integer at `offset` (bounds-checked).
    @inlinable @inline(__always)
    public func littleEndianU32(at offset: Int) -> UInt32 {
        let word = extracting(offset..<(offset + 4))
        return UInt32(word[0]) | UInt32(word[1]) << 8 | UInt32(word[2]) << 16 | UInt32(word[3]) << 24
    }

    /// True when the bytes at `offset` are `expected` (compared exactly);
    /// false when fewer bytes remain. (A constant array, not a string: a
    /// string's UTF-8 view costs more to walk than the comparison itself.)
    @inlinable
    public func matches(_ expected: [UInt8], at offset: Int = 0) -> Bool {
        guard offset >= 0, offset <= count, count - offset >= expected.count else { return false }
        let part = extracting(offset..<(offset + expected.count))
        let wanted = expected.span
        for index in wanted.indices where part[index] != wanted[index] { return false }
        return true
    }

    /// True when every byte in `range` is zero.
    @inlinable
    public func allZero(in range: Range<Int>) -> Bool {
        let part = extracting(range)
        for index in part.indices where part[index] != 0 { return false }
        return true
    }

    /// The bytes at `range` in a new array (bounds-checked).
    @inlinable
    public func copied(_ range: Range<Int>) -> [UInt8] {
        let part = extracting(range)
        var copy = [UInt8](repeating: 0, count: part.count)
        var output = copy.mutableSpan
        for index in part.indices { output[index] = part[index] }
        return copy
    }

    /// The bytes at `range`, ASCII letters lower-cased, in a new array.
    @inlinable
    public func lowercasedASCII(_ range: Range<Int>) -> [UInt8] {
        let part = extracting(range)
        var copy = [UInt8](repeating: 0, count: part.count)
        var output = copy.mutableSpan
        for index in part.indices { output[index] = ASCII.lowercased(part[index]) }
        return copy
    }

    /// True when some byte in `range` equals `byte`.
    @inlinable
    public func contains(_ byte: UInt8, in range: Range<Int>) -> Bool {
        let part = extracting(range)
        for index in part.indices where part[index] == byte { return true }
        return false
    }
}

extension Array where Element == UInt8 {
    /// A copy of the bytes of `span`.
    @inlinable
    public init(copying span: Span<UInt8>) {
        self = span.copied(0..<span.count)
    }
}

/// ASCII helpers shared by the name parsers.
public enum ASCII {
    @inlinable @inline(__always)
    public static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
    }

    /// Case-insensitive comparison of `bytes[range]` with a lower-case ASCII token.
    @inlinable
    public static func equalsIgnoringCase(_ bytes: Span<UInt8>, _ range: Range<Int>, _ lowercase: [UInt8]) -> Bool {
        guard range.count == lowercase.count, range.lowerBound >= 0, range.upperBound <= bytes.count else {
            return false
        }
        let part = bytes.extracting(range)
        let token = lowercase.span
        for index in part.indices where lowercased(part[index]) != token[index] { return false }
        return true
    }
}
