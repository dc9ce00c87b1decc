import Foundation
public import VerdictCore

/// A safeguarding alert as the server keeps it (Migrations, step 7): what
/// a record showed that one of the published policy's `safeguarding:` rules
/// matched, and where the safeguarding lead's triage of it stands.
public struct StoredAlert: Sendable, Hashable {
    /// Where triage stands. A new alert is acknowledged (someone looks at
    /// it), escalated (passed on: the police, children's services, a
    /// parent), and closed with a note of what was done.
    public enum State: String, Sendable, Hashable, Codable, CaseIterable {
        case new, acknowledged, escalated, closed

        /// The states a triage step to `self` may start from: forward only,
        /// and a closed alert stays closed (its note is the record of what was done).
        public var reachedFrom: [State] {
            switch self {
            case .new: []
            case .acknowledged: [.new]
            case .escalated: [.new, .acknowledged]
            case .closed: [.new, .acknowledged, .escalated]
            }
        }
    }

    /// `al-` and 16 of a-z, 2-7 (`Secrets.newAlertID`).
    public var id: String
    /// The record's time (Unix ms, the machine's clock).
    public var time: Int64
    /// When the server made the alert (Unix seconds).
    public var createdAt: Int64
    public var machine: String
    /// The machine's room when the record arrived.
    public var room: String
    /// The record's user (a name or a pseudonym, as the machine wrote it).
    public var user: String?
    public var group: String?
    public var ruleID: String
    public var severity: SafeguardingSeverity
    /// `allow` or `block`.
    public var action: String
    public var host: String?
    public var url: String?
    public var category: String?
    /// The search term read from the record's URL, when it was a search.
    public var searchTerm: String?
    public var recordSequence: Int64
    public var state: State
    /// The last triage step's note (each step's is in the audit trail).
    public var note: String?
    public var updatedAt: Int64?
    /// `Principal.author` of the last triage step.
    public var updatedBy: String?
    /// Whether the delivery has taken it (email, webhook).
    public var dispatched: Bool

    /// Who the repeat limit and attempts count for: the user as the record
    /// names them, or the machine when it names no one (`log.users: none`).
    public var person: String { Self.person(user: user, machine: machine) }

    public static func person(user: String?, machine: String) -> String { user ?? "machine:" + machine }
}

/// Which alerts a list shows, newest first (by creation, then id), within a
/// principal's scope (the alert's room or its person's group).
public struct AlertQuery: Sendable, Hashable {
    /// nil: every state.
    public var states: Set<StoredAlert.State>?
    public var severity: SafeguardingSeverity?
    public var user: String?
    /// Alerts whose record's time (Unix ms) is at or after this.
    public var since: Int64?
    /// ... and before this.
    public var until: Int64?
    public var after: AlertCursor?
    public var limit: Int
    public var scope: Scope

    public init(
        states: Set<StoredAlert.State>? = nil, severity: SafeguardingSeverity? = nil, user: String? = nil, since: Int64? = nil,
        until: Int64? = nil, after: AlertCursor? = nil, limit: Int = 100, scope: Scope = .school
    ) {
        self.states = states
        self.severity = severity
        self.user = user
        self.since = since
        self.until = until
        self.after = after
        self.limit = limit
        self.scope = scope
    }
}

/// Where a page of alerts ends: its last alert's creation and id, handed
/// out as an opaque token (`a1.` and base64url), as records' cursors are.
public struct AlertCursor: Sendable, Hashable {
    public var createdAt: Int64
    public var id: String

    public init(createdAt: Int64, id: String) {
        self.createdAt = createdAt
        self.id = id
    }

    static let prefix = "a1."

    public var token: String { Self.prefix + Secrets.base64URL(Array("\(createdAt).\(id)".utf8)) }

    /// The cursor a `token` names; nil for anything this server did not make.
    public init?(token: String) {
        guard token.utf8.count <= 128, token.hasPrefix(Self.prefix) else { return nil }
        let encoded = token.dropFirst(Self.prefix.count)
        guard !encoded.isEmpty, encoded.utf8.allSatisfy(Secrets.isBase64URL) else { return nil }
        var base64 = encoded.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let text = String(data: data, encoding: .utf8) else { return nil }
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let createdAt = Int64(parts[0]),
            Secrets.isAlertID(String(parts[1]))
        else { return nil }
        self.init(createdAt: createdAt, id: String(parts[1]))
    }
}

public struct AlertPage: Sendable, Hashable {
    public var alerts: [StoredAlert]
    /// nil on the last page.
    public var next: AlertCursor?

    public init(alerts: [StoredAlert], next: AlertCursor?) {
        self.alerts = alerts
        self.next = next
    }
}

/// The published policy's version, as the alerts at ingest need it: which
/// `safeguarding:` is in force (read again only when it changes).
public struct PublishedPolicyVersion: Sendable, Hashable {
    public var bundleVersion: Int64
    public var policyVersion: Int64

    public init(bundleVersion: Int64, policyVersion: Int64) {
        self.bundleVersion = bundleVersion
        self.policyVersion = policyVersion
    }
}
