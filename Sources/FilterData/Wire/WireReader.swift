// Bounds-checked big-endian reads over a borrowed byte buffer.
//
// Every parser in Wire/ reads through this type, so every read of wire data
// goes through one length check. It never traps on short input: reads past
// the end return nil and leave the cursor where it was.

/// A cursor over a borrowed buffer. Only ever created inside a
/// `withUnsafeBytes` closure (or from a buffer the caller borrows for the
/// duration of one parse call) and never stored, so the pointer cannot
/// outlive the memory it refers to.
struct WireReader {
    let bytes: UnsafeRawBufferPointer
    /// The next byte to read.
    private(set) var offset: Int
    /// One past the last byte this reader may read (at most `bytes.count`).
    let end: Int

    init(_ bytes: UnsafeRawBufferPointer, from start: Int = 0, to end: Int? = nil) {
        self.bytes = bytes
        let limit = min(end ?? bytes.count, bytes.count)
        self.end = max(0, limit)
        self.offset = max(0, min(start, self.end))
    }

    var remaining: Int { end - offset }
    var isAtEnd: Bool { offset >= end }

    func peekU8() -> UInt8? {
        offset < end ? bytes[offset] : nil
    }

    mutating func readU8() -> UInt8? {
        guard offset < end else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func readU16() -> UInt16? {
        guard remaining >= 2 else { return nil }
        defer { offset += 2 }
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    mutating func readU24() -> Int? {
        guard remaining >= 3 else { return nil }
        defer { offset += 3 }
        return Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
    }

    mutating func readU32() -> UInt32? {
        guard remaining >= 4 else { return nil }
        defer { offset += 4 }
        return bytes.loadBigEndianU32(at: offset)
    }

    /// A QUIC variable-length integer (RFC 9000 section 16).
    mutating func readQUICVarInt() -> UInt64? {
        guard let first = peekU8() else { return nil }
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

    /// A reader over the next `count` bytes, which this reader skips; nil if fewer remain.
    mutating func readSubReader(_ count: Int) -> WireReader? {
        guard let range = readRange(count) else { return nil }
        return WireReader(bytes, from: range.lowerBound, to: range.upperBound)
    }

    /// The next `count` bytes copied out; nil if fewer remain.
    mutating func readBytes(_ count: Int) -> [UInt8]? {
        guard let range = readRange(count) else { return nil }
        return Array(bytes[range])
    }
}

extension UnsafeRawBufferPointer {
    /// The caller has checked that `offset + 2 <= count`.
    @inline(__always)
    func loadBigEndianU16(at offset: Int) -> UInt16 {
        UInt16(self[offset]) << 8 | UInt16(self[offset + 1])
    }

    /// The caller has checked that `offset + 4 <= count`.
    @inline(__always)
    func loadBigEndianU32(at offset: Int) -> UInt32 {
        UInt32(self[offset]) << 24 | UInt32(self[offset + 1]) << 16
            | UInt32(self[offset + 2]) << 8 | UInt32(self[offset + 3])
    }
}

/// ASCII helpers shared by the name parsers.
enum ASCII {
    @inline(__always)
    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
    }

    /// Case-insensitive comparison of `bytes[range]` with a lowercase ASCII literal.
    static func equalsIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercase: StaticString) -> Bool {
        guard range.count == lowercase.utf8CodeUnitCount, range.lowerBound >= 0, range.upperBound <= bytes.count else {
            return false
        }
        let literal = lowercase.utf8Start
        for index in 0..<range.count where lowercased(bytes[range.lowerBound + index]) != literal[index] {
            return false
        }
        return true
    }
}
