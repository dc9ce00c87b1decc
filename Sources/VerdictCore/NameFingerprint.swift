/// The 64-bit hashing that the rule store is built on.
///
/// These functions are part of the store format: the writer and the reader
/// must compute the same values on every machine and every build, so they
/// use fixed constants and explicit little-endian reads, never `Hasher`
/// (which is seeded per process). Changing anything here changes the store
/// format version.
public enum StableHash {
    @usableFromInline static let seed: UInt64 = 0x9E37_79B9_7F4A_7C15
    @usableFromInline static let multiplierA: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    @usableFromInline static let multiplierB: UInt64 = 0x1656_67B1_9E37_79F9
    @usableFromInline static let multiplierC: UInt64 = 0xD6E8_FEB8_6659_FD93

    /// Folds the 128-bit product of two words into 64 bits.
    @inlinable @inline(__always)
    static func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let product = a.multipliedFullWidth(by: b)
        return product.high ^ product.low
    }

    /// A final avalanche so that every input bit reaches every output bit.
    @inlinable @inline(__always)
    static func finish(_ value: UInt64) -> UInt64 {
        var x = value
        x ^= x >> 31
        x &*= multiplierC
        x ^= x >> 29
        x &*= multiplierA
        x ^= x >> 32
        return x
    }

    /// The little-endian 64-bit word at `offset` (bounds-checked once for all eight bytes).
    @inlinable @inline(__always)
    static func word(_ bytes: Span<UInt8>, at offset: Int) -> UInt64 {
        let word = bytes.extracting(offset..<(offset + 8))
        return UInt64(word[0]) | UInt64(word[1]) << 8 | UInt64(word[2]) << 16 | UInt64(word[3]) << 24
            | UInt64(word[4]) << 32 | UInt64(word[5]) << 40 | UInt64(word[6]) << 48 | UInt64(word[7]) << 56
    }

    /// The little-endian word at a constant `offset` of a span whose length the
    /// caller fixed (a 32-byte block): no sub-span, so no pointer arithmetic per word.
    @inlinable @inline(__always)
    static func wordInBlock(_ block: Span<UInt8>, _ offset: Int) -> UInt64 {
        UInt64(block[offset]) | UInt64(block[offset + 1]) << 8 | UInt64(block[offset + 2]) << 16 | UInt64(block[offset + 3]) << 24
            | UInt64(block[offset + 4]) << 32 | UInt64(block[offset + 5]) << 40 | UInt64(block[offset + 6]) << 48
            | UInt64(block[offset + 7]) << 56
    }

    /// Mixes one label (`bytes[start..<end]`) into a running state.
    @inlinable @inline(__always)
    static func mixLabel(_ state: UInt64, _ bytes: Span<UInt8>, _ start: Int, _ end: Int) -> UInt64 {
        // One range check for the label; the reads inside it are then known in bounds.
        let label = bytes.extracting(start..<end)
        var h = state
        var index = 0
        // Wrapping arithmetic: index stays below label.count and shift below 64.
        while label.count &- index >= 8 {
            h = fold(h ^ word(label, at: index), multiplierA)
            index &+= 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while index < label.count {
            tail |= UInt64(label[index]) &<< shift
            shift &+= 8
            index &+= 1
        }
        return fold(h ^ tail ^ multiplierB, multiplierC ^ UInt64(label.count))
    }

    /// One checksum over two byte ranges, as if they were one (order matters).
    public static func checksum(_ first: Span<UInt8>, _ second: Span<UInt8>) -> UInt64 {
        finish(fold(checksum(first) ^ multiplierB, checksum(second) ^ multiplierC))
    }

    /// A 64-bit checksum of a byte range (used for whole-file integrity).
    public static func checksum(_ bytes: Span<UInt8>) -> UInt64 {
        var h = seed ^ UInt64(bytes.count)
        var index = 0
        // Four independent lanes keep the multiplier busy.
        var lanes: (UInt64, UInt64, UInt64, UInt64) = (h, h ^ multiplierA, h ^ multiplierB, h ^ multiplierC)
        while bytes.count &- index >= 32 {
            // One range check for the 32 bytes; the reads at constant offsets inside it need none.
            let block = bytes.extracting(index..<(index + 32))
            lanes.0 = fold(lanes.0 ^ wordInBlock(block, 0), multiplierA)
            lanes.1 = fold(lanes.1 ^ wordInBlock(block, 8), multiplierB)
            lanes.2 = fold(lanes.2 ^ wordInBlock(block, 16), multiplierC)
            lanes.3 = fold(lanes.3 ^ wordInBlock(block, 24), multiplierA)
            index += 32
        }
        h = fold(lanes.0 ^ lanes.1, multiplierB) ^ fold(lanes.2 ^ lanes.3, multiplierC)
        h = mixLabel(h, bytes, index, bytes.count)
        return finish(h)
    }
}

/// The fingerprints of every suffix of a host name, computed in one pass
/// from the right: `www.example.com` gives the fingerprints of
/// `www.example.com`, `example.com` and `com`.
///
/// A fingerprint is a 64-bit hash that stands for the name in the rule
/// store; the store keeps fingerprints, not the names themselves, which is
/// what keeps it near 12 bytes per domain. Two different names share a
/// fingerprint with probability about 2^-64 per pair.
public struct SuffixFingerprints: Sendable {
    /// Suffix `i` starts at label `i`: index 0 is the whole name, the last is the top-level label.
    public private(set) var fingerprints: [UInt64]
    /// The byte offset where suffix `i` starts in the name.
    public private(set) var starts: [Int]

    public init(_ name: HostName) {
        var fingerprints: [UInt64] = []
        var starts: [Int] = []
        SuffixFingerprints.forEachSuffix(name.bytes.span) { start, fingerprint in
            starts.append(start)
            fingerprints.append(fingerprint)
        }
        self.fingerprints = fingerprints.reversed()
        self.starts = starts.reversed()
    }

    public var count: Int { fingerprints.count }

    /// The fingerprint of one whole name.
    public static func fingerprint(of name: HostName) -> UInt64 {
        var last: UInt64 = 0
        forEachSuffix(name.bytes.span) { _, fingerprint in last = fingerprint }
        return last
    }

    /// Calls `body(start, fingerprint)` for each suffix, shortest first.
    @inlinable
    public static func forEachSuffix(_ bytes: Span<UInt8>, _ body: (Int, UInt64) -> Void) {
        var state = StableHash.seed
        var end = bytes.count
        var index = bytes.count
        while index > 0 {
            index -= 1
            if bytes[index] == UInt8(ascii: ".") {
                state = StableHash.mixLabel(state, bytes, index + 1, end)
                body(index + 1, nonZero(StableHash.finish(state)))
                end = index
            }
        }
        state = StableHash.mixLabel(state, bytes, 0, end)
        body(0, nonZero(StableHash.finish(state)))
    }

    /// Zero marks an empty slot in the store, so no name may hash to it.
    @inlinable @inline(__always)
    static func nonZero(_ value: UInt64) -> UInt64 { value == 0 ? 1 : value }
}
