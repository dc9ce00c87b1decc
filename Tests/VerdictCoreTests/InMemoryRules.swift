import VerdictCore

/// A rule source held in dictionaries: the fake the engine tests use.
struct InMemoryRules: RuleSource {
    var categoryNames: [String] = []
    var domains: [UInt64: [(CategoryID, MatchKind)]] = [:]
    var urls: [UInt64: [([UInt8], CategoryID)]] = [:]
    var networks: [(IPNetwork, CategoryID)] = []

    mutating func category(_ name: String) -> CategoryID {
        if let index = categoryNames.firstIndex(of: name) { return CategoryID(index) }
        categoryNames.append(name)
        return CategoryID(categoryNames.count - 1)
    }

    /// Adds `entry` (RulePattern syntax) under `categoryName`.
    mutating func add(_ entry: String, _ categoryName: String) throws {
        let id = category(categoryName)
        switch try RulePattern(entry) {
        case .domain(let host, let kind):
            domains[SuffixFingerprints.fingerprint(of: host), default: []].append((id, kind))
        case .urlPrefix(let host, let path):
            urls[SuffixFingerprints.fingerprint(of: host), default: []].append((Array(path.utf8), id))
        case .network(let network):
            networks.append((network, id))
        }
    }

    func forEachDomainRule(fingerprint: UInt64, _ body: (CategoryID, MatchKind) -> Void) {
        for (category, kind) in domains[fingerprint] ?? [] { body(category, kind) }
    }

    func forEachURLRule(hostFingerprint: UInt64, _ body: (Span<UInt8>, CategoryID) -> Void) {
        for (path, category) in urls[hostFingerprint] ?? [] {
            body(path.span, category)
        }
    }

    func forEachNetworkRule(containing address: IPAddress, _ body: (IPNetwork, CategoryID) -> Void) {
        for (network, category) in networks where network.contains(address) { body(network, category) }
    }
}
