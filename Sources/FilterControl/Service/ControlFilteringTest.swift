import Foundation
import SharedStore
import VerdictCore

/// The filtering test's side of Control (docs/fleet.md, "The filtering test").
extension Control {
    /// The answer to a filtering test run of the school's server: every name
    /// judged for every group as `filterctl check --user` judges it for a
    /// person of that group, on the rules and bundle in force, with the
    /// group's policy as the server expects it: its own keys and the top
    /// level's, without schedules, overrides, exams or live items (what a
    /// teacher opened for a lesson is not a hole in the filter).
    func filteringTestAnswer(_ request: FilteringTest.Request) -> FilteringTest.Answer {
        let now = clock()
        let seconds = Int64(now.timeIntervalSince1970)
        let moment = PolicyMoment(time: PolicyClock(zoneName: policy.school.timeZone).localTime(at: now), now: seconds)
        let store = self.store
        let policy = self.policy
        let results = FilteringTest.judge(request) { audience in
            VerdictEngine(rules: store, policy: policy.effectivePolicy(for: audience, at: moment, schedules: false).policy)
        }
        return FilteringTest.Answer(run: request.run, bundleVersion: Int64(store.version), results: results)
    }
}
