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

    /// What a refused change leaves on the page: the text typed, the reason
    /// and the refusal, next to the form it belongs to.
    struct Typed {
        var yaml: String?
        var reason: String?
        var policyError: String?
        var publishError: String?
        var rollbackError: String?
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
        return PolicyPage(
            current: latest != nil, currentText: currentText, publication: publication, summary: summary, summaryError: summaryError,
            errors: typed.policyError.map { Errors(messages: [$0]) }, canEdit: canEdit, yaml: typed.yaml ?? latest?.policy ?? "",
            reason: typed.reason ?? "", publishError: typed.publishError, hasHistory: !rows.isEmpty, history: rows,
            canRollBack: canEdit && rows.count > 1, rollbackError: typed.rollbackError)
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
