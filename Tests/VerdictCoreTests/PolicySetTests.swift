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

    @Test func safeSearchTargetsTravelInTheSet() throws {
        var set = try set()
        set.safeSearchTargets = [
            .google: SafeSearchTarget(addresses: [IPAddress("216.239.38.120")!, IPAddress("2001:4860:4802:32::78")!], timeToLive: 300),
            .bing: SafeSearchTarget(addresses: [IPAddress("204.79.197.220")!], timeToLive: 60),
        ]
        let text = PolicySet.render(set)
        #expect(text.contains("safeSearchTarget google 300 216.239.38.120 2001:4860:4802:32::78\n"))
        #expect(try PolicySet.parse(text) == set)
        let many = (1...40).map { IPAddress("192.0.2.\($0)")! }
        #expect(SafeSearchTarget(addresses: many, timeToLive: 1).addresses.count == SafeSearchTarget.maximumAddresses)
    }

    @Test(arguments: [
        "safeSearchTarget google 300\naudience ungrouped\n", "safeSearchTarget altavista 300 192.0.2.1\naudience ungrouped\n",
        "safeSearchTarget google forever 192.0.2.1\naudience ungrouped\n", "safeSearchTarget google 300 not-an-address\naudience ungrouped\n",
        "safeSearchTarget google 100000 192.0.2.1\naudience ungrouped\n",
    ])
    func malformedSafeSearchTargetsAreRefused(text: String) {
        #expect(throws: PolicyText.ParseError.self) { try PolicySet.parse(text) }
    }

    @Test func theEnginesAreThoseOfEveryAudience() throws {
        var students = Policy(blockedCategories: .only(["adult"]))
        students.bypass.safeSearch = [.google, .youtubeStrict]
        var staff = Policy(blockedCategories: .only([]))
        staff.bypass.safeSearch = [.bing]
        let set = PolicySet(policies: [.ungrouped: Policy(), .group("students"): students, .group("staff"): staff])
        #expect(set.safeSearchEngines == [.google, .youtubeStrict, .bing])
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
