/// What the school decided, independent of any rule store: which categories
/// are blocked, the local allow and deny lists, and the defaults.
///
/// Precedence (first that applies wins; see `VerdictEngine`):
/// 0. an exam in force (`exam`): a name, URL or address on the exam's list
///    is allowed, everything else is blocked, whatever follows;
/// 0. a focus or pause in force (`focus`, a live item): the same with the
///    focus list (empty for a pause);
/// 0. teacher overrides (`overrideAllow`, `overrideBlock`): the most
///    specific matching entry decides, block on a tie; by name, then by address;
/// 1. the local lists, by name: the most specific matching entry of `allow`
///    or `deny` decides; on a tie `deny` wins;
/// 2. the local lists, by destination address (most specific block);
/// 3. category rules: a URL-prefix rule, a domain rule, or an address rule
///    in a blocked category blocks;
/// 4. a name found only in categories that are not blocked is allowed;
/// 5. a name found nowhere gets `unknown`; with `unknown: ask`, filter-control
///    is asked, and its answer (the categories a lookup service knows for
///    the name, see `LookupAnswers`) is judged like a category rule; a name
///    the lookup does not know, or no answer within `askTimeoutMilliseconds`,
///    gets `askDefault`;
/// 6. a flow that has not shown a name yet, and may still, needs more data;
///    one that never shows a name (or names only an IP literal) gets `noName`.
///
/// A category in `locked` is blocked whatever `blockedCategories` says, and
/// an allow from any list above (exam, focus, overrides, `allow`) does not
/// open a name, URL or address a rule puts in a locked category: it is
/// blocked with that category as its reason.
public struct Policy: Sendable, Hashable {
    public enum CategorySelection: Sendable, Hashable {
        /// Every category in the store is blocked (what `filterctl check` uses without a config).
        case all
        /// Only these categories are blocked; the others are known and allowed.
        case only(Set<String>)

        public func blocks(_ category: String) -> Bool {
            switch self {
            case .all: true
            case .only(let names): names.contains(category)
            }
        }
    }

    /// What happens to a name no rule knows.
    public enum UnknownAction: String, Sendable, Hashable, CaseIterable {
        case allow, block
        /// Hold the flow and ask filter-control (Apple's needRules).
        case ask
    }

    /// What happens to a flow that never reveals a name.
    public enum NoNameAction: String, Sendable, Hashable, CaseIterable {
        case allow, block
    }

    /// A plain allow-or-block default (for `askDefault`).
    public typealias DefaultAction = NoNameAction

    /// Where DNS answers for blocked names point, so a browser that asks for
    /// a blocked name reaches the block page: filter-data lets the query go
    /// and rewrites the A and AAAA records of its answer to these addresses.
    public struct DNSRewrite: Sendable, Hashable {
        public var ipv4: IPAddress
        public var ipv6: IPAddress
        /// The time to live of a rewritten record, so an approved name resolves normally soon.
        public var timeToLive: UInt32

        public init(ipv4: IPAddress, ipv6: IPAddress, timeToLive: UInt32 = 10) {
            self.ipv4 = ipv4
            self.ipv6 = ipv6
            self.timeToLive = timeToLive
        }
    }

    public var blockedCategories: CategorySelection
    public var allow: [RulePattern]
    public var deny: [RulePattern]
    public var unknown: UnknownAction
    public var noName: NoNameAction
    /// With `unknown: ask`: the action when the answer does not come in time,
    /// when too many flows are already waiting, or when the lookup service
    /// does not know the name either.
    public var askDefault: DefaultAction
    /// With `unknown: ask`: how long a flow waits for filter-control's answer.
    public var askTimeoutMilliseconds: Int
    /// nil: DNS queries for blocked names are dropped (the name does not resolve).
    public var dnsRewrite: DNSRewrite?
    /// Teacher overrides in force, checked before the lists (see the precedence above).
    public var overrideAllow: [RulePattern] = []
    public var overrideBlock: [RulePattern] = []
    /// An exam in force: only its list reaches the network.
    public var exam: Exam?
    /// A focus (or, with an empty list, a pause) in force: only its list reaches the network.
    public var focus: Focus?
    /// Categories nothing opens (the school's `locked:`).
    public var locked: Set<String> = []
    /// Encrypted DNS, ECH, tunnels, QUIC and SafeSearch (`safeSearch:`, `bypass:`).
    public var bypass = BypassPolicy()
    /// What is inspected (the school's `inspect:`, docs/inspection.md): filter-data
    /// selects the addresses of inspected names for the proxy, and the proxy
    /// splices or refuses by it. The same for every moment of a day (no `during:`).
    public var inspection = InspectionPolicy()

    /// While an exam runs, the people it applies to reach only `allow`.
    public struct Exam: Sendable, Hashable {
        public var allow: [RulePattern]
        /// When it ends (Unix seconds), for the block page; nil: until stopped.
        public var until: Int64?

        public init(allow: [RulePattern], until: Int64? = nil) {
            self.allow = allow
            self.until = until
        }
    }

    /// A live focus or pause: the people it applies to reach only `allow`.
    public struct Focus: Sendable, Hashable {
        /// Empty for a pause.
        public var allow: [RulePattern]
        /// When it ends (Unix seconds), for the block page.
        public var until: Int64

        public init(allow: [RulePattern], until: Int64) {
            self.allow = allow
            self.until = until
        }
    }

    public init(
        blockedCategories: CategorySelection = .all,
        allow: [RulePattern] = [],
        deny: [RulePattern] = [],
        unknown: UnknownAction = .allow,
        noName: NoNameAction = .allow,
        askDefault: DefaultAction = .allow,
        askTimeoutMilliseconds: Int = 2000,
        dnsRewrite: DNSRewrite? = nil
    ) {
        self.blockedCategories = blockedCategories
        self.allow = allow
        self.deny = deny
        self.unknown = unknown
        self.noName = noName
        self.askDefault = askDefault
        self.askTimeoutMilliseconds = askTimeoutMilliseconds
        self.dnsRewrite = dnsRewrite
    }
}
