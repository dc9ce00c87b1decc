import FilterControl
import Foundation
import HallpassConfig
import VerdictCore

/// The policy pages' view models: the current version with a summary read
/// from the parsed policy, the editor, publishing and rolling back, the
/// history; one version; the difference between two.

struct PolicySummary {
    struct Group {
        let name: String
        let members: String
        let blocked: String
        let during: String
        let exam: String
    }

    struct ScheduleRow {
        let name: String
        let days: String
        let times: String
    }

    struct KeyValue {
        let key: String
        let value: String
    }

    let timeZone: String
    let topLevelBlocks: String
    let locked: String
    let safeSearch: String
    let overrides: String
    let hasGroups: Bool
    let groups: [Group]
    let hasSchedules: Bool
    let schedules: [ScheduleRow]
    let exam: String
    let bypass: [KeyValue]

    /// What the policy says, key by key, as the machines will read it: each
    /// group's blocked categories with what it inherits from the top level,
    /// the categories every group blocks ("locked": no group is spared
    /// them), SafeSearch and the bypass keys of the top level.
    /// The summary of a policy file, or the reason machines would refuse it.
    static func make(yaml: String, t: [String: String]) throws(ConfigurationError) -> PolicySummary {
        make(try SchoolPolicy(yaml: yaml), t: t)
    }

    static func make(_ policy: SchoolPolicy, t: [String: String]) -> PolicySummary {
        let none = t["none"] ?? "-"
        func list(_ items: [String]) -> String { items.isEmpty ? none : items.joined(separator: ", ") }
        func selection(_ selection: Policy.CategorySelection?) -> String {
            switch selection {
            case .all: t["policyAllCategories"] ?? "all"
            case .only(let names): list(names.sorted())
            case nil: none
            }
        }
        let top = policy.topLevel.keys
        var everyone: Policy.CategorySelection? = top.block
        var groups: [Group] = []
        for group in policy.groups {
            let blocks = group.policy.keys.block ?? top.block
            switch (everyone, blocks) {
            case (.all, let other): everyone = other
            case (.only(let a), .only(let b)): everyone = .only(a.intersection(b))
            case (.only, .all): break
            case (_, nil), (nil, _): everyone = .only([])
            }
            var members: [String] = []
            if !group.members.uids.isEmpty {
                members.append("uids " + group.members.uids.map { "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ", "))
            }
            if !group.members.unixGroups.isEmpty { members.append("unixGroups " + group.members.unixGroups.joined(separator: ", ")) }
            if !group.members.users.isEmpty { members.append("users " + group.members.users.joined(separator: ", ")) }
            let during = (policy.topLevel.during.map(\.schedule) + group.policy.during.map(\.schedule))
            groups.append(
                Group(
                    name: group.name, members: list(members), blocked: selection(blocks), during: list(Array(Set(during)).sorted()),
                    exam: group.examExempt ? (t["policyExamExempt"] ?? "exempt") : ""))
        }
        let schedules = policy.schedules.keys.sorted().map { name in
            let schedule = policy.schedules[name]!
            return ScheduleRow(
                name: name, days: schedule.days.sorted { $0.rawValue < $1.rawValue }.map(\.shortName).joined(separator: ", "),
                times: schedule.times.map(\.description).joined(separator: ", "))
        }
        var exam = t["policyExamNone"] ?? ""
        if let settings = policy.exam {
            exam = ConsoleText.fill(
                t["policyExamText"] ?? "",
                [
                    "allow": list(settings.allow.map(\.description)),
                    "groups": settings.groups.map { list($0) } ?? (t["policyExamAllGroups"] ?? ""), "during": list(settings.during),
                ])
        }
        let bypass = BypassPolicy().applying(top.bypass)
        let keys: [KeyValue] = [
            KeyValue(key: "encryptedDNS", value: bypass.encryptedDNS.rawValue), KeyValue(key: "ech", value: bypass.ech.rawValue),
            KeyValue(key: "tunnels", value: bypass.tunnels.rawValue), KeyValue(key: "unreadableQUIC", value: bypass.unreadableQUIC.rawValue),
            KeyValue(key: "quic", value: bypass.quic.rawValue), KeyValue(key: "ssh", value: bypass.ssh.rawValue),
            KeyValue(key: "proxy", value: list(bypass.proxies.map(\.description))),
            KeyValue(key: "sshServers", value: list(bypass.sshServers.map(\.description))),
        ]
        return PolicySummary(
            timeZone: policy.timeZone ?? (t["policyMachineZone"] ?? ""), topLevelBlocks: selection(top.block),
            locked: policy.groups.isEmpty ? selection(top.block) : selection(everyone),
            safeSearch: list(bypass.safeSearch.map(\.rawValue).sorted()), overrides: policy.overrides.rawValue, hasGroups: !groups.isEmpty,
            groups: groups, hasSchedules: !schedules.isEmpty, schedules: schedules, exam: exam, bypass: keys)
    }
}

extension BypassPolicy {
    fileprivate func applying(_ keys: BypassKeys) -> BypassPolicy { keys.applied(to: self) }
}

struct PolicyPage {
    struct Errors {
        let messages: [String]
    }

    struct VersionRow {
        let version: Int64
        let time: String
        let author: String
        let reason: String
        let viewLink: String
        let diffLink: String?
    }

    let current: Bool
    let currentText: String
    let publication: String?
    let summary: PolicySummary?
    let summaryError: String?
    let errors: Errors?
    let canEdit: Bool
    let yaml: String
    let reason: String
    let publishError: String?
    let hasHistory: Bool
    let history: [VersionRow]
    let canRollBack: Bool
    let rollbackError: String?
    let form: PolicyForm?
    let formUnavailable: String?

    /// What a refused change leaves on the page: the text typed, the reason
    /// and the refusal, next to the form it belongs to.
    struct Typed {
        var yaml: String?
        var reason: String?
        var policyError: String?
        var publishError: String?
        var rollbackError: String?
        /// The policy form's keys as posted, and its refusal.
        var formValues: PolicyFormValues?
        var formReason: String?
        var formError: String?
    }

    static let historySize = 50

    static func make(
        principal: Principal, latest: StoredPolicyVersion?, published: StoredPublication?, pending: StoredPublication?,
        history: [StoredPolicyVersion], typed: Typed, time: ConsoleTime, t: [String: String]
    ) -> PolicyPage {
        var currentText = ""
        var summary: PolicySummary?
        var summaryError: String?
        if let latest {
            currentText = ConsoleText.fill(
                t["policyCurrent"] ?? "",
                [
                    "version": String(latest.version), "time": time.dateTime(latest.createdAt * 1000), "author": latest.author,
                    "reason": latest.reason,
                ])
            if let yaml = latest.policy {
                do {
                    summary = try PolicySummary.make(yaml: yaml, t: t)
                } catch {
                    summaryError = error.description
                }
            }
        }
        var publication: String?
        if let published {
            publication = ConsoleText.fill(
                t["policyPublished"] ?? "",
                [
                    "bundle": String(published.bundleVersion), "version": String(published.policyVersion),
                    "time": time.dateTime((published.publishedAt ?? published.createdAt) * 1000),
                ])
        } else {
            publication = t["policyNotPublished"]
        }
        if let pending {
            publication = (publication.map { $0 + " " } ?? "") + ConsoleText.fill(t["policyPending"] ?? "", ["bundle": String(pending.bundleVersion)])
        }
        let rows = history.map { version in
            VersionRow(
                version: version.version, time: time.dateTime(version.createdAt * 1000), author: version.author, reason: version.reason,
                viewLink: "/console/policy/versions/\(version.version)",
                diffLink: version.version > 1 ? "/console/policy/diff?from=\(version.version - 1)&to=\(version.version)" : nil)
        }
        let canEdit = principal.may(.editPolicy)
        var form: PolicyForm?
        var formUnavailable: String?
        if canEdit {
            do {
                let current = try PolicyFormEdit.read(yaml: latest?.policy)
                form = PolicyForm.make(
                    values: typed.formValues ?? current.values, named: current.named, lists: (latest?.lists ?? []).map(\.category),
                    locked: summary?.locked ?? (t["none"] ?? "-"), reason: typed.formReason ?? "", error: typed.formError,
                    shownInYAML: typed.formError != nil && typed.yaml != nil, t: t)
            } catch {
                formUnavailable = error.message
            }
        }
        return PolicyPage(
            current: latest != nil, currentText: currentText, publication: publication, summary: summary, summaryError: summaryError,
            errors: typed.policyError.map { Errors(messages: [$0]) }, canEdit: canEdit, yaml: typed.yaml ?? latest?.policy ?? "",
            reason: typed.reason ?? "", publishError: typed.publishError, hasHistory: !rows.isEmpty, history: rows,
            canRollBack: canEdit && rows.count > 1, rollbackError: typed.rollbackError, form: form, formUnavailable: formUnavailable)
    }
}

struct PolicyVersionPage {
    struct ListRow {
        let category: String
        let names: Int64
        let sha256: String
    }

    let meta: String
    let diffLink: String?
    let hasPolicy: Bool
    let yaml: String
    let hasLists: Bool
    let lists: [ListRow]

    static func make(_ version: StoredPolicyVersion, time: ConsoleTime, t: [String: String]) -> PolicyVersionPage {
        PolicyVersionPage(
            meta: ConsoleText.fill(
                t["policyVersionMeta"] ?? "", ["time": time.dateTime(version.createdAt * 1000), "author": version.author, "reason": version.reason]),
            diffLink: version.version > 1 ? "/console/policy/diff?from=\(version.version - 1)&to=\(version.version)" : nil,
            hasPolicy: version.policy != nil, yaml: version.policy ?? "", hasLists: !version.lists.isEmpty,
            lists: version.lists.map { ListRow(category: $0.category, names: $0.names, sha256: $0.sha256) })
    }
}

struct PolicyDiffPage {
    struct Line {
        let kind: String
        let text: String
    }

    struct ListRow {
        let category: String
        let added: Int
        let removed: Int
        let sample: String
    }

    let hasPolicyChanges: Bool
    let lines: [Line]
    let hasListChanges: Bool
    let lists: [ListRow]

    static func make(_ diff: PolicyDiff) -> PolicyDiffPage {
        let lines = diff.policy.map { line -> Line in
            let kind =
                line.hasPrefix("@@") ? "hunk" : line.hasPrefix("+++") || line.hasPrefix("---") ? "file"
                : line.hasPrefix("+") ? "add" : line.hasPrefix("-") ? "remove" : "same"
            return Line(kind: kind, text: line)
        }
        let lists = diff.lists.map { change in
            ListRow(
                category: change.category, added: change.added, removed: change.removed,
                sample: (change.addedNames.map { "+" + $0 } + change.removedNames.map { "−" + $0 }).joined(separator: " "))
        }
        return PolicyDiffPage(hasPolicyChanges: !lines.isEmpty, lines: lines, hasListChanges: !lists.isEmpty, lists: lists)
    }
}

/// The policy as a form: for the top level and each group, the blocked
/// categories, `unknown` and `safeSearch` (PolicyFormEdit writes them into
/// the file). A field's name is the key's place in the file
/// (`policy.block`, `policy.groups.year7.unknown`), so a posted form says
/// which level it changes; a level posts `PREFIX.shown` so that its boxes
/// left unticked mean "none" rather than "not on the form".
struct PolicyForm {
    struct Box {
        let value: String
        let checked: Bool
    }

    struct Choice {
        let value: String
        let label: String
        let selected: Bool
    }

    struct Level {
        let id: String
        let prefix: String
        let legend: String
        let isGroup: Bool
        let blockInherits: Bool
        let all: Bool
        let categories: [Box]
        let unknown: [Choice]
        let safeSearchInherits: Bool
        let engines: [Box]
    }

    let levels: [Level]
    let locked: String
    let reason: String
    let error: String?
    let shownInYAML: Bool

    static func prefix(group: String?) -> String { group.map { "policy.groups." + $0 } ?? "policy" }

    static func make(
        values: PolicyFormValues, named: Set<String>, lists: [String], locked: String, reason: String, error: String?, shownInYAML: Bool,
        t: [String: String]
    ) -> PolicyForm {
        var categories = named.union(lists)
        for keys in [values.topLevel] + values.groups.map(\.keys) {
            if case .only(let names) = keys.block { categories.formUnion(names.map { $0.lowercased() }) }
        }
        categories.remove("all")
        let sorted = categories.sorted()
        func level(_ index: Int, _ name: String?, _ keys: PolicyLevelKeys) -> Level {
            let blocked: Set<String> = if case .only(let names) = keys.block { Set(names.map { $0.lowercased() }) } else { [] }
            let unknownChoices = [("", t[name == nil ? "policyFormDefault" : "policyFormInherit"] ?? "")] + ["allow", "block", "ask"].map { ($0, $0) }
            let engines = Set(keys.safeSearch ?? [])
            return Level(
                id: "pf-\(index)", prefix: prefix(group: name),
                legend: name.map { ConsoleText.fill(t["policyFormGroup"] ?? "", ["group": $0]) } ?? (t["policyFormTopLevel"] ?? ""),
                isGroup: name != nil, blockInherits: keys.block == nil, all: keys.block == .all,
                categories: sorted.map { Box(value: $0, checked: blocked.contains($0)) },
                unknown: unknownChoices.map { Choice(value: $0.0, label: $0.1, selected: (keys.unknown ?? "") == $0.0) },
                safeSearchInherits: keys.safeSearch == nil,
                engines: SafeSearchEngine.allCases.map { Box(value: $0.rawValue, checked: engines.contains($0.rawValue)) })
        }
        let levels = [level(0, nil, values.topLevel)] + values.groups.enumerated().map { level($0.offset + 1, $0.element.name, $0.element.keys) }
        return PolicyForm(levels: levels, locked: locked, reason: reason, error: error, shownInYAML: shownInYAML)
    }

    /// The keys as posted: the levels of `current` the form showed, each set
    /// from its fields; a level not posted keeps its keys.
    static func values(_ form: ConsoleForm, current: PolicyFormValues) -> PolicyFormValues {
        func all(_ name: String) -> [String] { form.pairs.filter { $0.name == name }.map(\.value) }
        func read(_ prefix: String, _ keys: PolicyLevelKeys, isGroup: Bool) -> PolicyLevelKeys {
            guard form[prefix + ".shown"] != nil else { return keys }
            var keys = PolicyLevelKeys()
            if !isGroup || form[prefix + ".blockFrom"] == "own" {
                let names = all(prefix + ".block")
                keys.block = names.contains("all") ? .all : .only(names)
            }
            if let unknown = form[prefix + ".unknown"], !unknown.isEmpty { keys.unknown = unknown }
            if !isGroup || form[prefix + ".safeSearchFrom"] == "own" { keys.safeSearch = all(prefix + ".safeSearch") }
            return keys
        }
        return PolicyFormValues(
            topLevel: read(prefix(group: nil), current.topLevel, isGroup: false),
            groups: current.groups.map { ($0.name, read(prefix(group: $0.name), $0.keys, isGroup: true)) })
    }
}
