import Foundation

/// Who the school's provider says signed in, and what the console makes of it.
public struct VerifiedIdentity: Sendable, Hashable {
    /// The console login: `loginClaim`, lower-cased.
    public var login: String
    /// `nameClaim`, or the login when the token has none.
    public var name: String
    /// From the first rule that matches; nil only with `unmatched: people`
    /// when none does: then the console's own list of people decides.
    public var role: Role?
    /// The union of the scopes of every matching rule of that role
    /// (whole school when one of them has none).
    public var scope: Scope
    /// The provider's `sub`: the one claim that never changes for a person.
    public var subject: String
    /// Where the person was going when the sign-in began (a local path).
    public var returnTo: String
    /// The `email` claim, when it is an address the server sends to and the
    /// provider does not say it is unverified (`email_verified: false`).
    public var email: String?

    public init(login: String, name: String, role: Role?, scope: Scope, subject: String, returnTo: String, email: String? = nil) {
        self.email = email
        self.login = login
        self.name = name
        self.role = role
        self.scope = scope
        self.subject = subject
        self.returnTo = returnTo
    }
}

extension OpenIDConfiguration {
    /// Reads the configured claims of a verified ID token. The rules are
    /// read in the order written and the first that matches gives the role,
    /// so a school puts its narrowest rule first ("it-admins" before
    /// "staff"); a teacher in several class groups sees the rooms and groups
    /// of every rule of that role that matches.
    public func identity(from claims: IDTokenClaims, returnTo: String) throws(ServerError) -> VerifiedIdentity {
        guard let subject = claims["sub"]?.string else {
            throw ServerError(code: "oidc.id-token.subject", message: "the ID token has no subject (sub)")
        }
        guard let rawLogin = claims[loginClaim]?.string else {
            throw ServerError(
                code: "oidc.claims",
                message: "the ID token has no \(loginClaim) claim (signIn.oidc.loginClaim); ask the provider for it with a scope, e.g. profile or email")
        }
        let login = rawLogin.lowercased()
        guard Self.isLogin(login) else {
            throw ServerError(
                code: "oidc.claims",
                message: "the \(loginClaim) claim '\(rawLogin.prefix(80))' is not a console login (1 to 64 of a-z, 0-9, '.', '_', '-', '@')")
        }
        var name = claims[nameClaim]?.string?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        if name.isEmpty { name = login }
        if name.count > 200 { name = String(name.prefix(200)) }

        var email: String?
        if let claimed = claims["email"]?.string, MailAddress.refusal(claimed) == nil, claims["email_verified"] != .bool(false) {
            email = claimed
        }

        let values = Set(claims[rolesClaim]?.strings ?? [])
        let matching = roles.filter { values.contains($0.value) }
        guard let first = matching.first else {
            switch unmatched {
            case .people:
                return VerifiedIdentity(login: login, name: name, role: nil, scope: .school, subject: subject, returnTo: returnTo, email: email)
            case .refuse:
                let held = values.isEmpty ? "none" : values.sorted().prefix(10).joined(separator: ", ")
                throw ServerError(
                    code: "oidc.no-role",
                    message: "\(login) signed in at the provider, but no rule under signIn.oidc.roles matches their \(rolesClaim) (\(held))")
            }
        }
        let sameRole = matching.filter { $0.role == first.role }
        let scope =
            sameRole.contains(where: { $0.scope.isWholeSchool })
            ? Scope.school
            : Scope(rooms: sameRole.flatMap(\.scope.rooms), groups: sameRole.flatMap(\.scope.groups))
        return VerifiedIdentity(login: login, name: name, role: first.role, scope: scope, subject: subject, returnTo: returnTo, email: email)
    }

    /// The console's logins: 1 to 64 of a-z, 0-9, '.', '_', '-', '@' (as the people table takes them).
    static func isLogin(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64
            && text.utf8.allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 46 || $0 == 95 || $0 == 45 || $0 == 64 }
    }
}
