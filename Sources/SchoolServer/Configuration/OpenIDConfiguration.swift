import Foundation
public import HallpassConfig

/// `signIn.oidc` in server.yaml: signing in to the console with the
/// school's own accounts through its OpenID Connect provider (docs/server.md,
/// "Signing in with the school's accounts"). Read by `OpenIDConfiguration(_:)`,
/// every key checked as the rest of the file is.
public struct OpenIDConfiguration: Sendable, Hashable {
    /// One line of `roles:`: people whose `rolesClaim` holds `value` get `role`,
    /// seeing `scope` (empty: the whole school; a teacher's is never empty).
    public struct RoleRule: Sendable, Hashable {
        public var value: String
        public var role: Role
        public var scope: Scope

        public init(value: String, role: Role, scope: Scope = .school) {
            self.value = value
            self.role = role
            self.scope = scope
        }
    }

    /// What happens to someone the provider signed in whom no rule matches.
    public enum Unmatched: String, Sendable, Hashable, CaseIterable {
        /// Refused: only the provider's groups give a role (the default).
        case refuse
        /// The console's own list of people decides: the identity comes back
        /// without a role, and only a person an admin added by that login
        /// (`hallpass-server user add`) signs in, with the role given there.
        case people
    }

    /// The provider's issuer, exactly as its discovery document writes it
    /// (`https://accounts.google.com`, `https://login.microsoftonline.com/TENANT/v2.0`).
    public var issuer: String
    public var clientID: String
    /// A file holding the client secret (its first line); never readable by others.
    public var clientSecretFile: String
    /// Where the provider sends the browser back: the console's `/console/oidc/callback`
    /// as the browser reaches it, registered with the provider as it is written here.
    public var redirectURL: String
    public var scopes: [String] = ["openid", "profile", "email"]
    /// The claim that is the person's login in the console (lower-cased).
    public var loginClaim = "preferred_username"
    public var nameClaim = "name"
    /// The claim whose values (a string or a list of strings) the rules match.
    public var rolesClaim = "groups"
    public var roles: [RoleRule] = []
    public var unmatched: Unmatched = .refuse
    /// PEM certificates to trust for the provider instead of the system's
    /// (a school's own provider under its own CA).
    public var caFile: String? = nil

    public init(issuer: String, clientID: String, clientSecretFile: String, redirectURL: String) {
        self.issuer = issuer
        self.clientID = clientID
        self.clientSecretFile = clientSecretFile
        self.redirectURL = redirectURL
    }

    static let keys = [
        "issuer", "clientID", "clientSecretFile", "redirectURL", "scopes", "loginClaim", "nameClaim", "rolesClaim", "roles",
        "unmatched", "caFile",
    ]

    /// Reads `signIn.oidc`.
    public init(_ node: ConfigNode) throws(ConfigurationError) {
        let keys = try node.mapping(allowed: Self.keys)
        func required(_ name: String, _ what: String) throws(ConfigurationError) -> ConfigNode {
            guard let value = keys[name] else { throw node.error("give \(name): \(what)") }
            return value
        }
        let issuerNode = try required("issuer", "the provider's issuer, an https URL")
        issuer = try issuerNode.string()
        guard let issuerURL = URLComponents(string: issuer), issuerURL.scheme == "https", issuerURL.host?.isEmpty == false,
            issuerURL.query == nil, issuerURL.fragment == nil, issuerURL.user == nil
        else {
            throw issuerNode.error("expected the provider's issuer as an https URL without query or fragment, got '\(issuer)'")
        }
        let clientNode = try required("clientID", "the client id the provider gave the console")
        clientID = try clientNode.string()
        guard !clientID.isEmpty, clientID.utf8.count <= 256, clientID.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else {
            throw clientNode.error("expected the client id: 1 to 256 printable characters without spaces")
        }
        clientSecretFile = try required("clientSecretFile", "a file holding the client secret").absolutePath()
        let redirectNode = try required("redirectURL", "the console's callback as the browser reaches it, e.g. https://HOST:8443/console/oidc/callback")
        redirectURL = try redirectNode.string()
        guard Self.isRedirectURL(redirectURL) else {
            throw redirectNode.error(
                "expected an https URL without fragment (http only on 127.0.0.1, ::1 or localhost), got '\(redirectURL)'")
        }
        if let scopesNode = keys["scopes"] {
            var scopes: [String] = []
            for item in try scopesNode.list() {
                let scope = try item.string()
                // RFC 6749 3.3: scope tokens are printable ASCII without space, '"' or '\'.
                guard !scope.isEmpty, scope.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f && $0 != "\"" && $0 != "\\" }) else {
                    throw item.error("expected a scope name (printable characters without spaces or quotes), got '\(scope)'")
                }
                if !scopes.contains(scope) { scopes.append(scope) }
            }
            guard scopes.contains("openid") else { throw scopesNode.error("the scopes must include openid (OpenID Connect asks for it)") }
            self.scopes = scopes
        }
        for (name, path) in [("loginClaim", \Self.loginClaim), ("nameClaim", \Self.nameClaim), ("rolesClaim", \Self.rolesClaim)] {
            guard let claimNode = keys[name] else { continue }
            let claim = try claimNode.string()
            guard !claim.isEmpty, claim.utf8.count <= 128 else { throw claimNode.error("expected the name of a claim of the ID token") }
            self[keyPath: path] = claim
        }
        if let rolesNode = keys["roles"] {
            roles = try rolesNode.list().map { item throws(ConfigurationError) in try Self.rule(item) }
        }
        if let unmatchedNode = keys["unmatched"] { unmatched = try unmatchedNode.choice(Unmatched.self) }
        if roles.isEmpty && unmatched == .refuse {
            throw (keys["roles"] ?? node).error(
                "no rule under roles: nobody could sign in; map a value of \(rolesClaim) to a role, or set unmatched: people")
        }
        if let caNode = keys["caFile"] { caFile = try caNode.absolutePath() }
    }

    static func rule(_ item: ConfigNode) throws(ConfigurationError) -> RoleRule {
        let keys = try item.mapping(allowed: ["value", "role", "rooms", "groups"])
        guard let valueNode = keys["value"], let roleNode = keys["role"] else {
            throw item.error("each rule gives value (what the roles claim holds) and role (\(Role.personRoles.map(\.rawValue).joined(separator: ", ")))")
        }
        let value = try valueNode.string()
        guard !value.isEmpty else { throw valueNode.error("expected the claim's value to match") }
        let roleText = try roleNode.string()
        guard let role = Role(rawValue: roleText), Role.personRoles.contains(role) else {
            throw roleNode.error("expected one of \(Role.personRoles.map(\.rawValue).joined(separator: ", ")), got '\(roleText)'")
        }
        let rooms = try names(keys["rooms"], what: "room")
        let groups = try names(keys["groups"], what: "group")
        if role == .teacher && rooms.isEmpty && groups.isEmpty {
            throw item.error("a teacher's rule needs rooms or groups: a teacher sees only their own rooms and groups")
        }
        return RoleRule(value: value, role: role, scope: Scope(rooms: rooms, groups: groups))
    }

    static func names(_ node: ConfigNode?, what: String) throws(ConfigurationError) -> [String] {
        guard let node else { return [] }
        var names: [String] = []
        for item in try node.list() {
            let name = try item.string()
            guard !name.isEmpty, name.utf8.count <= 64, name.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7f }) else {
                throw item.error("a \(what) is 1 to 64 characters without spaces, e.g. lab2")
            }
            names.append(name)
        }
        return names
    }

    /// https, or http on the loopback only (RFC 8252's exception, for tests
    /// and a console reached through an SSH tunnel); no fragment (RFC 6749 3.1.2).
    static func isRedirectURL(_ text: String) -> Bool {
        guard let url = URLComponents(string: text), let host = url.host, !host.isEmpty, url.fragment == nil, url.user == nil else {
            return false
        }
        switch url.scheme {
        case "https": return true
        case "http": return ["127.0.0.1", "[::1]", "::1", "localhost"].contains(host)
        default: return false
        }
    }
}

extension ServerConfiguration {
    /// The hook of `signIn.oidc` in `init(yaml:)`.
    static func openID(_ signIn: [String: ConfigNode]) throws(ConfigurationError) -> OpenIDConfiguration? {
        try signIn["oidc"].map { node throws(ConfigurationError) in try OpenIDConfiguration(node) }
    }
}
