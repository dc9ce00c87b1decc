public import HallpassConfig
public import VerdictCore
import Foundation
import SharedStore
import Yams

/// The school's policy file (YAML), as a school publishes it in its bundle
/// (`filterctl bundle build --policy FILE`) and checks it first
/// (`filterctl policy check FILE`). docs/school-policy.md has a complete
/// example; every problem is an error naming the key and the line.
///
/// ```yaml
/// timezone: Europe/London            # the schedules' clock (default: the machine's)
/// overrides: allow                   # what teachers may do on a machine: allow | block-only | none
/// systemUsers: staff                 # the group of flows without a person (default: the top-level keys, no exams)
/// groups:                            # in order: a person is in the first group that matches
///   staff:    { unixGroups: [staff] }
///   students: { uids: ["10000-19999"], unixGroups: [students], users: [alice] }
/// schedules:
///   lessons: { days: [mon, tue, wed, thu, fri], times: ["08:30-12:00", "13:00-15:30"] }
/// policy:                            # people in no group; what groups inherit
///   block: [adult, gambling]
///   during: { lessons: { block: [adult, gambling, games] } }
///   groups:
///     staff: { block: [adult], exam: exempt }
/// exam:
///   allow: [exams.example.org]
///   groups: [students]               # default: every group not exempt
///   during: [exams]                  # schedules; or `filterctl exam start`
/// locked: [adult, iwf]               # categories nothing opens (no override, live item, focus or exam list)
/// live:                              # what the school's server may change at once (docs/school-policy.md)
///   keys: ["ed25519:BASE64"]         # required: the server's live key(s)
///   actions: [allow, block, focus, pause]   # the default; also exam
///   longest: 2h                      # the default; at most 24h
///   rooms: [lab1, lab2]              # default: any
///   groups: [students]               # default: any group
/// safeguarding:                      # which records are alerts for the safeguarding lead
///   defaults: true                   # the shipped rules too (docs/school-policy.md, "Safeguarding")
///   repeat: 10m                      # one alert per person and rule within this
///   rules:
///     - { id: year7-games, severity: advisory, categories: [games], groups: [year7] }
/// ```
extension SchoolPolicy {
    /// The largest policy file a bundle may carry.
    public static let maximumFileBytes = 1 << 20

    public init(yaml: String) throws(ConfigurationError) {
        guard yaml.utf8.count <= Self.maximumFileBytes else {
            throw ConfigurationError(key: "", message: "the policy file is larger than \(Self.maximumFileBytes / 1024) KiB")
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(notYAML: error)
        }
        self.init()
        guard let root else { return }
        let top = try ConfigNode(root, key: "").mapping(allowed: [
            "timezone", "overrides", "systemUsers", "groups", "schedules", "policy", "exam", "locked", "live", "safeguarding",
        ])

        if let zone = top["timezone"] {
            let name = try zone.string()
            guard TimeZone(identifier: name) != nil else { throw zone.error("'\(name)' is not a time zone this machine knows (e.g. Europe/London)") }
            timeZone = name
        }
        if let overrides = top["overrides"] { self.overrides = try overrides.choice(OverridePermission.self) }

        var schedules: [String: Schedule] = [:]
        for (name, node) in try top["schedules"]?.orderedMapping() ?? [] {
            try Self.checkName(name, node)
            let fields = try node.mapping(allowed: ["days", "times"])
            guard let days = fields["days"], let times = fields["times"] else { throw node.error("a schedule needs both days and times") }
            let weekdays = try days.list().map { day throws(ConfigurationError) in
                let text = try day.string()
                guard let weekday = Weekday(shortName: text) else { throw day.error("'\(text)' is not a day (mon, tue, wed, thu, fri, sat, sun)") }
                return weekday
            }
            let ranges = try times.list().map { time throws(ConfigurationError) in
                do {
                    return try TimeRange(time.string())
                } catch let error as TimeRange.ParseError {
                    throw time.error(error.description)
                } catch {
                    throw error as! ConfigurationError
                }
            }
            guard !weekdays.isEmpty, !ranges.isEmpty else { throw node.error("a schedule needs at least one day and one time range") }
            schedules[name] = Schedule(days: Set(weekdays), times: ranges)
        }
        self.schedules = schedules

        var groups: [PolicyGroup] = []
        for (name, node) in try top["groups"]?.orderedMapping() ?? [] {
            try Self.checkName(name, node)
            let fields = try node.mapping(allowed: ["uids", "unixGroups", "users"])
            var members = GroupMembers()
            members.uids = try fields["uids"]?.list().map { entry throws(ConfigurationError) in try Self.uidRange(entry) } ?? []
            members.unixGroups = try fields["unixGroups"]?.list().map { entry throws(ConfigurationError) in try entry.string() } ?? []
            members.users = try fields["users"]?.list().map { entry throws(ConfigurationError) in try entry.string() } ?? []
            guard !members.uids.isEmpty || !members.unixGroups.isEmpty || !members.users.isEmpty else {
                throw node.error("a group needs members: uids, unixGroups or users")
            }
            groups.append(PolicyGroup(name: name, members: members))
        }

        if let policy = top["policy"] {
            let fields = try policy.mapping(allowed: PolicyKeys.fieldNames + ["during", "groups", "inspect"])
            topLevel = try Self.level(fields, schedules: schedules)
            let topInspection = topLevel.inspect.applied(to: InspectionPolicy())
            if let node = fields["inspect"] {
                try Self.checkInspection(topInspection, level: topLevel.inspect, node: node, builtIn: .builtIn)
            }
            for (name, node) in try fields["groups"]?.orderedMapping() ?? [] {
                guard let index = groups.firstIndex(where: { $0.name == name }) else {
                    throw node.error("no group '\(name)' under groups: (known: \(groups.map(\.name).joined(separator: ", ")))")
                }
                let groupFields = try node.mapping(allowed: PolicyKeys.fieldNames + ["during", "exam", "inspect"])
                groups[index].policy = try Self.level(groupFields, schedules: schedules)
                if let inspect = groupFields["inspect"] {
                    let level = groups[index].policy.inspect
                    try Self.checkInspection(level.applied(to: topInspection), level: level, node: inspect, builtIn: .builtIn)
                }
                if let exam = groupFields["exam"] {
                    guard try exam.string() == "exempt" else { throw exam.error("the only value is 'exempt' (leave it out otherwise)") }
                    groups[index].examExempt = true
                }
            }
        }
        self.groups = groups

        if let node = top["systemUsers"] {
            let name = try node.string()
            guard groups.contains(where: { $0.name == name }) else { throw node.error("no group '\(name)' under groups:") }
            systemUsers = name
        }

        if let node = top["exam"] {
            let fields = try node.mapping(allowed: ["allow", "groups", "during"])
            var exam = ExamSettings()
            exam.allow = try fields["allow"]?.patterns() ?? []
            if let names = fields["groups"] {
                exam.groups = try names.list().map { entry throws(ConfigurationError) in
                    let name = try entry.string()
                    guard groups.contains(where: { $0.name == name }) else { throw entry.error("no group '\(name)' under groups:") }
                    return name
                }
            }
            exam.during = try fields["during"]?.list().map { entry throws(ConfigurationError) in
                let name = try entry.string()
                guard schedules[name] != nil else { throw entry.error("no schedule '\(name)' under schedules:") }
                return name
            } ?? []
            self.exam = exam
        }

        if let node = top["locked"] {
            locked = Set(
                try node.list().map { entry throws(ConfigurationError) in
                    let name = try entry.string().lowercased()
                    guard RuleStoreBuilder.isValidCategoryName(name) else { throw entry.error("'\(name)' is not a category name (a-z, 0-9, '-', '_')") }
                    return name
                })
        }
        if let node = top["live"] { live = try Self.livePolicy(node, groups: groups) }
        if let node = top["safeguarding"] { safeguarding = try Self.safeguardingPolicy(node, groups: groups) }
    }

    /// `live:`: the keys (required), the actions, the longest duration, rooms and groups.
    private static func livePolicy(_ node: ConfigNode, groups: [PolicyGroup]) throws(ConfigurationError) -> LivePolicy {
        let fields = try node.mapping(allowed: ["keys", "actions", "longest", "rooms", "groups"])
        guard let keysNode = fields["keys"] else {
            throw node.error("live: needs keys: the school's server's live key (hallpass-server live-key prints it)")
        }
        let keys = try keysNode.bundlePublicKeys()
        guard !keys.isEmpty else { throw keysNode.error("name at least one key (ed25519:BASE64), or leave live: out") }
        var live = LivePolicy(keys: keys.map { Array($0.key.rawRepresentation) })
        if let actions = fields["actions"] {
            live.actions = Set(try actions.list().map { entry throws(ConfigurationError) in try entry.choice(LiveAction.self) })
        }
        if let longest = fields["longest"] {
            live.longestSeconds = Int64(try longest.duration(in: 60...Int(LivePolicy.longestLimit)))
        }
        if let rooms = fields["rooms"] {
            live.rooms = Set(
                try rooms.list().map { entry throws(ConfigurationError) in
                    let name = try entry.string()
                    // As the server names rooms: any printable text, not only policy names.
                    guard (1...64).contains(name.count), !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                        throw entry.error("'\(name.prefix(70))' is not a room name (1 to 64 printable characters)")
                    }
                    return name
                })
        }
        if let names = fields["groups"] {
            live.groups = Set(
                try names.list().map { entry throws(ConfigurationError) in
                    let name = try entry.string()
                    guard groups.contains(where: { $0.name == name }) else { throw entry.error("no group '\(name)' under groups:") }
                    return name
                })
        }
        return live
    }

    /// `safeguarding:`: whether the shipped rules apply, the repeat limit, the
    /// school's rules. Every entry is checked as the matcher will read it; the
    /// bounds keep a policy's rules small enough to judge every record with.
    private static func safeguardingPolicy(_ node: ConfigNode, groups: [PolicyGroup]) throws(ConfigurationError) -> SafeguardingPolicy {
        let fields = try node.mapping(allowed: ["defaults", "repeat", "rules"])
        let defaults = try fields["defaults"]?.boolean() ?? true
        let limits = SafeguardingPolicy.self
        let durations = Int(limits.durationRange.lowerBound)...Int(limits.durationRange.upperBound)
        let repeatSeconds = try fields["repeat"].map { node throws(ConfigurationError) in Int64(try node.duration(in: durations)) }
        var rules: [SafeguardingRule] = []
        if let list = fields["rules"] {
            let items = try list.list()
            guard items.count <= limits.maximumRules else {
                throw list.error("at most \(limits.maximumRules) rules (there are \(items.count))")
            }
            var ids: Set<String> = []
            for item in items { rules.append(try safeguardingRule(item, groups: groups, durations: durations, ids: &ids)) }
        }
        return SafeguardingPolicy(defaults: defaults, repeatSeconds: repeatSeconds ?? limits.defaultRepeatSeconds, rules: rules)
    }

    private static func safeguardingRule(
        _ node: ConfigNode, groups: [PolicyGroup], durations: ClosedRange<Int>, ids: inout Set<String>
    ) throws(ConfigurationError) -> SafeguardingRule {
        let matchers = ["categories", "names", "urls", "searchTerms", "reasons"]
        let fields = try node.mapping(allowed: ["id", "severity"] + matchers + ["flows", "groups", "attempts"])
        guard let idNode = fields["id"] else { throw node.error("a rule needs an id: 1 to 40 of a-z, 0-9 and '-' (shown in alerts)") }
        let id = try idNode.string()
        guard (1...SafeguardingPolicy.maximumIDLength).contains(id.utf8.count),
            id.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D })
        else { throw idNode.error("'\(id.prefix(60))' is not a rule id: 1 to 40 of a-z, 0-9 and '-'") }
        guard id != SafeguardingPolicy.filteringTestRuleID else {
            throw idNode.error("'\(id)' is the id of the school's server's own alert for a failed filtering test; give the rule another id")
        }
        guard ids.insert(id).inserted else { throw idNode.error("another rule has the id '\(id)'") }
        guard let severityNode = fields["severity"] else { throw node.error("the rule '\(id)' needs a severity: danger, caution or advisory") }
        var rule = SafeguardingRule(id: id, severity: try severityNode.choice(SafeguardingSeverity.self))

        if let list = fields["categories"] {
            rule.categories = Set(
                try safeguardingEntries(list) { entry, text throws(ConfigurationError) in
                    let name = text.lowercased()
                    guard RuleStoreBuilder.isValidCategoryName(name) else { throw entry.error("'\(name)' is not a category name (a-z, 0-9, '-', '_')") }
                    return name
                })
        }
        if let list = fields["names"] {
            rule.names = try safeguardingEntries(list) { entry, text throws(ConfigurationError) in
                let pattern: RulePattern
                do throws(RulePattern.ParseError) {
                    pattern = try RulePattern(text)
                } catch {
                    throw entry.error(error.description)
                }
                guard case .domain = pattern else {
                    throw entry.error("'\(text)' is not a name (example.com, =example.com, *.example.com); a path goes under urls:, and records are not matched by address")
                }
                return pattern
            }
        }
        if let list = fields["urls"] {
            rule.urls = try safeguardingEntries(list) { entry, text throws(ConfigurationError) in
                // As UT1's urls files write them: no scheme.
                var written = Substring(text)
                for scheme in ["http://", "https://"] where written.lowercased().hasPrefix(scheme) { written = written.dropFirst(scheme.count) }
                let pattern: RulePattern
                do throws(RulePattern.ParseError) {
                    pattern = try RulePattern(written, urlList: true)
                } catch {
                    throw entry.error(error.description)
                }
                guard case .urlPrefix = pattern else {
                    throw entry.error("'\(text)' is not a host and a path (example.com/forum/); a whole site goes under names:")
                }
                return pattern
            }
        }
        if let list = fields["searchTerms"] {
            rule.searchTerms = try safeguardingEntries(list) { entry, text throws(ConfigurationError) in
                guard let phrase = SearchPhrase(text) else { throw entry.error("'\(text)' holds no word to look for") }
                return phrase
            }
        }
        if let list = fields["reasons"] {
            rule.reasons = Set(
                try safeguardingEntries(list) { entry, text throws(ConfigurationError) in
                    guard Reason.Source(rawValue: text) != nil else {
                        throw entry.error("'\(text)' is not a reason (\(Reason.Source.allCases.map(\.rawValue).joined(separator: ", ")))")
                    }
                    return text
                })
        }
        guard matchers.contains(where: { fields[$0] != nil }) else {
            throw node.error("the rule '\(id)' matches nothing: give at least one of \(matchers.joined(separator: ", "))")
        }
        if let flows = fields["flows"] { rule.flows = try flows.choice(SafeguardingFlows.self) }
        if let list = fields["groups"] {
            rule.groups = Set(
                try safeguardingEntries(list) { entry, text throws(ConfigurationError) in
                    guard groups.contains(where: { $0.name == text }) else { throw entry.error("no group '\(text)' under groups:") }
                    return text
                })
        }
        if let attempts = fields["attempts"] {
            let parts = try attempts.mapping(allowed: ["count", "within"])
            guard let count = parts["count"], let within = parts["within"] else {
                throw attempts.error("attempts needs count and within, e.g. { count: 5, within: 10m }")
            }
            let range = SafeguardingPolicy.attemptsCountRange
            rule.attempts = SafeguardingRule.Attempts(count: try count.integer(in: range), withinSeconds: Int64(try within.duration(in: durations)))
        }
        return rule
    }

    /// The entries of one of a rule's lists, each read by `read`: at least
    /// one (an empty list would match nothing), at most 1,000, each at most 200 bytes.
    private static func safeguardingEntries<Entry>(
        _ node: ConfigNode, _ read: (ConfigNode, String) throws(ConfigurationError) -> Entry
    ) throws(ConfigurationError) -> [Entry] {
        let items = try node.list()
        guard !items.isEmpty else { throw node.error("an empty list matches nothing; leave the key out instead") }
        guard items.count <= SafeguardingPolicy.maximumEntries else {
            throw node.error("at most \(SafeguardingPolicy.maximumEntries) entries (there are \(items.count))")
        }
        var entries: [Entry] = []
        for item in items {
            let text = try item.string()
            guard text.utf8.count <= SafeguardingPolicy.maximumEntryBytes else {
                throw item.error("an entry is at most \(SafeguardingPolicy.maximumEntryBytes) bytes")
            }
            entries.append(try read(item, text))
        }
        return entries
    }

    /// Group and schedule names: what filterctl and the logs show.
    private static func checkName(_ name: String, _ node: ConfigNode) throws(ConfigurationError) {
        guard (1...64).contains(name.count), name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            throw node.error("'\(name)' is not a name (1 to 64 of a-z, A-Z, 0-9, '-', '_')")
        }
    }

    /// `"5001"` or `"10000-19999"`.
    private static func uidRange(_ node: ConfigNode) throws(ConfigurationError) -> ClosedRange<UInt32> {
        let text = try node.string()
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let low = UInt32(parts[0]), let high = UInt32(parts.last!), low <= high else {
            throw node.error("'\(text)' is not a uid or a range of uids like 10000-19999")
        }
        return low...high
    }

    private static func level(_ fields: [String: ConfigNode], schedules: [String: Schedule]) throws(ConfigurationError) -> PolicyLevel {
        var level = PolicyLevel(keys: try PolicyKeys(fields))
        if let inspect = fields["inspect"] { level.inspect = try InspectKeys(inspect, builtIn: .builtIn) }
        for (name, node) in try fields["during"]?.orderedMapping() ?? [] {
            guard schedules[name] != nil else { throw node.error("no schedule '\(name)' under schedules:") }
            level.during.append((schedule: name, keys: try PolicyKeys(node.mapping(allowed: PolicyKeys.fieldNames))))
        }
        return level
    }
}

extension ConfigNode {
    /// A mapping's entries in the order written (group order matters), each
    /// key once; an empty or null node has none.
    func orderedMapping() throws(ConfigurationError) -> [(String, ConfigNode)] {
        guard case .mapping(let mapping) = node else {
            if case .scalar = node, node.null != nil { return [] }
            throw error("expected a mapping of names")
        }
        var seen: Set<String> = []
        var result: [(String, ConfigNode)] = []
        for (keyNode, value) in mapping {
            guard let name = keyNode.string else { throw error("a key is not a string") }
            let path = key.isEmpty ? name : key + "." + name
            guard seen.insert(name).inserted else {
                throw ConfigurationError(key: path, line: keyNode.mark.map { $0.line }, message: "the name appears twice")
            }
            result.append((name, ConfigNode(value, key: path)))
        }
        return result
    }
}
