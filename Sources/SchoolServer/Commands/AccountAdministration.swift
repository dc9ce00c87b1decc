import Foundation

/// What `hallpass-server user ...` does, apart from argument parsing and
/// reading passwords, so that tests run the same code on both engines.
/// Each change is written to the audit trail with `author` as its actor.
extension ServerAdministration {
    /// A password as the console takes it: 10 characters or more, and at
    /// most 72 bytes (bcrypt reads no further; a longer one would be cut
    /// without a word).
    public static func passwordRefusal(_ password: String) -> String? {
        if password.count < 10 { return "a password is at least 10 characters" }
        if password.utf8.count > 72 { return "a password is at most 72 bytes (bcrypt reads no further)" }
        if password.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) { return "a password holds no control characters" }
        return nil
    }

    /// Why `email` is not an address a person's alerts may go to; nil when it may.
    public static func emailRefusal(_ email: String) -> String? {
        MailAddress.refusal(email)
    }

    /// `user add`: a local account.
    public static func addPerson(
        storage: any ServerStorage, login: String, displayName: String?, role: Role, scope: Scope, password: String, email: String? = nil,
        author: String, now: Int64
    ) async throws -> StoredPerson {
        guard StoredPerson.isLogin(login) else {
            throw ServerError(code: "user.login", message: "a login is 1 to 64 of a-z, 0-9, '.', '_', '-', '@'")
        }
        if let refusal = StoredPerson.refusal(role: role, scope: scope) { throw ServerError(code: "user.role", message: refusal) }
        if let refusal = passwordRefusal(password) { throw ServerError(code: "user.password", message: refusal) }
        let name = displayName ?? login
        guard (1...200).contains(name.count), name.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
            throw ServerError(code: "user.name", message: "a name is 1 to 200 characters without control characters")
        }
        if let email, let refusal = emailRefusal(email) { throw ServerError(code: "user.email", message: refusal) }
        let person = StoredPerson(
            login: login, displayName: name, role: role, scope: scope, method: .local,
            passwordHash: try await SignInRoutes.hashPassword(password), createdBy: author, createdAt: now, email: email)
        guard try await storage.addPerson(person) else {
            throw ServerError(code: "user.exists", message: "there is a person \(login) already (hallpass-server user list)")
        }
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: author, action: "person.add", target: login,
                detail: describe(role: role, scope: scope) + (email.map { ", email \($0)" } ?? "")))
        return person
    }

    /// `user list`: login, role, method, state, last sign-in, email, scope.
    public static func peopleTable(storage: any ServerStorage, now: Int64) async throws -> String {
        var lines = ["LOGIN                 ROLE          METHOD  STATE     LAST SIGN-IN          EMAIL                           SCOPE"]
        for person in try await storage.people() {
            let state =
                person.disabledAt != nil ? "disabled" : (person.lockedUntil.map { $0 > now } ?? false) ? "locked" : "active"
            let seen = person.lastSignInAt.map { RecordTime.format(milliseconds: $0 * 1000) } ?? "never"
            lines.append(
                [
                    person.login.padded(22), person.role.rawValue.padded(14), person.method.rawValue.padded(8), state.padded(10), seen.padded(22),
                    (person.email ?? "-").padded(32), scopeText(person.scope),
                ].joined())
        }
        return lines.joined(separator: "\n")
    }

    /// What `user set` changes; nil: kept.
    public struct PersonChange: Sendable {
        public var role: Role?
        /// Replaces the scope (an empty one is the whole school).
        public var scope: Scope?
        public var displayName: String?
        /// true: disabled (and signed out everywhere); false: enabled again (and unlocked).
        public var disabled: Bool?
        /// `.some(nil)`: the address removed.
        public var email: String??

        public init(role: Role? = nil, scope: Scope? = nil, displayName: String? = nil, disabled: Bool? = nil, email: String?? = nil) {
            self.role = role
            self.scope = scope
            self.displayName = displayName
            self.disabled = disabled
            self.email = email
        }
    }

    /// `user set`.
    public static func changePerson(storage: any ServerStorage, login: String, _ change: PersonChange, author: String, now: Int64) async throws
        -> StoredPerson
    {
        var person = try await existingPerson(storage, login)
        var changed: [String] = []
        if let role = change.role, role != person.role {
            person.role = role
            changed.append("role \(role.rawValue)")
        }
        if let scope = change.scope, scope != person.scope {
            person.scope = scope
            changed.append("scope \(scopeText(scope))")
        }
        if let refusal = StoredPerson.refusal(role: person.role, scope: person.scope) { throw ServerError(code: "user.role", message: refusal) }
        if let name = change.displayName, name != person.displayName {
            guard (1...200).contains(name.count), name.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
                throw ServerError(code: "user.name", message: "a name is 1 to 200 characters without control characters")
            }
            person.displayName = name
            changed.append("name")
        }
        if let email = change.email, email != person.email {
            if let email, let refusal = emailRefusal(email) { throw ServerError(code: "user.email", message: refusal) }
            person.email = email
            changed.append(email.map { "email \($0)" } ?? "no email")
        }
        if let disabled = change.disabled {
            if disabled && person.disabledAt == nil {
                person.disabledAt = now
                changed.append("disabled")
            } else if !disabled && (person.disabledAt != nil || person.lockedUntil != nil) {
                person.disabledAt = nil
                person.lockedUntil = nil
                person.failedAttempts = 0
                changed.append("enabled")
            }
        }
        guard !changed.isEmpty else { throw ServerError(code: "user.no-change", message: "nothing to change for \(login)") }
        _ = try await storage.updatePerson(person)
        // A disabled person's sessions end now, not at their next request.
        if person.disabledAt != nil { _ = try await storage.removeSessions(login: login) }
        try await storage.audit(
            NewAuditEvent(time: now, actor: author, action: "person.change", target: login, detail: changed.joined(separator: ", ")))
        return person
    }

    /// `user password`: a new password for a local account; its sessions end and a lock is lifted.
    public static func setPassword(storage: any ServerStorage, login: String, password: String, author: String, now: Int64) async throws {
        var person = try await existingPerson(storage, login)
        guard person.method == .local else {
            throw ServerError(code: "user.method", message: "\(login) signs in through the school's OpenID provider and has no password here")
        }
        if let refusal = passwordRefusal(password) { throw ServerError(code: "user.password", message: refusal) }
        person.passwordHash = try await SignInRoutes.hashPassword(password)
        person.failedAttempts = 0
        person.lockedUntil = nil
        _ = try await storage.updatePerson(person)
        _ = try await storage.removeSessions(login: login)
        try await storage.audit(NewAuditEvent(time: now, actor: author, action: "person.change", target: login, detail: "password"))
    }

    /// `user remove`: the account and its sessions.
    public static func removePerson(storage: any ServerStorage, login: String, author: String, now: Int64) async throws {
        guard try await storage.removePerson(login: login) else {
            throw ServerError(code: "user.unknown", message: "there is no person \(login) (hallpass-server user list)")
        }
        try await storage.audit(NewAuditEvent(time: now, actor: author, action: "person.remove", target: login))
    }

    /// `user sign-out`: ends every session of the person; returns how many.
    public static func signOutPerson(storage: any ServerStorage, login: String, author: String, now: Int64) async throws -> Int {
        _ = try await existingPerson(storage, login)
        let ended = try await storage.removeSessions(login: login)
        try await storage.audit(
            NewAuditEvent(time: now, actor: author, action: "session.sign-out-everywhere", target: login, detail: "\(ended) sessions"))
        return ended
    }

    static func existingPerson(_ storage: any ServerStorage, _ login: String) async throws -> StoredPerson {
        guard let person = try await storage.person(login: login) else {
            throw ServerError(code: "user.unknown", message: "there is no person \(login) (hallpass-server user list)")
        }
        return person
    }

    /// `rooms lab2, lab3; groups 7a` or `whole school`.
    public static func scopeText(_ scope: Scope) -> String {
        if scope.isWholeSchool { return "whole school" }
        var parts: [String] = []
        if !scope.rooms.isEmpty { parts.append("rooms " + scope.rooms.joined(separator: ", ")) }
        if !scope.groups.isEmpty { parts.append("groups " + scope.groups.joined(separator: ", ")) }
        return parts.joined(separator: "; ")
    }

    static func describe(role: Role, scope: Scope) -> String {
        "role \(role.rawValue), scope \(scopeText(scope))"
    }
}

extension String {
    fileprivate func padded(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
