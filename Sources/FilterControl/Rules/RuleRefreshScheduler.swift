/// Runs ``RuleUpdater/update(now:)`` every `rules.refresh`, give or take a
/// random 10%, so that a fleet of machines started together does not ask the
/// server in step. The daemon runs it in a task and cancels the task to stop it.
///
/// ```swift
/// let scheduler = RuleRefreshScheduler(interval: .seconds(configuration.rules.refresh))
/// let refresh = Task {
///     await scheduler.run(updater: updater) { outcome in
///         if case .installed = outcome { /* tell filter-data "rulesChanged" */ }
///     }
/// }
/// // on shutdown: refresh.cancel()
/// ```
public struct RuleRefreshScheduler: Sendable {
    public var interval: Duration
    /// The largest share of `interval` added or taken away (0.1: ±10%).
    public var jitter: Double

    public init(interval: Duration, jitter: Double = 0.1) {
        self.interval = interval
        self.jitter = min(max(jitter, 0), 0.5)
    }

    /// The wait before the next check for a random value in 0...1
    /// (0 gives the shortest wait, 1 the longest).
    public func delay(random: Double) -> Duration {
        let factor = 1 + jitter * (2 * min(max(random, 0), 1) - 1)
        let (seconds, attoseconds) = interval.components
        let milliseconds = Double(seconds) * 1000 + Double(attoseconds / 1_000_000_000_000_000)
        return .milliseconds(Int64((milliseconds * factor).rounded()))
    }

    /// Checks at once when `checkFirst`, then after every wait, until the
    /// calling task is cancelled. `onOutcome` sees every outcome.
    public func run(
        updater: RuleUpdater, checkFirst: Bool = true, onOutcome: @Sendable (UpdateOutcome) async -> Void = { _ in }
    ) async {
        var check = checkFirst
        while !Task.isCancelled {
            if check {
                let outcome = await updater.update()
                if Task.isCancelled { return }
                await onOutcome(outcome)
            }
            check = true
            do {
                try await Task.sleep(for: delay(random: Double.random(in: 0...1)))
            } catch {
                return
            }
        }
    }
}
