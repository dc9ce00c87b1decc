import Foundation
public import Logging
public import VerdictCore

/// Everything hallpass-server keeps, behind one interface with two engines
/// (SQLite and PostgreSQL, `SQLStorage` over an `SQLEngine`). The storage
/// test suite runs the same tests on both.
public protocol ServerStorage: Sendable {
    /// `sqlite` or `postgres`.
    var engineName: String { get }

    /// Applies the schema steps not yet applied; returns their versions.
    @discardableResult func migrate() async throws -> [Int]
    /// The versions recorded in `schema_migrations`, in order.
    func appliedMigrations() async throws -> [Int]

    func createEnrolmentToken(_ token: StoredEnrolmentToken) async throws
    func enrolmentToken(hash: String) async throws -> StoredEnrolmentToken?
    /// Takes one use of the token and enrols the machine, in one transaction;
    /// returns the room, or throws a `TokenRefusal` (and changes nothing).
    func enrol(_ machine: NewMachine, tokenHash: String, now: Int64) async throws -> String

    func machine(id: String) async throws -> StoredMachine?
    func machine(publicKey: String) async throws -> StoredMachine?
    func machines() async throws -> [StoredMachine]
    /// Marks the machine revoked; false when there is no such machine.
    func revokeMachine(id: String, now: Int64) async throws -> Bool

    /// Stores each record once (a record whose (machine, sequence) is stored
    /// is ignored), adds `dropped` to the machine's count, and returns the
    /// machine's stored-through sequence and how many were new. With
    /// `safeguarding`, the records that were new are judged by its rules and
    /// the alerts they raise are stored with them (Storage/AlertStatements.swift).
    /// All of it or nothing.
    func storeRecords(machine: String, records: [StoredRecord], dropped: Int64, now: Int64, safeguarding: SafeguardingPolicy?) async throws
        -> StoreOutcome
    func records(machine: String) async throws -> [StoredRecord]
    /// One page of the records that match every filter of `query`, in the
    /// order (time, machine, sequence), and the cursor of the next page.
    func queryRecords(_ query: RecordQuery) async throws -> RecordPage
    func recordCount() async throws -> Int64
    /// The time (Unix ms) of the oldest record; nil when there is none.
    func oldestRecordTime() async throws -> Int64?
    /// Removes the records older than `before` (Unix ms); returns how many.
    func removeRecords(before: Int64) async throws -> Int64
    /// Removes at most `limit` of the oldest rows of `kind` from before
    /// `before` (Unix seconds); returns how many (Storage/RetentionStatements.swift).
    func removeOld(_ kind: RetainedKind, before: Int64, limit: Int) async throws -> Int64

    func recordCheckIn(machine: String, _ checkIn: CheckIn, now: Int64) async throws

    func createAPIToken(_ token: StoredAPIToken, hash: String) async throws
    func apiToken(hash: String) async throws -> StoredAPIToken?
    /// Every API token (never its secret), oldest first.
    func apiTokens() async throws -> [StoredAPIToken]

    /// The version of the bundle the server publishes (the current
    /// publication's, or the version set with `setPublishedVersion` if higher); 0 before any.
    func publishedVersion() async throws -> Int64
    /// Sets the version the bundle versions continue from (a school that
    /// published bundles before: machines refuse a version below the one they have).
    func setPublishedVersion(_ version: Int64) async throws

    // Policy versions (docs/server.md, "Publishing").
    func latestPolicyVersion() async throws -> StoredPolicyVersion?
    func policyVersion(_ version: Int64) async throws -> StoredPolicyVersion?
    /// Newest first: the versions below `before` (all when nil), at most `limit`.
    func policyVersions(before: Int64?, limit: Int) async throws -> [StoredPolicyVersion]
    /// Stores the lists not stored yet and the version, numbered one above the
    /// latest, in one transaction.
    func addPolicyVersion(_ new: NewPolicyVersion, now: Int64) async throws -> StoredPolicyVersion
    func listContent(sha256: String) async throws -> [UInt8]?

    // Publications.
    /// Numbers the publication above every one before, asks `sign` for the
    /// manifest of that version (and its signature, unless the key is offline),
    /// and stores it with its files, in one transaction. A pending publication
    /// is replaced by it.
    func addPublication(_ new: NewPublication, now: Int64, sign: @Sendable (Int64) throws -> SignedManifest) async throws
        -> StoredPublication
    /// Publishes the pending publication `bundleVersion` with `signature`; nil when it is not pending.
    func completePublication(bundleVersion: Int64, signature: [UInt8], now: Int64) async throws -> StoredPublication?
    func publication(bundleVersion: Int64) async throws -> StoredPublication?
    /// The published bundle of the highest version: what machines are served.
    func currentPublication() async throws -> StoredPublication?
    func pendingPublication() async throws -> StoredPublication?
    /// Every publication, newest first.
    func publications() async throws -> [StoredPublication]
    func bundleFile(sha256: String) async throws -> [UInt8]?
    /// Removes the bytes of every bundle file that neither the newest `published`
    /// published publications nor a pending one name; returns how many.
    func pruneBundleFiles(keepingPublished published: Int) async throws -> Int64

    // Accounts (docs/server.md, "Accounts and sessions").
    /// Adds the person; false when the login is taken.
    func addPerson(_ person: StoredPerson) async throws -> Bool
    func person(login: String) async throws -> StoredPerson?
    /// Every person, by login.
    func people() async throws -> [StoredPerson]
    /// Writes the person's name, role, scope, method, password hash, failures,
    /// lock, disabling and email; false when there is no such login.
    func updatePerson(_ person: StoredPerson) async throws -> Bool
    /// Removes the person and their sessions, in one transaction; false when there is no such login.
    func removePerson(login: String) async throws -> Bool
    /// Counts a failed sign-in of an account that is not locked; the
    /// `lockAfter`th locks it until `now + lockFor`. True when this one locked it.
    func recordFailedSignIn(login: String, now: Int64, lockAfter: Int, lockFor: Int64) async throws -> Bool
    /// A sign-in succeeded: the failures and the lock are cleared.
    func recordSignIn(login: String, now: Int64) async throws
    func addSession(_ session: StoredSession) async throws
    func session(hash: String) async throws -> StoredSession?
    func sessions(login: String) async throws -> [StoredSession]
    /// Sets the session's last use to `now` (never back).
    func touchSession(hash: String, now: Int64) async throws
    func removeSession(hash: String) async throws -> Bool
    /// Removes every session of `login`; returns how many.
    func removeSessions(login: String) async throws -> Int
    /// Removes the sessions past their end or unused since before `idleBefore`; returns how many.
    func removeEndedSessions(now: Int64, idleBefore: Int64) async throws -> Int
    func addSignInState(_ state: StoredSignInState) async throws
    /// Deletes and answers the state of `hash` in one statement (a state is
    /// taken once); nil when there is none or it was made before `notBefore`.
    /// States older than `notBefore` are removed too.
    func takeSignInState(hash: String, notBefore: Int64) async throws -> StoredSignInState?
    /// Writes an event to the audit trail.
    func audit(_ event: NewAuditEvent) async throws
    /// One page of the audit trail, newest first.
    func auditEvents(_ query: AuditQuery) async throws -> AuditPage

    // Access requests (Storage/AccessRequestStatements.swift; docs/server.md, "Access requests").
    /// Stores the requests the server does not have (by machine and the machine's id); returns those stored now.
    func storeAccessRequests(machine: String, room: String, _ requests: [NewAccessRequest], now: Int64) async throws -> [StoredAccessRequest]
    func accessRequest(id: String) async throws -> StoredAccessRequest?
    func accessRequests(_ query: AccessRequestQuery) async throws -> [StoredAccessRequest]
    /// Decides a pending request; nil when there is none or it is decided already.
    func decideAccessRequest(id: String, _ decision: AccessRequestDecision, now: Int64) async throws -> StoredAccessRequest?
    func setAccessRequestLiveItem(id: String, liveItem: String) async throws
    /// The newest `limit` decisions on the machine's requests made since `since`, oldest first, for its live state.
    func accessRequestDecisions(machine: String, since: Int64, limit: Int) async throws -> [StoredAccessRequest]
    /// Gives the machine's live view the next live sequence (a decision on one of its requests); returns its room.
    func raiseMachineLiveSequence(machine: String) async throws -> String?
    func removeAccessRequests(before: Int64) async throws -> Int64

    // Console (Storage/ConsoleStatements.swift; docs/console.md).
    /// The blocks from `since` to `until` (Unix ms) in `scope`, counted by category and host.
    func blockCounts(since: Int64, until: Int64, scope: Scope) async throws -> [BlockCount]
    /// Every user name the records hold, sorted, at most `limit`.
    func recordUserNames(limit: Int) async throws -> [String]
    /// The key of the console's pseudonyms, made on first use.
    func pseudonymKey() async throws -> [UInt8]

    // The live channel (Storage/LiveStatements.swift; docs/server.md, "The live channel").
    /// Stores the item with the next live sequence and wakes the servers' held requests for its room.
    func addLiveItem(_ new: NewLiveItem, now: Int64) async throws -> StoredLiveItem
    /// Ends the items of `scope` in force at `now` (only `id` when given), all
    /// with one new sequence; returns those ended (none: nothing changed).
    func endLiveItems(scope: LiveScope, id: String?, by author: String, now: Int64) async throws -> [StoredLiveItem]
    func liveItem(id: String) async throws -> StoredLiveItem?
    /// The items of `scope` in force at `now`, oldest first.
    func liveItems(scope: LiveScope, now: Int64) async throws -> [StoredLiveItem]
    /// The machine's live view (its items only when `items`); nil when there is no such machine.
    func liveView(machine: String, now: Int64, items: Bool) async throws -> LiveView?
    /// The highest live sequence handed out.
    func liveSequence() async throws -> Int64
    /// Moves the machine to `room` (a change of its live view); returns the
    /// room it was in, or nil when there is no such machine.
    func setMachineRoom(id: String, room: String) async throws -> String?
    /// The rooms of the machines not revoked, with their machine counts.
    func rooms() async throws -> [(room: String, machines: Int)]
    /// On PostgreSQL: calls `changed` with the room of each live change made
    /// by any server instance (`*`: every room), until cancelled; `ready` once
    /// listening. Throws when the connection fails. False at once on SQLite,
    /// where every change is made by this process.
    func listenForLiveChanges(ready: @Sendable () async -> Void, _ changed: @escaping @Sendable (String) async -> Void) async throws -> Bool

    // Safeguarding alerts (Storage/AlertStatements.swift; docs/server.md, "Safeguarding alerts").
    /// One page of the alerts that match every filter of `query`, newest first, within its scope.
    func alerts(_ query: AlertQuery) async throws -> AlertPage
    func alert(id: String) async throws -> StoredAlert?
    /// How many alerts match the query's filters within its scope, counted to at most `atMost`.
    func countAlerts(_ query: AlertQuery, atMost: Int) async throws -> Int64
    /// Moves an alert to `state` by one triage step; nil when there is no
    /// such alert or its state does not allow the step (`State.reachedFrom`).
    func triageAlert(id: String, to state: StoredAlert.State, note: String?, by author: String, now: Int64) async throws -> StoredAlert?
    /// The oldest alerts the delivery has not taken, at most `limit`.
    func undispatchedAlerts(limit: Int) async throws -> [StoredAlert]
    /// Marks alerts taken by the delivery; returns those this call marked.
    func markAlertsDispatched(ids: [String]) async throws -> [String]
    /// Removes the attempts counted before `before` (Unix ms), and the repeat
    /// limits last set before it; returns how many attempts.
    func pruneAlertAttempts(before: Int64) async throws -> Int64
    /// The published bundle of the highest version and its policy version; nil before any publication.
    func publishedPolicyVersion() async throws -> PublishedPolicyVersion?

    // Alert deliveries (Storage/AlertDeliveryStatements.swift; docs/server.md, "Alert delivery").
    /// Adds the deliveries of an alert that are not there yet (by alert,
    /// channel and target), in one transaction; returns how many were added.
    func addAlertDeliveries(_ deliveries: [NewAlertDelivery], now: Int64) async throws -> Int
    /// Leases at most `limit` waiting deliveries that are due at `now` and
    /// held by nobody (no lease, or one that ended) to `owner` until
    /// `leaseUntil`, in one statement; returns them. Two workers never get one delivery at once.
    func claimAlertDeliveries(owner: String, now: Int64, leaseUntil: Int64, limit: Int) async throws -> [StoredAlertDelivery]
    /// Writes the outcome of an attempt and ends the lease, if `owner` still
    /// holds it and the delivery is waiting; false otherwise (nothing changed).
    func finishAlertDelivery(id: String, owner: String, _ outcome: AlertDeliveryOutcome, now: Int64) async throws -> Bool
    /// The deliveries of one alert, oldest first.
    func alertDeliveries(alertID: String) async throws -> [StoredAlertDelivery]
    /// How many alerts' deliveries are in each (channel, state) (digests not counted).
    func alertDeliveryCounts() async throws -> [AlertDeliveryCount]

    // Safeguarding digests (Storage/DigestStatements.swift; docs/server.md, "Safeguarding digests").
    /// Claims the digest (kind, period start, login) and adds its email to
    /// the outbox, in one transaction; false when it was claimed already (nothing added).
    func claimDigest(_ claim: NewDigestClaim, now: Int64) async throws -> Bool
    /// The claims of one digest period, by login.
    func digestClaims(kind: DigestKind, periodStart: Int64) async throws -> [StoredDigestClaim]
    /// The newest `limit` digests made (at most 1,000), newest first, each with its email's state.
    func sentDigests(limit: Int) async throws -> [SentDigest]
    /// When the digests of `kind` began: `now` on the first call, kept.
    func digestsStart(kind: DigestKind, now: Int64) async throws -> Int64
    /// Records blocked with reason `bypass` from `since` to `until` (Unix ms) in `scope`, per person and group, most first.
    func bypassAttempts(since: Int64, until: Int64, scope: Scope, limit: Int) async throws -> [BypassAttempts]
    /// Removes the digests' emails made before `before` that are sent or failed (the claims stay); returns how many.
    func removeDigestEmails(before: Int64) async throws -> Int64
    /// How many digest emails the outbox holds in each state.
    func digestDeliveryCounts() async throws -> [AlertDeliveryState: Int64]

    // The filtering test and the annual review (Storage/FilteringTestStatements.swift; docs/server.md, "The filtering test").
    func addFilteringRun(
        id: String, createdBy: String, now: Int64, expiresAt: Int64, bundleVersion: Int64, policyVersion: Int64?, plan: FilteringTestPlan
    ) async throws -> StoredFilteringRun
    func filteringRun(id: String) async throws -> StoredFilteringRun?
    func filteringRuns(limit: Int) async throws -> [StoredFilteringRun]
    func pendingFilteringRun(machine: String, now: Int64) async throws -> StoredFilteringRun?
    func storeFilteringAnswer(_ answer: StoredFilteringAnswer, results: [StoredFilteringResult], alert: StoredAlert?) async throws
        -> StoredFilteringAnswer?
    func filteringAnswers(run: String) async throws -> [StoredFilteringAnswer]
    func filteringResults(run: String, failedOnly: Bool, limit: Int) async throws -> [StoredFilteringResult]
    func addReview(_ review: StoredReview) async throws
    func reviews(limit: Int) async throws -> [StoredReview]

    /// Runs what the engine needs while it is used; returns when the task is cancelled.
    func run() async
    func close() async
}

extension ServerStorage {
    /// Stores records without judging them for alerts (tools and tests that store records alone).
    public func storeRecords(machine: String, records: [StoredRecord], dropped: Int64, now: Int64) async throws -> StoreOutcome {
        try await storeRecords(machine: machine, records: records, dropped: dropped, now: now, safeguarding: nil)
    }
}

/// Opens the storage `location` names, runs its engine while `body` runs,
/// and closes it after (also when `body` throws). For the commands and tests;
/// the server runs the engine as a service instead.
public func withServerStorage<T: Sendable>(
    _ location: DatabaseLocation, logger: Logger, migrate: Bool = true,
    _ body: @Sendable (SQLStorage) async throws -> T
) async throws -> T {
    let storage = try await SQLStorage.open(location, logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await storage.run() }
        do {
            if migrate { _ = try await storage.migrate() }
            let result = try await body(storage)
            group.cancelAll()
            await storage.close()
            return result
        } catch {
            group.cancelAll()
            await storage.close()
            throw error
        }
    }
}

/// `ServerStorage` on an SQL engine: the server's statements, written once.
public final class SQLStorage: ServerStorage {
    let engine: any SQLEngine
    let logger: Logger

    public var engineName: String { engine.name }

    init(engine: any SQLEngine, logger: Logger) {
        self.engine = engine
        self.logger = logger
    }

    public static func open(_ location: DatabaseLocation, logger: Logger) async throws -> SQLStorage {
        switch location {
        case .sqlite(let path):
            return SQLStorage(engine: try await SQLiteEngine.open(path: path, logger: logger), logger: logger)
        case .postgres(let postgres):
            return SQLStorage(engine: try await PostgresEngine.open(location: postgres, logger: logger), logger: logger)
        }
    }

    public func run() async { await engine.run() }
    public func close() async { await engine.close() }

    // MARK: Schema

    public func migrate() async throws -> [Int] {
        try await engine.run(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
        let done = Set(try await appliedMigrations())
        if let newest = done.max(), newest > Migrations.latest {
            throw StorageError.newerSchema(found: newest, known: Migrations.latest)
        }
        var applied: [Int] = []
        for step in Migrations.steps where !done.contains(step.version) {
            let now = Int64(Date().timeIntervalSince1970)
            // One transaction per step: a step is in, with its row, or not at all.
            // Two servers starting at once on one PostgreSQL database: the second's
            // insert of the same version fails and its step rolls back.
            try await engine.transaction { session in
                for statement in step.statements { try await session.run(statement) }
                try await session.run(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", SQLValue(step.version), SQLValue(now))
            }
            logger.info(
                "applied schema step", metadata: ["hallpass.schema.version": "\(step.version)", "hallpass.schema.step": "\(step.summary)"])
            applied.append(step.version)
        }
        return applied
    }

    public func appliedMigrations() async throws -> [Int] {
        try await engine.run("SELECT version FROM schema_migrations ORDER BY version").map { Int(try $0.integer("version")) }
    }

    // MARK: Enrolment

    public func createEnrolmentToken(_ token: StoredEnrolmentToken) async throws {
        try await engine.run(
            "INSERT INTO enrolment_tokens (hash, room, uses_left, expires_at, created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
            SQLValue(token.hash), SQLValue(token.room), SQLValue(token.usesLeft), SQLValue(token.expiresAt),
            SQLValue(token.createdBy), SQLValue(token.createdAt))
    }

    public func enrolmentToken(hash: String) async throws -> StoredEnrolmentToken? {
        try await engine.run("SELECT * FROM enrolment_tokens WHERE hash = $1", SQLValue(hash)).first.map(Self.token)
    }

    public func enrol(_ machine: NewMachine, tokenHash: String, now: Int64) async throws -> String {
        let outcome: Result<String, TokenRefusal> = try await engine.transaction { session in
            // One statement takes the use: with concurrent enrolments on one token,
            // each sees the count the one before it left (a row lock in PostgreSQL,
            // the single writer in SQLite), so no token gives more uses than it had.
            let taken = try await session.run(
                "UPDATE enrolment_tokens SET uses_left = uses_left - 1 WHERE hash = $1 AND uses_left > 0 AND expires_at > $2 RETURNING room",
                SQLValue(tokenHash), SQLValue(now))
            guard let room = try taken.first?.text("room") else {
                let rows = try await session.run("SELECT * FROM enrolment_tokens WHERE hash = $1", SQLValue(tokenHash))
                guard let token = try rows.first.map(Self.token) else { return .failure(.unknown) }
                return .failure(token.usesLeft <= 0 ? .usedUp : .expired)
            }
            try await session.run(
                "INSERT INTO machines (id, public_key, room, hostname, version, enrolled_at) VALUES ($1, $2, $3, $4, $5, $6)",
                SQLValue(machine.id), SQLValue(machine.publicKey), SQLValue(room), SQLValue(machine.hostname),
                SQLValue(machine.version), SQLValue(now))
            return .success(room)
        }
        return try outcome.get()
    }

    // MARK: Machines

    public func machine(id: String) async throws -> StoredMachine? {
        try await engine.run("SELECT * FROM machines WHERE id = $1", SQLValue(id)).first.map(Self.machine)
    }

    public func machine(publicKey: String) async throws -> StoredMachine? {
        try await engine.run("SELECT * FROM machines WHERE public_key = $1", SQLValue(publicKey)).first.map(Self.machine)
    }

    public func machines() async throws -> [StoredMachine] {
        try await engine.run("SELECT * FROM machines ORDER BY room, hostname, id").map(Self.machine)
    }

    public func revokeMachine(id: String, now: Int64) async throws -> Bool {
        let rows = try await engine.run(
            "UPDATE machines SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING id", SQLValue(id), SQLValue(now))
        return !rows.isEmpty
    }

    public func recordCheckIn(machine: String, _ checkIn: CheckIn, now: Int64) async throws {
        let users = String(decoding: try JSONEncoder().encode(checkIn.users), as: UTF8.self)
        // The right-hand sides read the row as it was: the drops of the check-in before this one are kept.
        try await engine.run(
            """
            UPDATE machines SET checkin_at = $2, checkin_version = $3, rules_version = $4, rules_since = $5, filter_data = $6,
                filter_data_restarts = $7, fail_mode = $8, previous_queue_drops = queue_drops, queue_drops = $9,
                records_waiting = $10, checkin_records_dropped = $11, users = $12
            WHERE id = $1
            """,
            SQLValue(machine), SQLValue(now), SQLValue(checkIn.version), SQLValue(checkIn.rulesVersion), SQLValue(checkIn.rulesSince),
            SQLValue(checkIn.filterData.rawValue), SQLValue(checkIn.filterDataRestarts), SQLValue(checkIn.failMode.rawValue),
            SQLValue(checkIn.queueDrops), SQLValue(checkIn.recordsWaiting), SQLValue(checkIn.recordsDropped), SQLValue(users))
    }

    // MARK: Records

    static let recordColumns = [
        "machine", "sequence", "time", "uid", "user_name", "group_name", "kind", "host", "url", "destination", "port",
        "action", "category", "rule", "reason", "rules_version", "received_at",
    ]

    public func storeRecords(machine: String, records: [StoredRecord], dropped: Int64, now: Int64, safeguarding: SafeguardingPolicy?)
        async throws -> StoreOutcome
    {
        let highest = records.map(\.record.sequence).max() ?? 0
        return try await engine.transaction { session in
            // A hundred rows a statement: 1,700 parameters, well within both engines' limits.
            var start = 0
            var inserted: Int64 = 0
            // The records that were new (for the alerts), each sequence once: a post that
            // names one twice stores it once.
            var new: [StoredRecord] = []
            var newSequences: Set<Int64> = []
            while start < records.count {
                let chunk = records[start..<min(start + 100, records.count)]
                var placeholders: [String] = []
                var binds: [SQLValue] = []
                for stored in chunk {
                    let first = binds.count + 1
                    placeholders.append("(" + (first..<first + Self.recordColumns.count).map { "$\($0)" }.joined(separator: ", ") + ")")
                    let record = stored.record
                    binds += [
                        SQLValue(machine), SQLValue(record.sequence), SQLValue(stored.timeMilliseconds), SQLValue(record.uid),
                        SQLValue(record.user), SQLValue(record.group), SQLValue(record.kind), SQLValue(record.host),
                        SQLValue(record.url), SQLValue(record.destination), SQLValue(record.port), SQLValue(record.action),
                        SQLValue(record.category), SQLValue(record.rule), SQLValue(record.reason), SQLValue(record.rulesVersion),
                        SQLValue(now),
                    ]
                }
                // RETURNING lists the rows inserted, not those already there.
                let stored = try await session.query(
                    "INSERT INTO records (\(Self.recordColumns.joined(separator: ", "))) VALUES \(placeholders.joined(separator: ", "))"
                        + " ON CONFLICT (machine, sequence) DO NOTHING RETURNING sequence",
                    binds)
                inserted += Int64(stored.count)
                if safeguarding != nil {
                    let sequences = Set(try stored.map { try $0.integer("sequence") })
                    for record in chunk where sequences.contains(record.record.sequence) && newSequences.insert(record.record.sequence).inserted {
                        new.append(record)
                    }
                }
                start += 100
            }
            let rows = try await session.run(
                """
                UPDATE machines SET stored_through = CASE WHEN stored_through < $2 THEN $2 ELSE stored_through END,
                    records_dropped = records_dropped + $3
                WHERE id = $1 RETURNING stored_through, room
                """,
                SQLValue(machine), SQLValue(highest), SQLValue(dropped))
            guard let row = rows.first else { throw StorageError.failed("no machine \(machine) to store records for") }
            var outcome = StoreOutcome(storedThrough: try row.integer("stored_through"), inserted: inserted)
            if let safeguarding, !new.isEmpty {
                let raised = try await Self.raiseAlerts(
                    session, machine: machine, room: try row.text("room"), records: new, safeguarding: safeguarding, now: now)
                outcome.alerts = raised.alerts
                outcome.suppressed = raised.suppressed
            }
            return outcome
        }
    }

    public func records(machine: String) async throws -> [StoredRecord] {
        try await engine.run("SELECT * FROM records WHERE machine = $1 ORDER BY sequence", SQLValue(machine)).map(Self.record)
    }

    public func recordCount() async throws -> Int64 {
        try await engine.run("SELECT COUNT(*) AS count FROM records").first?.integer("count") ?? 0
    }

    public func oldestRecordTime() async throws -> Int64? {
        try await engine.run("SELECT MIN(time) AS oldest FROM records").first?.optionalInteger("oldest")
    }

    public func removeRecords(before: Int64) async throws -> Int64 {
        // Counted first in the same transaction (on the time index), rather than
        // with RETURNING, which would bring a whole day's rows back to count them.
        try await engine.transaction { session in
            let count = try await session.run("SELECT COUNT(*) AS count FROM records WHERE time < $1", SQLValue(before)).first?.integer("count") ?? 0
            try await session.run("DELETE FROM records WHERE time < $1", SQLValue(before))
            return count
        }
    }

    // MARK: API tokens and state

    public func createAPIToken(_ token: StoredAPIToken, hash: String) async throws {
        try await engine.run(
            "INSERT INTO api_tokens (id, hash, role, created_by, created_at, scope_rooms, scope_groups) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            SQLValue(token.id), SQLValue(hash), SQLValue(token.role.rawValue), SQLValue(token.createdBy), SQLValue(token.createdAt),
            SQLValue(Self.lines(token.scope.rooms)), SQLValue(Self.lines(token.scope.groups)))
    }

    public func apiToken(hash: String) async throws -> StoredAPIToken? {
        try await engine.run("SELECT * FROM api_tokens WHERE hash = $1", SQLValue(hash)).first.map(Self.apiToken)
    }

    public func apiTokens() async throws -> [StoredAPIToken] {
        try await engine.run("SELECT * FROM api_tokens ORDER BY created_at, id").map(Self.apiToken)
    }

    static func apiToken(_ row: SQLRow) throws -> StoredAPIToken {
        guard let role = Role(rawValue: try row.text("role")) else { throw StorageError.unexpectedRow(column: "role") }
        return StoredAPIToken(
            id: try row.text("id"), role: role, scope: Scope(rooms: Self.names(row.optionalText("scope_rooms")), groups: Self.names(row.optionalText("scope_groups"))),
            createdBy: try row.text("created_by"), createdAt: try row.integer("created_at"))
    }

    public func publishedVersion() async throws -> Int64 {
        let published =
            try await engine.run("SELECT COALESCE(MAX(bundle_version), 0) AS published FROM publications WHERE state = 'published'")
            .first?.integer("published") ?? 0
        return max(published, try await Self.publishedVersionFloor(engine))
    }

    public func setPublishedVersion(_ version: Int64) async throws {
        try await engine.run(
            "INSERT INTO server_state (name, value) VALUES ('publishedVersion', $1) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            SQLValue(String(version)))
    }

    // MARK: Rows to values

    static func token(_ row: SQLRow) throws -> StoredEnrolmentToken {
        StoredEnrolmentToken(
            hash: try row.text("hash"), room: try row.text("room"), usesLeft: Int(try row.integer("uses_left")),
            expiresAt: try row.integer("expires_at"), createdBy: try row.text("created_by"), createdAt: try row.integer("created_at"))
    }

    static func machine(_ row: SQLRow) throws -> StoredMachine {
        var checkIn: CheckIn?
        if row.optionalInteger("checkin_at") != nil {
            let users = row.optionalText("users").flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) } ?? []
            checkIn = CheckIn(
                version: row.optionalText("checkin_version") ?? "", rulesVersion: row.optionalInteger("rules_version") ?? 0,
                rulesSince: row.optionalText("rules_since"),
                filterData: row.optionalText("filter_data").flatMap(CheckIn.FilterDataState.init(rawValue:)) ?? .down,
                filterDataRestarts: row.optionalInteger("filter_data_restarts") ?? 0,
                failMode: row.optionalText("fail_mode").flatMap(CheckIn.FailMode.init(rawValue:)) ?? .open,
                queueDrops: row.optionalInteger("queue_drops") ?? 0, recordsWaiting: row.optionalInteger("records_waiting") ?? 0,
                recordsDropped: row.optionalInteger("checkin_records_dropped") ?? 0, users: users)
        }
        return StoredMachine(
            id: try row.text("id"), publicKey: try row.text("public_key"), room: try row.text("room"),
            hostname: try row.text("hostname"), version: try row.text("version"), enrolledAt: try row.integer("enrolled_at"),
            revokedAt: row.optionalInteger("revoked_at"), storedThrough: try row.integer("stored_through"),
            recordsDropped: try row.integer("records_dropped"), checkInAt: row.optionalInteger("checkin_at"), lastCheckIn: checkIn,
            previousQueueDrops: row.optionalInteger("previous_queue_drops"))
    }

    static func record(_ row: SQLRow) throws -> StoredRecord {
        let time = try row.integer("time")
        return StoredRecord(
            machine: try row.text("machine"), timeMilliseconds: time,
            record: MachineRecord(
                sequence: try row.integer("sequence"), time: RecordTime.format(milliseconds: time), uid: row.optionalInteger("uid"),
                user: row.optionalText("user_name"), group: row.optionalText("group_name"), kind: row.optionalText("kind"),
                host: row.optionalText("host"), url: row.optionalText("url"), destination: row.optionalText("destination"),
                port: row.optionalInteger("port"), action: try row.text("action"), category: row.optionalText("category"),
                rule: row.optionalText("rule"), reason: row.optionalText("reason"), rulesVersion: row.optionalInteger("rules_version")))
    }
}
