// The per-flow memory of the data path: a bounded table keyed by the flow's
// 5-tuple in the client's direction, with least-recently-used order, idle
// timeouts that depend on what the flow is doing, and eviction when full.
//
// Time is passed in by the caller (monotonic nanoseconds); nothing here reads
// a clock, so tests and `filterctl replay` drive it with whatever time they like.
import HallpassWire
public import HallpassIPC


/// What a table entry is doing, which decides its idle timeout and whether it
/// counts against the budget for flows that hold reassembly buffers.
public enum FlowStage: UInt8, Sendable, Hashable, CaseIterable {
    /// Still gathering bytes for a name: holds a stream peek or a QUIC CRYPTO
    /// buffer, the costly kind of entry.
    case inspecting
    /// Inspecting, reading a ClientHello larger than the peek bound whole (up
    /// to 80 KiB of buffer): counted apart, so the caller can hold fewer of them.
    case inspectingLargeHello
    /// Has a name, waits for filter-control's rules (needRules); no buffers.
    case waitingForRules
    /// Has a verdict (or, for DNS, judges each query on its own); no buffers.
    case decided

    /// Holds reassembly buffers (either inspecting stage).
    public var holdsBuffers: Bool { self == .inspecting || self == .inspectingLargeHello }
}

/// Sizes and idle timeouts of a `FlowTable`. Every field has a default.
///
/// A decided flow's packets stop reaching filter-data once the kernel has
/// saved its mark on the connection; only packets queued before that come
/// late, within milliseconds. Decided flows are therefore kept seconds, not
/// minutes: under connection churn the table holds what is being inspected,
/// not the history (which is what made filter-data's memory grow with load).
/// A decided TCP flow is kept 2 seconds at most (DataPath forgets it much
/// sooner, once the queue was read empty after its verdict): a new connection
/// that reuses its addresses and ports after conntrack started a fresh entry
/// (its SYN is not queued) would otherwise be given the old decision.
public struct FlowTableSettings: Sendable, Hashable {
    /// The most flows held at once; when full, the least recently used flow is
    /// evicted (an expired one first, when the oldest is expired).
    public var capacity: Int
    /// A TCP flow that has not been decided yet (inspecting or waiting for rules)
    /// is forgotten after this long without a packet.
    public var tcpUndecidedIdleTimeout: Duration
    /// A decided TCP flow is forgotten after this long without a packet.
    public var tcpDecidedIdleTimeout: Duration
    /// A UDP flow (or any other protocol) not decided yet.
    public var udpIdleTimeout: Duration
    /// A decided UDP flow (a QUIC connection, a DNS socket between queries).
    public var udpDecidedIdleTimeout: Duration

    public init(
        capacity: Int = 8_192,
        tcpUndecidedIdleTimeout: Duration = .seconds(30),
        tcpDecidedIdleTimeout: Duration = .seconds(2),
        udpIdleTimeout: Duration = .seconds(60),
        udpDecidedIdleTimeout: Duration = .seconds(10)
    ) {
        self.capacity = capacity
        self.tcpUndecidedIdleTimeout = tcpUndecidedIdleTimeout
        self.tcpDecidedIdleTimeout = tcpDecidedIdleTimeout
        self.udpIdleTimeout = udpIdleTimeout
        self.udpDecidedIdleTimeout = udpDecidedIdleTimeout
    }

    /// The idle timeout, in nanoseconds, of a flow of this protocol in this stage.
    public func idleTimeoutNanoseconds(protocolNumber: UInt8, stage: FlowStage) -> UInt64 {
        switch (protocolNumber == 6, stage == .decided) {
        case (true, true): Self.nanoseconds(tcpDecidedIdleTimeout)
        case (true, false): Self.nanoseconds(tcpUndecidedIdleTimeout)
        case (false, true): Self.nanoseconds(udpDecidedIdleTimeout)
        case (false, false): Self.nanoseconds(udpIdleTimeout)
        }
    }

    /// `duration` in whole nanoseconds, clamped to 0...UInt64.max.
    public static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return .max }
        return whole &+ UInt64(max(0, attoseconds) / 1_000_000_000)
    }
}

/// A handle to a live entry of a `FlowTable`. Valid until that entry is
/// removed, expired or evicted; the table's methods that can remove entries
/// say so, and a handle must not be used after them.
public struct FlowSlot: Hashable, Sendable {
    let index: Int32
}

/// Why an entry left the table without the caller removing it.
public enum FlowDeparture: Hashable, Sendable {
    /// No packet for longer than its idle timeout.
    case expired
    /// The table was full and this was the least recently used entry.
    case evicted
}

/// A bounded flow table.
///
/// - Lookup is one hash probe (`[FlowKey: Int32]`), touching an entry moves
///   it to the front of an intrusive least-recently-used list: no allocation
///   once the entry exists.
/// - Entries in an inspecting stage are also kept on a second LRU list, so
///   the caller can bound how many flows hold reassembly buffers
///   (`leastRecentlyUsedInspecting`), and how many of them read a large
///   ClientHello (`largeHelloCount`).
/// - Idle timeouts are checked lazily (a lookup of an expired entry removes it)
///   and by `removeExpired(now:limit:)`, which walks from the oldest end.
///   Times are expected to be non-decreasing; an earlier `now` never makes an
///   entry younger (the last-seen time only moves forward).
public struct FlowTable<Value: Sendable>: Sendable {
    public let settings: FlowTableSettings
    /// Timeouts in nanoseconds by [protocol is TCP][stage].
    private let timeouts: (tcp: [UInt64], other: [UInt64])

    private var index: [FlowKey: Int32] = [:]
    private var keys: [FlowKey] = []
    private var values: [Value?] = []
    private var lastSeen: [UInt64] = []
    private var stages: [FlowStage] = []
    // The all-entries LRU list: `head` is the most recently used.
    private var newer: [Int32] = []
    private var older: [Int32] = []
    private var head: Int32 = -1
    private var tail: Int32 = -1
    // The inspecting-entries LRU list.
    private var newerInspecting: [Int32] = []
    private var olderInspecting: [Int32] = []
    private var inspectingHead: Int32 = -1
    private var inspectingTail: Int32 = -1
    private var freeSlots: [Int32] = []

    /// Entries in the table.
    public private(set) var count = 0
    /// Entries that left after their idle timeout, since creation.
    public private(set) var expiredCount: UInt64 = 0
    /// Entries evicted because the table was full, since creation.
    public private(set) var evictedCount: UInt64 = 0
    /// Entries in an inspecting stage (`.inspecting` or `.inspectingLargeHello`).
    public private(set) var inspectingCount = 0
    /// Entries in stage `.inspectingLargeHello`.
    public private(set) var largeHelloCount = 0

    public init(settings: FlowTableSettings = FlowTableSettings()) {
        let capacity = max(1, min(settings.capacity, Int(Int32.max)))
        var adjusted = settings
        adjusted.capacity = capacity
        self.settings = adjusted
        self.timeouts = (
            tcp: FlowStage.allCases.map { adjusted.idleTimeoutNanoseconds(protocolNumber: 6, stage: $0) },
            other: FlowStage.allCases.map { adjusted.idleTimeoutNanoseconds(protocolNumber: 17, stage: $0) }
        )
        let initial = min(capacity, 1_024)
        index.reserveCapacity(initial)
        keys.reserveCapacity(initial)
        values.reserveCapacity(initial)
    }

    public var capacity: Int { settings.capacity }
    public var isFull: Bool { count >= settings.capacity }

    // MARK: Reading entries

    /// The entry for `key`, touched (last-seen time `now`, front of the LRU
    /// order), or nil when absent. An entry idle past its timeout is removed
    /// first and reported through `departed`.
    public mutating func find(_ key: FlowKey, now: UInt64, departed: ((FlowKey, Value, FlowDeparture) -> Void)? = nil) -> FlowSlot? {
        guard let slotIndex = index[key] else { return nil }
        let slot = FlowSlot(index: slotIndex)
        if isExpired(slotIndex, now: now) {
            let value = remove(slot)
            expiredCount += 1
            departed?(key, value, .expired)
            return nil
        }
        touch(slotIndex, now: now)
        return slot
    }

    /// The entry for `key` without touching it or checking its timeout.
    public func slot(for key: FlowKey) -> FlowSlot? {
        index[key].map(FlowSlot.init(index:))
    }

    /// The value of a live entry. Modify it in place through this subscript.
    public subscript(slot: FlowSlot) -> Value {
        get { values[Int(slot.index)]! }
        _modify {
            // Take the value out so the mutation does not copy it (no second reference).
            var value = values[Int(slot.index)].take()!
            defer { values[Int(slot.index)] = value }
            yield &value
        }
    }

    public func key(of slot: FlowSlot) -> FlowKey { keys[Int(slot.index)] }
    public func stage(of slot: FlowSlot) -> FlowStage { stages[Int(slot.index)] }
    public func lastSeen(of slot: FlowSlot) -> UInt64 { lastSeen[Int(slot.index)] }

    /// The least recently used entry, if any.
    public var leastRecentlyUsed: FlowSlot? { tail >= 0 ? FlowSlot(index: tail) : nil }
    /// The least recently used entry in an inspecting stage, if any.
    public var leastRecentlyUsedInspecting: FlowSlot? { inspectingTail >= 0 ? FlowSlot(index: inspectingTail) : nil }

    /// The live entries from most to least recently used (a snapshot).
    public var slotsByRecency: [FlowSlot] {
        var result: [FlowSlot] = []
        result.reserveCapacity(count)
        var cursor = head
        while cursor >= 0 {
            result.append(FlowSlot(index: cursor))
            cursor = older[Int(cursor)]
        }
        return result
    }

    // MARK: Changing entries

    /// Adds an entry for `key` (replacing one that exists) at the front of the
    /// LRU order. When the table is full, the least recently used entry
    /// (decided entries before undecided ones, see `evictionCandidate`)
    /// leaves first and is reported through `departed` (as expired when it
    /// was, else as evicted). Slots held before this call may be invalid after it.
    @discardableResult
    public mutating func insert(
        _ key: FlowKey, _ value: Value, stage: FlowStage, now: UInt64,
        departed: ((FlowKey, Value, FlowDeparture) -> Void)? = nil
    ) -> FlowSlot {
        if let existing = index[key] {
            let slot = FlowSlot(index: existing)
            values[Int(existing)] = value
            setStage(slot, stage)
            touch(existing, now: now)
            return slot
        }
        if count >= settings.capacity, tail >= 0 {
            let victimIndex = evictionCandidate(now: now)
            let victim = FlowSlot(index: victimIndex)
            let victimKey = keys[Int(victimIndex)]
            let reason: FlowDeparture = isExpired(victimIndex, now: now) ? .expired : .evicted
            let victimValue = remove(victim)
            if reason == .expired { expiredCount += 1 } else { evictedCount += 1 }
            departed?(victimKey, victimValue, reason)
        }
        let slotIndex: Int32
        if let free = freeSlots.popLast() {
            slotIndex = free
            keys[Int(free)] = key
            values[Int(free)] = value
            lastSeen[Int(free)] = now
            stages[Int(free)] = stage
        } else {
            slotIndex = Int32(keys.count)
            keys.append(key)
            values.append(value)
            lastSeen.append(now)
            stages.append(stage)
            newer.append(-1)
            older.append(-1)
            newerInspecting.append(-1)
            olderInspecting.append(-1)
        }
        index[key] = slotIndex
        count += 1
        linkAtHead(slotIndex)
        if stage.holdsBuffers { linkInspectingAtHead(slotIndex) }
        return FlowSlot(index: slotIndex)
    }

    /// Which entry leaves a full table: the least recently used one, unless it
    /// is still undecided (and not expired) and a decided one is near it in
    /// the order (among the 32 least recently used). Losing a
    /// decided flow costs nothing (its packets no longer come); losing one
    /// that is still gathering its name would let its next segment start a
    /// nameless flow mid-stream, so a flood of new connections must not push
    /// those out first.
    private func evictionCandidate(now: UInt64) -> Int32 {
        if isExpired(tail, now: now) { return tail }
        var cursor = tail
        for _ in 0..<32 where cursor >= 0 {
            if stages[Int(cursor)] == .decided { return cursor }
            cursor = newer[Int(cursor)]
        }
        return tail
    }

    /// Moves an entry to another stage (its idle timeout follows the stage).
    public mutating func setStage(_ slot: FlowSlot, _ stage: FlowStage) {
        let slotIndex = slot.index
        let previous = stages[Int(slotIndex)]
        guard previous != stage else { return }
        if previous.holdsBuffers { unlinkInspecting(slotIndex) }
        stages[Int(slotIndex)] = stage
        if stage.holdsBuffers { linkInspectingAtHead(slotIndex) }
    }

    /// Removes an entry and returns its value. The slot is invalid afterwards.
    @discardableResult
    public mutating func remove(_ slot: FlowSlot) -> Value {
        let slotIndex = slot.index
        let value = values[Int(slotIndex)].take()!
        index[keys[Int(slotIndex)]] = nil
        unlink(slotIndex)
        if stages[Int(slotIndex)].holdsBuffers { unlinkInspecting(slotIndex) }
        freeSlots.append(slotIndex)
        count -= 1
        return value
    }

    /// Removes entries idle past their timeout, looking at no more than
    /// `limit` entries from the least recently used end, and stopping early
    /// at the first entry younger than the shortest timeout (all newer ones
    /// are younger still). Returns how many were removed.
    @discardableResult
    public mutating func removeExpired(now: UInt64, limit: Int = .max, departed: ((FlowKey, Value) -> Void)? = nil) -> Int {
        let shortest = min(timeouts.tcp.min() ?? 0, timeouts.other.min() ?? 0)
        var removed = 0
        var examined = 0
        var cursor = tail
        while cursor >= 0, examined < limit {
            examined += 1
            let next = newer[Int(cursor)]
            let idle = now >= lastSeen[Int(cursor)] ? now - lastSeen[Int(cursor)] : 0
            if idle <= shortest { break }
            if isExpired(cursor, now: now) {
                let key = keys[Int(cursor)]
                let value = remove(FlowSlot(index: cursor))
                expiredCount += 1
                departed?(key, value)
                removed += 1
            }
            cursor = next
        }
        return removed
    }

    // MARK: Internals

    private func timeout(of slotIndex: Int32) -> UInt64 {
        let stage = Int(stages[Int(slotIndex)].rawValue)
        return keys[Int(slotIndex)].protocolNumber == 6 ? timeouts.tcp[stage] : timeouts.other[stage]
    }

    private func isExpired(_ slotIndex: Int32, now: UInt64) -> Bool {
        let seen = lastSeen[Int(slotIndex)]
        return now > seen && now - seen > timeout(of: slotIndex)
    }

    private mutating func touch(_ slotIndex: Int32, now: UInt64) {
        if now > lastSeen[Int(slotIndex)] { lastSeen[Int(slotIndex)] = now }
        if head != slotIndex {
            unlink(slotIndex)
            linkAtHead(slotIndex)
        }
        if stages[Int(slotIndex)].holdsBuffers, inspectingHead != slotIndex {
            unlinkInspecting(slotIndex)
            linkInspectingAtHead(slotIndex)
        }
    }

    private mutating func linkAtHead(_ slotIndex: Int32) {
        newer[Int(slotIndex)] = -1
        older[Int(slotIndex)] = head
        if head >= 0 { newer[Int(head)] = slotIndex }
        head = slotIndex
        if tail < 0 { tail = slotIndex }
    }

    private mutating func unlink(_ slotIndex: Int32) {
        let before = newer[Int(slotIndex)]
        let after = older[Int(slotIndex)]
        if before >= 0 { older[Int(before)] = after } else { head = after }
        if after >= 0 { newer[Int(after)] = before } else { tail = before }
        newer[Int(slotIndex)] = -1
        older[Int(slotIndex)] = -1
    }

    private mutating func linkInspectingAtHead(_ slotIndex: Int32) {
        newerInspecting[Int(slotIndex)] = -1
        olderInspecting[Int(slotIndex)] = inspectingHead
        if inspectingHead >= 0 { newerInspecting[Int(inspectingHead)] = slotIndex }
        inspectingHead = slotIndex
        if inspectingTail < 0 { inspectingTail = slotIndex }
        inspectingCount += 1
        if stages[Int(slotIndex)] == .inspectingLargeHello { largeHelloCount += 1 }
    }

    private mutating func unlinkInspecting(_ slotIndex: Int32) {
        let before = newerInspecting[Int(slotIndex)]
        let after = olderInspecting[Int(slotIndex)]
        if before >= 0 { olderInspecting[Int(before)] = after } else { inspectingHead = after }
        if after >= 0 { newerInspecting[Int(after)] = before } else { inspectingTail = before }
        newerInspecting[Int(slotIndex)] = -1
        olderInspecting[Int(slotIndex)] = -1
        inspectingCount -= 1
        if stages[Int(slotIndex)] == .inspectingLargeHello { largeHelloCount -= 1 }
    }
}
