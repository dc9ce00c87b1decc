import Testing
import VerdictCore

/// The filtering test's judging and bounds: every name for every group with
/// the engine of that group's policy, in the order asked; what a run may hold.
@Suite struct FilteringTestTests {
    static let request = FilteringTest.Request(
        run: "ft-abc", groups: ["year9", FilteringTest.noGroup],
        names: [.init(name: "pokerstars.com", category: "gambling"), .init(name: "tinder.com", category: "dating")])

    @Test func everyNameIsJudgedForEveryGroupWithThatGroupsEngine() throws {
        var rules = InMemoryRules()
        try rules.add("pokerstars.com", "gambling")
        try rules.add("tinder.com", "dating")
        let results = FilteringTest.judge(Self.request) { audience in
            // year9 blocks gambling; people in no group block nothing.
            VerdictEngine(rules: rules, policy: Policy(blockedCategories: .only(audience == .group("year9") ? ["gambling"] : [])))
        }
        #expect(
            results.map { "\($0.group) \($0.name) \($0.action)" } == [
                "year9 pokerstars.com block", "year9 tinder.com allow", "(no group) pokerstars.com allow", "(no group) tinder.com allow",
            ])
        #expect(results.first?.category == "gambling" && results.first?.reason.contains("gambling") == true)
        #expect(results.first?.source == "category")
        // A name the school lists under two categories is judged once per group (the server files it under both).
        var twice = Self.request
        twice.names.append(.init(name: "tinder.com", category: "adult"))
        let once = FilteringTest.judge(twice) { _ in VerdictEngine(rules: rules, policy: Policy()) }
        #expect(once.count == results.count && once.filter { $0.name == "tinder.com" }.count == 2)
        #expect(FilteringTest.audience(ofGroup: FilteringTest.noGroup) == .ungrouped && FilteringTest.audience(ofGroup: "year9") == .group("year9"))
    }

    @Test func aRunHoldsHostNamesWithinItsBounds() {
        #expect(Self.request.refusal == nil)
        for name in ["not a name", "UPPER.example", "nodot", "-a.example", "a..example", String(repeating: "a", count: 254) + ".x"] {
            #expect(FilteringTest.nameRefusal(name) != nil, "\(name)")
        }
        #expect(FilteringTest.nameRefusal("888casino.com") == nil && FilteringTest.nameRefusal("casino.test") == nil)
        #expect(FilteringTest.categoryRefusal("dangerous_material") == nil && FilteringTest.categoryRefusal("two words") != nil)
        var big = Self.request
        big.names = (0...FilteringTest.maximumNames).map { .init(name: "n\($0).example", category: "games") }
        #expect(big.refusal != nil)
        var noGroups = Self.request
        noGroups.groups = []
        #expect(noGroups.refusal != nil)
        var badRun = Self.request
        badRun.run = "ft abc"
        #expect(badRun.refusal != nil)
    }
}
