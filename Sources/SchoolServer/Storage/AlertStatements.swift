import Foundation
import VerdictCore

/// The safeguarding alerts' statements (docs/server.md, "Safeguarding alerts").
extension SQLStorage {
    static let alertColumns = [
        "id", "time", "created_at", "machine", "room", "user_name", "group_name", "rule_id", "severity", "action", "host", "url",
        "category", "search_term", "record_sequence", "state",
    ]

    /// What `raiseAlerts` made: the alerts, and the matches the repeat limit kept quiet.
    struct RaisedAlerts: Sendable {
        var alerts: [StoredAlert] = []
        var suppressed: Int64 = 0
    }

    /// Judges `records` (those of a post that were new) by `safeguarding`'s
    /// rules, in the records' transaction. The matches are taken by person
    /// and rule, each one's records in time order: an `attempts:` rule counts
    /// them (and goes on from the count-th within its window); the first that
    /// goes on takes the repeat limit (one conditional upsert: of two
    /// transactions, only one passes) and, when it passes, is the alert; the
    /// rest are kept quiet and counted. So a post costs a few statements per
    /// person and rule it matches, not per record; and taking (person, rule)
    /// in one order, every transaction locks the limits' rows in that order
    /// (PostgreSQL: two posts about the same people never wait on each other
    /// in a circle).
    static func raiseAlerts(
        _ session: any SQLSession, machine: String, room: String, records: [StoredRecord], safeguarding: SafeguardingPolicy, now: Int64
    ) async throws -> RaisedAlerts {
        struct Match {
            var stored: StoredRecord
            var rule: SafeguardingRule
            var person: String
            var searchTerm: String?
            var key: String { person + "\u{0}" + rule.id }
        }
        var matches: [Match] = []
        for stored in records {
            let record = stored.record
            let searchTerm = record.url.flatMap(SearchTerms.extract(url:))
            let facts = SafeguardingFacts(
                group: record.group, blocked: record.action != "allow", host: record.host, url: record.url, category: record.category,
                reasonSource: record.reason, searchTerm: searchTerm)
            for rule in safeguarding.matches(facts) {
                matches.append(Match(stored: stored, rule: rule, person: StoredAlert.person(user: record.user, machine: machine), searchTerm: searchTerm))
            }
        }
        guard !matches.isEmpty else { return RaisedAlerts() }
        matches.sort {
            ($0.person, $0.rule.id, $0.stored.timeMilliseconds, $0.stored.record.sequence)
                < ($1.person, $1.rule.id, $1.stored.timeMilliseconds, $1.stored.record.sequence)
        }
        var raised = RaisedAlerts()
        var start = 0
        while start < matches.count {
            var end = start + 1
            while end < matches.count, matches[end].key == matches[start].key { end += 1 }
            let group = Array(matches[start..<end])
            start = end
            let first = group[0]
            var candidates = group
            if let attempts = first.rule.attempts {
                candidates = try await countAttempts(session, group.map(\.stored.timeMilliseconds), person: first.person, rule: first.rule.id, attempts, now: now)
                    .enumerated().filter { $0.element }.map { group[$0.offset] }
            }
            guard let candidate = candidates.first else { continue }
            // The repeat limit: the row is written (and answered) only when the last alert is
            // old enough; a second transaction at once waits for the first's row and then finds it new.
            let passed = !(try await session.run(
                """
                INSERT INTO alert_limits (person, rule_id, last_at, suppressed) VALUES ($1, $2, $3, 0)
                ON CONFLICT (person, rule_id) DO UPDATE SET last_at = excluded.last_at, suppressed = 0
                WHERE alert_limits.last_at <= $4 RETURNING last_at
                """,
                SQLValue(candidate.person), SQLValue(candidate.rule.id), SQLValue(now), SQLValue(now - safeguarding.repeatSeconds))
                .isEmpty)
            // The others of this post are within the repeat of the one that passed (or of the alert before).
            let quiet = Int64(candidates.count - (passed ? 1 : 0))
            if quiet > 0 {
                try await session.run(
                    "UPDATE alert_limits SET suppressed = suppressed + $3 WHERE person = $1 AND rule_id = $2", SQLValue(candidate.person),
                    SQLValue(candidate.rule.id), SQLValue(quiet))
                raised.suppressed += quiet
            }
            guard passed else { continue }
            let record = candidate.stored.record
            let rows = try await session.query(
                "INSERT INTO alerts (\(alertColumns.joined(separator: ", "))) VALUES "
                    + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'new')"
                    + " ON CONFLICT (machine, record_sequence, rule_id) DO NOTHING RETURNING *",
                [
                    SQLValue(Secrets.newAlertID()), SQLValue(candidate.stored.timeMilliseconds), SQLValue(now), SQLValue(machine),
                    SQLValue(room), SQLValue(record.user), SQLValue(record.group), SQLValue(candidate.rule.id),
                    SQLValue(candidate.rule.severity.rawValue), SQLValue(record.action == "allow" ? "allow" : "block"), SQLValue(record.host),
                    SQLValue(record.url), SQLValue(record.category), SQLValue(candidate.searchTerm), SQLValue(record.sequence),
                ])
            raised.alerts += try rows.map(Self.alert)
        }
        // As they happened.
        raised.alerts.sort { ($0.time, $0.id) < ($1.time, $1.id) }
        return raised
    }

    /// Counts the attempts of `person` for an `attempts:` rule: the records'
    /// times (Unix ms, in order) are kept, those past the window of the
    /// earliest removed, and each record goes on when, with it, the window
    /// that ends at it holds `count` or more. A record's time is never taken
    /// as later than the server's clock: a machine's clock ahead cannot keep
    /// attempts counting into the future.
    static func countAttempts(
        _ session: any SQLSession, _ times: [Int64], person: String, rule: String, _ attempts: SafeguardingRule.Attempts, now: Int64
    ) async throws -> [Bool] {
        let window = attempts.withinSeconds * 1000
        let at = times.map { min($0, now * 1000) }
        guard let earliest = at.min(), let latest = at.max() else { return [] }
        try await session.run(
            "DELETE FROM alert_attempts WHERE person = $1 AND rule_id = $2 AND time <= $3", SQLValue(person), SQLValue(rule),
            SQLValue(earliest - window))
        // A hundred rows a statement.
        var offset = 0
        while offset < at.count {
            let chunk = at[offset..<min(offset + 100, at.count)]
            var binds: [SQLValue] = [SQLValue(person), SQLValue(rule)]
            let rows = chunk.map { time -> String in
                binds.append(SQLValue(time))
                return "($1, $2, $\(binds.count))"
            }
            try await session.query("INSERT INTO alert_attempts (person, rule_id, time) VALUES " + rows.joined(separator: ", "), binds)
            offset += 100
        }
        let kept = try await session.run(
            "SELECT time FROM alert_attempts WHERE person = $1 AND rule_id = $2 AND time > $3 AND time <= $4 ORDER BY time", SQLValue(person),
            SQLValue(rule), SQLValue(earliest - window), SQLValue(latest)
        ).map { try $0.integer("time") }
        return at.map { time in kept.lazy.filter { $0 > time - window && $0 <= time }.count >= attempts.count }
    }

    public func alert(id: String) async throws -> StoredAlert? {
        try await engine.run("SELECT * FROM alerts WHERE id = $1", SQLValue(id)).first.map(Self.alert)
    }

    /// The statement of `alerts(query)`, apart from running it (for the tests' EXPLAIN).
    func alertsStatement(_ query: AlertQuery) -> (sql: String, binds: [SQLValue]) {
        var binds: [SQLValue] = []
        func bind(_ value: SQLValue) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        let filter = Self.alertsFilter(query, bind: bind)
        let limit = bind(.integer(Int64(max(1, min(query.limit, 1000))) + 1))
        return ("SELECT * FROM alerts\(filter) ORDER BY created_at DESC, id DESC LIMIT \(limit)", binds)
    }

    /// How many alerts match `query`'s filters (its cursor and limit aside), counting no further than `atMost`.
    public func countAlerts(_ query: AlertQuery, atMost: Int) async throws -> Int64 {
        var binds: [SQLValue] = []
        func bind(_ value: SQLValue) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        var counted = query
        counted.after = nil
        let filter = Self.alertsFilter(counted, bind: bind)
        let limit = bind(.integer(Int64(max(1, atMost))))
        return try await engine.query("SELECT COUNT(*) AS count FROM (SELECT id FROM alerts\(filter) LIMIT \(limit)) AS counted", binds)
            .first?.integer("count") ?? 0
    }

    /// The WHERE clause of the query's filters and cursor ("" for none), its values bound with `bind`.
    static func alertsFilter(_ query: AlertQuery, bind: (SQLValue) -> String) -> String {
        var conditions: [String] = []
        if let states = query.states {
            // An empty set asks for nothing; `IN ()` is not SQL.
            let names = states.map(\.rawValue).sorted()
            conditions.append(names.isEmpty ? "1 = 0" : "state IN (\(names.map { bind(.text($0)) }.joined(separator: ", ")))")
        }
        if let severity = query.severity { conditions.append("severity = \(bind(.text(severity.rawValue)))") }
        if let user = query.user { conditions.append("user_name = \(bind(.text(user)))") }
        if let since = query.since { conditions.append("time >= \(bind(.integer(since)))") }
        if let until = query.until { conditions.append("time < \(bind(.integer(until)))") }
        // The scope in the query, as the records': the alert's room, or its person's group.
        if !query.scope.isWholeSchool {
            var either: [String] = []
            if !query.scope.rooms.isEmpty { either.append("room IN (\(query.scope.rooms.map { bind(.text($0)) }.joined(separator: ", ")))") }
            if !query.scope.groups.isEmpty {
                either.append("group_name IN (\(query.scope.groups.map { bind(.text($0)) }.joined(separator: ", ")))")
            }
            conditions.append("(" + either.joined(separator: " OR ") + ")")
        }
        if let after = query.after {
            let created = bind(.integer(after.createdAt))
            conditions.append("created_at <= \(created) AND (created_at < \(created) OR id < \(bind(.text(after.id))))")
        }
        return conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
    }

    public func alerts(_ query: AlertQuery) async throws -> AlertPage {
        let statement = alertsStatement(query)
        var alerts = try await engine.query(statement.sql, statement.binds).map(Self.alert)
        let limit = max(1, min(query.limit, 1000))
        var next: AlertCursor? = nil
        if alerts.count > limit {
            alerts.removeLast(alerts.count - limit)
            if let last = alerts.last { next = AlertCursor(createdAt: last.createdAt, id: last.id) }
        }
        return AlertPage(alerts: alerts, next: next)
    }

    /// Moves the alert to `state` when its state allows the step
    /// (`StoredAlert.State.reachedFrom`), in one statement: of two people
    /// triaging at once, the second finds the state moved. The note replaces
    /// the one before only when there is one. nil: no such alert, or the step
    /// is not allowed from where it is.
    public func triageAlert(id: String, to state: StoredAlert.State, note: String?, by author: String, now: Int64) async throws -> StoredAlert? {
        let from = state.reachedFrom
        guard !from.isEmpty else { return nil }
        var binds: [SQLValue] = [SQLValue(id), SQLValue(state.rawValue), SQLValue(note), SQLValue(now), SQLValue(author)]
        let placeholders = from.map { state -> String in
            binds.append(SQLValue(state.rawValue))
            return "$\(binds.count)"
        }
        return try await engine.query(
            "UPDATE alerts SET state = $2, note = COALESCE($3, note), updated_at = $4, updated_by = $5"
                + " WHERE id = $1 AND state IN (\(placeholders.joined(separator: ", "))) RETURNING *",
            binds
        ).first.map(Self.alert)
    }

    /// The oldest alerts the delivery has not taken yet, at most `limit`.
    public func undispatchedAlerts(limit: Int) async throws -> [StoredAlert] {
        // `dispatched = 0` written out: the partial index is used only for a condition that implies its own.
        try await engine.run(
            "SELECT * FROM alerts WHERE dispatched = 0 ORDER BY created_at, id LIMIT $1", SQLValue(Int64(max(1, min(limit, 10_000))))
        ).map(Self.alert)
    }

    /// Marks the alerts taken by the delivery; returns the ids this call
    /// marked (an id marked already, or unknown, is left out), so that of two
    /// instances marking the same alert, one delivers it.
    public func markAlertsDispatched(ids: [String]) async throws -> [String] {
        guard !ids.isEmpty else { return [] }
        var marked: [String] = []
        // At most 500 a statement: well within both engines' parameter limits.
        var start = 0
        while start < ids.count {
            let chunk = Array(ids[start..<min(start + 500, ids.count)])
            let placeholders = (1...chunk.count).map { "$\($0)" }.joined(separator: ", ")
            let rows = try await engine.query(
                "UPDATE alerts SET dispatched = 1 WHERE dispatched = 0 AND id IN (\(placeholders)) RETURNING id", chunk.map { SQLValue($0) })
            marked += try rows.map { try $0.text("id") }
            start += 500
        }
        return marked
    }

    /// Removes attempts recorded before `before` (Unix ms): the counts of
    /// people who stopped before reaching a rule's count. Returns how many.
    public func pruneAlertAttempts(before: Int64) async throws -> Int64 {
        try await engine.transaction { session in
            let count =
                try await session.run("SELECT COUNT(*) AS count FROM alert_attempts WHERE time < $1", SQLValue(before)).first?.integer("count") ?? 0
            try await session.run("DELETE FROM alert_attempts WHERE time < $1", SQLValue(before))
            // A limit's last alert is in Unix seconds; past the longest `repeat:` it holds nobody back.
            try await session.run("DELETE FROM alert_limits WHERE last_at < $1", SQLValue(before / 1000))
            return count
        }
    }

    public func publishedPolicyVersion() async throws -> PublishedPolicyVersion? {
        guard
            let row = try await engine.run(
                "SELECT bundle_version, policy_version FROM publications WHERE state = 'published' ORDER BY bundle_version DESC LIMIT 1"
            ).first
        else { return nil }
        return PublishedPolicyVersion(bundleVersion: try row.integer("bundle_version"), policyVersion: try row.integer("policy_version"))
    }

    static func alert(_ row: SQLRow) throws -> StoredAlert {
        guard let state = StoredAlert.State(rawValue: try row.text("state")) else { throw StorageError.unexpectedRow(column: "state") }
        guard let severity = SafeguardingSeverity(rawValue: try row.text("severity")) else { throw StorageError.unexpectedRow(column: "severity") }
        return StoredAlert(
            id: try row.text("id"), time: try row.integer("time"), createdAt: try row.integer("created_at"), machine: try row.text("machine"),
            room: try row.text("room"), user: row.optionalText("user_name"), group: row.optionalText("group_name"),
            ruleID: try row.text("rule_id"), severity: severity, action: try row.text("action"), host: row.optionalText("host"),
            url: row.optionalText("url"), category: row.optionalText("category"), searchTerm: row.optionalText("search_term"),
            recordSequence: try row.integer("record_sequence"), state: state, note: row.optionalText("note"),
            updatedAt: row.optionalInteger("updated_at"), updatedBy: row.optionalText("updated_by"),
            dispatched: (row.optionalInteger("dispatched") ?? 0) != 0)
    }
}
