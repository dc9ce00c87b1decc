// The school's policy as a whole: who (groups of local users), when
// (schedules, exams), what (the policy keys of each), and what teachers may
// change on a machine (overrides). Pure: the caller resolves users through
// the system's user database and reads the wall clock; this type turns
// (group, local time, exam state, overrides) into the one `Policy` the
// engine judges with. Precedence is written out in docs/school-policy.md.

/// A day of the week, ISO numbering (Monday 1).
public enum Weekday: Int, Sendable, Hashable, CaseIterable, Comparable {
    case monday = 1, tuesday, wednesday, thursday, friday, saturday, sunday

    /// `mon` ... `sun`, as written in a schedule.
    public var shortName: String { ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][rawValue - 1] }

    public init?(shortName: String) {
        guard let day = Weekday.allCases.first(where: { $0.shortName == shortName.lowercased() }) else { return nil }
        self = day
    }

    public var previous: Weekday { Weekday(rawValue: rawValue == 1 ? 7 : rawValue - 1)! }

    public static func < (lhs: Weekday, rhs: Weekday) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A moment on the school's wall clock: the day of the week and the minute
/// of the day (0 to 1439), in the school's time zone.
public struct LocalTime: Sendable, Hashable {
    public var weekday: Weekday
    public var minute: Int

    public init(weekday: Weekday, minute: Int) {
        self.weekday = weekday
        self.minute = max(0, min(1439, minute))
    }

    public init(weekday: Weekday, hour: Int, minute: Int) {
        self.init(weekday: weekday, minute: hour * 60 + minute)
    }
}

/// `08:30-12:00`: from the first minute up to (not including) the second.
/// A range whose end is not after its start runs past midnight
/// (`22:00-06:00`) and belongs to the day it starts on; `00:00-24:00` is the whole day.
public struct TimeRange: Sendable, Hashable, CustomStringConvertible {
    public var start: Int
    public var end: Int

    public init(start: Int, end: Int) {
        self.start = start
        self.end = end
    }

    public struct ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        public var text: String
        public var description: String { "'\(text)' is not a time range like 08:30-12:00 (hours 00 to 24, minutes 00 to 59)" }
    }

    public init(_ text: String) throws(ParseError) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        func minute(_ part: Substring) -> Int? {
            let fields = part.trimmingASCIISpaces().split(separator: ":", omittingEmptySubsequences: false)
            guard fields.count == 2, fields[0].count == 2, fields[1].count == 2, let hour = Int(fields[0]), let minute = Int(fields[1]),
                (0...24).contains(hour), (0...59).contains(minute), hour < 24 || minute == 0
            else { return nil }
            return hour * 60 + minute
        }
        guard parts.count == 2, let start = minute(parts[0]), let end = minute(parts[1]), start != end || start == 0, start < 1440 else {
            throw ParseError(text: text)
        }
        self.init(start: start, end: end)
    }

    var wrapsPastMidnight: Bool { end <= start }

    public var description: String {
        func text(_ minute: Int) -> String {
            let hour = minute / 60
            let rest = minute % 60
            return (hour < 10 ? "0" : "") + String(hour) + ":" + (rest < 10 ? "0" : "") + String(rest)
        }
        return text(start) + "-" + text(end)
    }
}

/// When a schedule is active: on these days, during these ranges.
public struct Schedule: Sendable, Hashable {
    public var days: Set<Weekday>
    public var times: [TimeRange]

    public init(days: Set<Weekday>, times: [TimeRange]) {
        self.days = days
        self.times = times
    }

    public func isActive(at time: LocalTime) -> Bool {
        minutesLeft(at: time) != nil
    }

    /// How many minutes of the active range are left (it ends when this many
    /// minutes have passed); nil when the schedule is not active.
    public func minutesLeft(at time: LocalTime) -> Int? {
        var longest: Int? = nil
        for range in times {
            var left: Int? = nil
            if !range.wrapsPastMidnight {
                if days.contains(time.weekday), range.start <= time.minute, time.minute < range.end { left = range.end - time.minute }
            } else if range.start == 0, range.end == 0 {
                // 00:00-00:00 is not a range; TimeRange refuses it. Nothing to do.
            } else {
                if days.contains(time.weekday), time.minute >= range.start { left = 1440 - time.minute + range.end }
                if days.contains(time.weekday.previous), time.minute < range.end { left = max(left ?? 0, range.end - time.minute) }
            }
            if let left { longest = max(longest ?? 0, left) }
        }
        return longest
    }
}

/// The keys of a policy that the school sets at the top level, for a group,
/// or for a schedule; nil means "as the level below says".
public struct PolicyKeys: Sendable, Hashable {
    public var block: Policy.CategorySelection?
    public var allow: [RulePattern]?
    public var deny: [RulePattern]?
    public var unknown: Policy.UnknownAction?
    public var noName: Policy.NoNameAction?
    public var askDefault: Policy.DefaultAction?
    public var askTimeoutMilliseconds: Int?
    /// `safeSearch:` and `bypass:`.
    public var bypass = BypassKeys()

    public init(
        block: Policy.CategorySelection? = nil, allow: [RulePattern]? = nil, deny: [RulePattern]? = nil,
        unknown: Policy.UnknownAction? = nil, noName: Policy.NoNameAction? = nil, askDefault: Policy.DefaultAction? = nil,
        askTimeoutMilliseconds: Int? = nil
    ) {
        self.block = block
        self.allow = allow
        self.deny = deny
        self.unknown = unknown
        self.noName = noName
        self.askDefault = askDefault
        self.askTimeoutMilliseconds = askTimeoutMilliseconds
    }

    /// Sets every key this level has; a key it does not have stays as it was.
    public func apply(to policy: inout Policy) {
        if let block { policy.blockedCategories = block }
        if let allow { policy.allow = allow }
        if let deny { policy.deny = deny }
        if let unknown { policy.unknown = unknown }
        if let noName { policy.noName = noName }
        if let askDefault { policy.askDefault = askDefault }
        if let askTimeoutMilliseconds { policy.askTimeoutMilliseconds = askTimeoutMilliseconds }
        policy.bypass = bypass.applied(to: policy.bypass)
    }
}

/// A level of the policy: its keys, and the keys that replace them while a
/// schedule is active (the first active schedule listed wins).
public struct PolicyLevel: Sendable, Hashable {
    public var keys: PolicyKeys
    public var during: [(schedule: String, keys: PolicyKeys)]
    /// `inspect:` (docs/inspection.md); not in `during`: what is inspected does not change with a schedule.
    public var inspect: InspectKeys

    public init(keys: PolicyKeys = PolicyKeys(), during: [(schedule: String, keys: PolicyKeys)] = [], inspect: InspectKeys = InspectKeys()) {
        self.keys = keys
        self.during = during
        self.inspect = inspect
    }

    public static func == (lhs: PolicyLevel, rhs: PolicyLevel) -> Bool {
        lhs.keys == rhs.keys && lhs.inspect == rhs.inspect && lhs.during.count == rhs.during.count
            && zip(lhs.during, rhs.during).allSatisfy { $0.schedule == $1.schedule && $0.keys == $1.keys }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(keys)
        hasher.combine(inspect)
        for entry in during {
            hasher.combine(entry.schedule)
            hasher.combine(entry.keys)
        }
    }
}

/// Who belongs to a group: uid ranges, unix groups, user names (any matches).
public struct GroupMembers: Sendable, Hashable {
    public var uids: [ClosedRange<UInt32>]
    public var unixGroups: [String]
    public var users: [String]

    public init(uids: [ClosedRange<UInt32>] = [], unixGroups: [String] = [], users: [String] = []) {
        self.uids = uids
        self.unixGroups = unixGroups
        self.users = users
    }

    public func contains(_ user: LocalUser) -> Bool {
        uids.contains { $0.contains(user.uid) } || user.name.map(users.contains) == true
            || user.unixGroups.contains(where: unixGroups.contains)
    }
}

/// A local user as the system's user database knows them (filter-control
/// resolves a uid through NSS, so LDAP and SSSD accounts count).
public struct LocalUser: Sendable, Hashable {
    public var uid: UInt32
    /// nil: the uid has no entry in the user database.
    public var name: String?
    /// The names of every group the user is in, the primary one included.
    public var unixGroups: [String]

    public init(uid: UInt32, name: String? = nil, unixGroups: [String] = []) {
        self.uid = uid
        self.name = name
        self.unixGroups = unixGroups
    }
}

/// One group of the school's policy.
public struct PolicyGroup: Sendable, Hashable {
    public var name: String
    public var members: GroupMembers
    public var policy: PolicyLevel
    /// Exams never apply to this group (`exam: exempt`).
    public var examExempt: Bool

    public init(name: String, members: GroupMembers, policy: PolicyLevel = PolicyLevel(), examExempt: Bool = false) {
        self.name = name
        self.members = members
        self.policy = policy
        self.examExempt = examExempt
    }
}

/// What the school lets teachers change on a machine (`overrides:`).
public enum OverridePermission: String, Sendable, Hashable, CaseIterable {
    /// `filterctl allow` and `filterctl block`.
    case allow
    /// `filterctl block` only: a machine may be made stricter, never looser.
    case blockOnly = "block-only"
    /// Neither.
    case none
}

/// The school's exam settings (`exam:`).
public struct ExamSettings: Sendable, Hashable {
    /// What the exam's groups may reach while it runs.
    public var allow: [RulePattern]
    /// The groups an exam applies to; nil: every group not marked exempt (people in no group too).
    public var groups: [String]?
    /// Schedules during which an exam runs by itself.
    public var during: [String]

    public init(allow: [RulePattern] = [], groups: [String]? = nil, during: [String] = []) {
        self.allow = allow
        self.groups = groups
        self.during = during
    }
}

/// A teacher's override on a machine: allow or block a target, for everyone
/// or one group, until a time or until removed.
public struct PolicyOverride: Sendable, Hashable, Codable {
    public enum Action: String, Sendable, Hashable, Codable, CaseIterable {
        case allow, block
    }

    public var id: String
    public var action: Action
    /// A `RulePattern` (name, `=exact`, `*.subdomains`, URL prefix, address or network).
    public var target: String
    /// nil: everyone.
    public var group: String?
    /// Unix seconds; nil: until removed.
    public var until: Int64?
    public var createdAt: Int64
    /// Who made it (the admin's user name) or where it came from (`request ID`).
    public var by: String?

    public init(id: String, action: Action, target: String, group: String? = nil, until: Int64? = nil, createdAt: Int64, by: String? = nil) {
        self.id = id
        self.action = action
        self.target = target
        self.group = group
        self.until = until
        self.createdAt = createdAt
        self.by = by
    }

    public func isInForce(now: Int64) -> Bool { until.map { now < $0 } ?? true }
}

/// An exam started by hand (`filterctl exam start`).
public struct ManualExam: Sendable, Hashable, Codable {
    /// nil: the groups the school's exam settings name.
    public var groups: [String]?
    /// Unix seconds; nil: until `filterctl exam stop`.
    public var until: Int64?
    public var startedAt: Int64

    public init(groups: [String]? = nil, until: Int64? = nil, startedAt: Int64) {
        self.groups = groups
        self.until = until
        self.startedAt = startedAt
    }

    public func isInForce(now: Int64) -> Bool { until.map { now < $0 } ?? true }
}

/// What is in force besides the policy itself, at one moment.
public struct PolicyMoment: Sendable, Hashable {
    /// The school's wall clock.
    public var time: LocalTime
    /// Unix seconds (for expiries).
    public var now: Int64
    public var manualExam: ManualExam?
    public var overrides: [PolicyOverride]
    /// The live items the machine accepted from the school's server (checked
    /// against `SchoolPolicy.live` already); those ended at `now` are skipped.
    public var live: [LiveItem]

    public init(time: LocalTime, now: Int64, manualExam: ManualExam? = nil, overrides: [PolicyOverride] = [], live: [LiveItem] = []) {
        self.time = time
        self.now = now
        self.manualExam = manualExam
        self.overrides = overrides
        self.live = live
    }
}

/// Whom a policy is for: the people of a group, people in no group, or
/// flows with no person behind them (system users, flows without a local
/// socket); and one person with live items of their own (an access request
/// approved for them alone): their group's policy plus those items. A
/// person's audience is a policy of its own, not a group: the records still
/// name the group filter-control placed them in.
public enum Audience: Sendable, Hashable, CustomStringConvertible {
    case group(String)
    case ungrouped
    case system
    /// The uid of a person with live items scoped to them (`LiveItem.Scope.user`).
    case person(UInt32)

    public var groupName: String? {
        if case .group(let name) = self { return name }
        return nil
    }

    public var description: String {
        switch self {
        case .group(let name): name
        case .ungrouped: "(no group)"
        case .system: "(system)"
        case .person(let uid): "(uid \(uid))"
        }
    }
}

/// The policy one audience gets at one moment, and why.
public struct EffectivePolicy: Sendable, Hashable {
    public var policy: Policy
    public var audience: Audience
    /// The schedules whose keys are in force (top level first, then the group's).
    public var schedules: [String]
    /// Whether an exam applies, and until when (Unix seconds; nil: until stopped).
    public var exam: ExamInForce?
    /// The overrides in force for this group, by id.
    public var overrides: [String]
    /// The live items in force for this audience, by id.
    public var live: [String] = []

    public struct ExamInForce: Sendable, Hashable {
        public var until: Int64?
        /// `schedule NAME` or `filterctl exam start`.
        public var startedBy: String
    }
}

/// The school's policy.
public struct SchoolPolicy: Sendable, Hashable {
    /// An IANA time zone name for the schedules; nil: the machine's own.
    public var timeZone: String?
    /// In order: a person belongs to the first group that matches.
    public var groups: [PolicyGroup]
    public var schedules: [String: Schedule]
    /// People in no group get this; groups inherit the keys they do not set.
    public var topLevel: PolicyLevel
    public var exam: ExamSettings?
    public var overrides: OverridePermission
    /// The group of flows with no person behind them: system users (uid
    /// below 1000, and `nobody`) and flows without a local socket. nil: the
    /// top-level keys, and never an exam (exams are for people).
    public var systemUsers: String?
    /// Categories nothing may open (`locked:`): they are blocked for every
    /// audience, and no override, live item, focus list, exam list or allow
    /// list lets a name in them through.
    public var locked: Set<String>
    /// What the school's server may change on a machine at once (`live:`);
    /// nil: no live item is accepted.
    public var live: LivePolicy?
    /// Which records are safeguarding alerts (`safeguarding:`); without the
    /// key, the shipped rules. The machine records the allowed flows they
    /// look at; the school's server makes the alerts.
    public var safeguarding: SafeguardingPolicy

    public init(
        timeZone: String? = nil, groups: [PolicyGroup] = [], schedules: [String: Schedule] = [:], topLevel: PolicyLevel = PolicyLevel(),
        exam: ExamSettings? = nil, overrides: OverridePermission = .allow, systemUsers: String? = nil, locked: Set<String> = [],
        live: LivePolicy? = nil, safeguarding: SafeguardingPolicy = .shipped
    ) {
        self.timeZone = timeZone
        self.groups = groups
        self.schedules = schedules
        self.topLevel = topLevel
        self.exam = exam
        self.overrides = overrides
        self.systemUsers = systemUsers
        self.locked = locked
        self.live = live
        self.safeguarding = safeguarding
    }

    /// The lowest uid of a person (Debian's UID_MIN); below it, and `nobody`, are system users.
    public static let firstPersonUID: UInt32 = 1000
    public static let nobodyUID: UInt32 = 65534

    /// Whom a user's flows are judged for: the first group that matches;
    /// system users (and flows with no user) are `.system`.
    public func audience(of user: LocalUser?) -> Audience {
        guard let user, user.uid >= Self.firstPersonUID, user.uid != Self.nobodyUID else { return .system }
        return groups.first { $0.members.contains(user) }.map { .group($0.name) } ?? .ungrouped
    }

    /// Every audience a policy is made for: people in no group, system flows, each group.
    public var audiences: [Audience] { [.ungrouped, .system] + groups.map { .group($0.name) } }

    /// The policy `audience` gets at `moment`, starting from `base` (what the
    /// machine sets: DNS rewriting, and local restrictions via `localDeny`
    /// and `localBlock`, which only ever add to what the school blocks).
    /// With `person` (a user name), the live items scoped to that user apply
    /// too: the policy of `.person(uid)` is made from the person's own
    /// audience (their group) this way. Without `schedules`, no `during:`
    /// applies (the policy of a lesson with none, as the filtering test judges).
    public func effectivePolicy(
        for audience: Audience, at moment: PolicyMoment, base: Policy = Policy(), localDeny: [RulePattern] = [],
        localBlock: Policy.CategorySelection? = nil, person: String? = nil, schedules useSchedules: Bool = true
    ) -> EffectivePolicy {
        // System flows follow the group the school names for them, if any.
        let group: String?
        switch audience {
        case .group(let name): group = name
        case .ungrouped, .person: group = nil
        case .system: group = systemUsers
        }
        var policy = base
        var schedulesInForce: [String] = []
        func apply(_ level: PolicyLevel) {
            level.keys.apply(to: &policy)
            if useSchedules, let active = level.during.first(where: { schedules[$0.schedule]?.isActive(at: moment.time) == true }) {
                active.keys.apply(to: &policy)
                schedulesInForce.append(active.schedule)
            }
        }
        apply(topLevel)
        let definition = group.flatMap { name in groups.first { $0.name == name } }
        if let definition { apply(definition.policy) }

        // What the machine adds: more denied names and blocked categories, never fewer.
        policy.deny += localDeny
        if let localBlock {
            switch (policy.blockedCategories, localBlock) {
            case (.all, _), (_, .all): policy.blockedCategories = .all
            case (.only(let school), .only(let local)): policy.blockedCategories = .only(school.union(local))
            }
        }

        var applied: [String] = []
        for override in moment.overrides where override.isInForce(now: moment.now) && (override.group == nil || override.group == group) {
            guard permits(override.action), let pattern = try? RulePattern(override.target) else { continue }
            if override.action == .allow { policy.overrideAllow.append(pattern) } else { policy.overrideBlock.append(pattern) }
            applied.append(override.id)
        }

        var exam = audience == .system && systemUsers == nil ? nil : examInForce(for: group, definition: definition, at: moment)

        // Live items from the school's server, checked against `live:` when they arrived.
        var liveApplied: [String] = []
        var focus: (item: LiveItem, patterns: [RulePattern])? = nil
        for item in moment.live where item.isInForce(now: moment.now) {
            guard item.applies(toGroup: group, audience: audience, person: person) else { continue }
            if item.user != nil, !liveUserItemsReach(group: group) { continue }
            let patterns = item.patterns
            switch item.action {
            case .allow: policy.overrideAllow += patterns
            case .block: policy.overrideBlock += patterns
            case .focus, .pause:
                // People only: system flows go on as they were. A pause beats a focus; of two of a kind, the later one.
                guard audience != .system else { continue }
                if let current = focus?.item {
                    let replaces = (item.action == .pause && current.action == .focus) || (item.action == current.action && item.sequence > current.sequence)
                    guard replaces else { continue }
                    liveApplied.removeAll { $0 == current.id }
                }
                focus = (item, item.action == .pause ? [] : patterns)
            case .exam:
                guard audience != .system else { continue }
                // Room and everyone: the exam's own groups (or every group not exempt), as `filterctl exam start`.
                if item.scope.isWholeMachine {
                    let sits = self.exam?.groups.map { names in group.map(names.contains) ?? false } ?? !(definition?.examExempt ?? false)
                    guard sits else { continue }
                }
                if exam == nil || (exam!.until.map { $0 < item.until } ?? false) {
                    exam = .init(until: item.until, startedBy: "live: " + item.by)
                }
            }
            liveApplied.append(item.id)
        }
        if let focus { policy.focus = Policy.Focus(allow: focus.patterns, until: focus.item.until) }
        if let exam { policy.exam = Policy.Exam(allow: self.exam?.allow ?? [], until: exam.until) }
        policy.locked = locked
        policy.inspection = inspection(for: audience)
        var result = EffectivePolicy(policy: policy, audience: audience, schedules: schedulesInForce, exam: exam, overrides: applied)
        result.live = liveApplied
        return result
    }

    /// Whether a live item scoped to one user reaches that user in `group`
    /// (nil: in no group). With `live.groups`, only people of those groups,
    /// as a group item may name only those: an item for one person is not a
    /// way around the bound. The machine learns a person's group when it
    /// places them, so this is judged there, not when the state arrives.
    public func liveUserItemsReach(group: String?) -> Bool {
        guard let groups = live?.groups else { return true }
        return group.map(groups.contains) ?? false
    }

    /// Whether the school's `overrides:` lets a machine make this change.
    public func permits(_ action: PolicyOverride.Action) -> Bool {
        switch overrides {
        case .allow: true
        case .blockOnly: action == .block
        case .none: false
        }
    }

    /// Whether an exam applies to `group` now: started by hand (for its
    /// groups, or the default ones), or by one of the exam's schedules.
    func examInForce(for group: String?, definition: PolicyGroup?, at moment: PolicyMoment) -> EffectivePolicy.ExamInForce? {
        func applies(to groups: [String]?) -> Bool {
            if let groups { return group.map(groups.contains) ?? false }
            return !(definition?.examExempt ?? false)
        }
        if let manual = moment.manualExam, manual.isInForce(now: moment.now), applies(to: manual.groups ?? exam?.groups) {
            return .init(until: manual.until, startedBy: "filterctl exam start")
        }
        guard let exam, applies(to: exam.groups) else { return nil }
        for name in exam.during {
            guard let schedule = schedules[name], let left = schedule.minutesLeft(at: moment.time) else { continue }
            // The range ends at a whole minute: the seconds already gone in this minute come off.
            return .init(until: moment.now + Int64(left * 60) - moment.now % 60, startedBy: "schedule \(name)")
        }
        return nil
    }
}

extension Substring {
    fileprivate func trimmingASCIISpaces() -> Substring {
        var result = self
        while result.first == " " { result = result.dropFirst() }
        while result.last == " " { result = result.dropLast() }
        return result
    }
}
