/// The poke that wakes the alerts' delivery when records raised alerts: the
/// ingest pokes it after the records' transaction commits (and the digests
/// after they queued their emails), the delivery worker waits on `pokes`.
/// Pokes that come while the worker is busy are one: the stream keeps the newest only, and the worker takes every alert
/// not yet dispatched when it wakes (`ServerStorage.undispatchedAlerts`), so
/// nothing depends on how many pokes there were. Other server instances on
/// one PostgreSQL are not poked; they find the alerts at their next poll.
///
/// One process, one listener: `pokes` is an AsyncStream, which has one consumer.
public final class AlertSignal: Sendable {
    /// Ends when `finish()` is called (the server shuts down).
    public let pokes: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    public init() {
        (pokes, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Wakes the listener (or, when none waits, the next one to ask). Never waits.
    public func poke() {
        continuation.yield()
    }

    public func finish() {
        continuation.finish()
    }
}
