import HallpassConfig
import SharedStore
import VerdictCore
import Yams

extension PolicyKeys {
    /// The keys a policy level may set, in hallpass.yaml's `policy:` and in
    /// the school's policy file (top level, groups, schedules).
    static let fieldNames = ["block", "allow", "deny", "unknown", "noName", "askDefault", "askTimeout"] + BypassKeys.fieldNames

    /// Reads the policy keys among `fields` (which the caller checked for unknown keys).
    init(_ fields: [String: ConfigNode]) throws(ConfigurationError) {
        self.init()
        if let block = fields["block"] {
            if case .scalar = block.node, try block.string() == "all" {
                self.block = .all
            } else {
                let names = try block.list().map { node throws(ConfigurationError) in
                    let name = try node.string().lowercased()
                    guard RuleStoreBuilder.isValidCategoryName(name) else {
                        throw node.error("'\(name)' is not a category name (a-z, 0-9, '-', '_')")
                    }
                    return name
                }
                self.block = .only(Set(names))
            }
        }
        if let list = fields["allow"] { self.allow = try list.patterns() }
        if let list = fields["deny"] { self.deny = try list.patterns() }
        if let unknown = fields["unknown"] { self.unknown = try unknown.choice(Policy.UnknownAction.self) }
        if let noName = fields["noName"] { self.noName = try noName.choice(Policy.NoNameAction.self) }
        if let askDefault = fields["askDefault"] { self.askDefault = try askDefault.choice(Policy.DefaultAction.self) }
        if let askTimeout = fields["askTimeout"] { self.askTimeoutMilliseconds = try askTimeout.milliseconds(in: 10...60_000) }
        self.bypass = try BypassKeys(fields)
    }
}

extension ConfigNode {
    /// A list of rule patterns (names, `=exact`, `*.subdomains`, URL prefixes, addresses).
    func patterns() throws(ConfigurationError) -> [RulePattern] {
        try list().map { node throws(ConfigurationError) in
            do {
                return try RulePattern(node.string())
            } catch let error as RulePattern.ParseError {
                throw node.error(error.description)
            } catch {
                throw error as! ConfigurationError
            }
        }
    }
}

extension ConfigNode {
    /// A list of bundle public keys (`ed25519:BASE64`): rules.trustedKeys, school.bundleKeys.
    func bundlePublicKeys() throws(ConfigurationError) -> [BundlePublicKey] {
        try list().map { node throws(ConfigurationError) in
            do {
                return try BundlePublicKey(node.string())
            } catch let error as BundleError {
                throw node.error(error.description)
            } catch {
                throw error as! ConfigurationError
            }
        }
    }
}
