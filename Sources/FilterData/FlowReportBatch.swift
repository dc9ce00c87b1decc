// The decisions filter-data owes filter-control, gathered into full
// messages. Pure: time is passed in, and the channel is the caller's closure.
public import HallpassIPC

/// Decisions waiting to be reported to filter-control (the audit log, the
/// connections to judge again when the policy changes), as the lines they
/// travel in. They go in full messages rather than one per packet, so that
/// filter-control wakes once for many (at a few connections a second, each
/// report used to cost both processes a wakeup): once `batchSize` wait, or
/// once the oldest has waited `delay`; the audit log and the connection
/// records are that much later. Bounded: past `capacity` a report is
/// refused (the caller counts it), and lines the channel has no room for
/// stay for a later send.
public struct FlowReportBatch: Sendable {
    /// Reports waiting, at most.
    public let capacity: Int
    /// How long a report may wait for others (ns).
    public let delay: UInt64
    /// Reports that go at once, without waiting for `delay`: at thousands of
    /// connections a second filter-control then wakes some tens of times a
    /// second, not once per few milliseconds (each wakeup costs both
    /// processes a context switch and the caches the other one warmed). 256
    /// lines are three or four messages (a line is 80 to 150 bytes), a small
    /// part of the channel's send buffer, which questions to filter-control share.
    public let batchSize: Int
    /// The waiting reports.
    public private(set) var lines = FlowReportLines()
    /// When the oldest waiting report was made, or when a send last found no
    /// room for the rest; nil when none waits.
    public private(set) var waitingSince: UInt64?

    /// The bytes of lines a `report` message carries, at most: the message is
    /// its name, a line feed, and the lines without the last one's line feed.
    public static let roomPerMessage = controlMessageMaximumSize - 7

    public init(capacity: Int = 4096, delay: UInt64 = 50_000_000, batchSize: Int = 2 * FlowReportLines.maximumPerMessage) {
        precondition(capacity > 0 && batchSize > 0)
        self.capacity = capacity
        self.delay = delay
        self.batchSize = batchSize
    }

    public var count: Int { lines.count }
    public var isEmpty: Bool { lines.isEmpty }

    /// When the waiting reports go whatever their number; nil when none waits.
    public var due: UInt64? { waitingSince.map { $0 &+ delay } }

    /// Adds a report that `write` appends as its line (without a line feed).
    /// False, and nothing added, when `capacity` reports already wait.
    public mutating func add(now: UInt64, _ write: (inout [UInt8]) -> Void) -> Bool {
        guard lines.count < capacity else { return false }
        if lines.isEmpty { waitingSince = now }
        lines.appendLine(write)
        return true
    }

    /// Whether the waiting reports go at `now`: `batchSize` of them, or the oldest has waited `delay`.
    public func isDue(now: UInt64) -> Bool {
        guard let waitingSince else { return false }
        return lines.count >= batchSize || now &- waitingSince >= delay
    }

    /// Sends the waiting reports if they are due (or `all` of them): as many
    /// lines per message as fit in `roomPerMessage` bytes and
    /// `FlowReportLines.maximumPerMessage` lines, each message through `send`,
    /// which says false when the channel has no room. The first refusal ends
    /// the send; what stays waits `delay` from `now` before it is tried again
    /// (not at every turn of the loop). Returns how many reports went.
    public mutating func send(now: UInt64, all: Bool = false, _ send: (FlowReportLines) -> Bool) -> Int {
        guard !lines.isEmpty, all || isDue(now: now) else { return 0 }
        var sent = 0
        while sent < lines.count {
            // A line is far shorter than a message (its fields are cut to 256 bytes): at least one goes.
            var end = sent + 1
            while end < lines.count, end - sent < FlowReportLines.maximumPerMessage,
                lines.byteCount(sent..<(end + 1)) <= Self.roomPerMessage
            {
                end += 1
            }
            guard send(lines.lines(sent..<end)) else { break }
            sent = end
        }
        if sent == lines.count {
            lines.removeAll(keepingCapacity: true)
            waitingSince = nil
        } else {
            lines = lines.lines(sent..<lines.count)
            waitingSince = now
        }
        return sent
    }
}
