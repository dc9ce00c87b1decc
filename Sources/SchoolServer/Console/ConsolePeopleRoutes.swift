import Foundation
import Hummingbird
import Logging

/// The People page's two forms (admins only, `managePeople`): add an account
/// and change one. Both run the same checks as `hallpass-server user add`
/// and `user set` (ServerAdministration), which also write the audit trail
/// with the admin as the author. A refusal goes back to the page with a
/// code (`error=`) whose sentence the page shows; nothing the person typed
/// travels in the link.
extension ConsoleRoutes {
    /// `POST /console/people`: login, name, role, rooms, groups (comma-separated), email, password.
    /// With a password the account signs in here; without one, through the
    /// school's OpenID provider, under the same login.
    func addPerson(_ principal: Principal, _ form: ConsoleForm) async throws -> Response {
        let login = (form["login"] ?? "").trimmingCharacters(in: .whitespaces).lowercased()
        guard let role = form["role"].flatMap(Role.init(rawValue:)), Role.personRoles.contains(role) else {
            return Self.redirect("/console/people?error=role")
        }
        guard let scope = Self.scope(form) else { return Self.redirect("/console/people?error=scope") }
        let name = form["name"].map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
        let password = form["password"] ?? ""
        let email = form.text("email")
        if let email, ServerAdministration.emailRefusal(email) != nil { return Self.redirect("/console/people?error=email") }
        do {
            if password.isEmpty {
                try await addOpenIDPerson(login: login, name: name, role: role, scope: scope, email: email, author: principal.author)
            } else {
                _ = try await ServerAdministration.addPerson(
                    storage: storage, login: login, displayName: name, role: role, scope: scope, password: password, email: email,
                    author: principal.author, now: clock())
            }
        } catch let error as ServerError {
            return Self.redirect("/console/people?error=" + Self.peopleErrorCode(error))
        }
        return Self.redirect("/console/people?done=person-added")
    }

    /// `POST /console/people/{login}`: role, rooms, groups, email (empty:
    /// none; absent: kept), `enabled=yes` (absent: disabled). An admin cannot
    /// change their own role or scope or disable themselves, so that a school
    /// is never left without an admin by a slip; their own email they may.
    func changePerson(_ context: ServerRequestContext, _ principal: Principal, _ form: ConsoleForm) async throws -> Response {
        guard let login = context.parameters.get("login"), StoredPerson.isLogin(login), let person = try await storage.person(login: login) else {
            return Self.redirect("/console/people?error=login")
        }
        guard let role = form["role"].flatMap(Role.init(rawValue:)), Role.personRoles.contains(role) else {
            return Self.redirect("/console/people?error=role")
        }
        guard let scope = Self.scope(form) else { return Self.redirect("/console/people?error=scope") }
        let disabled = form["enabled"] != "yes"
        if principal.kind == .person(login), role != person.role || scope != person.scope || disabled {
            return Self.redirect("/console/people?error=self")
        }
        var change = ServerAdministration.PersonChange()
        if role != person.role { change.role = role }
        if scope != person.scope { change.scope = scope }
        if disabled != (person.disabledAt != nil) { change.disabled = disabled }
        if form["email"] != nil {
            let email = form.text("email")
            if let email, ServerAdministration.emailRefusal(email) != nil { return Self.redirect("/console/people?error=email") }
            if email != person.email { change.email = .some(email) }
        }
        do {
            _ = try await ServerAdministration.changePerson(storage: storage, login: login, change, author: principal.author, now: clock())
        } catch let error as ServerError {
            return Self.redirect("/console/people?error=" + Self.peopleErrorCode(error))
        }
        context.logger.notice("changed an account from the console", metadata: ["hallpass.target": "\(login)", "hallpass.author": "\(principal.author)"])
        return Self.redirect("/console/people?done=person-changed")
    }

    /// An account that signs in only through the school's OpenID provider: no password kept.
    func addOpenIDPerson(login: String, name: String?, role: Role, scope: Scope, email: String? = nil, author: String) async throws {
        guard StoredPerson.isLogin(login) else { throw ServerError(code: "user.login", message: "login") }
        if let refusal = StoredPerson.refusal(role: role, scope: scope) { throw ServerError(code: "user.role", message: refusal) }
        let shown = name ?? login
        guard (1...200).contains(shown.count), shown.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
            throw ServerError(code: "user.name", message: "name")
        }
        let now = clock()
        guard
            try await storage.addPerson(
                StoredPerson(
                    login: login, displayName: shown, role: role, scope: scope, method: .oidc, createdBy: author, createdAt: now, email: email))
        else { throw ServerError(code: "user.exists", message: "exists") }
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: author, action: "person.add", target: login,
                detail: "\(role.rawValue), signs in through the school's provider" + (email.map { ", email \($0)" } ?? "")))
    }

    /// The rooms and groups of a form (comma-separated, blanks dropped); nil when one is not a name.
    static func scope(_ form: ConsoleForm) -> Scope? {
        func names(_ field: String) -> [String] {
            (form[field] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        let scope = Scope(rooms: names("rooms"), groups: names("groups"))
        return Scope.refusal(scope) == nil ? scope : nil
    }

    /// The page's code for a refusal of ServerAdministration (`user.exists` -> `exists`).
    static func peopleErrorCode(_ error: ServerError) -> String {
        let code = error.code.hasPrefix("user.") ? String(error.code.dropFirst(5)) : "role"
        return PeoplePage.errorKeys[code] != nil ? code : "role"
    }
}

/// The console as the server runs it: the audit trail written for each
/// change and each opened timeline, the People and Audit pages read from
/// the storage.
extension ConsoleRoutes.Hooks {
    static func auditing(_ storage: any ServerStorage, clock: @escaping @Sendable () -> Int64) -> Self {
        Self(
            timelineOpened: { principal, user in
                try await storage.audit(NewAuditEvent(time: clock(), actor: principal.author, action: "timeline.open", target: user))
            },
            changed: { principal, change in
                try await storage.audit(
                    NewAuditEvent(time: clock(), actor: principal.author, action: change.action, target: change.target, reason: change.reason))
            })
    }
}

extension ConsoleRoutes.Sources {
    static func stored(_ storage: any ServerStorage) -> Self {
        Self(
            people: {
                try await storage.people().map { person in
                    ConsolePerson(
                        login: person.login, displayName: person.displayName, role: person.role, scope: person.scope,
                        method: person.method.rawValue, disabled: person.disabledAt != nil, lastSignInAt: person.lastSignInAt,
                        email: person.email)
                }
            },
            auditEvents: { asked in
                let page = try await storage.auditEvents(
                    AuditQuery(
                        actor: asked.actor, action: asked.action, since: asked.since, until: asked.until,
                        after: asked.after.flatMap(AuditCursor.init(token:)), limit: asked.limit))
                return ConsoleAuditPage(
                    events: page.events.map {
                        ConsoleAuditEvent(time: $0.event.time, actor: $0.event.actor, action: $0.event.action, target: $0.event.target, reason: $0.event.reason)
                    },
                    next: page.next?.token)
            })
    }
}
