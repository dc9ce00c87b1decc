// The first bytes of one direction of a TCP connection, reassembled from
// segments in whatever order they arrive (RFC 9293 section 3.4 sequence
// numbers, RFC 7413 Fast Open data on the SYN).
import HallpassWire

/// A bounded reassembly buffer for the first `capacity` bytes of one
/// direction of a TCP flow.
///
/// - Out-of-order segments are kept until the gap before them fills.
/// - Retransmissions and overlaps: the first copy of each byte wins, so a
///   later segment cannot rewrite what the filter has already seen.
/// - A SYN consumes one sequence number; data on the SYN (TCP Fast Open)
///   starts at ISN + 1.
/// - A flow first seen mid-stream (no SYN) starts at the first data segment's
///   sequence number; data before it is ignored.
/// - Memory never exceeds `capacity` bytes plus a bitmap of `capacity / 8`,
///   whatever the segment sizes: one-byte segments work like any others.
public struct StreamPeek: Sendable {
    /// The default peek bound: 16 KiB.
    public static let defaultCapacity = 16_384

    private var buffer: ReassemblyBuffer
    /// The sequence number of stream offset 0, once known.
    public private(set) var initialSequence: UInt32?
    /// True when `initialSequence` came from a SYN (ISN + 1), false when from a mid-stream segment.
    public private(set) var sawSYN = false

    public init(capacity: Int = StreamPeek.defaultCapacity) {
        buffer = ReassemblyBuffer(capacity: capacity)
    }

    /// The bound given at creation, or the one it grew to (`grow(to:)`).
    public var capacity: Int { buffer.capacity }
    /// How many bytes from the start of the stream are present without a gap.
    public var contiguousCount: Int { buffer.contiguousCount }
    /// The whole bound is filled contiguously.
    public var isFull: Bool { buffer.isFull }
    /// Bytes held beyond a gap (out-of-order data waiting for the gap to fill).
    public var bytesWaitingBeyondGap: Int { buffer.bytesBeyondPrefix }

    /// Adds one segment of this direction. `isSYN` is the segment's SYN flag.
    /// Returns true when the contiguous prefix grew.
    @discardableResult
    public mutating func add(sequenceNumber: UInt32, isSYN: Bool, payload: Span<UInt8>) -> Bool {
        if isSYN {
            let start = sequenceNumber &+ 1
            // A SYN fixes the start unless data is already stored (then a retransmitted
            // SYN changes nothing, and a late SYN of a mid-stream flow is ignored).
            if buffer.storage.isEmpty {
                initialSequence = start
                sawSYN = true
            }
            guard !payload.isEmpty, let base = initialSequence else { return false }
            return buffer.write(payload, at: Self.relativeOffset(of: start, from: base))
        }
        guard !payload.isEmpty else { return false }
        if initialSequence == nil { initialSequence = sequenceNumber }
        guard let base = initialSequence else { return false }
        return buffer.write(payload, at: Self.relativeOffset(of: sequenceNumber, from: base))
    }

    /// Raises the bound to `newCapacity` for a stream whose first bytes
    /// declare more (a ClientHello larger than the peek bound). False, and
    /// the bound unchanged, when bytes past the old bound were dropped
    /// already (they arrived before the ones that declared the size): the
    /// stream could then never be read whole.
    public mutating func grow(to newCapacity: Int) -> Bool {
        buffer.grow(to: newCapacity)
    }

    /// Convenience for an array payload.
    @discardableResult
    public mutating func add(sequenceNumber: UInt32, isSYN: Bool, payload: [UInt8]) -> Bool {
        add(sequenceNumber: sequenceNumber, isSYN: isSYN, payload: payload.span)
    }

    /// Calls `body` with the contiguous prefix.
    public func withContiguousPrefix<Result>(_ body: (Span<UInt8>) throws -> Result) rethrows -> Result {
        try buffer.withContiguousPrefix(body)
    }

    /// The contiguous prefix as a slice (no copy).
    public var contiguousPrefix: ArraySlice<UInt8> { buffer.contiguousPrefix }

    /// The signed distance from `base` to `sequence` in sequence space
    /// (modulo 2^32, RFC 9293 section 3.4), so wrap-around is handled.
    static func relativeOffset(of sequence: UInt32, from base: UInt32) -> Int {
        Int(Int32(bitPattern: sequence &- base))
    }
}
