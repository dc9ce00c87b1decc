// A bounded byte buffer filled at arbitrary offsets, first copy wins, that
// exposes its contiguous prefix. Shared by the TCP stream peek, the QUIC
// CRYPTO stream assembler and Google QUIC's handshake stream.
import HallpassWire

/// Bytes at offsets `0..<capacity`, filled in any order; which offsets are
/// filled is kept in a bitmap, so any pattern of tiny, overlapping or
/// out-of-order pieces costs the same bounded memory (capacity + capacity/8).
struct ReassemblyBuffer: Sendable {
    /// Offsets at and past it are dropped; it only grows (`grow(to:)`).
    private(set) var capacity: Int
    /// Some piece reached past `capacity` and lost bytes there.
    private(set) var droppedPastCapacity = false
    /// Grows (never past `capacity`) up to the highest filled offset.
    private(set) var storage: [UInt8] = []
    private var filled: [UInt64] = []
    /// Offsets `0..<contiguousCount` are all filled.
    private(set) var contiguousCount = 0
    /// Bytes stored out of order beyond the contiguous prefix.
    private(set) var bytesBeyondPrefix = 0

    init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    var isFull: Bool { contiguousCount >= capacity }

    private func isFilled(_ offset: Int) -> Bool {
        filled[offset >> 6] & (1 << UInt64(offset & 63)) != 0
    }

    /// Stores `piece` at `offset`, keeping bytes already present. Parts outside
    /// `0..<capacity` are dropped. Returns true when the contiguous prefix grew.
    @discardableResult
    mutating func write(_ piece: Span<UInt8>, at offset: Int) -> Bool {
        guard !piece.isEmpty else { return false }
        if offset > capacity - piece.count { droppedPastCapacity = true }
        guard offset < capacity else { return false }
        // Clip to the buffer; `offset` may be negative for data before the start.
        let start = max(offset, 0)
        let end = offset > capacity - piece.count ? capacity : offset + piece.count
        guard start < end else { return false }
        if storage.count < end {
            let grown = min(capacity, max(end, storage.count * 2, 1024))
            storage.reserveCapacity(grown)
            storage.append(contentsOf: repeatElement(0, count: end - storage.count))
            let words = (storage.count + 63) >> 6
            if filled.count < words { filled.append(contentsOf: repeatElement(0, count: words - filled.count)) }
        }
        // The part of `piece` that lands inside the buffer, range-checked once, and
        // one mutable span of the storage for all the writes (one uniqueness check).
        // The storage is moved out while written, so the span borrows a local.
        let source = piece.extracting((start - offset)..<(end - offset))
        var bytes = storage
        storage = []
        do {
            var target = bytes.mutableSpan
            var index = start
            while index < end {
                // Whole unfilled 64-bit words are copied at once; the rest byte by byte.
                let word = index >> 6
                if index & 63 == 0, end - index >= 64, filled[word] == 0 {
                    let block = source.extracting((index - start)..<(index - start + 64))
                    for byteIndex in 0..<64 { target[index + byteIndex] = block[byteIndex] }
                    filled[word] = ~0
                    if index >= contiguousCount { bytesBeyondPrefix += 64 }
                    index += 64
                    continue
                }
                let bit: UInt64 = 1 << UInt64(index & 63)
                if filled[word] & bit == 0 {
                    target[index] = source[index - start]
                    filled[word] |= bit
                    if index >= contiguousCount { bytesBeyondPrefix += 1 }
                }
                index += 1
            }
        }
        storage = bytes
        let before = contiguousCount
        while contiguousCount < storage.count {
            let word = contiguousCount >> 6
            if contiguousCount & 63 == 0, filled[word] == ~0, contiguousCount + 64 <= storage.count {
                contiguousCount += 64
                bytesBeyondPrefix -= 64
            } else if isFilled(contiguousCount) {
                contiguousCount += 1
                bytesBeyondPrefix -= 1
            } else {
                break
            }
        }
        return contiguousCount > before
    }

    /// Forgets everything (capacity stays).
    mutating func reset() {
        storage = []
        filled = []
        contiguousCount = 0
        bytesBeyondPrefix = 0
        droppedPastCapacity = false
    }

    /// Raises the capacity to `newCapacity` (memory still grows only as bytes
    /// arrive). Refused, returning false, once bytes past the old capacity were
    /// dropped: the buffer could never hold them, so growing would leave a gap.
    mutating func grow(to newCapacity: Int) -> Bool {
        guard !droppedPastCapacity else { return false }
        capacity = max(capacity, newCapacity)
        return true
    }

    /// Calls `body` with the contiguous prefix.
    func withContiguousPrefix<Result>(_ body: (Span<UInt8>) throws -> Result) rethrows -> Result {
        try body(storage.span.extracting(0..<contiguousCount))
    }

    var contiguousPrefix: ArraySlice<UInt8> { storage[0..<contiguousCount] }
}
