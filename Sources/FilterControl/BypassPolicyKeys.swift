// The policy keys of issue 14, `safeSearch:` and `bypass:`, read from a
// policy level's mapping (hallpass.yaml's `policy:`, the school's file's
// `policy:` and its groups). Kept apart from `PolicyKeys` so that the policy
// parser can take them in one step: add `BypassPolicyKeys.fieldNames` to
// `PolicyKeys.fieldNames` and call `BypassPolicyKeys(fields)` beside
// `PolicyKeys(fields)`. Until then `filterctl browser-policies` reads them
// itself from the files (`topLevel(yaml:)`), tolerating every other key.

import SharedStore
public import VerdictCore
import Yams

public struct BypassPolicyKeys: Sendable, Hashable {
    /// The keys this reads, beside the other policy keys.
    public static let fieldNames = ["safeSearch", "bypass"]

    /// Nil when the level does not set the key (a lower level inherits it).
    public var safeSearch: Set<SafeSearchEngine>?
    public var encryptedDNS: BypassPolicy.Action?
    public var ech: BypassPolicy.Action?
    public var tunnels: BypassPolicy.Action?
    public var unreadableQUIC: BypassPolicy.Action?
    public var quic: BypassPolicy.Action?

    public init() {}

    /// Reads `safeSearch` and `bypass` among `fields` (other keys are the caller's).
    init(_ fields: [String: ConfigNode]) throws(ConfigurationError) {
        if let node = fields["safeSearch"] {
            var engines: Set<SafeSearchEngine> = []
            if case .scalar = node.node, node.node.null == nil {
                // `safeSearch: none` or a single engine.
                let text = try node.string()
                if text != "none" { engines.insert(try node.choice(SafeSearchEngine.self)) }
            } else {
                for item in try node.list() { engines.insert(try item.choice(SafeSearchEngine.self)) }
            }
            if engines.contains(.youtubeStrict), engines.contains(.youtubeModerate) {
                throw node.error("choose one of youtube-strict and youtube-moderate")
            }
            safeSearch = engines
        }
        if let node = fields["bypass"] {
            let keys = try node.mapping(allowed: BypassPolicy.bypassKeyNames)
            if let value = keys["encryptedDNS"] { encryptedDNS = try value.choice(BypassPolicy.Action.self) }
            if let value = keys["ech"] { ech = try value.choice(BypassPolicy.Action.self) }
            if let value = keys["tunnels"] { tunnels = try value.choice(BypassPolicy.Action.self) }
            if let value = keys["unreadableQUIC"] { unreadableQUIC = try value.choice(BypassPolicy.Action.self) }
            if let value = keys["quic"] { quic = try value.choice(BypassPolicy.Action.self) }
        }
    }

    /// These keys laid over `policy` (the keys this level does not set stay).
    public func applied(to policy: BypassPolicy) -> BypassPolicy {
        var result = policy
        if let safeSearch { result.safeSearch = safeSearch }
        if let encryptedDNS { result.encryptedDNS = encryptedDNS }
        if let ech { result.ech = ech }
        if let tunnels { result.tunnels = tunnels }
        if let unreadableQUIC { result.unreadableQUIC = unreadableQUIC }
        if let quic { result.quic = quic }
        return result
    }

    /// The keys of the top-level `policy:` mapping of a YAML document
    /// (hallpass.yaml or a school's policy file); other keys are ignored.
    public static func topLevel(yaml text: String) throws(ConfigurationError) -> BypassPolicyKeys {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            throw ConfigurationError(notYAML: error)
        }
        guard let root, case .mapping(let top) = root, let policy = top["policy"] else { return BypassPolicyKeys() }
        guard case .mapping(let mapping) = policy else { return BypassPolicyKeys() }
        var fields: [String: ConfigNode] = [:]
        for (key, value) in mapping {
            guard let name = key.string, fieldNames.contains(name) else { continue }
            fields[name] = ConfigNode(value, key: "policy." + name)
        }
        return try BypassPolicyKeys(fields)
    }
}
