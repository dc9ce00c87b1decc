import Foundation
import Testing
import VerdictCore

/// `locked:` categories in the engine, live focus and pause, and live items
/// in the effective policy (docs/school-policy.md, "Locked categories" and "Live items").
@Suite struct LockedAndLiveTests {
    func patterns(_ texts: String...) throws -> [RulePattern] { try texts.map { try RulePattern($0) } }

    func decide(_ host: String, _ policy: Policy, path: String? = nil, destination: String? = nil) throws -> Decision {
        let facts = FlowFacts(host: try HostName(host), nameSource: .tlsServerName, path: path, destination: destination.flatMap { IPAddress($0) })
        return VerdictEngine(rules: try VerdictEngineTests.rules(), policy: policy).decide(facts)
    }

    // MARK: Locked

    @Test func anOverrideAllowDoesNotOpenALockedCategory() throws {
        // Fails on the code before `locked`: the override layer allowed casino.example.
        var policy = Policy(blockedCategories: .only(["gambling"]))
        policy.locked = ["gambling"]
        policy.overrideAllow = try patterns("casino.example")
        let decision = try decide("www.casino.example", policy)
        #expect(decision.verdict == .drop)
        #expect(decision.reason == Reason(source: .category, category: "gambling", rule: "casino.example"))
        // An override of a name in a category that is blocked but not locked still opens it.
        policy.locked = []
        #expect(try decide("www.casino.example", policy).reason.source == .overrideAllow)
    }

    @Test func lockedBeatsEveryListAndIsBlockedWhateverBlockSays() throws {
        var policy = Policy(blockedCategories: .only([]))
        policy.locked = ["adult", "malware"]
        // Not in block:, still blocked.
        #expect(try decide("only.exact.example", policy).reason == Reason(source: .category, category: "adult", rule: "=only.exact.example"))
        // The allow list, an exam list, a focus list: none opens it.
        policy.allow = try patterns("only.exact.example")
        #expect(try decide("only.exact.example", policy).verdict == .drop)
        policy.exam = Policy.Exam(allow: try patterns("only.exact.example"))
        #expect(try decide("only.exact.example", policy).verdict == .drop)
        policy.exam = nil
        policy.focus = Policy.Focus(allow: try patterns("only.exact.example", "edu.example"), until: 2_000_000_000)
        #expect(try decide("only.exact.example", policy).verdict == .drop)
        #expect(try decide("edu.example", policy).reason.source == .focusList, "the rest of the focus list opens")
        // A URL prefix rule in a locked category under an allowed name.
        policy.focus = nil
        policy.overrideAllow = try patterns("videos.example")
        #expect(try decide("videos.example", policy, path: "/forbidden/x").verdict == .drop)
        #expect(try decide("videos.example", policy, path: "/fine").verdict == .allow)
        // By address: an override of a locked network.
        policy.overrideAllow = try patterns("203.0.113.0/24")
        let engine = VerdictEngine(rules: try VerdictEngineTests.rules(), policy: policy)
        #expect(engine.decide(FlowFacts(destination: IPAddress("203.0.113.7"), transport: .udp)).reason.category == "malware")
    }

    @Test func aFocusOrExamNetworkDoesNotOpenALockedName() throws {
        // Fails on the code before: a name missing the focus list fell to the nameless
        // path, where the focus network allowed the address and only the address was
        // checked for locked categories.
        var policy = Policy(blockedCategories: .only([]), unknown: .allow)
        policy.locked = ["gambling"]
        policy.focus = Policy.Focus(allow: try patterns("198.51.100.0/24"), until: 2_000_000_000)
        let locked = try decide("www.casino.example", policy, destination: "198.51.100.7")
        #expect(locked.verdict == .drop && locked.reason == Reason(source: .category, category: "gambling", rule: "casino.example"))
        // A name in no locked category at an address of the network still goes through.
        #expect(try decide("docs.example.org", policy, destination: "198.51.100.7").reason == Reason(source: .focusList, rule: "198.51.100.0/24"))
        // Outside the network: the focus, as before.
        #expect(try decide("docs.example.org", policy, destination: "192.0.2.1").reason == Reason(source: .focus))
        #expect(try decide("docs.example.org", policy).reason == Reason(source: .focus), "no destination known")
        // The same for an exam's list.
        policy.focus = nil
        policy.exam = Policy.Exam(allow: try patterns("198.51.100.0/24"))
        #expect(try decide("www.casino.example", policy, destination: "198.51.100.7").reason.category == "gambling")
        #expect(try decide("docs.example.org", policy, destination: "198.51.100.7").reason == Reason(source: .examList, rule: "198.51.100.0/24"))
        #expect(try decide("docs.example.org", policy, destination: "192.0.2.1").reason == Reason(source: .exam))
    }

    @Test func aLockedCategoryAnsweredByTheLookupIsBlocked() throws {
        var policy = Policy(blockedCategories: .only([]), unknown: .ask)
        policy.locked = ["adult"]
        var engine = VerdictEngine(rules: try VerdictEngineTests.rules(), policy: policy)
        let host = try HostName("new.example")
        engine.answers.record(LookupAnswers.Answer(categories: ["adult"], expires: UInt64.max), for: host)
        #expect(engine.decide(FlowFacts(host: host, nameSource: .tlsServerName)).verdict == .drop)
    }

    // MARK: Focus and pause

    @Test func aFocusLetsOnlyItsListThroughAndAPauseNothing() throws {
        var policy = Policy(blockedCategories: .only([]), unknown: .allow, noName: .allow)
        policy.overrideAllow = try patterns("casino.example")
        policy.focus = Policy.Focus(allow: try patterns("edu.example", "192.0.2.10"), until: 2_000_000_000)
        #expect(try decide("www.edu.example", policy).reason == Reason(source: .focusList, rule: "edu.example"))
        for host in ["casino.example", "unknown.example"] {
            #expect(try decide(host, policy).reason.source == .focus, "\(host)")
        }
        let engine = VerdictEngine(rules: try VerdictEngineTests.rules(), policy: policy)
        #expect(engine.decide(FlowFacts(destination: IPAddress("192.0.2.10"), transport: .udp)).verdict == .allow)
        #expect(engine.decide(FlowFacts(destination: IPAddress("192.0.2.11"), transport: .udp)).reason.source == .focus)
        policy.focus = Policy.Focus(allow: [], until: 2_000_000_000)
        #expect(try decide("www.edu.example", policy).reason.source == .focus, "a pause")
        // An exam in force comes first.
        policy.exam = Policy.Exam(allow: try patterns("exams.example.org"))
        #expect(try decide("exams.example.org", policy).reason.source == .examList)
    }

    @Test func theFocusAndLockedLinesRoundTrip() throws {
        var policy = Policy(blockedCategories: .only(["adult"]))
        policy.locked = ["adult", "iwf"]
        policy.focus = Policy.Focus(allow: try patterns("docs.example.org", "=exact.example"), until: 1_767_261_600)
        let text = PolicyText.render(policy)
        #expect(text.contains("locked adult iwf\n") && text.contains("focus 1767261600\n") && text.contains("focusAllow docs.example.org\n"))
        #expect(try PolicyText.parse(text) == policy)
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("focusAllow a.example\n") }
        var pause = Policy()
        pause.focus = Policy.Focus(allow: [], until: 5)
        #expect(try PolicyText.parse(PolicyText.render(pause)) == pause)
    }

    // MARK: Live items in the effective policy

    func school(exam: ExamSettings? = ExamSettings(allow: [try! RulePattern("exams.example.org")], groups: ["year9"])) -> SchoolPolicy {
        SchoolPolicy(
            groups: [
                PolicyGroup(name: "staff", members: GroupMembers(unixGroups: ["staff"]), examExempt: true),
                PolicyGroup(name: "year9", members: GroupMembers(unixGroups: ["year9"])),
            ],
            topLevel: PolicyLevel(keys: PolicyKeys(block: .only(["games"]))), exam: exam, overrides: .none, locked: ["adult"],
            live: LivePolicy(keys: [Array(repeating: 1, count: 32)], actions: Set(LiveAction.allCases)))
    }

    func item(
        _ id: String, _ action: LiveAction, _ targets: [String] = [], scope: LiveItem.Scope = .room("lab1"), until: Int64 = 2_000, sequence: Int64 = 1
    ) -> LiveItem {
        LiveItem(id: id, sequence: sequence, action: action, targets: targets, scope: scope, from: 1_000, until: until, by: "Ada Lovelace")
    }

    func moment(_ items: LiveItem..., now: Int64 = 1_500) -> PolicyMoment {
        PolicyMoment(time: LocalTime(weekday: .monday, hour: 10, minute: 0), now: now, live: items)
    }

    @Test func liveAllowAndBlockAreOverridesForTheirScopeWhateverOverridesSays() throws {
        let school = school()
        let moment = moment(
            item("a", .allow, ["games.example"]), item("b", .block, ["news.example"], scope: .group("year9")),
            item("c", .allow, ["chess.example"], scope: .user("ada")))
        let year9 = school.effectivePolicy(for: .group("year9"), at: moment)
        #expect(year9.policy.overrideAllow == (try patterns("games.example")), "overrides: none binds filterctl, not live items")
        #expect(year9.policy.overrideBlock == (try patterns("news.example")))
        #expect(year9.live == ["a", "b"])
        let staff = school.effectivePolicy(for: .group("staff"), at: moment)
        #expect(staff.policy.overrideBlock.isEmpty && staff.live == ["a"])
        // System flows get a room's allow and block too (their DNS answers), never a group's.
        #expect(school.effectivePolicy(for: .system, at: moment).live == ["a"])
        // A user's item reaches only the policy made for that person.
        let ada = school.effectivePolicy(for: .group("year9"), at: moment, person: "ada")
        #expect(ada.live == ["a", "b", "c"] && ada.policy.overrideAllow.count == 2)
        #expect(year9.policy.locked == ["adult"], "locked reaches every policy")
    }

    @Test func aUsersItemReachesOnlyThePeopleOfLiveGroups() throws {
        // Fails on the code before: the user scope skipped live.groups.
        var school = school()
        school.live?.groups = ["year9"]
        let moment = moment(item("u", .allow, ["chess.example"], scope: .user("ada")))
        #expect(school.effectivePolicy(for: .group("year9"), at: moment, person: "ada").live == ["u"])
        #expect(school.effectivePolicy(for: .group("staff"), at: moment, person: "ada").live.isEmpty)
        #expect(school.effectivePolicy(for: .ungrouped, at: moment, person: "ada").policy.overrideAllow.isEmpty)
        school.live?.groups = nil
        #expect(school.effectivePolicy(for: .ungrouped, at: moment, person: "ada").live == ["u"], "no live.groups: anyone")
    }

    @Test func anItemEndsAtItsTime() throws {
        let school = school()
        let block = item("a", .block, ["news.example"], until: 2_000)
        #expect(school.effectivePolicy(for: .ungrouped, at: moment(block, now: 1_999)).live == ["a"])
        #expect(school.effectivePolicy(for: .ungrouped, at: moment(block, now: 2_000)).live.isEmpty)
        #expect(school.effectivePolicy(for: .ungrouped, at: moment(block, now: 2_000)).policy.overrideBlock.isEmpty)
    }

    @Test func focusAndPauseAreForPeopleAndAPauseBeatsAFocus() throws {
        let school = school()
        let focus = item("f", .focus, ["docs.example.org"], until: 1_900)
        let people = school.effectivePolicy(for: .group("year9"), at: moment(focus))
        #expect(people.policy.focus == Policy.Focus(allow: try patterns("docs.example.org"), until: 1_900))
        #expect(school.effectivePolicy(for: .system, at: moment(focus)).policy.focus == nil, "system flows go on")
        let both = school.effectivePolicy(for: .ungrouped, at: moment(focus, item("p", .pause, until: 1_800)))
        #expect(both.policy.focus == Policy.Focus(allow: [], until: 1_800) && both.live == ["p"])
        // Of two focus items, the later one.
        let later = item("g", .focus, ["maths.example"], until: 1_700, sequence: 5)
        #expect(school.effectivePolicy(for: .ungrouped, at: moment(later, focus)).policy.focus?.allow == (try patterns("maths.example")))
    }

    @Test func aLiveExamIsTheSchoolsExamForItsScope() throws {
        let school = school()
        let exam = item("e", .exam, until: 1_900)
        let year9 = school.effectivePolicy(for: .group("year9"), at: moment(exam))
        #expect(year9.exam?.startedBy == "live: Ada Lovelace" && year9.exam?.until == 1_900)
        #expect(year9.policy.exam == Policy.Exam(allow: try patterns("exams.example.org"), until: 1_900))
        // The room's exam is for the exam's groups only, as `filterctl exam start`.
        #expect(school.effectivePolicy(for: .group("staff"), at: moment(exam)).exam == nil)
        #expect(school.effectivePolicy(for: .ungrouped, at: moment(exam)).exam == nil)
        #expect(school.effectivePolicy(for: .system, at: moment(exam)).exam == nil)
        // A group's exam for that group, even one the exam settings do not name.
        let staffExam = item("s", .exam, scope: .group("staff"), until: 1_900)
        #expect(school.effectivePolicy(for: .group("staff"), at: moment(staffExam)).exam != nil)
    }

    @Test func aPersonsAudienceHasItsOwnLinesInAPolicySet() throws {
        var set = PolicySet(policies: [.ungrouped: Policy(), .person(1001): Policy(blockedCategories: .only(["games"]))])
        set.users = [1001: .person(1001), 1002: .ungrouped]
        let text = PolicySet.render(set)
        #expect(text.contains("user 1001 @1001\n") && text.contains("audience person 1001\n"))
        let parsed = try PolicySet.parse(text)
        #expect(parsed == set)
        #expect(parsed.placement(uid: 1001) == .audience(.person(1001)))
        #expect(throws: PolicyText.ParseError.self) { try PolicySet.parse("user 5 @5\naudience ungrouped\nblock all\n") }
    }
}

/// A live item's targets, parsed once when the item is made.
@Suite struct LiveItemTests {
    @Test func anItemKeepsItsTargetsParsedAndWritesThemAsText() throws {
        let item = LiveItem(
            id: "a", sequence: 1, action: .allow, targets: ["Docs.Example.org/Path", "not a name"], scope: .everyone, from: 0, until: 10, by: "Ada")
        #expect(item.patterns == [try RulePattern("docs.example.org/path")] && item.targets == ["docs.example.org/path"])
        let text = try JSONEncoder().encode(item)
        #expect(String(decoding: text, as: UTF8.self).contains(#""targets":["docs.example.org\/path"]"#))
        #expect(try JSONDecoder().decode(LiveItem.self, from: text) == item)
    }
}
