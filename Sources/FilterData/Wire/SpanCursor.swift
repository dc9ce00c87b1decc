// A read position in a `Span<UInt8>` for the bypass recognizers and
// rewriters (TunnelRecognizer, GoogleQUIC, DNSBypassRewrite).
//
// It mirrors the span-based `WireReader` of the `spans` branch (positions
// only, the span handed to every read, reads past the end give nil and leave
// the cursor where it was), under its own name so that both branches merge
// without a conflict; once they are merged the two can become one.
//
// Every byte is read through `Span`'s bounds-checked subscript: a wrong
// offset traps instead of reading outside the buffer, and the guards below
// make sure no input, however short or hostile, reaches such an offset.

/// A read position in one span. The span is passed to every read and never stored.
struct SpanCursor {
    /// The next byte to read.
    private(set) var offset: Int
    /// One past the last byte this cursor may read (at most the span's count).
    let end: Int

    init(_ bytes: Span<UInt8>, from start: Int = 0, to end: Int? = nil) {
        let limit = min(end ?? bytes.count, bytes.count)
        self.end = max(0, limit)
        self.offset = max(0, min(start, self.end))
    }

    var remaining: Int { end - offset }
    var isAtEnd: Bool { offset >= end }

    func peekU8(in bytes: Span<UInt8>) -> UInt8? {
        offset < end ? bytes[offset] : nil
    }

    mutating func readU8(in bytes: Span<UInt8>) -> UInt8? {
        guard offset < end else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func readU16(in bytes: Span<UInt8>) -> UInt16? {
        guard remaining >= 2 else { return nil }
        defer { offset += 2 }
        return SpanBytes.u16(bytes, at: offset)
    }

    mutating func readU32(in bytes: Span<UInt8>) -> UInt32? {
        guard remaining >= 4 else { return nil }
        defer { offset += 4 }
        return SpanBytes.u32(bytes, at: offset)
    }

    /// An unsigned integer of `count` bytes (1...8), big- or little-endian.
    mutating func readUInt(_ count: Int, littleEndian: Bool = false, in bytes: Span<UInt8>) -> UInt64? {
        guard count >= 1, count <= 8, remaining >= count else { return nil }
        var value: UInt64 = 0
        for index in 0..<count {
            let byte = UInt64(bytes[offset + (littleEndian ? count - 1 - index : index)])
            value = value << 8 | byte
        }
        offset += count
        return value
    }

    /// A QUIC variable-length integer (RFC 9000 section 16).
    mutating func readQUICVarInt(in bytes: Span<UInt8>) -> UInt64? {
        guard let first = peekU8(in: bytes) else { return nil }
        let length = 1 << Int(first >> 6)
        guard remaining >= length else { return nil }
        var value = UInt64(first & 0x3F)
        for index in 1..<length {
            value = value << 8 | UInt64(bytes[offset + index])
        }
        offset += length
        return value
    }

    /// Skips `count` bytes; false (and no move) if fewer remain.
    mutating func skip(_ count: Int) -> Bool {
        guard count >= 0, count <= remaining else { return false }
        offset += count
        return true
    }

    /// The offsets of the next `count` bytes, consumed; nil if fewer remain.
    mutating func readRange(_ count: Int) -> Range<Int>? {
        guard count >= 0, count <= remaining else { return nil }
        defer { offset += count }
        return offset..<(offset + count)
    }

    /// The next `count` bytes copied out; nil if fewer remain.
    mutating func readBytes(_ count: Int, in bytes: Span<UInt8>) -> [UInt8]? {
        guard let range = readRange(count) else { return nil }
        return SpanBytes.copy(bytes, range)
    }
}

/// Reads at fixed offsets of a span; every one bounds-checked by `Span`.
/// The callers check the offsets first, so these never trap on valid guards.
enum SpanBytes {
    @inline(__always)
    static func u16(_ bytes: Span<UInt8>, at offset: Int) -> UInt16 {
        UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    @inline(__always)
    static func u32(_ bytes: Span<UInt8>, at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    @inline(__always)
    static func u32LittleEndian(_ bytes: Span<UInt8>, at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
    }

    /// The bytes at `range` in a new array.
    static func copy(_ bytes: Span<UInt8>, _ range: Range<Int>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(range.count)
        for index in range { out.append(bytes[index]) }
        return out
    }

    /// True when the bytes at `offset` are `literal` (ASCII, compared exactly).
    static func hasPrefix(_ bytes: Span<UInt8>, _ literal: String, at offset: Int = 0) -> Bool {
        let utf8 = literal.utf8
        guard offset >= 0, offset <= bytes.count, bytes.count - offset >= utf8.count else { return false }
        var index = offset
        for byte in utf8 {
            if bytes[index] != byte { return false }
            index += 1
        }
        return true
    }

    /// True when every byte at `range` is zero.
    static func allZero(_ bytes: Span<UInt8>, _ range: Range<Int>) -> Bool {
        for index in range where bytes[index] != 0 { return false }
        return true
    }
}
