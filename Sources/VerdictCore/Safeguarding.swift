// The school's safeguarding rules (the `safeguarding:` key of its policy):
// which records tell the designated safeguarding lead that a child may be at
// risk, and how urgently. A rule matches a record by its category, name, URL,
// search term or reason, for a group or everyone, on blocked flows, allowed
// ones or both; a match is an alert of the rule's severity, made by the
// school's server as the record arrives. Pure: the machine asks only whether
// an allowed flow must be recorded for the server to see it
// (`recordsAllowedFlow`); the server asks which rules a record matches
// (`matches`) and counts attempts and repeats itself.
// docs/school-policy.md, "Safeguarding", says what each default rule is for.

/// How urgently an alert asks for an adult: `danger` reaches the
/// safeguarding lead at once, `caution` is for the queue and the digests,
/// `advisory` for the digests and the annual review.
public enum SafeguardingSeverity: String, Sendable, Hashable, CaseIterable, Codable, Comparable {
    case danger, caution, advisory

    /// Danger first.
    public static func < (lhs: Self, rhs: Self) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// Which flows a rule looks at.
public enum SafeguardingFlows: String, Sendable, Hashable, CaseIterable {
    case blocked, allowed, any
}

/// What a record says that a rule can match: the record's fields as the
/// machine wrote them, and the search term read from its URL.
public struct SafeguardingFacts: Sendable, Hashable {
    /// The policy group the machine placed the person in (nil: none known).
    public var group: String?
    /// Whether the flow was blocked.
    public var blocked: Bool
    public var host: String?
    /// The URL as records carry it (`http://host/path?query`, or `host/path?query`).
    public var url: String?
    /// The category of the rule that decided (blocked or not).
    public var category: String?
    /// The reason's source (`category`, `bypass`, `exam`, `focus`, `local-deny`, ...).
    public var reasonSource: String?
    /// The search term of the URL (`SearchTerms.extract`), when it is a search.
    public var searchTerm: String?

    public init(
        group: String? = nil, blocked: Bool, host: String? = nil, url: String? = nil, category: String? = nil, reasonSource: String? = nil,
        searchTerm: String? = nil
    ) {
        self.group = group
        self.blocked = blocked
        self.host = host
        self.url = url
        self.category = category
        self.reasonSource = reasonSource
        self.searchTerm = searchTerm
    }

    /// What the rules read of the facts, each part read once, when a rule
    /// first needs it: most records pass by every rule on their category
    /// alone, and a name is not parsed for them.
    struct Read {
        let facts: SafeguardingFacts
        private var hostRead: HostName??
        private var urlRead: (host: HostName?, path: String)??
        private var termRead: [String]??

        init(_ facts: SafeguardingFacts) {
            self.facts = facts
        }

        /// The host as a name.
        mutating func host() -> HostName? {
            if let hostRead { return hostRead }
            let value = facts.host.flatMap { try? HostName($0) }
            hostRead = .some(value)
            return value
        }

        /// The URL's host and its path (with the query), lower case as URL rules are kept.
        mutating func url() -> (host: HostName?, path: String)? {
            if let urlRead { return urlRead }
            var value: (host: HostName?, path: String)? = nil
            if let url = facts.url {
                var rest = Substring(url)
                for scheme in ["http://", "https://"] where rest.count >= scheme.count && rest.prefix(scheme.count).lowercased() == scheme {
                    rest = rest.dropFirst(scheme.count)
                    break
                }
                let end = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
                // A port after the host is not part of the name.
                var hostPart = rest[..<end]
                if let colon = hostPart.lastIndex(of: ":"), hostPart[hostPart.index(after: colon)...].allSatisfy(\.isNumber) {
                    hostPart = hostPart[..<colon]
                }
                let path = rest[end...]
                value = (try? HostName(hostPart), (path.hasPrefix("/") ? String(path) : "/" + path).lowercased())
            }
            urlRead = .some(value)
            return value
        }

        /// The search term's words.
        mutating func termWords() -> [String]? {
            if let termRead { return termRead }
            let value = facts.searchTerm.map(SearchPhrase.words)
            termRead = .some(value)
            return value
        }
    }
}

/// A phrase of `searchTerms:`: its words, in order and next to each other,
/// match a search term that holds them as whole words, whatever the case:
/// `kill myself` matches "how to kill myself" and "KILL MYSELF now", never
/// "skill myself" or "kill my self". An apostrophe joins a word (`don't`
/// is `dont`); every other character that is no letter or digit separates.
public struct SearchPhrase: Sendable, Hashable, CustomStringConvertible {
    /// As written.
    public let text: String
    public let words: [String]

    /// Nil when `text` holds no word.
    public init?(_ text: String) {
        let words = Self.words(text)
        guard !words.isEmpty else { return nil }
        self.text = text
        self.words = words
    }

    public var description: String { text }

    /// The words of `text`, lower case.
    public static func words(_ text: String) -> [String] {
        var words: [String] = []
        var current = String.UnicodeScalarView()
        for scalar in text.lowercased().unicodeScalars {
            let properties = scalar.properties
            switch properties.generalCategory {
            case .nonspacingMark, .spacingMark, .enclosingMark, .decimalNumber, .letterNumber, .otherNumber:
                current.append(scalar)
                continue
            default: break
            }
            if properties.isAlphabetic {
                current.append(scalar)
            } else if scalar == "'" || scalar == "\u{2019}" || scalar == "\u{02BC}" {
                continue
            } else if !current.isEmpty {
                words.append(String(current))
                current = String.UnicodeScalarView()
            }
        }
        if !current.isEmpty { words.append(String(current)) }
        return words
    }

    /// Whether `termWords` holds this phrase's words, in order and next to each other.
    public func matches(termWords: [String]) -> Bool {
        guard termWords.count >= words.count else { return false }
        for start in 0...(termWords.count - words.count) where termWords[start] == words[0] {
            if termWords[start..<(start + words.count)].elementsEqual(words) { return true }
        }
        return false
    }
}

/// One rule of `safeguarding.rules` (or a shipped one). The matchers that are
/// set must all match (a list matches when one of its entries does); at
/// least one is set.
public struct SafeguardingRule: Sendable, Hashable, Identifiable {
    /// `attempts:`: the rule fires on the `count`-th matching record of one
    /// person within `withinSeconds` (and on each after it while they go on),
    /// not on the first. Counting is the server's.
    public struct Attempts: Sendable, Hashable {
        public var count: Int
        public var withinSeconds: Int64

        public init(count: Int, withinSeconds: Int64) {
            self.count = count
            self.withinSeconds = withinSeconds
        }
    }

    /// `[a-z0-9-]{1,40}`: shown in alerts and emails.
    public var id: String
    public var severity: SafeguardingSeverity
    /// The store's category names (a record's category).
    public var categories: Set<String>?
    /// Names (`RulePattern` domains: a name and its subdomains, `=exact`, `*.subdomains`).
    public var names: [RulePattern]?
    /// URL prefixes (`RulePattern.urlPrefix`: a host and its subdomains, and a path prefix), as UT1's `urls` files.
    public var urls: [RulePattern]?
    public var searchTerms: [SearchPhrase]?
    /// Reason sources (`Reason.Source` raw values: `bypass`, `exam`, `focus`, ...).
    public var reasons: Set<String>?
    public var flows: SafeguardingFlows
    /// The policy's groups the rule is for; nil: every group and people in none.
    public var groups: Set<String>?
    public var attempts: Attempts?

    public init(
        id: String, severity: SafeguardingSeverity, categories: Set<String>? = nil, names: [RulePattern]? = nil, urls: [RulePattern]? = nil,
        searchTerms: [SearchPhrase]? = nil, reasons: Set<String>? = nil, flows: SafeguardingFlows = .any, groups: Set<String>? = nil,
        attempts: Attempts? = nil
    ) {
        self.id = id
        self.severity = severity
        self.categories = categories
        self.names = names
        self.urls = urls
        self.searchTerms = searchTerms
        self.reasons = reasons
        self.flows = flows
        self.groups = groups
        self.attempts = attempts
    }

    /// Whether any matcher is set (a rule without one is refused).
    public var hasMatcher: Bool { categories != nil || names != nil || urls != nil || searchTerms != nil || reasons != nil }

    /// Whether the rule looks at allowed flows.
    public var looksAtAllowedFlows: Bool { flows != .blocked }

    /// Whether the rule matches `facts`.
    public func matches(_ facts: SafeguardingFacts) -> Bool {
        guard looksAt(facts) else { return false }
        var read = SafeguardingFacts.Read(facts)
        return matchesRead(&read)
    }

    /// Flows, group, category and reason: what needs nothing read.
    func looksAt(_ facts: SafeguardingFacts) -> Bool {
        switch flows {
        case .blocked: guard facts.blocked else { return false }
        case .allowed: guard !facts.blocked else { return false }
        case .any: break
        }
        if let groups { guard let group = facts.group, groups.contains(group) else { return false } }
        if let categories { guard let category = facts.category, categories.contains(category) else { return false } }
        if let reasons { guard let reason = facts.reasonSource, reasons.contains(reason) else { return false } }
        return true
    }

    /// Names, URLs and search terms, on facts read once for every rule (`looksAt` passed).
    func matchesRead(_ read: inout SafeguardingFacts.Read) -> Bool {
        if let searchTerms {
            guard let words = read.termWords(), searchTerms.contains(where: { $0.matches(termWords: words) }) else { return false }
        }
        if let names {
            guard let host = read.host() ?? read.url()?.host, names.contains(where: { $0.coversName(host) }) else { return false }
        }
        if let urls {
            guard let url = read.url(), let host = url.host ?? read.host() else { return false }
            let found = urls.contains { pattern in
                guard case .urlPrefix(let name, let prefix) = pattern, RulePattern.domain(name, .subtree).coversName(host) else { return false }
                // Bytes, as the engine compares URL prefixes.
                return url.path.utf8.starts(with: prefix.utf8)
            }
            guard found else { return false }
        }
        return true
    }
}

/// The school's `safeguarding:` in force: the shipped rules (unless
/// `defaults: false`), less those the school replaced by id, then the
/// school's own; and how long a person and rule stay quiet after an alert.
public struct SafeguardingPolicy: Sendable, Hashable {
    public static let defaultRepeatSeconds: Int64 = 600
    /// `repeat:` and `attempts.within:`, in seconds: a minute to a day.
    public static let durationRange: ClosedRange<Int64> = 60...86_400
    public static let attemptsCountRange: ClosedRange<Int> = 2...1000
    public static let maximumRules = 200
    /// Entries of one list (categories, names, urls, searchTerms, reasons, groups).
    public static let maximumEntries = 1000
    public static let maximumEntryBytes = 200
    public static let maximumIDLength = 40
    /// The rule id of the danger alert the school's server raises when a
    /// machine lets through a name of its filtering test that the policy
    /// blocks: reserved, so that no rule of a school's own carries it.
    public static let filteringTestRuleID = "filtering-test"

    /// Whether the shipped rules apply beside the school's.
    public let usesDefaults: Bool
    /// At most one alert per person and rule within this many seconds.
    public let repeatSeconds: Int64
    /// The school's own rules, as written.
    public let schoolRules: [SafeguardingRule]
    /// The rules in force: the shipped ones the school did not replace, then the school's.
    public let rules: [SafeguardingRule]
    /// What the machine reads of an allowed flow before it asks `recordsAllowedFlow`.
    public let allowedFlows: AllowedFlowNeeds

    /// What an allowed flow must show for some rule to want it recorded, made
    /// once per policy so that the machine's question costs little for most flows.
    public struct AllowedFlowNeeds: Sendable, Hashable {
        /// Some rule looks at allowed flows.
        public var any: Bool
        /// An allowed flow in one of these categories is recorded whatever else
        /// it shows (rules of categories alone, for everyone).
        public var categories: Set<String>
        /// Some other rule may match an allowed flow that has no URL (only plain
        /// HTTP and inspected requests have one); false: such a flow outside
        /// `categories` is never recorded.
        public var withoutURL: Bool
    }

    public init(defaults: Bool = true, repeatSeconds: Int64 = SafeguardingPolicy.defaultRepeatSeconds, rules: [SafeguardingRule] = []) {
        usesDefaults = defaults
        self.repeatSeconds = repeatSeconds
        schoolRules = rules
        let replaced = Set(rules.map(\.id))
        let inForce = (defaults ? Self.defaultRules.filter { !replaced.contains($0.id) } : []) + rules
        self.rules = inForce
        var needs = AllowedFlowNeeds(any: false, categories: [], withoutURL: false)
        for rule in inForce where rule.looksAtAllowedFlows {
            needs.any = true
            let categoriesAlone = rule.categories != nil && rule.names == nil && rule.urls == nil && rule.searchTerms == nil
                && rule.reasons == nil && rule.groups == nil
            if categoriesAlone, let categories = rule.categories {
                needs.categories.formUnion(categories)
            } else if rule.urls == nil && rule.searchTerms == nil {
                needs.withoutURL = true
            }
        }
        allowedFlows = needs
    }

    /// A policy without `safeguarding:`: the shipped rules, a repeat of ten minutes.
    public static let shipped = SafeguardingPolicy()
    /// No rule at all: what a machine without a school's policy has.
    public static let none = SafeguardingPolicy(defaults: false)

    /// Every rule in force that matches `facts` (attempts rules too: the server counts).
    public func matches(_ facts: SafeguardingFacts) -> [SafeguardingRule] {
        var read = SafeguardingFacts.Read(facts)
        var found: [SafeguardingRule] = []
        for rule in rules where rule.looksAt(facts) && rule.matchesRead(&read) { found.append(rule) }
        return found
    }

    /// Whether the machine must record this allowed flow for the server to
    /// judge it (some rule with `flows: any` or `allowed` matches it), even
    /// with `log.allowed: none`. Facts with `blocked` set are not asked about.
    public func recordsAllowedFlow(_ facts: SafeguardingFacts) -> Bool {
        guard allowedFlows.any, !facts.blocked else { return false }
        if let category = facts.category, allowedFlows.categories.contains(category) { return true }
        guard allowedFlows.withoutURL || facts.url != nil else { return false }
        var read = SafeguardingFacts.Read(facts)
        return rules.contains { $0.looksAtAllowedFlows && $0.looksAt(facts) && $0.matchesRead(&read) }
    }

    /// The longest `attempts.within` of the rules in force (how long the
    /// server keeps attempts); nil when no rule counts attempts.
    public var longestAttemptsWindow: Int64? {
        rules.compactMap(\.attempts?.withinSeconds).max()
    }
}

// MARK: The shipped rules

extension SafeguardingPolicy {
    /// The rules every school's policy has unless it says `defaults: false`
    /// (docs/school-policy.md, "Safeguarding", says why each is there). The
    /// categories are UT1's names, as the shipped lists use them.
    public static let defaultRules: [SafeguardingRule] = [
        SafeguardingRule(
            id: "self-harm-search", severity: .danger, searchTerms: selfHarmSearchPhrases.compactMap(SearchPhrase.init)),
        SafeguardingRule(id: "dangerous-material", severity: .danger, categories: ["dangerous_material"]),
        SafeguardingRule(id: "adult", severity: .caution, categories: ["adult", "mixed_adult"]),
        SafeguardingRule(id: "drugs", severity: .caution, categories: ["drogue"]),
        SafeguardingRule(id: "extremism", severity: .caution, categories: ["agressif", "sect"]),
        SafeguardingRule(
            id: "bypass-attempts", severity: .caution, reasons: ["bypass"], flows: .blocked,
            attempts: .init(count: 5, withinSeconds: 600)),
        SafeguardingRule(id: "stalkerware", severity: .caution, categories: ["stalkerware"]),
        SafeguardingRule(id: "hacking", severity: .caution, categories: ["hacking"]),
        SafeguardingRule(id: "gambling", severity: .advisory, categories: ["gambling"]),
        SafeguardingRule(id: "dating", severity: .advisory, categories: ["dating"]),
        SafeguardingRule(id: "ai-tools", severity: .advisory, categories: ["ai"]),
        SafeguardingRule(id: "vpn", severity: .advisory, categories: ["vpn"]),
        SafeguardingRule(id: "doh", severity: .advisory, categories: ["doh"]),
    ]

    /// The phrases of the shipped `self-harm-search` rule: searches for ways
    /// to hurt or kill oneself, and searches that say a child wants to die.
    /// English only; a school adds its own languages with a rule of its own.
    /// Each matches as whole words, in order (`SearchPhrase`).
    public static let selfHarmSearchPhrases: [String] = [
        "suicide", "suicidal", "kill myself", "killing myself", "end my life", "ending my life", "take my own life",
        "taking my own life", "want to die", "wanna die", "want to be dead", "wish i was dead", "wish i were dead",
        "better off dead", "dont want to live", "dont want to be alive", "no reason to live", "painless way to die",
        "easiest way to die", "quickest way to die", "best way to die", "hang myself", "hanging myself", "tie a noose",
        "slit my wrists", "cutting myself", "how to cut myself", "want to hurt myself", "self harm", "selfharm",
        "self harming", "how to overdose", "overdose to die", "pills to die", "lethal dose", "jump off a bridge",
    ]
}
