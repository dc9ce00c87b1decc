/// What the server keeps, as values (the storage's rows, decoded).

/// An enrolment token as stored: the hash of its secret, never the secret.
public struct StoredEnrolmentToken: Sendable, Hashable {
    public var hash: String
    public var room: String
    public var usesLeft: Int
    /// Unix seconds.
    public var expiresAt: Int64
    public var createdBy: String
    public var createdAt: Int64

    public init(hash: String, room: String, usesLeft: Int, expiresAt: Int64, createdBy: String, createdAt: Int64) {
        self.hash = hash
        self.room = room
        self.usesLeft = usesLeft
        self.expiresAt = expiresAt
        self.createdBy = createdBy
        self.createdAt = createdAt
    }
}

/// Why an enrolment token was not accepted.
public enum TokenRefusal: String, Sendable, Hashable, Error {
    case unknown = "token-unknown"
    case usedUp = "token-used-up"
    case expired = "token-expired"
}

/// A machine's last check-in, as it sent it.
public struct CheckIn: Sendable, Hashable, Codable {
    public enum FilterDataState: String, Sendable, Hashable, Codable, CaseIterable {
        case running, restarting, down
    }

    public enum FailMode: String, Sendable, Hashable, Codable, CaseIterable {
        case open, closed
    }

    public var version: String
    public var rulesVersion: Int64
    /// RFC 3339, as the machine wrote it; nil when it has no rules installed
    /// (filter-control leaves the key out then).
    public var rulesSince: String?
    public var filterData: FilterDataState
    public var filterDataRestarts: Int64
    public var failMode: FailMode
    public var queueDrops: Int64
    public var recordsWaiting: Int64
    public var recordsDropped: Int64
    public var users: [String]

    public init(
        version: String, rulesVersion: Int64, rulesSince: String?, filterData: FilterDataState, filterDataRestarts: Int64,
        failMode: FailMode, queueDrops: Int64, recordsWaiting: Int64, recordsDropped: Int64, users: [String]
    ) {
        self.version = version
        self.rulesVersion = rulesVersion
        self.rulesSince = rulesSince
        self.filterData = filterData
        self.filterDataRestarts = filterDataRestarts
        self.failMode = failMode
        self.queueDrops = queueDrops
        self.recordsWaiting = recordsWaiting
        self.recordsDropped = recordsDropped
        self.users = users
    }
}

/// An enrolled machine.
public struct StoredMachine: Sendable, Hashable {
    public var id: String
    /// The 32 raw bytes of its Ed25519 public key, in base64.
    public var publicKey: String
    public var room: String
    public var hostname: String
    /// hallpass's version at enrolment.
    public var version: String
    public var enrolledAt: Int64
    public var revokedAt: Int64?
    /// Every record of this machine with a sequence up to this one is stored.
    public var storedThrough: Int64
    /// The sum of the `dropped` counts of its accepted posts.
    public var recordsDropped: Int64
    /// Unix seconds of the last check-in; nil before the first.
    public var checkInAt: Int64?
    public var lastCheckIn: CheckIn?
    /// The check-in before the last one's queue drops (nil before the second).
    public var previousQueueDrops: Int64?
}

/// A machine about to be enrolled.
public struct NewMachine: Sendable, Hashable {
    public var id: String
    public var publicKey: String
    public var hostname: String
    public var version: String

    public init(id: String, publicKey: String, hostname: String, version: String) {
        self.id = id
        self.publicKey = publicKey
        self.hostname = hostname
        self.version = version
    }
}

/// One audit record as a machine sends it (docs/fleet.md, "The record"),
/// without `machine`: the signer is the machine.
public struct MachineRecord: Sendable, Hashable, Codable {
    public var sequence: Int64
    /// RFC 3339 UTC with milliseconds, as the machine wrote it.
    public var time: String
    public var uid: Int64?
    public var user: String?
    public var group: String?
    public var kind: String?
    public var host: String?
    public var url: String?
    /// The search terms of a request the machine's inspection proxy read. Taken and
    /// not stored yet: the records table has no column for it.
    public var searchTerm: String?
    public var destination: String?
    public var port: Int64?
    public var action: String
    public var category: String?
    public var rule: String?
    public var reason: String?
    public var rulesVersion: Int64?

    public init(
        sequence: Int64, time: String, uid: Int64? = nil, user: String? = nil, group: String? = nil, kind: String? = nil,
        host: String? = nil, url: String? = nil, searchTerm: String? = nil, destination: String? = nil, port: Int64? = nil, action: String,
        category: String? = nil, rule: String? = nil, reason: String? = nil, rulesVersion: Int64? = nil
    ) {
        self.sequence = sequence
        self.time = time
        self.uid = uid
        self.user = user
        self.group = group
        self.kind = kind
        self.host = host
        self.url = url
        self.searchTerm = searchTerm
        self.destination = destination
        self.port = port
        self.action = action
        self.category = category
        self.rule = rule
        self.reason = reason
        self.rulesVersion = rulesVersion
    }
}

/// A stored record: the machine's record, whose machine, and its time in Unix milliseconds.
public struct StoredRecord: Sendable, Hashable {
    public var machine: String
    public var timeMilliseconds: Int64
    public var record: MachineRecord

    public init(machine: String, timeMilliseconds: Int64, record: MachineRecord) {
        self.machine = machine
        self.timeMilliseconds = timeMilliseconds
        self.record = record
    }
}

public struct StoredAPIToken: Sendable, Hashable {
    public var id: String
    public var role: Role
    /// What the token may see (the whole school when empty).
    public var scope: Scope
    public var createdBy: String
    public var createdAt: Int64

    public init(id: String, role: Role, scope: Scope = .school, createdBy: String, createdAt: Int64) {
        self.id = id
        self.role = role
        self.scope = scope
        self.createdBy = createdBy
        self.createdAt = createdAt
    }
}

/// What a post of records did.
public struct StoreOutcome: Sendable, Hashable {
    /// Every record of the machine up to this sequence is stored.
    public var storedThrough: Int64
    /// How many of the posted records were new (the rest were stored already).
    public var inserted: Int64
    /// The safeguarding alerts the new records raised, stored with them.
    public var alerts: [StoredAlert]
    /// The rule matches the repeat limit kept quiet (no alert made).
    public var suppressed: Int64

    public init(storedThrough: Int64, inserted: Int64, alerts: [StoredAlert] = [], suppressed: Int64 = 0) {
        self.storedThrough = storedThrough
        self.inserted = inserted
        self.alerts = alerts
        self.suppressed = suppressed
    }
}
