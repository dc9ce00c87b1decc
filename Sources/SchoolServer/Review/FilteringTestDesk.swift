import Foundation
import Logging
public import VerdictCore

/// The filtering test (docs/server.md, "The filtering test"), for the API,
/// the console and the machines' route alike.
///
/// An admin starts a run: the published policy's groups (and the people in
/// no group), the test names (`FilteringTestNames`), and for each group the
/// categories the published policy blocks and the published bundle has a
/// list for are kept with the run; every held live request is woken, and
/// each machine is sent the run with its next live answer
/// (`MachineRoutes.liveState`). The machine judges every name for every
/// group with its own rules and policy and posts the results
/// (`POST /api/v1/machine/filtering-test`), once: the results must be names
/// and groups of that run. A name whose category the group's policy blocks
/// and which the machine lets through is a failure; a machine with failures
/// raises one `danger` alert (rule `filtering-test`) for the run, which goes
/// to the admins as well as the safeguarding recipients.
public struct FilteringTestDesk: Sendable {
    let storage: any ServerStorage
    /// The school's own test names (server.yaml `filteringTest:`).
    let schoolNames: [FilteringTest.Name]
    /// The categories every bundle carries besides the school's lists (`publishing.builtinProtections`).
    let protections: [String]
    /// Woken when a run starts (every room), so held live requests answer at once.
    let live: LiveHub?
    /// Poked when an answer raised an alert.
    let alerts: AlertSignal?
    let clock: @Sendable () -> Int64

    /// How long machines are asked to answer a run.
    public static let openFor: Int64 = 3600

    public init(
        storage: any ServerStorage, schoolNames: [FilteringTest.Name], protections: [String], live: LiveHub?, alerts: AlertSignal?,
        clock: @escaping @Sendable () -> Int64
    ) {
        self.storage = storage
        self.schoolNames = schoolNames
        self.protections = protections
        self.live = live
        self.alerts = alerts
        self.clock = clock
    }

    /// The most checks (groups times names) a run asks of each machine.
    static let maximumChecks = 5000

    static let notFound = APIError(.notFound, "not-found", "no filtering test run has this id")

    /// Starts a run as `principal` (who may `runFilteringTest`); audited as `filtering-test.start`.
    public func start(by principal: Principal) async throws -> StoredFilteringRun {
        guard principal.may(.runFilteringTest) else { throw APIError.roleForbidden(principal.role) }
        guard let published = try await storage.publishedPolicyVersion(), let version = try await storage.policyVersion(published.policyVersion),
            let text = version.policy
        else {
            throw APIError(
                .conflict, "no-policy",
                "the server publishes no school policy yet: the test compares what machines do with what the published policy blocks")
        }
        let policy: LivePolicy
        do {
            policy = try LivePolicy(yaml: text)
        } catch {
            throw APIError(.conflict, "no-policy", "the published policy cannot be read by this server: \(error)")
        }
        let plan = Self.plan(
            policy: policy.school ?? SchoolPolicy(), locked: policy.locked, listed: Set(version.lists.map(\.category) + protections),
            names: FilteringTestNames.all(school: schoolNames))
        // A machine's answer is one request body (APILimits.maxBodyBytes): about 150 bytes a check.
        let checks = plan.checks
        guard checks <= Self.maximumChecks else {
            throw APIError(
                .conflict, "too-many-checks",
                "this run would ask each machine for \(checks) checks (groups times names), more than \(Self.maximumChecks); list fewer names under filteringTest: in server.yaml")
        }
        let now = clock()
        let run = try await storage.addFilteringRun(
            id: "ft-" + Secrets.randomBase32(count: 16), createdBy: principal.author, now: now, expiresAt: now + Self.openFor,
            bundleVersion: published.bundleVersion, policyVersion: published.policyVersion, plan: plan)
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: principal.author, action: "filtering-test.start", target: run.id, reason: nil,
                detail: "bundle=\(run.bundleVersion) groups=\(plan.groups.count) names=\(plan.names.count)"))
        await live?.announce(room: SQLStorage.everyRoom)
        return run
    }

    /// The groups, names and expected blocks of a run on `policy`: each
    /// group's keys over the top level's (without schedules: what the group
    /// has in a lesson with none), the locked categories for everyone, and
    /// the lists of the ways around the filter its `bypass:` keys block;
    /// only categories the bundle has a list for (`listed`) are expected to be blocked.
    static func plan(policy: SchoolPolicy, locked: Set<String>, listed: Set<String>, names: [FilteringTest.Name]) -> FilteringTestPlan {
        let groups = Array(policy.groups.map(\.name).prefix(FilteringTest.maximumGroups - 1)) + [FilteringTest.noGroup]
        let categories = Set(names.map(\.category)).intersection(listed)
        var blocked: [String: [String]] = [:]
        for group in groups {
            var keys = Policy()
            policy.topLevel.keys.apply(to: &keys)
            if let definition = policy.groups.first(where: { $0.name == group }) { definition.policy.keys.apply(to: &keys) }
            let all = locked.union(policy.locked)
            // The ways around the filter follow their `bypass:` keys, as the machines' engines do.
            var bypass: Set<String> = []
            if keys.bypass.encryptedDNS == .block { bypass.insert(BypassPolicy.encryptedDNSCategory) }
            if keys.bypass.ech == .block { bypass.insert(BypassPolicy.echFrontCategory) }
            blocked[group] = categories.filter { keys.blockedCategories.blocks($0) || all.contains($0) || bypass.contains($0) }.sorted()
        }
        return FilteringTestPlan(groups: groups, names: names, blocked: blocked)
    }

    /// The run a machine is to answer now, if any.
    public func pending(machine: String) async throws -> StoredFilteringRun? {
        try await storage.pendingFilteringRun(machine: machine, now: clock())
    }

    /// Takes `machine`'s answer: refused when the run is not one it may
    /// answer (unknown, ended, answered already) or the results are not the
    /// run's groups and names, each once. Returns the answer as stored.
    public func answer(_ answer: FilteringTest.Answer, from machine: StoredMachine) async throws -> StoredFilteringAnswer {
        let now = clock()
        guard let run = try await storage.filteringRun(id: answer.run) else {
            throw APIError(.notFound, "not-found", "no filtering test run has this id")
        }
        guard run.expiresAt > now else { throw APIError(.conflict, "run-ended", "this filtering test run ended; it takes no more answers") }
        guard answer.bundleVersion >= 0 else { throw APIError.badRequest("bundleVersion must not be negative") }
        let groups = Set(run.plan.groups)
        var categories: [String: [String]] = [:]
        for name in run.plan.names { categories[name.name, default: []].append(name.category) }
        // Every group and name once: a partial answer would stand as evidence of checks never made.
        let asked = run.plan.checks
        guard answer.results.count == asked else {
            throw APIError.badRequest("a run's answer has \(asked) results (its groups times its names), not \(answer.results.count)")
        }
        var seen: Set<String> = []
        var results: [StoredFilteringResult] = []
        for (index, result) in answer.results.enumerated() {
            guard groups.contains(result.group) else { throw APIError.badRequest("results[\(index)].group is not a group of this run") }
            guard let nameCategories = categories[result.name] else { throw APIError.badRequest("results[\(index)].name is not a name of this run") }
            guard seen.insert(result.group + "\u{0}" + result.name).inserted else {
                throw APIError.badRequest("results[\(index)] answers a group and name answered before")
            }
            guard ["allow", "block", "ask"].contains(result.action) else { throw APIError.badRequest("results[\(index)].action is allow, block or ask") }
            guard result.reason.utf8.count <= 1000, (result.category?.utf8.count ?? 0) <= FilteringTest.maximumCategoryBytes,
                (result.source?.utf8.count ?? 0) <= 40
            else {
                throw APIError.badRequest(
                    "results[\(index)]: a reason is at most 1,000 bytes, a category \(FilteringTest.maximumCategoryBytes), a source 40")
            }
            // A name the group's own allow list lets through is the school's choice, not a hole.
            let allowListed = result.action == "allow" && result.source == Reason.Source.localAllowList.rawValue
            for category in nameCategories {
                results.append(
                    StoredFilteringResult(
                        run: run.id, machine: machine.id, group: result.group, name: result.name, category: category,
                        expected: allowListed ? "allow" : run.plan.expected(group: result.group, category: category), actual: result.action,
                        actualCategory: result.category, reason: result.reason, bundleVersion: answer.bundleVersion))
            }
        }
        let failures = results.filter(\.failed)
        var alert: StoredAlert? = nil
        if let first = failures.first {
            alert = StoredAlert(
                id: Secrets.newAlertID(), time: now * 1000, createdAt: now, machine: machine.id, room: machine.room, user: nil, group: first.group,
                ruleID: SafeguardingPolicy.filteringTestRuleID, severity: .danger, action: "allow", host: first.name, url: nil,
                category: first.category, searchTerm: nil, recordSequence: -run.number, state: .new, note: nil, updatedAt: nil, updatedBy: nil,
                dispatched: false)
        }
        let stored = StoredFilteringAnswer(
            run: run.id, machine: machine.id, room: machine.room, answeredAt: now, bundleVersion: answer.bundleVersion,
            failures: Int64(failures.count), alertID: alert?.id)
        guard let kept = try await storage.storeFilteringAnswer(stored, results: results, alert: alert) else {
            throw APIError(.conflict, "answered", "this machine has answered this run already")
        }
        if alert != nil { alerts?.poke() }
        return kept
    }

    /// The newest runs, for a principal who may view them.
    public func runs(for principal: Principal, limit: Int = 50) async throws -> [StoredFilteringRun] {
        guard principal.may(.viewReview) else { throw APIError.roleForbidden(principal.role) }
        return try await storage.filteringRuns(limit: limit)
    }

    /// A run with its answers and at most `limit` results (the failures
    /// first), for a principal who may view them.
    public func run(
        _ id: String, for principal: Principal, limit: Int = 20_000
    ) async throws -> (run: StoredFilteringRun, answers: [StoredFilteringAnswer], results: [StoredFilteringResult]) {
        guard principal.may(.viewReview) else { throw APIError.roleForbidden(principal.role) }
        guard id.utf8.count <= FilteringTest.maximumRunBytes, let run = try await storage.filteringRun(id: id) else { throw Self.notFound }
        return (run, try await storage.filteringAnswers(run: run.id), try await storage.filteringResults(run: run.id, failedOnly: false, limit: limit))
    }
}
