import Foundation
import SharedStore
import VerdictCore

/// The filtering test's side of Control (docs/fleet.md, "The filtering test").
extension Control {
    /// The answer to a filtering test run of the school's server: every name
    /// judged for every group as `filterctl check --user` judges it for a
    /// person of that group now (the rules in force, the group's policy with
    /// its schedules, overrides and live items), on the bundle in force.
    func filteringTestAnswer(_ request: FilteringTest.Request) -> FilteringTest.Answer {
        let now = clock()
        let seconds = Int64(now.timeIntervalSince1970)
        let state = policyState.current(now: seconds)
        let moment = PolicyMoment(
            time: PolicyClock(zoneName: policy.school.timeZone).localTime(at: now), now: seconds, manualExam: state.exam, overrides: state.overrides,
            live: school?.live.items(inForceAt: seconds) ?? [])
        let store = self.store
        let policy = self.policy
        let results = FilteringTest.judge(request) { audience in
            VerdictEngine(rules: store, policy: policy.effectivePolicy(for: audience, at: moment).policy)
        }
        return FilteringTest.Answer(run: request.run, bundleVersion: Int64(store.version), results: results)
    }
}
