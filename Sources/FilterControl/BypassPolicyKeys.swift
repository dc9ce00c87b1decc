// The policy keys `safeSearch:` and `bypass:`, read from a policy level's
// mapping (hallpass.yaml's `policy:`, the school's file's `policy:`, its
// groups and their schedules) as part of `PolicyKeys`. `filterctl
// browser-policies` also reads them alone (`topLevel(yaml:)`), tolerating
// every other key.

public import HallpassConfig
import SharedStore
public import VerdictCore
import Yams

/// The keys as one policy level sets them (VerdictCore's `BypassKeys`).
public typealias BypassPolicyKeys = BypassKeys

extension BypassKeys {
    /// The keys this reads, beside the other policy keys.
    public static let fieldNames = ["safeSearch", "bypass"]

    /// Reads `safeSearch` and `bypass` among `fields` (other keys are the caller's).
    init(_ fields: [String: ConfigNode]) throws(ConfigurationError) {
        self.init()
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
            if let value = keys["ssh"] { ssh = try value.choice(BypassPolicy.Action.self) }
            if let node = keys["proxy"] {
                proxies = try Self.endpoints(node, what: "a proxy address", examples: "10.0.0.8:3128 or \"[2001:db8::8]:3128\"")
            }
            if let node = keys["sshServers"] {
                sshServers = try Self.endpoints(node, what: "an SSH server address", examples: "10.0.0.5:22 or \"[2001:db8::5]:22\"")
            }
        }
    }

    /// One address or a list: ADDRESS[/LENGTH][:PORT], an IPv6 address in brackets when a port follows.
    private static func endpoints(_ node: ConfigNode, what: String, examples: String) throws(ConfigurationError) -> [ProxyEndpoint] {
        let items = if case .scalar = node.node, node.node.null == nil { [node] } else { try node.list() }
        var found: [ProxyEndpoint] = []
        for item in items {
            let text = try item.string()
            guard let endpoint = ProxyEndpoint(text) else {
                throw item.error("'\(text)' is not \(what): ADDRESS[/LENGTH][:PORT], e.g. \(examples) (quoted)")
            }
            found.append(endpoint)
        }
        return found
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
