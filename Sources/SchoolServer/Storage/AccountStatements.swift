import Foundation

/// The statements of the console's accounts: people, sessions, OpenID
/// sign-in states and the audit trail (schema step 4).
extension SQLStorage {
    // MARK: People

    public func addPerson(_ person: StoredPerson) async throws -> Bool {
        // ON CONFLICT DO NOTHING: a login taken already is an answer, not an error of the engine.
        let rows = try await engine.run(
            """
            INSERT INTO people (login, display_name, role, scope_rooms, scope_groups, method, password_hash, failed_attempts,
                locked_until, disabled_at, created_by, created_at, last_sign_in_at, email)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (login) DO NOTHING RETURNING login
            """,
            SQLValue(person.login), SQLValue(person.displayName), SQLValue(person.role.rawValue), SQLValue(Self.lines(person.scope.rooms)),
            SQLValue(Self.lines(person.scope.groups)), SQLValue(person.method.rawValue), SQLValue(person.passwordHash),
            SQLValue(person.failedAttempts), SQLValue(person.lockedUntil), SQLValue(person.disabledAt), SQLValue(person.createdBy),
            SQLValue(person.createdAt), SQLValue(person.lastSignInAt), SQLValue(person.email))
        return !rows.isEmpty
    }

    public func person(login: String) async throws -> StoredPerson? {
        try await engine.run("SELECT * FROM people WHERE login = $1", SQLValue(login)).first.map(Self.person)
    }

    public func people() async throws -> [StoredPerson] {
        try await engine.run("SELECT * FROM people ORDER BY login").map(Self.person)
    }

    public func updatePerson(_ person: StoredPerson) async throws -> Bool {
        // The whole account is written, its email too: callers change a person read just before.
        let rows = try await engine.run(
            """
            UPDATE people SET display_name = $2, role = $3, scope_rooms = $4, scope_groups = $5, method = $6, password_hash = $7,
                failed_attempts = $8, locked_until = $9, disabled_at = $10, email = $11
            WHERE login = $1 RETURNING login
            """,
            SQLValue(person.login), SQLValue(person.displayName), SQLValue(person.role.rawValue), SQLValue(Self.lines(person.scope.rooms)),
            SQLValue(Self.lines(person.scope.groups)), SQLValue(person.method.rawValue), SQLValue(person.passwordHash),
            SQLValue(person.failedAttempts), SQLValue(person.lockedUntil), SQLValue(person.disabledAt), SQLValue(person.email))
        return !rows.isEmpty
    }

    public func removePerson(login: String) async throws -> Bool {
        try await engine.transaction { session in
            try await session.run("DELETE FROM sessions WHERE login = $1", SQLValue(login))
            return !(try await session.run("DELETE FROM people WHERE login = $1 RETURNING login", SQLValue(login))).isEmpty
        }
    }

    public func recordFailedSignIn(login: String, now: Int64, lockAfter: Int, lockFor: Int64) async throws -> Bool {
        // One statement: two failures at once both count. The right-hand sides
        // read the row as it was. Reaching `lockAfter` locks the account and
        // starts the count again; failures while it is locked change nothing
        // (they neither extend the lock nor count toward the next).
        let rows = try await engine.run(
            """
            UPDATE people SET
                locked_until = CASE WHEN failed_attempts + 1 >= $3 THEN $4 ELSE locked_until END,
                failed_attempts = CASE WHEN failed_attempts + 1 >= $3 THEN 0 ELSE failed_attempts + 1 END
            WHERE login = $1 AND (locked_until IS NULL OR locked_until <= $2)
            RETURNING locked_until
            """,
            SQLValue(login), SQLValue(now), SQLValue(lockAfter), SQLValue(now + lockFor))
        guard let lockedUntil = rows.first?.optionalInteger("locked_until") else { return false }
        return lockedUntil > now
    }

    public func recordSignIn(login: String, now: Int64) async throws {
        try await engine.run(
            "UPDATE people SET failed_attempts = 0, locked_until = NULL, last_sign_in_at = $2 WHERE login = $1", SQLValue(login), SQLValue(now))
    }

    // MARK: Sessions

    public func addSession(_ session: StoredSession) async throws {
        try await engine.run(
            "INSERT INTO sessions (hash, login, csrf_token, created_at, last_seen, expires_at, method) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            SQLValue(session.hash), SQLValue(session.login), SQLValue(session.csrfToken), SQLValue(session.createdAt),
            SQLValue(session.lastSeen), SQLValue(session.expiresAt), SQLValue(session.method.rawValue))
    }

    public func session(hash: String) async throws -> StoredSession? {
        try await engine.run("SELECT * FROM sessions WHERE hash = $1", SQLValue(hash)).first.map(Self.session)
    }

    public func sessions(login: String) async throws -> [StoredSession] {
        try await engine.run("SELECT * FROM sessions WHERE login = $1 ORDER BY created_at", SQLValue(login)).map(Self.session)
    }

    public func touchSession(hash: String, now: Int64) async throws {
        try await engine.run("UPDATE sessions SET last_seen = $2 WHERE hash = $1 AND last_seen < $2", SQLValue(hash), SQLValue(now))
    }

    public func removeSession(hash: String) async throws -> Bool {
        !(try await engine.run("DELETE FROM sessions WHERE hash = $1 RETURNING hash", SQLValue(hash))).isEmpty
    }

    public func removeSessions(login: String) async throws -> Int {
        try await engine.run("DELETE FROM sessions WHERE login = $1 RETURNING hash", SQLValue(login)).count
    }

    public func removeEndedSessions(now: Int64, idleBefore: Int64) async throws -> Int {
        try await engine.transaction { session in
            let count = try await session.run(
                "SELECT COUNT(*) AS count FROM sessions WHERE expires_at <= $1 OR last_seen < $2", SQLValue(now), SQLValue(idleBefore)
            ).first?.integer("count") ?? 0
            try await session.run("DELETE FROM sessions WHERE expires_at <= $1 OR last_seen < $2", SQLValue(now), SQLValue(idleBefore))
            return Int(count)
        }
    }

    // MARK: OpenID sign-in states

    public func addSignInState(_ state: StoredSignInState) async throws {
        try await engine.run(
            "INSERT INTO sign_in_states (hash, verifier, nonce, return_path, created_at) VALUES ($1, $2, $3, $4, $5)",
            SQLValue(state.hash), SQLValue(state.verifier), SQLValue(state.nonce), SQLValue(state.returnPath), SQLValue(state.createdAt))
    }

    public func takeSignInState(hash: String, notBefore: Int64) async throws -> StoredSignInState? {
        // One statement deletes and answers: a state is taken once, also by two
        // callbacks at once; one made before `notBefore` is gone and not answered.
        // The old ones of everyone go in the same transaction.
        try await engine.transaction { session in
            let rows = try await session.run(
                "DELETE FROM sign_in_states WHERE hash = $1 RETURNING hash, verifier, nonce, return_path, created_at", SQLValue(hash))
            try await session.run("DELETE FROM sign_in_states WHERE created_at < $1", SQLValue(notBefore))
            guard let row = rows.first else { return nil }
            let state = StoredSignInState(
                hash: try row.text("hash"), verifier: try row.text("verifier"), nonce: try row.text("nonce"),
                returnPath: try row.text("return_path"), createdAt: try row.integer("created_at"))
            return state.createdAt >= notBefore ? state : nil
        }
    }

    // MARK: Audit trail

    public func audit(_ event: NewAuditEvent) async throws {
        let id = AuditEventID.make(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000))
        try await engine.run(
            "INSERT INTO audit_events (id, time, actor, action, target, reason, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            SQLValue(id), SQLValue(event.time), SQLValue(event.actor), SQLValue(event.action), SQLValue(event.target),
            SQLValue(event.reason), SQLValue(event.detail))
    }

    public func auditEvents(_ query: AuditQuery) async throws -> AuditPage {
        var conditions: [String] = []
        var binds: [SQLValue] = []
        func bind(_ value: SQLValue) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        if let actor = query.actor { conditions.append("actor = \(bind(.text(actor)))") }
        if let action = query.action { conditions.append("action = \(bind(.text(action)))") }
        if let since = query.since { conditions.append("time >= \(bind(.integer(since)))") }
        if let until = query.until { conditions.append("time < \(bind(.integer(until)))") }
        if let after = query.after {
            let time = bind(.integer(after.time))
            let id = bind(.text(after.id))
            conditions.append("time <= \(time) AND (time < \(time) OR id < \(id))")
        }
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let limit = bind(.integer(Int64(query.limit) + 1))
        var events = try await engine.query(
            "SELECT * FROM audit_events\(filter) ORDER BY time DESC, id DESC LIMIT \(limit)", binds
        ).map { row throws in
            StoredAuditEvent(
                id: try row.text("id"),
                event: NewAuditEvent(
                    time: try row.integer("time"), actor: try row.text("actor"), action: try row.text("action"),
                    target: row.optionalText("target"), reason: row.optionalText("reason"), detail: row.optionalText("detail")))
        }
        var next: AuditCursor?
        if events.count > query.limit {
            events.removeLast(events.count - query.limit)
            if let last = events.last { next = AuditCursor(time: last.event.time, id: last.id) }
        }
        return AuditPage(events: events, next: next)
    }

    // MARK: Rows to values

    /// A scope's rooms or groups as stored: one a line.
    static func lines(_ names: [String]) -> String { names.joined(separator: "\n") }

    static func names(_ text: String?) -> [String] {
        (text ?? "").split(separator: "\n").map(String.init)
    }

    static func person(_ row: SQLRow) throws -> StoredPerson {
        guard let role = Role(rawValue: try row.text("role")) else { throw StorageError.unexpectedRow(column: "role") }
        guard let method = SignInMethod(rawValue: try row.text("method")) else { throw StorageError.unexpectedRow(column: "method") }
        return StoredPerson(
            login: try row.text("login"), displayName: try row.text("display_name"), role: role,
            scope: Scope(rooms: names(row.optionalText("scope_rooms")), groups: names(row.optionalText("scope_groups"))), method: method,
            passwordHash: row.optionalText("password_hash"), failedAttempts: Int(try row.integer("failed_attempts")),
            lockedUntil: row.optionalInteger("locked_until"), disabledAt: row.optionalInteger("disabled_at"),
            createdBy: try row.text("created_by"), createdAt: try row.integer("created_at"), lastSignInAt: row.optionalInteger("last_sign_in_at"),
            email: row.optionalText("email"))
    }

    static func session(_ row: SQLRow) throws -> StoredSession {
        guard let method = SignInMethod(rawValue: try row.text("method")) else { throw StorageError.unexpectedRow(column: "method") }
        return StoredSession(
            hash: try row.text("hash"), login: try row.text("login"), csrfToken: try row.text("csrf_token"),
            createdAt: try row.integer("created_at"), lastSeen: try row.integer("last_seen"), expiresAt: try row.integer("expires_at"),
            method: method)
    }
}

/// The OpenID client's pending sign-ins kept in the server's storage
/// (`sign_in_states`), so that any server instance on one PostgreSQL can
/// take the callback, and a state is taken once.
public struct StoredSignInStates: SignInStateStore {
    let storage: any ServerStorage

    public init(storage: any ServerStorage) {
        self.storage = storage
    }

    public func add(_ pending: PendingSignIn) async throws {
        try await storage.addSignInState(
            StoredSignInState(
                hash: pending.stateHash, verifier: pending.verifier, nonce: pending.nonce, returnPath: pending.returnTo,
                createdAt: pending.createdAt))
    }

    public func take(stateHash: String, notBefore: Int64) async throws -> PendingSignIn? {
        try await storage.takeSignInState(hash: stateHash, notBefore: notBefore).map {
            PendingSignIn(stateHash: $0.hash, verifier: $0.verifier, nonce: $0.nonce, returnTo: $0.returnPath, createdAt: $0.createdAt)
        }
    }
}
