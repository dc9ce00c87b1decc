// What the school's server may change on a machine at once (the `live:` key
// of the school's policy), and the items it sends: allow or block a site,
// focus on a few sites, pause, an exam, for a room, a group, a person or
// everyone, each until a time. Pure: filter-control checks the signature
// and the bounds of a live state (FilterControl's `LiveState`) and hands the
// items it accepted to `SchoolPolicy.effectivePolicy` through `PolicyMoment`.
// docs/school-policy.md, "Live items", says what each means.

/// What a live item does.
public enum LiveAction: String, Sendable, Hashable, CaseIterable, Codable {
    /// Like `filterctl allow`: the targets are reachable (never a locked category).
    case allow
    /// Like `filterctl block`.
    case block
    /// People reach only the targets (like an exam's list); system flows go on.
    case focus
    /// People reach nothing; system flows go on.
    case pause
    /// The school's exam (as `filterctl exam start`).
    case exam
}

/// The school's bounds on live items (`live:`).
public struct LivePolicy: Sendable, Hashable {
    /// The raw 32-byte Ed25519 public keys whose signature a machine accepts on a live state.
    public var keys: [[UInt8]]
    public var actions: Set<LiveAction>
    /// The longest an item may last (`until - from`), in seconds.
    public var longestSeconds: Int64
    /// The rooms room items may name; nil: any.
    public var rooms: Set<String>?
    /// The groups group items may name; nil: any group of the policy.
    public var groups: Set<String>?

    public static let defaultActions: Set<LiveAction> = [.allow, .block, .focus, .pause]
    public static let defaultLongestSeconds: Int64 = 2 * 3600
    /// `longest:` is at most a day.
    public static let longestLimit: Int64 = 24 * 3600

    public init(
        keys: [[UInt8]], actions: Set<LiveAction> = LivePolicy.defaultActions, longestSeconds: Int64 = LivePolicy.defaultLongestSeconds,
        rooms: Set<String>? = nil, groups: Set<String>? = nil
    ) {
        self.keys = keys
        self.actions = actions
        self.longestSeconds = longestSeconds
        self.rooms = rooms
        self.groups = groups
    }
}

/// One item of a live state the machine accepted.
public struct LiveItem: Sendable, Hashable, Codable {
    /// Whom an item is for.
    public enum Scope: Sendable, Hashable, Codable {
        /// Everyone on a machine of this room (the machine checked it is its own room).
        case room(String)
        case everyone
        /// The people of a group of the school's policy.
        case group(String)
        /// One local user, by login name.
        case user(String)

        /// Room and everyone: every audience of the machine.
        public var isWholeMachine: Bool {
            switch self {
            case .room, .everyone: true
            case .group, .user: false
            }
        }
    }

    public var id: String
    /// The server's sequence when the item was made (of two focus items, the later one wins).
    public var sequence: Int64
    public var action: LiveAction
    /// The sites of an allow, block or focus; none for pause and exam. Parsed
    /// once, when the item is made (the state accepted or checked again), not
    /// at every policy tick for every audience.
    public var patterns: [RulePattern]
    /// The targets as written (`RulePattern` texts).
    public var targets: [String] { patterns.map(\.description) }
    public var scope: Scope
    /// Unix seconds.
    public var from: Int64
    public var until: Int64
    /// Who set it (a person's display name), for the block page.
    public var by: String
    public var reason: String?
    /// The access request it answers, if any.
    public var request: String?

    /// An item of `targets` (`RulePattern` texts; one that does not parse is left out).
    public init(
        id: String, sequence: Int64, action: LiveAction, targets: [String], scope: Scope, from: Int64, until: Int64, by: String,
        reason: String? = nil, request: String? = nil
    ) {
        self.init(
            id: id, sequence: sequence, action: action, patterns: targets.compactMap { try? RulePattern($0) }, scope: scope, from: from,
            until: until, by: by, reason: reason, request: request)
    }

    public init(
        id: String, sequence: Int64, action: LiveAction, patterns: [RulePattern], scope: Scope, from: Int64, until: Int64, by: String,
        reason: String? = nil, request: String? = nil
    ) {
        self.id = id
        self.sequence = sequence
        self.action = action
        self.patterns = patterns
        self.scope = scope
        self.from = from
        self.until = until
        self.by = by
        self.reason = reason
        self.request = request
    }

    /// In force from its arrival until `until` (not from `from`: a machine
    /// whose clock is a little behind the server's would otherwise wait).
    public func isInForce(now: Int64) -> Bool { now < until }

    /// Whether the item applies to the people of `group` (nil: no group, or
    /// system flows without a `systemUsers` group) judged as `audience`;
    /// `person` is the user name when the policy is made for one person.
    public func applies(toGroup group: String?, audience: Audience, person: String?) -> Bool {
        switch scope {
        case .room, .everyone: true
        case .group(let name): audience != .system && group == name
        case .user(let name): person == name
        }
    }

    /// The user an item is scoped to, if it is.
    public var user: String? {
        if case .user(let name) = scope { return name }
        return nil
    }

    // Written with the targets as text, and read back through the parser.
    enum CodingKeys: String, CodingKey { case id, sequence, action, targets, scope, from, until, by, reason, request }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            id: try container.decode(String.self, forKey: .id), sequence: try container.decode(Int64.self, forKey: .sequence),
            action: try container.decode(LiveAction.self, forKey: .action), targets: try container.decode([String].self, forKey: .targets),
            scope: try container.decode(Scope.self, forKey: .scope), from: try container.decode(Int64.self, forKey: .from),
            until: try container.decode(Int64.self, forKey: .until), by: try container.decode(String.self, forKey: .by),
            reason: try container.decodeIfPresent(String.self, forKey: .reason), request: try container.decodeIfPresent(String.self, forKey: .request))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(sequence, forKey: .sequence)
        try container.encode(action, forKey: .action)
        try container.encode(targets, forKey: .targets)
        try container.encode(scope, forKey: .scope)
        try container.encode(from, forKey: .from)
        try container.encode(until, forKey: .until)
        try container.encode(by, forKey: .by)
        try container.encodeIfPresent(reason, forKey: .reason)
        try container.encodeIfPresent(request, forKey: .request)
    }
}

/// What a live allow or focus may name by address. A network opens every
/// address in it, and whether a target is in a locked category is looked up
/// for one address (a store's address rules are found by the address they
/// contain), so a wide network could open a locked network that the look-up
/// never saw: a live allow or focus names at most a /24 (IPv4) or a /48
/// (IPv6). The engine still judges every flow's name and destination for
/// locked categories; this keeps what a teacher may open to what was checked.
public enum LiveTargets {
    public static let widestIPv4Prefix = 24
    public static let widestIPv6Prefix = 48

    /// Why `pattern` may not be opened by a live allow or focus; nil when it may.
    public static func refusal(_ pattern: RulePattern) -> String? {
        guard case .network(let network) = pattern else { return nil }
        let widest = network.address.isIPv4 ? widestIPv4Prefix : widestIPv6Prefix
        guard network.prefixLength < widest else { return nil }
        return "\(network) is a network wider than /\(widest): a live allow or focus opens a single site or address, or a network of at most /\(widest)"
    }
}
