import Testing
import VerdictCore

/// The school's policy turned into the one policy the engine uses, for each
/// audience and moment (docs/school-policy.md, "Precedence").
@Suite struct SchoolPolicyTests {
    func patterns(_ texts: String...) throws -> [RulePattern] { try texts.map { try RulePattern($0) } }

    /// Students, staff and a year group; lessons and lunch; an exam week.
    func school() throws -> SchoolPolicy {
        let weekdays: Set<Weekday> = [.monday, .tuesday, .wednesday, .thursday, .friday]
        return SchoolPolicy(
            groups: [
                PolicyGroup(
                    name: "staff", members: GroupMembers(unixGroups: ["staff"]),
                    policy: PolicyLevel(keys: PolicyKeys(block: .only(["adult"]))), examExempt: true),
                PolicyGroup(
                    name: "year7", members: GroupMembers(unixGroups: ["year7"]),
                    policy: PolicyLevel(keys: PolicyKeys(unknown: .block))),
                PolicyGroup(
                    name: "students", members: GroupMembers(uids: [10_000...19_999], users: ["alice"]),
                    policy: PolicyLevel(during: [
                        (schedule: "lessons", keys: PolicyKeys(block: .only(["adult", "games", "social"]))),
                        (schedule: "evening", keys: PolicyKeys(block: .only(["adult"]))),
                    ])),
            ],
            schedules: [
                "lessons": Schedule(days: weekdays, times: [try TimeRange("08:30-12:00"), try TimeRange("13:00-15:30")]),
                "lunch": Schedule(days: weekdays, times: [try TimeRange("12:00-13:00")]),
                "evening": Schedule(days: weekdays, times: [try TimeRange("22:00-06:00")]),
                "examweek": Schedule(days: [.wednesday], times: [try TimeRange("09:00-11:00")]),
            ],
            topLevel: PolicyLevel(
                keys: PolicyKeys(block: .only(["adult", "gambling"]), deny: try patterns("games.example")),
                during: [(schedule: "lunch", keys: PolicyKeys(block: .only(["adult"])))]),
            exam: ExamSettings(allow: try patterns("exams.example.org"), during: ["examweek"]),
            overrides: .allow)
    }

    let mondayLesson = PolicyMoment(time: LocalTime(weekday: .monday, hour: 9, minute: 0), now: 1_000_020)
    let mondayLunch = PolicyMoment(time: LocalTime(weekday: .monday, hour: 12, minute: 30), now: 1_000_020)
    let saturday = PolicyMoment(time: LocalTime(weekday: .saturday, hour: 10, minute: 0), now: 1_000_020)

    @Test func theFirstMatchingGroupWinsAndSystemUsersAreTheirOwn() throws {
        let school = try school()
        #expect(school.audience(of: LocalUser(uid: 10_500, name: "bob", unixGroups: ["staff"])) == .group("staff"), "order decides")
        #expect(school.audience(of: LocalUser(uid: 10_500, name: "bob", unixGroups: ["bob"])) == .group("students"))
        #expect(school.audience(of: LocalUser(uid: 2_000, name: "alice")) == .group("students"), "by user name")
        #expect(school.audience(of: LocalUser(uid: 2_001, name: "carol", unixGroups: ["carol", "year7"])) == .group("year7"))
        #expect(school.audience(of: LocalUser(uid: 2_002, name: "dave")) == .ungrouped)
        #expect(school.audience(of: LocalUser(uid: 2_003)) == .ungrouped, "a uid with no passwd entry is still a person")
        #expect(school.audience(of: LocalUser(uid: 105, name: "systemd-resolve")) == .system)
        #expect(school.audience(of: LocalUser(uid: 65_534, name: "nobody")) == .system)
        #expect(school.audience(of: nil) == .system, "no local socket")
    }

    @Test func groupsInheritTheKeysTheyDoNotSet() throws {
        let school = try school()
        let year7 = school.effectivePolicy(for: .group("year7"), at: saturday).policy
        #expect(year7.blockedCategories == .only(["adult", "gambling"]), "inherited")
        #expect(year7.deny == (try patterns("games.example")), "inherited")
        #expect(year7.unknown == .block, "its own")
        let staff = school.effectivePolicy(for: .group("staff"), at: saturday).policy
        #expect(staff.blockedCategories == .only(["adult"]), "replaced, not merged")
    }

    @Test func schedulesReplaceKeysWhileActiveAndTheFirstActiveListedWins() throws {
        let school = try school()
        let lesson = school.effectivePolicy(for: .group("students"), at: mondayLesson)
        #expect(lesson.policy.blockedCategories == .only(["adult", "games", "social"]) && lesson.schedules == ["lessons"])
        // Lunch: the top level's lunch keys apply; the students' own schedules are not active.
        let lunch = school.effectivePolicy(for: .group("students"), at: mondayLunch)
        #expect(lunch.policy.blockedCategories == .only(["adult"]) && lunch.schedules == ["lunch"])
        // A group's own keys come after the top level's schedule: staff keep theirs at lunch.
        #expect(school.effectivePolicy(for: .group("staff"), at: mondayLunch).policy.blockedCategories == .only(["adult"]))
        #expect(school.effectivePolicy(for: .ungrouped, at: saturday).schedules.isEmpty)
    }

    @Test func schedulesAcrossMidnightBelongToTheDayTheyStart() throws {
        let evening = try school().schedules["evening"]!
        #expect(evening.isActive(at: LocalTime(weekday: .friday, hour: 23, minute: 0)))
        #expect(evening.isActive(at: LocalTime(weekday: .saturday, hour: 5, minute: 59)), "Friday's evening runs into Saturday")
        #expect(!evening.isActive(at: LocalTime(weekday: .saturday, hour: 22, minute: 0)))
        #expect(!evening.isActive(at: LocalTime(weekday: .monday, hour: 5, minute: 0)), "Sunday night is not in the schedule")
        #expect(!evening.isActive(at: LocalTime(weekday: .monday, hour: 6, minute: 0)), "the end minute is outside")
        #expect(evening.minutesLeft(at: LocalTime(weekday: .monday, hour: 23, minute: 0)) == 7 * 60)
        let lessons = try school().schedules["lessons"]!
        #expect(lessons.isActive(at: LocalTime(weekday: .monday, hour: 8, minute: 30)))
        #expect(!lessons.isActive(at: LocalTime(weekday: .monday, hour: 12, minute: 0)))
        #expect(lessons.minutesLeft(at: LocalTime(weekday: .monday, hour: 15, minute: 0)) == 30)
        let allDay = Schedule(days: [.sunday], times: [try TimeRange("00:00-24:00")])
        #expect(allDay.isActive(at: LocalTime(weekday: .sunday, minute: 0)) && allDay.isActive(at: LocalTime(weekday: .sunday, minute: 1439)))
        #expect(!allDay.isActive(at: LocalTime(weekday: .monday, minute: 0)))
    }

    @Test(arguments: ["8:30-12:00", "08:30", "08:30-12:60", "25:00-26:00", "24:30-01:00", "12:00-12:00", "ab:cd-ef:gh", ""])
    func malformedTimeRangesAreRefused(text: String) {
        #expect(throws: TimeRange.ParseError.self) { try TimeRange(text) }
    }

    @Test func anExamOnItsScheduleAppliesToEveryGroupButTheExempt() throws {
        let school = try school()
        // 10:15:20 on the school's clock (1_000_040 is 20 s into its minute).
        let wednesday = PolicyMoment(time: LocalTime(weekday: .wednesday, hour: 10, minute: 15), now: 1_000_040)
        let students = school.effectivePolicy(for: .group("students"), at: wednesday)
        #expect(students.exam?.startedBy == "schedule examweek")
        let until: Int64 = 1_000_040 + 45 * 60 - 20
        #expect(students.exam?.until == until, "until 11:00:00")
        #expect(students.policy.exam == Policy.Exam(allow: try patterns("exams.example.org"), until: students.exam?.until))
        #expect(school.effectivePolicy(for: .ungrouped, at: wednesday).exam != nil, "people in no group sit the exam too")
        #expect(school.effectivePolicy(for: .group("staff"), at: wednesday).exam == nil, "exam: exempt")
        #expect(school.effectivePolicy(for: .system, at: wednesday).exam == nil, "system flows are not people")
        #expect(school.effectivePolicy(for: .group("students"), at: mondayLesson).exam == nil)
    }

    @Test func anExamStartedByHandRunsForItsGroupsUntilItsTime() throws {
        let school = try school()
        var moment = saturday
        moment.manualExam = ManualExam(groups: ["year7"], until: moment.now + 3600, startedAt: moment.now)
        #expect(school.effectivePolicy(for: .group("year7"), at: moment).exam?.startedBy == "filterctl exam start")
        #expect(school.effectivePolicy(for: .group("students"), at: moment).exam == nil, "only the groups named")
        moment.manualExam = ManualExam(groups: nil, until: nil, startedAt: moment.now)
        #expect(school.effectivePolicy(for: .group("students"), at: moment).exam != nil, "no groups named: the default ones")
        #expect(school.effectivePolicy(for: .group("staff"), at: moment).exam == nil)
        moment.manualExam = ManualExam(groups: ["year7"], until: moment.now, startedAt: moment.now - 60)
        #expect(school.effectivePolicy(for: .group("year7"), at: moment).exam == nil, "it ended at its time")
    }

    @Test func overridesApplyToTheirGroupUntilTheyEndAsTheSchoolPermits() throws {
        var school = try school()
        var moment = saturday
        moment.overrides = [
            PolicyOverride(id: "a", action: .allow, target: "games.example", group: "students", until: moment.now + 60, createdAt: moment.now),
            PolicyOverride(id: "b", action: .block, target: "video.example", createdAt: moment.now),
            PolicyOverride(id: "c", action: .allow, target: "old.example", until: moment.now, createdAt: moment.now - 600),
        ]
        let students = school.effectivePolicy(for: .group("students"), at: moment)
        #expect(students.overrides == ["a", "b"], "c ended")
        #expect(students.policy.overrideAllow == (try patterns("games.example")))
        #expect(students.policy.overrideBlock == (try patterns("video.example")))
        #expect(school.effectivePolicy(for: .group("staff"), at: moment).overrides == ["b"], "a is for students only")
        school.overrides = .blockOnly
        #expect(school.effectivePolicy(for: .group("students"), at: moment).overrides == ["b"])
        school.overrides = .none
        #expect(school.effectivePolicy(for: .group("students"), at: moment).overrides.isEmpty)
    }

    @Test func theMachineMayAddRestrictionsButNeverLoosen() throws {
        let school = try school()
        let effective = school.effectivePolicy(
            for: .group("staff"), at: saturday, localDeny: try patterns("local.example"), localBlock: .only(["games"]))
        #expect(effective.policy.blockedCategories == .only(["adult", "games"]))
        #expect(effective.policy.deny == (try patterns("games.example", "local.example")))
        let all = school.effectivePolicy(for: .group("staff"), at: saturday, localBlock: .all)
        #expect(all.policy.blockedCategories == .all)
    }

    /// The whole precedence, end to end through the engine: exam, overrides, lists, categories.
    @Test func precedenceThroughTheEngine() throws {
        var rules = InMemoryRules()
        try rules.add("games.example", "games")
        try rules.add("exams.example.org", "education")
        try rules.add("social.example", "social")
        let school = try school()
        func verdict(_ host: String, _ audience: Audience, _ moment: PolicyMoment) throws -> Decision {
            let policy = school.effectivePolicy(for: audience, at: moment).policy
            return VerdictEngine(rules: rules, policy: policy).decide(FlowFacts(host: try HostName(host), nameSource: .tlsServerName))
        }
        // The school's deny list beats categories; a teacher's allow beats the list.
        #expect(try verdict("games.example", .group("staff"), saturday).reason.source == .localDenyList)
        var moment = mondayLesson
        moment.overrides = [PolicyOverride(id: "t", action: .allow, target: "games.example", group: "students", createdAt: 0)]
        #expect(try verdict("games.example", .group("students"), moment).verdict == .allow)
        // Lessons block social for students, not for staff.
        #expect(try verdict("social.example", .group("students"), moment).verdict == .drop)
        #expect(try verdict("social.example", .group("staff"), moment).verdict == .allow)
        // An exam beats the teacher's override.
        moment.manualExam = ManualExam(startedAt: 0)
        #expect(try verdict("games.example", .group("students"), moment).reason.source == .exam)
        #expect(try verdict("exams.example.org", .group("students"), moment).verdict == .allow)
    }
}
