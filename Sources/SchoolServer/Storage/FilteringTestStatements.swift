import Foundation
public import VerdictCore

/// What a filtering test run asked, kept with the run as JSON: the groups
/// and names the machines judge, and for each group the categories that the
/// policy published when the run started blocks and that the published
/// bundle has a list for (a name is expected to be blocked when its category
/// is one of them).
public struct FilteringTestPlan: Sendable, Hashable, Codable {
    public var groups: [String]
    public var names: [FilteringTest.Name]
    /// Group to the categories expected to be blocked, sorted.
    public var blocked: [String: [String]]

    public init(groups: [String], names: [FilteringTest.Name], blocked: [String: [String]]) {
        self.groups = groups
        self.names = names
        self.blocked = blocked
    }

    /// What a machine should do with `name` for `group`: `block` when the
    /// policy blocks the name's category and the bundle lists it, `allow`
    /// otherwise.
    public func expected(group: String, category: String) -> String {
        (blocked[group] ?? []).contains(category) ? "block" : "allow"
    }

    /// The checks a machine makes and answers: each group times each name
    /// once (a name listed under two categories is judged once).
    public var checks: Int { groups.count * Set(names.map(\.name)).count }
}

/// A run of the filtering test (schema step 10).
public struct StoredFilteringRun: Sendable, Hashable {
    public var id: String
    /// 1, 2, ... in the order the runs were made.
    public var number: Int64
    public var createdAt: Int64
    /// `person:LOGIN`, `token:ID`, `cli:USER`.
    public var createdBy: String
    /// Until when machines are asked (Unix seconds).
    public var expiresAt: Int64
    /// The bundle and policy versions published when it started (0 and nil: none).
    public var bundleVersion: Int64
    public var policyVersion: Int64?
    public var plan: FilteringTestPlan

    public init(
        id: String, number: Int64, createdAt: Int64, createdBy: String, expiresAt: Int64, bundleVersion: Int64, policyVersion: Int64?,
        plan: FilteringTestPlan
    ) {
        self.id = id
        self.number = number
        self.createdAt = createdAt
        self.createdBy = createdBy
        self.expiresAt = expiresAt
        self.bundleVersion = bundleVersion
        self.policyVersion = policyVersion
        self.plan = plan
    }

    public var request: FilteringTest.Request { FilteringTest.Request(run: id, groups: plan.groups, names: plan.names) }
}

/// One machine's answer to a run.
public struct StoredFilteringAnswer: Sendable, Hashable {
    public var run: String
    public var machine: String
    public var room: String
    public var answeredAt: Int64
    public var bundleVersion: Int64
    /// Names let through that the policy blocks.
    public var failures: Int64
    /// The danger alert the failures raised.
    public var alertID: String?
}

/// One name judged by one machine for one group.
public struct StoredFilteringResult: Sendable, Hashable {
    public var run: String
    public var machine: String
    public var group: String
    public var name: String
    /// The category the test name stands for.
    public var category: String
    /// `block` or `allow`: what the published policy asks.
    public var expected: String
    /// `allow`, `block` or `ask`: what the machine does.
    public var actual: String
    /// The category the machine's rules put it in.
    public var actualCategory: String?
    public var reason: String
    public var bundleVersion: Int64

    /// The policy blocks it and the machine lets it through.
    public var failed: Bool { expected == "block" && actual == "allow" }

    public init(
        run: String, machine: String, group: String, name: String, category: String, expected: String, actual: String, actualCategory: String?,
        reason: String, bundleVersion: Int64
    ) {
        self.run = run
        self.machine = machine
        self.group = group
        self.name = name
        self.category = category
        self.expected = expected
        self.actual = actual
        self.actualCategory = actualCategory
        self.reason = reason
        self.bundleVersion = bundleVersion
    }
}

/// A recorded annual review.
public struct StoredReview: Sendable, Hashable {
    public var id: String
    public var time: Int64
    public var reviewer: String
    public var note: String

    public init(id: String, time: Int64, reviewer: String, note: String) {
        self.id = id
        self.time = time
        self.reviewer = reviewer
        self.note = note
    }
}

/// The filtering test's and the reviews' statements (schema step 10; docs/server.md, "The filtering test").
extension SQLStorage {
    /// Adds a run, numbered one past the highest so far (in the statement: two
    /// runs made at once on PostgreSQL cannot share a number, the second fails).
    public func addFilteringRun(
        id: String, createdBy: String, now: Int64, expiresAt: Int64, bundleVersion: Int64, policyVersion: Int64?, plan: FilteringTestPlan
    ) async throws -> StoredFilteringRun {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let text = String(decoding: try encoder.encode(plan), as: UTF8.self)
        let rows = try await engine.run(
            """
            INSERT INTO filtering_runs (id, number, created_at, created_by, expires_at, bundle_version, policy_version, plan)
            VALUES ($1, (SELECT COALESCE(MAX(number), 0) + 1 FROM filtering_runs), $2, $3, $4, $5, $6, $7) RETURNING *
            """,
            SQLValue(id), SQLValue(now), SQLValue(createdBy), SQLValue(expiresAt), SQLValue(bundleVersion), SQLValue(policyVersion), SQLValue(text))
        guard let row = rows.first else { throw StorageError.unexpectedRow(column: "id") }
        return try Self.filteringRun(row)
    }

    public func filteringRun(id: String) async throws -> StoredFilteringRun? {
        try await engine.run("SELECT * FROM filtering_runs WHERE id = $1", SQLValue(id)).first.map(Self.filteringRun)
    }

    /// The newest runs first, at most `limit`.
    public func filteringRuns(limit: Int) async throws -> [StoredFilteringRun] {
        try await engine.run(
            "SELECT * FROM filtering_runs ORDER BY created_at DESC, id DESC LIMIT $1", SQLValue(Int64(max(1, min(limit, 1000))))
        ).map(Self.filteringRun)
    }

    /// The newest run not expired at `now` that `machine` has not answered.
    public func pendingFilteringRun(machine: String, now: Int64) async throws -> StoredFilteringRun? {
        try await engine.run(
            """
            SELECT * FROM filtering_runs r WHERE r.expires_at > $2
            AND NOT EXISTS (SELECT 1 FROM filtering_answers a WHERE a.run = r.id AND a.machine = $1)
            ORDER BY r.created_at DESC, r.id DESC LIMIT 1
            """,
            SQLValue(machine), SQLValue(now)
        ).first.map(Self.filteringRun)
    }

    /// Stores a machine's answer to a run with its results and, when
    /// `alert` is given, the danger alert, in one transaction; nil when the
    /// machine had answered the run already (nothing is stored).
    public func storeFilteringAnswer(
        _ answer: StoredFilteringAnswer, results: [StoredFilteringResult], alert: StoredAlert?
    ) async throws -> StoredFilteringAnswer? {
        try await engine.transaction { session in
            let taken = try await session.run(
                """
                INSERT INTO filtering_answers (run, machine, room, answered_at, bundle_version, failures, alert_id)
                VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING run
                """,
                SQLValue(answer.run), SQLValue(answer.machine), SQLValue(answer.room), SQLValue(answer.answeredAt), SQLValue(answer.bundleVersion),
                SQLValue(answer.failures), SQLValue(answer.alertID))
            guard !taken.isEmpty else { return nil }
            // Fifty rows (ten values each) a statement: well within both engines' parameter limits.
            var start = 0
            while start < results.count {
                let chunk = results[start..<min(start + 50, results.count)]
                var binds: [SQLValue] = []
                let rows = chunk.map { result -> String in
                    let values = [
                        SQLValue(result.run), SQLValue(result.machine), SQLValue(result.group), SQLValue(result.name), SQLValue(result.category),
                        SQLValue(result.expected), SQLValue(result.actual), SQLValue(result.actualCategory), SQLValue(result.reason),
                        SQLValue(result.bundleVersion),
                    ]
                    let first = binds.count + 1
                    binds += values
                    return "(" + (first..<(first + values.count)).map { "$\($0)" }.joined(separator: ", ") + ")"
                }
                _ = try await session.query(
                    "INSERT INTO filtering_results (run, machine, group_name, name, category, expected, actual, actual_category, reason, bundle_version)"
                        + " VALUES " + rows.joined(separator: ", ") + " ON CONFLICT DO NOTHING", binds)
                start += 50
            }
            if let alert {
                _ = try await session.query(
                    "INSERT INTO alerts (\(Self.alertColumns.joined(separator: ", "))) VALUES "
                        + "($1, $2, $3, $4, $5, NULL, $6, $7, 'danger', 'allow', $8, NULL, $9, NULL, $10, 'new')"
                        + " ON CONFLICT (machine, record_sequence, rule_id) DO NOTHING",
                    [
                        SQLValue(alert.id), SQLValue(alert.time), SQLValue(alert.createdAt), SQLValue(alert.machine), SQLValue(alert.room),
                        SQLValue(alert.group), SQLValue(alert.ruleID), SQLValue(alert.host), SQLValue(alert.category), SQLValue(alert.recordSequence),
                    ])
            }
            return answer
        }
    }

    /// The answers to a run, by machine.
    public func filteringAnswers(run: String) async throws -> [StoredFilteringAnswer] {
        try await engine.run("SELECT * FROM filtering_answers WHERE run = $1 ORDER BY machine", SQLValue(run)).map { row in
            StoredFilteringAnswer(
                run: try row.text("run"), machine: try row.text("machine"), room: try row.text("room"), answeredAt: try row.integer("answered_at"),
                bundleVersion: try row.integer("bundle_version"), failures: try row.integer("failures"), alertID: row.optionalText("alert_id"))
        }
    }

    /// The results of a run, at most `limit`: the failures first, then by
    /// machine, group, category and name; with `failedOnly`, the failures alone.
    public func filteringResults(run: String, failedOnly: Bool = false, limit: Int = 20_000) async throws -> [StoredFilteringResult] {
        let failed = "expected = 'block' AND actual = 'allow'"
        return try await engine.run(
            "SELECT * FROM filtering_results WHERE run = $1" + (failedOnly ? " AND " + failed : "")
                + " ORDER BY CASE WHEN \(failed) THEN 0 ELSE 1 END, machine, group_name, category, name LIMIT $2", SQLValue(run), SQLValue(Int64(limit))
        ).map { row in
            StoredFilteringResult(
                run: try row.text("run"), machine: try row.text("machine"), group: try row.text("group_name"), name: try row.text("name"),
                category: try row.text("category"), expected: try row.text("expected"), actual: try row.text("actual"),
                actualCategory: row.optionalText("actual_category"), reason: try row.text("reason"), bundleVersion: try row.integer("bundle_version"))
        }
    }

    public func addReview(_ review: StoredReview) async throws {
        try await engine.run(
            "INSERT INTO reviews (id, time, reviewer, note) VALUES ($1, $2, $3, $4)", SQLValue(review.id), SQLValue(review.time),
            SQLValue(review.reviewer), SQLValue(review.note))
    }

    /// The recorded reviews, newest first, at most `limit`.
    public func reviews(limit: Int) async throws -> [StoredReview] {
        try await engine.run("SELECT * FROM reviews ORDER BY time DESC, id DESC LIMIT $1", SQLValue(Int64(max(1, min(limit, 1000))))).map { row in
            StoredReview(id: try row.text("id"), time: try row.integer("time"), reviewer: try row.text("reviewer"), note: try row.text("note"))
        }
    }

    static func filteringRun(_ row: SQLRow) throws -> StoredFilteringRun {
        guard let plan = try? JSONDecoder().decode(FilteringTestPlan.self, from: Data(try row.text("plan").utf8)) else {
            throw StorageError.unexpectedRow(column: "plan")
        }
        return StoredFilteringRun(
            id: try row.text("id"), number: try row.integer("number"), createdAt: try row.integer("created_at"), createdBy: try row.text("created_by"),
            expiresAt: try row.integer("expires_at"), bundleVersion: try row.integer("bundle_version"),
            policyVersion: row.optionalInteger("policy_version"), plan: plan)
    }
}
