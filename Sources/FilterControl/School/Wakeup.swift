import NIOCore
import Synchronization

/// A wait that ends when signalled (a signal before the wait counts once),
/// after a timeout, or when the task is cancelled. The timeout is a task on
/// an event loop, scheduled `in:` a duration: NIO measures it on the
/// monotonic clock, so it is not moved by a step of the wall clock.
final class Wakeup: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
        var generation: UInt64 = 0
    }

    private let state = Mutex(State())

    func signal() {
        let waiter: CheckedContinuation<Void, Never>? = state.withLock { state in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Waits for a signal, `timeout` (nil: none) or cancellation. One waiter at a time.
    func wait(timeout: Duration?, loop: any EventLoop, takesSignals: Bool = true) async {
        let generation = state.withLock { state -> UInt64 in
            state.generation += 1
            return state.generation
        }
        var scheduled: Scheduled<Void>?
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now: Bool = state.withLock { state in
                    if takesSignals, state.pending {
                        state.pending = false
                        return true
                    }
                    if Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if now {
                    continuation.resume()
                    return
                }
                if let timeout {
                    let nanoseconds = Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
                    scheduled = loop.scheduleTask(in: .nanoseconds(max(0, nanoseconds))) { self.end(generation) }
                }
            }
        } onCancel: {
            self.end(generation)
        }
        scheduled?.cancel()
    }

    /// Ends the wait of `generation`, if it still waits.
    private func end(_ generation: UInt64) {
        let waiter: CheckedContinuation<Void, Never>? = state.withLock { state in
            guard state.generation == generation, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Waits `duration` (or until cancelled), signals aside.
    static func sleep(_ duration: Duration, loop: any EventLoop) async {
        await Wakeup().wait(timeout: duration, loop: loop, takesSignals: false)
    }
}
