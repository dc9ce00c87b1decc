import Foundation
import VerdictCore

/// The evidence of the annual filtering review (docs/safeguarding.md, "The
/// annual review"), gathered from what the server keeps: for each group of
/// the published policy what it blocks and allows, the locked categories,
/// the policy's history with the reasons its authors gave and what was
/// published, who holds which role (people and API tokens), the changes in
/// the audit trail since the last recorded review, and the latest run of
/// the filtering test. The console shows it as a page and as a PDF.
struct AnnualReview: Sendable {
    struct Group: Sendable, Hashable {
        var name: String
        /// Sorted category names; nil: every category.
        var blocked: [String]?
        var allowed: [String]
        var denied: [String]
    }

    var madeAt: Int64
    var lastReview: StoredReview?
    /// The published bundle and policy versions (nil: nothing published).
    var published: PublishedPolicyVersion?
    /// Whether the published publication carries a school policy.
    var hasPolicy: Bool
    var groups: [Group]
    var locked: [String]
    var history: [StoredPolicyVersion]
    var publications: [StoredPublication]
    var people: [StoredPerson]
    var tokens: [StoredAPIToken]
    /// Since the last review (all, without one), newest first.
    var changes: [StoredAuditEvent]
    /// True when there were more changes than `changes` holds.
    var moreChanges: Bool
    var latestRun: StoredFilteringRun?
    var answers: [StoredFilteringAnswer]
    var failures: [StoredFilteringResult]

    /// The most history, publications and changes one review lists.
    static let maximumRows = 200
    /// The names of one group's allow and deny lists shown.
    static let maximumPatterns = 20

    static func make(storage: any ServerStorage, now: Int64) async throws -> AnnualReview {
        let lastReview = try await storage.reviews(limit: 1).first
        let published = try await storage.publishedPolicyVersion()
        var groups: [Group] = []
        var locked: [String] = []
        var hasPolicy = false
        if let published, let text = try await storage.policyVersion(published.policyVersion)?.policy,
            let policy = try? LivePolicy(yaml: text)
        {
            hasPolicy = true
            let school = policy.school ?? SchoolPolicy()
            locked = policy.locked.union(school.locked).sorted()
            for name in school.groups.map(\.name) + [FilteringTest.noGroup] {
                var keys = Policy()
                school.topLevel.keys.apply(to: &keys)
                if let definition = school.groups.first(where: { $0.name == name }) { definition.policy.keys.apply(to: &keys) }
                let blocked: [String]?
                switch keys.blockedCategories {
                case .all: blocked = nil
                case .only(let categories): blocked = categories.sorted()
                }
                groups.append(
                    Group(
                        name: name, blocked: blocked, allowed: keys.allow.prefix(maximumPatterns).map { "\($0)" },
                        denied: keys.deny.prefix(maximumPatterns).map { "\($0)" }))
            }
        }
        let page = try await storage.auditEvents(AuditQuery(since: lastReview?.time, limit: maximumRows))
        let latestRun = try await storage.filteringRuns(limit: 1).first
        var answers: [StoredFilteringAnswer] = []
        var failures: [StoredFilteringResult] = []
        if let latestRun {
            answers = try await storage.filteringAnswers(run: latestRun.id)
            failures = try await storage.filteringResults(run: latestRun.id, failedOnly: true, limit: Self.maximumRows)
        }
        return AnnualReview(
            madeAt: now, lastReview: lastReview, published: published, hasPolicy: hasPolicy, groups: groups, locked: locked,
            history: try await storage.policyVersions(before: nil, limit: maximumRows),
            publications: Array(try await storage.publications().sorted { $0.bundleVersion > $1.bundleVersion }.prefix(maximumRows)),
            people: try await storage.people().sorted { $0.login < $1.login }, tokens: try await storage.apiTokens(), changes: page.events,
            moreChanges: page.next != nil, latestRun: latestRun, answers: answers, failures: failures)
    }

    /// "rooms lab1, lab2; groups 7a" or the whole school.
    static func scope(_ scope: Scope, _ t: [String: String]) -> String {
        if scope.isWholeSchool { return t["reviewWholeSchool"] ?? "" }
        let none = t["none"] ?? "-"
        return ConsoleText.fill(
            t["reviewScopeText"] ?? "",
            [
                "rooms": scope.rooms.isEmpty ? none : scope.rooms.sorted().joined(separator: ", "),
                "groups": scope.groups.isEmpty ? none : scope.groups.sorted().joined(separator: ", "),
            ])
    }

    func blockedText(_ group: Group, _ t: [String: String]) -> String {
        guard let blocked = group.blocked else { return t["reviewAllCategories"] ?? "" }
        return blocked.isEmpty ? (t["none"] ?? "-") : blocked.joined(separator: ", ")
    }

    func listText(_ items: [String], _ t: [String: String]) -> String {
        items.isEmpty ? (t["none"] ?? "-") : items.joined(separator: ", ")
    }

    /// The latest run in one sentence.
    func testSummary(_ t: [String: String], time: ConsoleTime) -> String? {
        guard let run = latestRun else { return nil }
        return ConsoleText.fill(
            t["reviewTestSummary"] ?? "",
            [
                "run": String(run.number), "time": time.dateTime(run.createdAt * 1000), "bundle": String(run.bundleVersion),
                "machines": String(answers.count), "failures": String(failures.count),
            ])
    }

    /// The review as a PDF, in the words of `t`.
    /// An audit event's target as `names` shows it: with pseudonyms, the
    /// pupil a `timeline.open` or `person.export` names, and the `user` of a
    /// `records.export`, as their pseudonyms (as on the audit page).
    static func target(of change: StoredAuditEvent, names: NameShown) -> String {
        let event = change.event
        return AuditTrailPage.target(
            of: ConsoleAuditEvent(time: event.time, actor: event.actor, action: event.action, target: event.target, reason: event.reason),
            names: names) ?? ""
    }

    func pdf(_ t: [String: String], time: ConsoleTime, schoolName: String, names: NameShown) -> [UInt8] {
        var report = PDFReport(
            title: (t["titleReview"] ?? "") + (schoolName.isEmpty ? "" : " - " + schoolName),
            subtitle: ConsoleText.fill(t["reviewMade"] ?? "", ["time": time.dateTime(madeAt * 1000)]))
        if let last = lastReview {
            report.paragraph(
                ConsoleText.fill(t["reviewLast"] ?? "", ["time": time.dateTime(last.time * 1000), "reviewer": last.reviewer, "note": last.note]))
        } else {
            report.paragraph(t["reviewNoneYet"] ?? "")
        }
        report.heading(t["reviewGroups"] ?? "")
        if hasPolicy {
            report.table(
                [.init(t["group"] ?? "", width: 16), .init(t["reviewBlocked"] ?? "", width: 40), .init(t["reviewAllowed"] ?? "", width: 22),
                 .init(t["reviewDenied"] ?? "", width: 22)],
                rows: groups.map { [$0.name, blockedText($0, t), listText($0.allowed, t), listText($0.denied, t)] })
            report.paragraph(ConsoleText.fill(t["reviewLocked"] ?? "", ["categories": listText(locked, t)]))
        } else {
            report.paragraph(t["reviewNoPolicy"] ?? "")
        }
        report.heading(t["reviewTest"] ?? "")
        if let summary = testSummary(t, time: time) {
            report.paragraph(summary)
            if failures.isEmpty {
                // Said only when some machine answered: no answers are no evidence.
                if !answers.isEmpty { report.paragraph(t["reviewTestAllBlocked"] ?? "") }
            } else {
                report.table(
                    [.init(t["filteringTestMachine"] ?? "", width: 26), .init(t["group"] ?? "", width: 14), .init(t["filteringTestName"] ?? "", width: 26),
                     .init(t["category"] ?? "", width: 16), .init(t["filteringTestBundle"] ?? "", width: 8, alignRight: true)],
                    rows: failures.map { [$0.machine, $0.group, $0.name, $0.category, String($0.bundleVersion)] })
            }
        } else {
            report.paragraph(t["reviewTestNone"] ?? "")
        }
        report.heading(t["reviewHistory"] ?? "")
        report.table(
            [.init(t["reviewVersion"] ?? "", width: 8, alignRight: true), .init(t["time"] ?? "", width: 17), .init(t["reviewAuthor"] ?? "", width: 20),
             .init(t["reason"] ?? "", width: 55)],
            rows: history.map { [String($0.version), time.dateTime($0.createdAt * 1000), $0.author, $0.reason] })
        report.heading(t["reviewPublications"] ?? "")
        report.table(
            [.init(t["reviewBundle"] ?? "", width: 8, alignRight: true), .init(t["reviewVersion"] ?? "", width: 8, alignRight: true),
             .init(t["time"] ?? "", width: 17), .init(t["reviewAuthor"] ?? "", width: 20), .init(t["reason"] ?? "", width: 47)],
            rows: publications.map {
                [String($0.bundleVersion), String($0.policyVersion), time.dateTime($0.createdAt * 1000), $0.author, $0.reason]
            })
        report.heading(t["reviewRoles"] ?? "")
        report.table(
            [.init(t["login"] ?? "", width: 18), .init(t["reviewPerson"] ?? "", width: 24), .init(t["reviewRole"] ?? "", width: 16),
             .init(t["reviewScope"] ?? "", width: 42)],
            rows: people.map {
                [$0.login, $0.displayName + ($0.disabledAt == nil ? "" : " (" + (t["reviewDisabled"] ?? "") + ")"),
                 ConsoleRenderer.roleLabel($0.role, t), Self.scope($0.scope, t)]
            })
        report.paragraph(t["reviewTokens"] ?? "")
        report.table(
            [.init(t["reviewToken"] ?? "", width: 18), .init(t["reviewRole"] ?? "", width: 16), .init(t["reviewScope"] ?? "", width: 42),
             .init(t["reviewCreatedBy"] ?? "", width: 24)],
            rows: tokens.map { [$0.id, ConsoleRenderer.roleLabel($0.role, t), Self.scope($0.scope, t), $0.createdBy] })
        report.heading(t["reviewChanges"] ?? "")
        if changes.isEmpty {
            report.paragraph(t["reviewNoChanges"] ?? "")
        } else {
            report.table(
                [.init(t["time"] ?? "", width: 17), .init(t["auditActor"] ?? "", width: 20), .init(t["auditAction"] ?? "", width: 20),
                 .init(t["auditTarget"] ?? "", width: 20), .init(t["reason"] ?? "", width: 24)],
                rows: changes.map {
                    [time.dateTime($0.event.time * 1000), $0.event.actor, $0.event.action, Self.target(of: $0, names: names), $0.event.reason ?? ""]
                })
            if moreChanges { report.paragraph(t["reviewMoreChanges"] ?? "") }
        }
        return report.render(created: madeAt)
    }
}
