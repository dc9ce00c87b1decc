/// A category's index in a rule source.
public typealias CategoryID = UInt16

/// The read side of a rule store, as the engine needs it. SharedStore's
/// memory-mapped reader conforms; tests use an in-memory one.
public protocol RuleSource: Sendable {
    /// Category names by `CategoryID`.
    var categoryNames: [String] { get }
    /// Calls `body` for each domain rule stored for exactly this name fingerprint.
    func forEachDomainRule(fingerprint: UInt64, _ body: (CategoryID, MatchKind) -> Void)
    /// Calls `body` for each URL-prefix rule stored for exactly this host
    /// fingerprint, with the path prefix (lower case, starting with `/`).
    func forEachURLRule(hostFingerprint: UInt64, _ body: (Span<UInt8>, CategoryID) -> Void)
    /// Calls `body` for each address rule whose network contains `address`.
    func forEachNetworkRule(containing address: IPAddress, _ body: (IPNetwork, CategoryID) -> Void)
    /// A hint that these fingerprints are about to be looked up: a store in
    /// memory may start loading them all at once. The default does nothing.
    func prefetchDomainRules(fingerprints: Span<UInt64>)
    /// Whether any domain rule is on a name with this many labels; a source
    /// that says no is never asked about such names. The default says yes.
    func hasDomainRules(labelCount: Int) -> Bool
}

extension RuleSource {
    public func prefetchDomainRules(fingerprints: Span<UInt64>) {}
    public func hasDomainRules(labelCount: Int) -> Bool { true }
}

/// Decides flows against one rule source and one policy. Pure: no I/O, no
/// clocks, no logging. Build one per (store, policy) pair and share it: it is
/// immutable, and building it resolves the policy's category names against
/// the store once, so `decide` does no string work until it writes a reason.
public struct VerdictEngine<Rules: RuleSource>: Sendable {
    public let rules: Rules
    public let policy: Policy
    /// filter-control's answers to needRules questions, consulted for names
    /// no rule knows when the policy says `unknown: ask`.
    public var answers = LookupAnswers()
    /// `categoryBlocked[id]` for every category of `rules`.
    private let categoryBlocked: [Bool]
    /// The `tor` category (relay addresses) when `bypass.tunnels: block`.
    private let torRelays: CategoryID?
    /// The exam's list, while an exam is in force.
    private let examList: ListLayer?
    /// A live focus's list (empty for a pause), while one is in force.
    private let focusList: ListLayer?
    /// `categoryLocked[id]`: the policy's `locked` categories, which no list opens.
    private let categoryLocked: [Bool]
    private let hasLocked: Bool
    /// Teacher overrides, checked before the lists.
    private let overrides: ListLayer
    /// The policy's allow and deny lists.
    private let local: ListLayer

    private struct LocalEntry: Sendable {
        var pattern: RulePattern
        var allows: Bool
    }

    /// Allow and deny entries checked together: the most specific match
    /// decides, deny on a tie; a layer before another wins whatever the
    /// specificity (overrides before the lists).
    private struct ListLayer: Sendable {
        var names: [UInt64: [LocalEntry]] = [:]
        var urls: [UInt64: [LocalEntry]] = [:]
        var networks: [LocalEntry] = []
        let allowSource: Reason.Source
        let denySource: Reason.Source

        init(deny: [RulePattern], allow: [RulePattern], allowSource: Reason.Source, denySource: Reason.Source) {
            self.allowSource = allowSource
            self.denySource = denySource
            // Deny entries go in first, so the first match on a tie is a deny.
            for (list, allows) in [(deny, false), (allow, true)] {
                for pattern in list {
                    let entry = LocalEntry(pattern: pattern, allows: allows)
                    switch pattern {
                    case .domain(let host, _):
                        names[SuffixFingerprints.fingerprint(of: host), default: []].append(entry)
                    case .urlPrefix(let host, _):
                        urls[SuffixFingerprints.fingerprint(of: host), default: []].append(entry)
                    case .network:
                        networks.append(entry)
                    }
                }
            }
        }

        var hasNames: Bool { !names.isEmpty || !urls.isEmpty }

        func decision(_ entry: LocalEntry) -> Decision {
            Decision(entry.allows ? .allow : .drop, Reason(source: entry.allows ? allowSource : denySource, rule: entry.pattern.description))
        }
    }

    /// The addresses of each SafeSearch engine's enforcement host (the policy
    /// set's `safeSearchTarget` lines): a TLS or QUIC flow to a name SafeSearch
    /// covers may go to these only.
    public var safeSearchAddresses: [SafeSearchEngine: Set<IPAddress>] = [:]

    public init(rules: Rules, policy: Policy) {
        self.rules = rules
        self.policy = policy
        // The lists of encrypted DNS resolvers and ECH public names go with their bypass keys.
        self.categoryLocked = rules.categoryNames.map { policy.locked.contains($0) }
        self.hasLocked = categoryLocked.contains(true)
        self.categoryBlocked = rules.categoryNames.map { name in
            policy.blockedCategories.blocks(name) || policy.locked.contains(name) || (name == BypassPolicy.encryptedDNSCategory && policy.bypass.encryptedDNS == .block)
                || (name == BypassPolicy.echFrontCategory && policy.bypass.ech == .block)
        }
        self.torRelays = policy.bypass.tunnels == .block ? rules.categoryNames.firstIndex(of: BypassPolicy.torCategory).map { CategoryID($0) } : nil
        self.examList = policy.exam.map { ListLayer(deny: [], allow: $0.allow, allowSource: .examList, denySource: .exam) }
        self.focusList = policy.focus.map { ListLayer(deny: [], allow: $0.allow, allowSource: .focusList, denySource: .focus) }
        self.overrides = ListLayer(deny: policy.overrideBlock, allow: policy.overrideAllow, allowSource: .overrideAllow, denySource: .overrideBlock)
        self.local = ListLayer(deny: policy.deny, allow: policy.allow, allowSource: .localAllowList, denySource: .localDenyList)
    }

    /// The decision for a flow, with its reason. See `Policy` for the precedence.
    public func decide(_ facts: FlowFacts) -> Decision {
        decide(facts, categoryURLRules: true)
    }

    /// The same, with the rule store's URL-prefix rules (UT1 `urls`) left out
    /// when `categoryURLRules` is false: an inspected host whose policy says
    /// `inspect.urls: false`. The policy's own lists keep their URL prefixes.
    public func decide(_ facts: FlowFacts, categoryURLRules: Bool) -> Decision {
        // A Tor relay carries any traffic under any name: a tunnel, before every rule of names.
        // (Not for DNS queries, nor for a flow still showing its name: asked again at its decision.)
        if let torRelays, facts.nameSource != .dnsQuestion, !facts.mayRevealName, let destination = facts.destination,
            isInCategory(destination, torRelays)
        {
            return Decision(.drop, Reason(source: .bypass, category: "tunnels", rule: BypassKind.tor.rawValue))
        }
        if facts.bypass != nil || facts.quic, let decision = bypassDecision(facts) { return decision }
        if let host = facts.host {
            // The canary names of encrypted DNS answer NXDOMAIN (filter-data rewrites the answer).
            if facts.nameSource == .dnsQuestion, policy.bypass.encryptedDNS == .block, BypassCanaryNames.answersNXDOMAIN(host) {
                return Decision(.drop, Reason(source: .bypass, category: "encryptedDNS", rule: Self.canaryRule))
            }
            if !policy.bypass.safeSearch.isEmpty, let decision = safeSearchDecision(facts, host: host) { return decision }
        }
        if let host = facts.host {
            if host.isIPv4Literal, let address = IPAddress(host.description) {
                // A bare address is no name, but URL-prefix rules may be written on it.
                if categoryURLRules, let path = facts.path, let blocked = blockedURLReason(host: host, path: path.lowercased()) {
                    return Decision(.drop, blocked)
                }
                return decideNameless(facts, literal: address)
            }
            return decide(facts, host: host, categoryURLRules: categoryURLRules)
        }
        if facts.mayRevealName {
            return Decision(.needMoreData, Reason(source: .awaitingName))
        }
        if categoryURLRules, let path = facts.path, case .v4 = facts.destination, let literal = try? HostName(facts.destination!.description),
            let blocked = blockedURLReason(host: literal, path: path.lowercased())
        {
            return Decision(.drop, blocked)
        }
        return decideNameless(facts, literal: nil)
    }

    /// The rule of a canary name's decision (its DNS answer becomes NXDOMAIN).
    public static var canaryRule: String { "canary" }

    /// A TLS or QUIC flow to a name SafeSearch covers goes to the enforcement
    /// host's addresses or nowhere: a hard-coded address, a stale cache or an
    /// answer from encrypted DNS would reach the search without SafeSearch.
    private func safeSearchDecision(_ facts: FlowFacts, host: HostName) -> Decision? {
        guard facts.nameSource == .tlsServerName || facts.nameSource == .quicServerName, let destination = facts.destination,
            let engine = SafeSearch.engine(for: host, among: policy.bypass.safeSearch)
        else { return nil }
        if safeSearchAddresses[engine]?.contains(destination) == true { return nil }
        return Decision(.drop, Reason(source: .bypass, category: "safeSearch", rule: engine.enforcementHost))
    }

    /// A way around the filter the policy blocks, before any rule of names:
    /// a tunnel or encrypted DNS carries every name, so no allow list lets
    /// it through; `bypass:` allowing it leaves the flow to the rules.
    private func bypassDecision(_ facts: FlowFacts) -> Decision? {
        let keys = policy.bypass
        if let kind = facts.bypass {
            // The school's own proxy: judged by the target the request names (a CONNECT, SOCKS4,
            // a SOCKS5 request that came with its greeting), else as nameless (policy.noName).
            if kind == .socks || kind == .connect, keys.isSchoolProxy(facts.destination, port: facts.destinationPort) { return nil }
            // The school's SSH servers: left to the rules (SSH shows no name: policy.noName).
            if kind == .ssh, keys.isSchoolSSHServer(facts.destination, port: facts.destinationPort) { return nil }
            let (key, action) =
                switch kind {
                case .dot, .doq: ("encryptedDNS", keys.encryptedDNS)
                case .ssh: ("ssh", keys.ssh)
                case .wireguard, .openvpn, .ike, .socks, .connect, .tor, .oversizedHello: ("tunnels", keys.tunnels)
                }
            return action == .block ? Decision(.drop, Reason(source: .bypass, category: key, rule: kind.rawValue)) : nil
        }
        if keys.quic == .block { return Decision(.drop, Reason(source: .bypass, category: "quic", rule: "quic")) }
        if facts.host == nil, !facts.mayRevealName, keys.unreadableQUIC == .block {
            return Decision(.drop, Reason(source: .bypass, category: "unreadableQUIC", rule: "quic"))
        }
        return nil
    }

    private func decide(_ facts: FlowFacts, host: HostName, categoryURLRules: Bool) -> Decision {
        var suffixes = Suffixes()
        SuffixFingerprints.forEachSuffix(host.bytes.span) { _, fingerprint in suffixes.append(fingerprint) }
        // Start loading every suffix the store may hold (index i has i + 1 labels).
        // Only a hint: past the first 8 (few real names have more) they load when probed.
        var wanted = InlineArray<8, UInt64>(repeating: 0)
        var wantedCount = 0
        for index in 0..<min(suffixes.count, wanted.count) where rules.hasDomainRules(labelCount: index + 1) {
            wanted[wantedCount] = suffixes.fingerprint(index: index)
            wantedCount += 1
        }
        rules.prefetchDomainRules(fingerprints: wanted.span.extracting(0..<wantedCount))
        return decide(facts, host: host, suffixes: suffixes, categoryURLRules: categoryURLRules)
    }

    /// The fingerprints of a name's suffixes. `forEachSuffix` yields the
    /// top-level label first, so index i has i + 1 labels and depth d (0 is
    /// the whole name) is at index `count - 1 - d`. The first 8 are kept on
    /// the stack; a longer name (up to 127 labels) moves them to the heap.
    private struct Suffixes {
        private var inline = InlineArray<8, UInt64>(repeating: 0)
        private var spilled: [UInt64] = []
        private(set) var count = 0

        @inline(__always)
        mutating func append(_ fingerprint: UInt64) {
            if count < inline.count {
                inline[count] = fingerprint
            } else {
                if spilled.isEmpty { spilled = (0..<inline.count).map { inline[$0] } }
                spilled.append(fingerprint)
            }
            count += 1
        }

        func fingerprint(index: Int) -> UInt64 { count <= inline.count ? inline[index] : spilled[index] }
        func fingerprint(depth: Int) -> UInt64 { fingerprint(index: count - 1 - depth) }
    }

    /// The suffix of `host` at `depth` as written in a rule: the name after its first `depth` dots.
    private func suffixText(_ host: HostName, depth: Int) -> String {
        let bytes = host.bytes.span
        var start = 0
        var dots = 0
        while dots < depth, start < bytes.count {
            if bytes[start] == UInt8(ascii: ".") { dots += 1 }
            start += 1
        }
        return String(decoding: host.bytes[start...], as: UTF8.self)
    }

    private func decide(_ facts: FlowFacts, host: HostName, suffixes: Suffixes, categoryURLRules: Bool) -> Decision {
        var path = facts.path
        if let raw = path, raw.utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) {
            path = raw.lowercased()
        }

        // A list's allow never opens a locked category (the check runs only on such an allow).
        func unlessLocked(_ decision: Decision) -> Decision {
            guard hasLocked, decision.verdict == .allow, let locked = lockedReason(host: host, suffixes: suffixes, path: path, destination: facts.destination)
            else { return decision }
            return Decision(.drop, locked)
        }
        // 0. An exam: its list or nothing. An address or network on the list opens the flow by its
        // destination, and the name is still judged for locked categories: a network wide enough
        // to hold a locked site's address must not open that site by name.
        if let examList {
            if let decision = nameDecision(examList, suffixes: suffixes, path: path) { return unlessLocked(decision) }
            if let destination = facts.destination, let decision = networkDecision(examList, destination) { return unlessLocked(decision) }
            return Decision(.drop, Reason(source: .exam))
        }
        // 0. A focus or pause: its list or nothing (by address as the exam's).
        if let focusList {
            if let decision = nameDecision(focusList, suffixes: suffixes, path: path) { return unlessLocked(decision) }
            if let destination = facts.destination, let decision = networkDecision(focusList, destination) { return unlessLocked(decision) }
            return Decision(.drop, Reason(source: .focus))
        }
        // 0. Teacher overrides, by name and by address.
        if overrides.hasNames, let decision = nameDecision(overrides, suffixes: suffixes, path: path) { return unlessLocked(decision) }
        if let destination = facts.destination, let decision = networkDecision(overrides, destination) { return unlessLocked(decision) }
        // 1. Local lists by name: the most specific entry wins, deny on a tie.
        if local.hasNames, let decision = nameDecision(local, suffixes: suffixes, path: path) { return unlessLocked(decision) }
        // 2. Local lists by address.
        if let destination = facts.destination, let decision = networkDecision(local, destination) {
            return unlessLocked(decision)
        }

        // 3. Category rules, most specific first. URL prefixes are more specific than domains.
        var firstKnown: Reason? = nil
        if categoryURLRules, let path {
            for depth in 0..<suffixes.count {
                var blocked: Reason? = nil
                rules.forEachURLRule(hostFingerprint: suffixes.fingerprint(depth: depth)) { prefix, category in
                    guard blocked == nil, prefix.isPrefix(of: path) else { return }
                    let reason = Reason(
                        source: .category,
                        category: categoryName(category),
                        rule: suffixText(host, depth: depth) + prefix.decodedText
                    )
                    if isBlocked(category) { blocked = reason } else if firstKnown == nil { firstKnown = reason }
                }
                if let blocked { return Decision(.drop, blocked) }
            }
        }
        for depth in 0..<suffixes.count where rules.hasDomainRules(labelCount: suffixes.count - depth) {
            var blocked: (CategoryID, MatchKind)? = nil
            var known: (CategoryID, MatchKind)? = nil
            rules.forEachDomainRule(fingerprint: suffixes.fingerprint(depth: depth)) { category, kind in
                guard blocked == nil, kind.applies(atDepth: depth) else { return }
                if isBlocked(category) { blocked = (category, kind) } else if known == nil { known = (category, kind) }
            }
            if let (category, kind) = blocked {
                return Decision(
                    .drop,
                    Reason(source: .category, category: categoryName(category), rule: kind.marker + suffixText(host, depth: depth)))
            }
            if firstKnown == nil, let (category, kind) = known {
                firstKnown = Reason(source: .category, category: categoryName(category), rule: kind.marker + suffixText(host, depth: depth))
            }
        }
        if let destination = facts.destination, let blocked = blockedNetworkReason(destination) {
            return Decision(.drop, blocked)
        }

        // 4. Known but not blocked.
        if let firstKnown { return Decision(.allow, firstKnown) }

        // 5. Unknown.
        let reason = Reason(source: .unknownHost)
        switch policy.unknown {
        case .allow: return Decision(.allow, reason)
        case .block: return Decision(.drop, reason)
        case .ask:
            guard let answer = answers[fingerprint: suffixes.fingerprint(depth: 0)] else {
                return Decision(.needRules, reason)
            }
            return decide(answer)
        }
    }

    /// The most specific entry of `layer` for the name (URL prefixes before
    /// domains at each depth), deny on a tie; nil when none matches.
    private func nameDecision(_ layer: ListLayer, suffixes: Suffixes, path: String?) -> Decision? {
        for depth in 0..<suffixes.count {
            let fingerprint = suffixes.fingerprint(depth: depth)
            var match: LocalEntry? = nil
            if let path, let entries = layer.urls[fingerprint] {
                match = entries.first {
                    // Bytes, as the store's prefixes match: String.hasPrefix compares characters, and a
                    // combining mark after the prefix would join its last one into another.
                    if case .urlPrefix(_, let prefix) = $0.pattern { return path.utf8.starts(with: prefix.utf8) }
                    return false
                }
            }
            if match == nil, let entries = layer.names[fingerprint] {
                match = entries.first {
                    if case .domain(_, let kind) = $0.pattern { return kind.applies(atDepth: depth) }
                    return false
                }
            }
            if let entry = match { return layer.decision(entry) }
        }
        return nil
    }

    /// The locked category a rule puts this name (URL, destination) in, as a
    /// reason; nil when none does. URL prefixes, then domains, then addresses.
    private func lockedReason(host: HostName, suffixes: Suffixes, path: String?, destination: IPAddress?) -> Reason? {
        if let path {
            for depth in 0..<suffixes.count {
                var found: Reason? = nil
                rules.forEachURLRule(hostFingerprint: suffixes.fingerprint(depth: depth)) { prefix, category in
                    guard found == nil, isLocked(category), prefix.isPrefix(of: path) else { return }
                    found = Reason(source: .category, category: categoryName(category), rule: suffixText(host, depth: depth) + prefix.decodedText)
                }
                if let found { return found }
            }
        }
        for depth in 0..<suffixes.count where rules.hasDomainRules(labelCount: suffixes.count - depth) {
            var found: Reason? = nil
            rules.forEachDomainRule(fingerprint: suffixes.fingerprint(depth: depth)) { category, kind in
                guard found == nil, isLocked(category), kind.applies(atDepth: depth) else { return }
                found = Reason(source: .category, category: categoryName(category), rule: kind.marker + suffixText(host, depth: depth))
            }
            if let found { return found }
        }
        return destination.flatMap(lockedNetworkReason)
    }

    private func lockedNetworkReason(_ address: IPAddress) -> Reason? {
        var best: (network: IPNetwork, category: CategoryID)? = nil
        rules.forEachNetworkRule(containing: address.unmappingIPv4) { network, category in
            guard isLocked(category) else { return }
            if best == nil || network.prefixLength > best!.network.prefixLength { best = (network, category) }
        }
        guard let best else { return nil }
        return Reason(source: .category, category: categoryName(best.category), rule: best.network.description)
    }

    private func isLocked(_ category: CategoryID) -> Bool {
        Int(category) < categoryLocked.count && categoryLocked[Int(category)]
    }

    /// Judges filter-control's answer for a name like a category rule.
    private func decide(_ answer: LookupAnswers.Answer) -> Decision {
        if let blocked = answer.categories.first(where: { policy.blockedCategories.blocks($0) || policy.locked.contains($0) }) {
            return Decision(.drop, Reason(source: .lookup, category: blocked))
        }
        if let known = answer.categories.first {
            return Decision(.allow, Reason(source: .lookup, category: known))
        }
        return askDefault(Reason(source: .lookupUnknown))
    }

    /// `policy.askDefault` with the given reason (no answer in time, or the lookup does not know the name).
    public func askDefault(_ reason: Reason) -> Decision {
        Decision(policy.askDefault == .allow ? .allow : .drop, reason)
    }

    private func decideNameless(_ facts: FlowFacts, literal: IPAddress?) -> Decision {
        func unlessLocked(_ decision: Decision, _ address: IPAddress) -> Decision {
            guard hasLocked, decision.verdict == .allow, let locked = lockedNetworkReason(address) else { return decision }
            return Decision(.drop, locked)
        }
        if let examList {
            if let address = literal ?? facts.destination, let decision = networkDecision(examList, address) { return unlessLocked(decision, address) }
            return Decision(.drop, Reason(source: .exam))
        }
        if let focusList {
            if let address = literal ?? facts.destination, let decision = networkDecision(focusList, address) { return unlessLocked(decision, address) }
            return Decision(.drop, Reason(source: .focus))
        }
        if let address = literal ?? facts.destination {
            if let decision = networkDecision(overrides, address) { return unlessLocked(decision, address) }
            if let decision = networkDecision(local, address) { return unlessLocked(decision, address) }
            if let blocked = blockedNetworkReason(address) { return Decision(.drop, blocked) }
        }
        let reason = Reason(source: .noName)
        return Decision(policy.noName == .allow ? .allow : .drop, reason)
    }

    /// A blocked URL-prefix rule on exactly this host (used for IP-literal hosts).
    private func blockedURLReason(host: HostName, path: String) -> Reason? {
        var blocked: Reason? = nil
        rules.forEachURLRule(hostFingerprint: SuffixFingerprints.fingerprint(of: host)) { prefix, category in
            guard blocked == nil, isBlocked(category), prefix.isPrefix(of: path) else { return }
            blocked = Reason(
                source: .category, category: categoryName(category),
                rule: host.description + prefix.decodedText)
        }
        return blocked
    }

    private func networkDecision(_ layer: ListLayer, _ address: IPAddress) -> Decision? {
        var best: LocalEntry? = nil
        var bestLength = -1
        for entry in layer.networks {
            guard case .network(let network) = entry.pattern, network.contains(address) else { continue }
            // Strictly longer wins; deny entries come first, so deny wins a tie.
            if network.prefixLength > bestLength {
                best = entry
                bestLength = network.prefixLength
            }
        }
        guard let best else { return nil }
        return layer.decision(best)
    }

    private func blockedNetworkReason(_ address: IPAddress) -> Reason? {
        var best: (network: IPNetwork, category: CategoryID)? = nil
        rules.forEachNetworkRule(containing: address.unmappingIPv4) { network, category in
            guard isBlocked(category) else { return }
            if best == nil || network.prefixLength > best!.network.prefixLength { best = (network, category) }
        }
        guard let best else { return nil }
        return Reason(source: .category, category: categoryName(best.category), rule: best.network.description)
    }

    private func isInCategory(_ address: IPAddress, _ wanted: CategoryID) -> Bool {
        var found = false
        rules.forEachNetworkRule(containing: address.unmappingIPv4) { _, category in
            if category == wanted { found = true }
        }
        return found
    }

    private func isBlocked(_ category: CategoryID) -> Bool {
        Int(category) < categoryBlocked.count ? categoryBlocked[Int(category)] : true
    }

    private func categoryName(_ category: CategoryID) -> String {
        let names = rules.categoryNames
        return Int(category) < names.count ? names[Int(category)] : "category-\(category)"
    }
}

extension Span where Element == UInt8 {
    /// True when `text`'s UTF-8 begins with these bytes.
    fileprivate func isPrefix(of text: String) -> Bool {
        var index = 0
        for byte in text.utf8 {
            guard index < count else { return true }
            if self[index] != byte { return false }
            index += 1
        }
        return index == count
    }

    /// These bytes as text (invalid UTF-8 repaired), for a reason.
    fileprivate var decodedText: String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        for index in indices { bytes.append(self[index]) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
