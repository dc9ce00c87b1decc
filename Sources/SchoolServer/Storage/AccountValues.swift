/// The console's accounts as values: people, sessions, the states of an
/// OpenID sign-in under way, and the audit trail (docs/server.md,
/// "Accounts and sessions").

/// How a person signs in.
public enum SignInMethod: String, Sendable, Hashable, CaseIterable, Codable {
    /// A password the server keeps as a bcrypt hash.
    case local
    /// The school's OpenID provider; the server keeps no password.
    case oidc
}

/// A console account.
public struct StoredPerson: Sendable, Hashable {
    public var login: String
    public var displayName: String
    public var role: Role
    public var scope: Scope
    public var method: SignInMethod
    /// bcrypt (`$2b$12$...`); nil for an OpenID account.
    public var passwordHash: String?
    /// Failed sign-ins since the last success or the last lockout.
    public var failedAttempts: Int
    /// Unix seconds; sign-ins are refused before then.
    public var lockedUntil: Int64?
    public var disabledAt: Int64?
    /// `cli:USER`, `person:LOGIN`, ...: who made the account.
    public var createdBy: String
    public var createdAt: Int64
    public var lastSignInAt: Int64?
    /// Where the person's alert emails go (docs/server.md, "Alert delivery"): checked
    /// with `MailAddress.refusal`; nil: none.
    public var email: String?

    public init(
        login: String, displayName: String, role: Role, scope: Scope = .school, method: SignInMethod, passwordHash: String? = nil,
        failedAttempts: Int = 0, lockedUntil: Int64? = nil, disabledAt: Int64? = nil, createdBy: String, createdAt: Int64,
        lastSignInAt: Int64? = nil, email: String? = nil
    ) {
        self.login = login
        self.displayName = displayName
        self.role = role
        self.scope = scope
        self.method = method
        self.passwordHash = passwordHash
        self.failedAttempts = failedAttempts
        self.lockedUntil = lockedUntil
        self.disabledAt = disabledAt
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.lastSignInAt = lastSignInAt
        self.email = email
    }

    /// Who the person is when signed in.
    public var principal: Principal { Principal(kind: .person(login), role: role, scope: scope) }

    /// A login: 1 to 64 of lower-case letters, digits, `.`, `_`, `-`, `@`.
    public static func isLogin(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return (1...64).contains(bytes.count)
            && bytes.allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 46 || $0 == 95 || $0 == 45 || $0 == 64 }
    }

    /// Why an account of `role` and `scope` may not be: a teacher without a
    /// scope, a person holding `metrics`, an admin with a scope (an admin
    /// changes the whole school's policy: a scope would promise what it does
    /// not keep). Nil when it may be.
    public static func refusal(role: Role, scope: Scope) -> String? {
        switch role {
        case .metrics: return "a person cannot hold the role metrics (it is for a Prometheus API token)"
        case .teacher where scope.isWholeSchool: return "a teacher needs a scope: at least one --room or --group"
        case .admin where !scope.isWholeSchool: return "an admin acts on the whole school; give no --room or --group"
        default: return Scope.refusal(scope)
        }
    }
}

extension Scope {
    /// Why a room or group of `scope` is not one (empty, longer than 256
    /// characters, or with a control character); nil when all are.
    public static func refusal(_ scope: Scope) -> String? {
        for name in scope.rooms + scope.groups {
            guard !name.isEmpty, name.unicodeScalars.count <= 256, name.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f })
            else { return "a room or group is 1 to 256 characters without control characters" }
        }
        return nil
    }
}

/// A console session: kept by the SHA-256 of the cookie's value.
public struct StoredSession: Sendable, Hashable {
    public var hash: String
    public var login: String
    /// The token every form of the session carries back (random, per session).
    public var csrfToken: String
    public var createdAt: Int64
    public var lastSeen: Int64
    /// The absolute end (`console.sessionLifetime` after the sign-in).
    public var expiresAt: Int64
    public var method: SignInMethod

    public init(hash: String, login: String, csrfToken: String, createdAt: Int64, lastSeen: Int64, expiresAt: Int64, method: SignInMethod) {
        self.hash = hash
        self.login = login
        self.csrfToken = csrfToken
        self.createdAt = createdAt
        self.lastSeen = lastSeen
        self.expiresAt = expiresAt
        self.method = method
    }
}

/// An OpenID sign-in under way, from the redirect to the provider until its
/// callback: kept by the SHA-256 of the `state` parameter, taken once.
public struct StoredSignInState: Sendable, Hashable {
    public var hash: String
    /// The PKCE code verifier.
    public var verifier: String
    public var nonce: String
    /// The local /console path to go to after the sign-in.
    public var returnPath: String
    public var createdAt: Int64

    public init(hash: String, verifier: String, nonce: String, returnPath: String, createdAt: Int64) {
        self.hash = hash
        self.verifier = verifier
        self.nonce = nonce
        self.returnPath = returnPath
        self.createdAt = createdAt
    }
}

/// What happened, to be written to the audit trail. Never a password, a
/// session id, a token or a CSRF token in any of its fields.
public struct NewAuditEvent: Sendable, Hashable {
    /// Unix seconds.
    public var time: Int64
    /// `Principal.author` (`person:LOGIN`, `token:ID`, `cli:USER`), or
    /// `address:IP` for a failed sign-in.
    public var actor: String
    /// Dotted: `sign-in`, `sign-in.failed`, `policy.set`, `publish`, ...
    public var action: String
    /// What it was done to: a login, a machine, a version, a token's id.
    public var target: String?
    /// The reason given with a change.
    public var reason: String?
    /// Anything else worth keeping, in words or `key=value`.
    public var detail: String?

    public init(time: Int64, actor: String, action: String, target: String? = nil, reason: String? = nil, detail: String? = nil) {
        self.time = time
        self.actor = actor
        self.action = action
        self.target = target
        self.reason = reason
        self.detail = detail
    }
}

/// An event of the audit trail as stored: with its id, unique and ordered
/// by when it was written.
public struct StoredAuditEvent: Sendable, Hashable {
    public var id: String
    public var event: NewAuditEvent

    public init(id: String, event: NewAuditEvent) {
        self.id = id
        self.event = event
    }
}

/// What the audit trail is asked: filters that all apply, newest first,
/// one page after `after`.
public struct AuditQuery: Sendable, Hashable {
    public var actor: String?
    public var action: String?
    /// Events at or after this time (Unix seconds).
    public var since: Int64?
    /// Events before this time (Unix seconds).
    public var until: Int64?
    /// The page starts after (older than) this event.
    public var after: AuditCursor?
    public var limit: Int

    public init(
        actor: String? = nil, action: String? = nil, since: Int64? = nil, until: Int64? = nil, after: AuditCursor? = nil, limit: Int = 100
    ) {
        self.actor = actor
        self.action = action
        self.since = since
        self.until = until
        self.after = after
        self.limit = limit
    }
}

/// Where a page of the audit trail ends: its last event's time and id.
public struct AuditCursor: Sendable, Hashable {
    public var time: Int64
    public var id: String

    public init(time: Int64, id: String) {
        self.time = time
        self.id = id
    }

    /// `a1.<time>.<id>`: opaque to the console, checked when it comes back.
    public var token: String { "a1.\(time).\(id)" }

    public init?(token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard token.utf8.count <= 128, parts.count == 3, parts[0] == "a1", let time = Int64(parts[1]), AuditEventID.isID(String(parts[2]))
        else { return nil }
        self.init(time: time, id: String(parts[2]))
    }
}

public struct AuditPage: Sendable, Hashable {
    public var events: [StoredAuditEvent]
    public var next: AuditCursor?

    public init(events: [StoredAuditEvent], next: AuditCursor?) {
        self.events = events
        self.next = next
    }
}

/// Audit event ids: `e` and the wall clock's microseconds in 16 digits,
/// then 6 random base32 characters. Ordered by when they were made in
/// this process and beside others (the clock), unique by the random part.
enum AuditEventID {
    static func make(microseconds: Int64) -> String {
        let digits = String(microseconds)
        return "e" + String(repeating: "0", count: max(0, 16 - digits.count)) + digits + Secrets.randomBase32(count: 6)
    }

    static func isID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == 23 && bytes[0] == 101 && bytes[1...16].allSatisfy { $0 >= 48 && $0 <= 57 }
            && bytes[17...].allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 50 && $0 <= 55) }
    }
}
