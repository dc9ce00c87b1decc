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

    /// Mixes one label (`bytes[start..<end]`) into a running state.
    @inlinable @inline(__always)
    static func mixLabel(_ state: UInt64, _ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> UInt64 {
        var h = state
        var index = start
        while index + 8 <= end {
            let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            h = fold(h ^ word, multiplierA)
            index += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while index < end {
            tail |= UInt64(bytes[index]) << shift
            shift += 8
            index += 1
        }
        return fold(h ^ tail ^ multiplierB, multiplierC ^ UInt64(end - start))
    }

    /// One checksum over two byte ranges, as if they were one (order matters).
    public static func checksum(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> UInt64 {
        finish(fold(checksum(first) ^ multiplierB, checksum(second) ^ multiplierC))
    }

    /// A 64-bit checksum of a byte range (used for whole-file integrity).
    public static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var h = seed ^ UInt64(bytes.count)
        var index = 0
        // Four independent lanes keep the multiplier busy.
        var lanes: (UInt64, UInt64, UInt64, UInt64) = (h, h ^ multiplierA, h ^ multiplierB, h ^ multiplierC)
        while index + 32 <= bytes.count {
            lanes.0 = fold(lanes.0 ^ bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self).littleEndian, multiplierA)
            lanes.1 = fold(lanes.1 ^ bytes.loadUnaligned(fromByteOffset: index + 8, as: UInt64.self).littleEndian, multiplierB)
            lanes.2 = fold(lanes.2 ^ bytes.loadUnaligned(fromByteOffset: index + 16, as: UInt64.self).littleEndian, multiplierC)
            lanes.3 = fold(lanes.3 ^ bytes.loadUnaligned(fromByteOffset: index + 24, as: UInt64.self).littleEndian, multiplierA)
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
        name.bytes.withUnsafeBytes { bytes in
            SuffixFingerprints.forEachSuffix(bytes) { start, fingerprint in
                starts.append(start)
                fingerprints.append(fingerprint)
            }
        }
        self.fingerprints = fingerprints.reversed()
        self.starts = starts.reversed()
    }

    public var count: Int { fingerprints.count }

    /// The fingerprint of one whole name.
    public static func fingerprint(of name: HostName) -> UInt64 {
        var last: UInt64 = 0
        name.bytes.withUnsafeBytes { bytes in
            forEachSuffix(bytes) { _, fingerprint in last = fingerprint }
        }
        return last
    }

    /// Calls `body(start, fingerprint)` for each suffix, shortest first.
    @inlinable
    public static func forEachSuffix(_ bytes: UnsafeRawBufferPointer, _ body: (Int, UInt64) -> Void) {
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
