import Foundation
import VerdictCore

// When the SafeSearch enforcement hosts' addresses are looked up, and how
// they reach filter-data: before its first policy, and then as soon as they
// change (issue 26).
extension Control {
    /// Before filter-data's first policy is written: looks up the enforcement
    /// hosts the policy needs, all at once, for at most `bound`, so the
    /// first policy filter-data judges with carries their addresses. Runs
    /// before the kernel rules are installed, so these questions meet no
    /// queue. A host not resolved by then gets its published addresses or
    /// keeps its engine blocked (`SafeSearchResolver`), said once in the log.
    func resolveSafeSearchAtStart(within bound: Duration) async {
        let engines = computePolicySet(now: clock()).0.safeSearchEngines
        guard !engines.isEmpty else { return }
        let outcome = await safeSearch.refresh(engines: engines, now: clock(), within: bound)
        logSafeSearch(outcome.events)
    }

    /// Looks up the enforcement hosts whose answers are due; new addresses
    /// go to filter-data at once (not at the school's clock's next tick).
    func refreshSafeSearch() async {
        let engines = safeSearchEngines()
        guard !engines.isEmpty else { return }
        let outcome = await safeSearch.refresh(engines: engines, now: clock())
        logSafeSearch(outcome.events)
        if outcome.changed { await applyPolicy(reason: "SafeSearch addresses") }
    }

    /// Where each engine's names go now, for the "ready" line.
    func safeSearchSummary() -> String? {
        let engines = safeSearchEngines()
        return engines.isEmpty ? nil : safeSearch.describe(engines, now: clock())
    }

    private func logSafeSearch(_ events: [SafeSearchResolver.Event]) {
        for event in events {
            switch event {
            case .unresolvable: logger.warning("\(event)")
            case .resolved: logger.notice("\(event)")
            }
        }
    }
}
