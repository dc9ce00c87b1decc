import Foundation

/// The machines' held live requests in this process, by room: a change
/// wakes the requests of its room (or all, for a change of everyone's), and
/// each woken request looks at its machine's view again.
///
/// A request takes a `ticket` before it reads its view and waits with it: a
/// change announced between the read and the wait is not lost, the wait
/// returns at once. Bounded: at most `limit` requests wait at once; one more
/// is answered as if its wait had passed (204), and the machine asks again.
public actor LiveHub {
    public enum Wake: Sendable, Hashable {
        /// Something in the request's room (or everyone's) changed.
        case changed
        /// The hub is full, or the wait was cancelled.
        case notHeld
        /// The server is shutting down.
        case closing
    }

    /// Where the changes stood when a request read its view.
    public struct Ticket: Sendable, Hashable {
        let generation: UInt64
    }

    public let limit: Int
    private var waiting: [String: [UInt64: CheckedContinuation<Wake, Never>]] = [:]
    private var count = 0
    private var nextID: UInt64 = 0
    /// Every announcement takes the next generation; the last one by room, and for every room.
    private var generation: UInt64 = 0
    private var roomGenerations: [String: UInt64] = [:]
    private var everyRoomGeneration: UInt64 = 0
    private var closed = false
    private var listening = false
    private var listeningWaiters: [CheckedContinuation<Void, Never>] = []

    /// The most rooms whose last change is kept; past it, the oldest are
    /// forgotten by treating the next wait as woken (the request reads again).
    static let roomsKept = 10_000

    public init(limit: Int = 20_000) {
        self.limit = limit
    }

    public var held: Int { count }

    public func ticket() -> Ticket { Ticket(generation: generation) }

    /// Waits until a change of `room` (or every room) announced after
    /// `ticket`, the hub's close, or the task's cancellation.
    public func wait(room: String, after ticket: Ticket) async -> Wake {
        if closed { return .closing }
        if max(roomGenerations[room] ?? 0, everyRoomGeneration) > ticket.generation { return .changed }
        guard count < limit else { return .notHeld }
        nextID += 1
        let id = nextID
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Wake, Never>) in
                if Task.isCancelled {
                    continuation.resume(returning: .notHeld)
                    return
                }
                waiting[room, default: [:]][id] = continuation
                count += 1
            }
        } onCancel: {
            Task { await self.resume(room: room, id: id, with: .notHeld) }
        }
    }

    private func resume(room: String, id: UInt64, with wake: Wake) {
        guard let continuation = waiting[room]?.removeValue(forKey: id) else { return }
        if waiting[room]?.isEmpty == true { waiting[room] = nil }
        count -= 1
        continuation.resume(returning: wake)
    }

    /// Wakes the requests of `room`; `*` (SQLStorage.everyRoom) wakes all.
    public func announce(room: String) {
        generation += 1
        if room == SQLStorage.everyRoom {
            everyRoomGeneration = generation
            let all = waiting
            waiting = [:]
            count = 0
            for continuation in all.values.flatMap(\.values) { continuation.resume(returning: .changed) }
            return
        }
        if roomGenerations.count >= Self.roomsKept, roomGenerations[room] == nil {
            roomGenerations = [:]
            everyRoomGeneration = generation
        }
        roomGenerations[room] = generation
        guard let woken = waiting.removeValue(forKey: room) else { return }
        count -= woken.count
        for continuation in woken.values { continuation.resume(returning: .changed) }
    }

    /// Answers every held request (the server is shutting down) and every later one at once.
    public func close() {
        closed = true
        let all = waiting
        waiting = [:]
        count = 0
        for continuation in all.values.flatMap(\.values) { continuation.resume(returning: .closing) }
    }

    /// Marks the PostgreSQL listener in place (tests wait for it).
    public func setListening(_ value: Bool) {
        listening = value
        guard value else { return }
        let waiters = listeningWaiters
        listeningWaiters = []
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once changes from other server instances reach this hub.
    public func untilListening() async {
        if listening { return }
        await withCheckedContinuation { listeningWaiters.append($0) }
    }
}
