import Testing
import VerdictCore

@Suite struct PolicySetTests {
    func set() throws -> PolicySet {
        var students = Policy(blockedCategories: .only(["adult", "games"]), unknown: .block)
        students.exam = Policy.Exam(allow: [try RulePattern("exams.example.org")], until: 1_900_000_000)
        return PolicySet(
            policies: [
                .ungrouped: Policy(blockedCategories: .only(["adult"])),
                .system: Policy(blockedCategories: .only([])),
                .group("students"): students,
                .group("staff"): Policy(blockedCategories: .only(["adult"]), deny: [try RulePattern("=games.example")]),
            ],
            users: [1000: .group("students"), 1001: .ungrouped, 105: .system, 2000: .group("staff")], askUsers: true)
    }

    @Test func roundTrips() throws {
        let set = try set()
        #expect(try PolicySet.parse(PolicySet.render(set)) == set)
        let plain = PolicySet(single: Policy(unknown: .ask))
        #expect(try PolicySet.parse(PolicySet.render(plain)) == plain)
    }

    @Test func aPlainPolicyFileIsOnePolicyForEveryone() throws {
        let policy = Policy(blockedCategories: .only(["gambling"]), noName: .block)
        let set = try PolicySet.parse(PolicyText.render(policy))
        #expect(set.policies[.ungrouped] == policy && set.policies[.system] == policy && !set.askUsers)
        #expect(set.placement(uid: 1234) == .audience(.ungrouped))
    }

    @Test func placementAsksOnlyAboutPeopleItWasNotToldOf() throws {
        let set = try set()
        #expect(set.placement(uid: 1000) == .audience(.group("students")))
        #expect(set.placement(uid: 5000) == .unknown)
        #expect(set.placement(uid: 33) == .audience(.system), "system users are never asked about")
        #expect(set.placement(uid: 65_534) == .audience(.system))
        #expect(set.placement(uid: nil) == .audience(.system), "no local socket")
        var quiet = set
        quiet.askUsers = false
        #expect(quiet.placement(uid: 5000) == .audience(.ungrouped))
    }

    @Test(arguments: [
        "audience group\n", "audience ungrouped\naudience ungrouped\n", "user 1000\naudience ungrouped\n", "user x students\naudience ungrouped\n",
        "askUsers maybe\naudience ungrouped\n", "block all\naudience ungrouped\n", "user 1000 teachers\naudience ungrouped\n",
        "audience ungrouped\nunknown perhaps\n",
    ])
    func malformedSetsAreRefused(text: String) {
        #expect(throws: PolicyText.ParseError.self) { try PolicySet.parse(text) }
    }

    @Test func errorsInASectionNameTheirLineInTheFile() {
        do {
            _ = try PolicySet.parse("askUsers no\naudience ungrouped\nblock all\nunknown perhaps\n")
            Issue.record("accepted")
        } catch {
            #expect(error.line == 4, "\(error)")
        }
    }
}
