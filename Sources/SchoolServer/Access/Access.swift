/// Who may do what on the school's server (docs/console.md): a role, a scope,
/// and the table of what each role may do. A person signed in to the console
/// and an API token are both a `Principal`; every page and every API route
/// asks the principal, never the kind of credential.

/// What a person or an API token is in the school.
public enum Role: String, Sendable, Hashable, CaseIterable, Codable {
    /// Everything: the IT admin.
    case admin
    /// The designated safeguarding lead: records, people's timelines, alerts
    /// and reports; reads the policy, never edits it (unless also an admin,
    /// which is a second account or the admin role).
    case safeguarding
    /// Their rooms and groups only: records and machines there.
    case teacher
    /// Reads everything a school reviews, changes nothing.
    case auditor
    /// `/metrics` and nothing else: for Prometheus (API tokens only).
    case metrics

    /// The roles a person's account may hold (`metrics` is for a scraper's token).
    public static let personRoles: [Role] = [.admin, .safeguarding, .teacher, .auditor]
}

/// What a principal may see: rooms (the machines' rooms, as they enrolled)
/// and groups (the policy's groups, as each record names its user's group).
/// Empty on both sides is the whole school. A record or a machine is in scope
/// when its room is one of `rooms` or its group is one of `groups`.
public struct Scope: Sendable, Hashable, Codable {
    public var rooms: [String]
    public var groups: [String]

    public init(rooms: [String] = [], groups: [String] = []) {
        self.rooms = Array(Set(rooms)).sorted()
        self.groups = Array(Set(groups)).sorted()
    }

    public static let school = Scope()

    public var isWholeSchool: Bool { rooms.isEmpty && groups.isEmpty }

    /// Whether a record of `room` and `group` (either may be unknown) is in scope.
    public func contains(room: String?, group: String?) -> Bool {
        if isWholeSchool { return true }
        if let room, rooms.contains(room) { return true }
        if let group, groups.contains(group) { return true }
        return false
    }

    /// Whether a machine of `room` is in scope (a machine has no group).
    public func contains(room: String) -> Bool { isWholeSchool || rooms.contains(room) }
}

/// One thing a page or a route does. The table `Role.may` is the only
/// place that says who may do it.
public enum Permission: String, Sendable, Hashable, CaseIterable {
    case viewDashboard
    /// Records in scope, and their CSV export.
    case viewRecords
    /// One person's records in time order (each opening is in the audit trail).
    case viewTimeline
    case viewMachines
    case revokeMachine
    case enrolMachines
    case viewPolicy
    /// Policy and list changes, publish, roll back.
    case editPolicy
    case viewPeople
    /// Accounts, roles, scopes and API tokens.
    case managePeople
    case viewAudit
    case viewMetrics
    /// A room's live rules (allow, block, focus, pause, end), for the rooms
    /// in scope: the lesson's teacher, the safeguarding lead, the admin.
    case controlRoom
    /// Students' access requests: list them and approve or deny them, within
    /// the principal's rooms and groups (admin, safeguarding lead, teacher).
    case answerRequests
    /// Safeguarding alerts in scope: the queue and each alert (admin,
    /// safeguarding lead, auditor).
    case viewAlerts
    /// Triage of alerts in scope: acknowledge, escalate, close with a note
    /// (admin, safeguarding lead; an auditor reviews, a teacher is told by them).
    case triageAlerts
    /// Start a run of the filtering test (admin).
    case runFilteringTest
    /// The filtering test's runs and results, and the annual review (admin,
    /// safeguarding lead, auditor).
    case viewReview
    /// Record that the annual review was done, with a note (admin, safeguarding lead).
    case recordReview
    /// Everything the server holds about one person, as one JSON document,
    /// for a subject access request (admin, safeguarding lead; each export
    /// is in the audit trail). Never for a role that sees pseudonyms.
    case exportPerson
    /// The digests made (when, to whom, which period, whether the email
    /// went), and a preview of one's own (admin, safeguarding lead).
    case viewDigests
}

extension Role {
    public func may(_ permission: Permission) -> Bool {
        // Answering a student is the people's who look after them; an auditor reviews, a scraper scrapes.
        if permission == .answerRequests { return [.admin, .safeguarding, .teacher].contains(self) }
        switch self {
        case .admin: return true
        case .safeguarding:
            return [
                .viewDashboard, .viewRecords, .viewTimeline, .viewMachines, .viewPolicy, .viewAudit, .controlRoom, .viewAlerts, .triageAlerts,
                .viewReview, .recordReview, .exportPerson, .viewDigests,
            ].contains(permission)
        case .teacher:
            return [.viewDashboard, .viewRecords, .viewTimeline, .viewMachines, .controlRoom].contains(permission)
        case .auditor:
            return [
                .viewDashboard, .viewRecords, .viewTimeline, .viewMachines, .viewPolicy, .viewPeople, .viewAudit, .viewMetrics, .viewAlerts,
                .viewReview,
            ].contains(permission)
        case .metrics:
            return permission == .viewMetrics
        }
    }
}

/// Who is asking: a person signed in to the console, an API token, or an
/// operator at the server's command line.
public struct Principal: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// A console account (local or from the school's OpenID provider), by login.
        case person(String)
        /// An API token, by id.
        case token(String)
        /// `hallpass-server` run by this operating-system user.
        case command(String)
    }

    public var kind: Kind
    public var role: Role
    public var scope: Scope

    public init(kind: Kind, role: Role, scope: Scope) {
        self.kind = kind
        self.role = role
        self.scope = scope
    }

    /// How the audit trail and the policy history name the principal:
    /// `person:LOGIN`, `token:ID`, `cli:USER`.
    public var author: String {
        switch kind {
        case .person(let login): return "person:\(login)"
        case .token(let id): return "token:\(id)"
        case .command(let user): return "cli:\(user)"
        }
    }

    public func may(_ permission: Permission) -> Bool { role.may(permission) }
}
