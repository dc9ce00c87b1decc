/// Every policy filter-data may need, and whose flows get which: one policy
/// per audience (each group, people in no group, system flows) and the uids
/// filter-control has already placed. filter-control works all of this out
/// (groups through NSS, schedules on the wall clock, exams, overrides) and
/// writes it as text whenever it changes; filter-data only looks up "which
/// policy for this uid, now". A uid it has not been told about is asked for,
/// like a name no rule knows, when `askUsers` is set.
///
/// ```
/// # hallpass policy set (written by filter-control)
/// askUsers yes
/// safeSearchTarget google 300 216.239.38.120 2001:4860:4802:32::78   # where SafeSearch sends its names
/// user 1000 students
/// user 1001 -                    # a person in no group
/// user 105 system
/// audience ungrouped
/// block adult gambling           # ... the lines of PolicyText for this audience
/// audience system
/// ...
/// audience group students
/// ...
/// audience person 1000          # a person with live items of their own (`user 1000 @1000`)
/// ...
/// ```
public struct PolicySet: Sendable, Hashable {
    /// The policy of every audience; `.ungrouped` and `.system` are always there.
    public var policies: [Audience: Policy]
    /// The uids filter-control placed.
    public var users: [UInt32: Audience]
    /// Whether to ask filter-control about a uid not in `users` (it has
    /// groups to place people in). Without it, every person is `.ungrouped`.
    public var askUsers: Bool
    /// The addresses of each SafeSearch engine's enforcement host, which
    /// filter-control resolves (filter-data has no network): DNS answers for
    /// the engine's names point there, and TLS or QUIC flows to those names
    /// may go nowhere else. An engine a policy asks for without a target
    /// here gets no answers and no flows until filter-control has one.
    public var safeSearchTargets: [SafeSearchEngine: SafeSearchTarget] = [:]

    public init(policies: [Audience: Policy], users: [UInt32: Audience] = [:], askUsers: Bool = false) {
        var policies = policies
        if policies[.ungrouped] == nil { policies[.ungrouped] = Policy() }
        if policies[.system] == nil { policies[.system] = policies[.ungrouped] }
        self.policies = policies
        self.users = users
        self.askUsers = askUsers
    }

    /// One policy for everyone (no groups).
    public init(single policy: Policy) {
        self.init(policies: [.ungrouped: policy, .system: policy])
    }

    /// The most uids a set carries (filter-control keeps the ones it saw last).
    public static let maximumUsers = 65_536

    public enum Placement: Sendable, Hashable {
        case audience(Audience)
        /// Ask filter-control first.
        case unknown
    }

    /// Where a flow of `uid` belongs (nil: no local socket, a system flow).
    public func placement(uid: UInt32?) -> Placement {
        guard let uid else { return .audience(.system) }
        if let audience = users[uid] { return .audience(audience) }
        if uid < SchoolPolicy.firstPersonUID || uid == SchoolPolicy.nobodyUID { return .audience(.system) }
        return askUsers ? .unknown : .audience(.ungrouped)
    }

    public static func render(_ set: PolicySet) -> String {
        var lines = ["# hallpass policy set for filter-data (written by filter-control; see docs/school-policy.md)"]
        lines.append("askUsers \(set.askUsers ? "yes" : "no")")
        for engine in SafeSearchEngine.allCases {
            guard let target = set.safeSearchTargets[engine] else { continue }
            lines.append((["safeSearchTarget", engine.rawValue, String(target.timeToLive)] + target.addresses.map(\.description)).joined(separator: " "))
        }
        for (uid, audience) in set.users.sorted(by: { $0.key < $1.key }) {
            lines.append("user \(uid) \(token(audience))")
        }
        let persons = set.policies.keys.compactMap { audience -> UInt32? in
            if case .person(let uid) = audience { return uid }
            return nil
        }
        let order: [Audience] =
            [.ungrouped, .system] + set.policies.keys.compactMap(\.groupName).sorted().map { .group($0) } + persons.sorted().map { .person($0) }
        for audience in order {
            guard let policy = set.policies[audience] else { continue }
            let name: String =
                switch audience {
                case .group(let group): "group " + group
                case .person(let uid): "person " + String(uid)
                default: token(audience)
                }
            lines.append("audience " + name)
            lines += PolicyText.render(policy).split(separator: "\n").filter { !$0.hasPrefix("#") }.map(String.init)
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// How an audience is written in a `user` line: the group's name, `-` for no group, `system`.
    public static func token(_ audience: Audience) -> String {
        switch audience {
        case .group(let name): name
        case .ungrouped: "-"
        case .system: "system"
        case .person(let uid): "@" + String(uid)
        }
    }

    /// The audience a `user` line names (a group name: the characters a school's group name may have).
    public static func audience(token: some StringProtocol) -> Audience? {
        switch token {
        case "-": return .ungrouped
        case "system": return .system
        case let token where token.first == "@":
            return UInt32(token.dropFirst()).map(Audience.person)
        default:
            guard (1...64).contains(token.count), token.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                return nil
            }
            return .group(String(token))
        }
    }

    /// Reads a policy set; a file without any `audience` line is one plain
    /// policy for everyone (what filter-control wrote before groups existed).
    public static func parse(_ text: String) throws(PolicyText.ParseError) -> PolicySet {
        let allLines = PolicyText.lines(text)
        guard allLines.contains(where: { $0.unicodeScalars.starts(with: "audience ".unicodeScalars) }) else {
            return PolicySet(single: try PolicyText.parse(text))
        }
        var policies: [Audience: Policy] = [:]
        var users: [UInt32: Audience] = [:]
        var askUsers = false
        var targets: [SafeSearchEngine: SafeSearchTarget] = [:]
        var current: (audience: Audience, firstLine: Int, lines: [Substring])? = nil
        func finish() throws(PolicyText.ParseError) {
            guard let section = current else { return }
            do {
                policies[section.audience] = try PolicyText.parse(section.lines.joined(separator: "\n"))
            } catch {
                throw PolicyText.ParseError(line: section.firstLine + error.line, reason: error.reason)
            }
            current = nil
        }
        for (index, line) in allLines.enumerated() {
            let number = index + 1
            let fields = PolicyText.fields(line)
            if fields.first == "audience" {
                try finish()
                let audience: Audience
                switch (fields.count, fields.count > 1 ? fields[1] : "") {
                case (2, "-"), (2, "ungrouped"): audience = .ungrouped
                case (2, "system"): audience = .system
                case (3, "group"): audience = .group(String(fields[2]))
                case (3, "person"):
                    guard let uid = UInt32(fields[2]) else { throw PolicyText.ParseError(line: number, reason: "'\(fields[2])' is not a uid") }
                    audience = .person(uid)
                default:
                    throw PolicyText.ParseError(
                        line: number, reason: "expected 'audience ungrouped', 'audience system', 'audience group NAME' or 'audience person UID'")
                }
                guard policies[audience] == nil else { throw PolicyText.ParseError(line: number, reason: "the audience \(audience) appears twice") }
                current = (audience, number, [])
                continue
            }
            if current != nil {
                current!.lines.append(line)
                continue
            }
            // Before the first audience: the user table.
            switch fields.first {
            case nil:
                continue
            case let first? where first.hasPrefix("#"):
                continue
            case "user":
                guard fields.count == 3, let uid = UInt32(fields[1]) else { throw PolicyText.ParseError(line: number, reason: "expected 'user UID GROUP' (or '-' or 'system')") }
                guard users.count < Self.maximumUsers else { throw PolicyText.ParseError(line: number, reason: "more than \(Self.maximumUsers) users") }
                guard let audience = audience(token: fields[2]) else { throw PolicyText.ParseError(line: number, reason: "'\(fields[2])' is not a group name") }
                users[uid] = audience
            case "askUsers":
                guard fields.count == 2, fields[1] == "yes" || fields[1] == "no" else { throw PolicyText.ParseError(line: number, reason: "expected 'askUsers yes|no'") }
                askUsers = fields[1] == "yes"
            case "safeSearchTarget":
                let usage = "expected 'safeSearchTarget ENGINE TTL ADDRESS...' (1 to \(SafeSearchTarget.maximumAddresses) addresses)"
                guard fields.count >= 4, fields.count - 3 <= SafeSearchTarget.maximumAddresses,
                    let engine = SafeSearchEngine(rawValue: String(fields[1])), let ttl = UInt32(fields[2]), ttl <= 86_400
                else { throw PolicyText.ParseError(line: number, reason: usage) }
                var addresses: [IPAddress] = []
                for field in fields.dropFirst(3) {
                    guard let address = IPAddress(String(field)) else { throw PolicyText.ParseError(line: number, reason: "'\(field)' is not an address") }
                    addresses.append(address)
                }
                targets[engine] = SafeSearchTarget(addresses: addresses, timeToLive: ttl)
            default:
                throw PolicyText.ParseError(line: number, reason: "expected 'user', 'askUsers', 'safeSearchTarget' or 'audience' before the first audience")
            }
        }
        try finish()
        for (uid, audience) in users where policies[audience] == nil && audience != .ungrouped && audience != .system {
            throw PolicyText.ParseError(line: 0, reason: "uid \(uid) is placed in \(audience), which has no policy")
        }
        var set = PolicySet(policies: policies, users: users, askUsers: askUsers)
        set.safeSearchTargets = targets
        return set
    }

    /// The engines some audience's policy enforces SafeSearch for.
    public var safeSearchEngines: Set<SafeSearchEngine> {
        policies.values.reduce(into: []) { $0.formUnion($1.bypass.safeSearch) }
    }
}
