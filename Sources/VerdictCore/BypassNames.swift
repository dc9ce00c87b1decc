// Names that matter for the ways around the filter (issue 14), as pure
// lookups: which DNS questions get NXDOMAIN, which search engines' names get
// a SafeSearch answer and from which enforcement host, and whether a flow to
// such a name goes where the enforcement host is.

/// Names answered NXDOMAIN whatever the policy's lists say.
public enum BypassCanaryNames {
    /// Firefox's canary: NXDOMAIN (or no address) tells Firefox not to turn
    /// DNS over HTTPS on by itself ("Canary domain - use-application-dns.net",
    /// support.mozilla.org). iCloud Private Relay: a negative answer for these
    /// tells Apple's devices that the network does not allow it ("Prepare
    /// your network or web server for iCloud Private Relay", developer.apple.com).
    public static let names: Set<String> = ["use-application-dns.net", "mask.icloud.com", "mask-h2.icloud.com"]

    /// The names as bytes, for the per-query check (no String made).
    static let nameBytes: [[UInt8]] = names.map { Array($0.utf8) }

    /// True when a DNS question for `host` (exactly, not a subdomain) is answered NXDOMAIN.
    public static func answersNXDOMAIN(_ host: HostName) -> Bool {
        let bytes = host.bytes
        guard bytes.count >= 15, bytes.count <= 23 else { return false }
        return nameBytes.contains(bytes)
    }
}

/// The search engines whose SafeSearch a policy can enforce.
public enum SafeSearchEngine: String, Sendable, Hashable, CaseIterable {
    case google
    case youtubeStrict = "youtube-strict"
    case youtubeModerate = "youtube-moderate"
    case bing
    case duckduckgo

    /// The host whose addresses the engine's names are pointed at.
    public var enforcementHost: String {
        switch self {
        case .google: "forcesafesearch.google.com"
        case .youtubeStrict: "restrict.youtube.com"
        case .youtubeModerate: "restrictmoderate.youtube.com"
        case .bing: "strict.bing.com"
        case .duckduckgo: "safe.duckduckgo.com"
        }
    }
}

/// Which names each engine's SafeSearch covers, and the checks on flows to them.
public enum SafeSearch {
    /// YouTube's names (support.google.com/a, "Manage YouTube content on your
    /// network and managed devices": the DNS method's names).
    public static let youtubeNames: Set<String> = [
        "www.youtube.com", "m.youtube.com", "youtubei.googleapis.com", "youtube.googleapis.com", "www.youtube-nocookie.com",
    ]

    /// The engine among `engines` whose SafeSearch covers `host`, if any. A
    /// set naming both YouTube modes counts as strict.
    public static func engine(for host: HostName, among engines: Set<SafeSearchEngine>) -> SafeSearchEngine? {
        let name = host.description
        if engines.contains(.google), isGoogleSearchName(name) { return .google }
        if youtubeNames.contains(name) {
            if engines.contains(.youtubeStrict) { return .youtubeStrict }
            if engines.contains(.youtubeModerate) { return .youtubeModerate }
        }
        if engines.contains(.bing), name == "www.bing.com" { return .bing }
        if engines.contains(.duckduckgo), name == "duckduckgo.com" { return .duckduckgo }
        return nil
    }

    /// The enforcement host `host`'s DNS answers point at, if SafeSearch covers it.
    public static func enforcementHost(for host: HostName, among engines: Set<SafeSearchEngine>) -> String? {
        engine(for: host, among: engines)?.enforcementHost
    }

    /// `www.google.` followed by one of the forms Google's search domains
    /// take (www.google.com/supported_domains): `com`, a two-letter country
    /// code, `com.` or `co.` and a country code, or `cat`. The pattern covers
    /// every listed domain without shipping the list; the few names it covers
    /// that Google does not use lead nowhere but Google's enforcement host.
    public static func isGoogleSearchName(_ name: String) -> Bool {
        guard name.hasPrefix("www.google.") else { return false }
        let suffix = name.dropFirst("www.google.".count).split(separator: ".", omittingEmptySubsequences: false)
        func isCountry(_ label: Substring) -> Bool { label.count == 2 && label.allSatisfy { $0 >= "a" && $0 <= "z" } }
        switch suffix.count {
        case 1: return suffix[0] == "com" || suffix[0] == "cat" || isCountry(suffix[0])
        case 2: return (suffix[0] == "com" || suffix[0] == "co") && isCountry(suffix[1])
        default: return false
        }
    }

    /// The SafeSearch check on a TLS or QUIC flow: a flow whose server name
    /// SafeSearch covers may only go to one of its enforcement host's
    /// addresses (a hard-coded address, or DNS that did not pass through the
    /// filter, would reach the unrestricted service). True when the flow may
    /// go on: the name is not covered, or `destination` is one of
    /// `enforcementAddresses[engine]`. A covered name whose enforcement host's
    /// addresses are not known yet is held to no address (the flow is reset).
    public static func allowsFlow(to destination: IPAddress, serverName: HostName, among engines: Set<SafeSearchEngine>,
                                  enforcementAddresses: [SafeSearchEngine: Set<IPAddress>]) -> Bool {
        guard let engine = engine(for: serverName, among: engines) else { return true }
        return enforcementAddresses[engine]?.contains(destination) ?? false
    }
}

/// The ways around a name filter filter-data recognizes a flow as, from
/// what its client sends first (FilterData's TunnelRecognizer).
public enum BypassKind: String, Sendable, Hashable, CaseIterable {
    case wireguard, openvpn, ike, socks, connect, tor
    /// SSH (RFC 4253): `ssh -D` is a SOCKS proxy and `-L`/`-R` forward any port, and
    /// what a session carries is encrypted; its own key, `bypass.ssh`, not `tunnels`.
    case ssh
    /// DNS over TLS (TCP 853, RFC 7858).
    case dot
    /// DNS over QUIC (UDP 853 or ALPN "doq", RFC 9250).
    case doq
    /// A TLS ClientHello past what hallpass reads whole (64 KiB of message,
    /// 80 KiB of records) or not readable whole (bytes past the peek bound
    /// came before the ones that declared its size): no browser sends one,
    /// and its server name stays hidden. Blocked with `tunnels`.
    case oversizedHello
}

/// Where an engine's SafeSearch sends its names: the enforcement host's
/// addresses as filter-control last resolved them (with those it saw in the
/// last hour, so a browser holding a slightly older answer is not cut off),
/// and the time to live filter-data gives its rewritten answers.
public struct SafeSearchTarget: Sendable, Hashable {
    public var addresses: [IPAddress]
    public var timeToLive: UInt32

    /// The most addresses one target carries.
    public static let maximumAddresses = 32

    public init(addresses: [IPAddress], timeToLive: UInt32) {
        self.addresses = Array(addresses.prefix(Self.maximumAddresses))
        self.timeToLive = timeToLive
    }
}

/// The `bypass:` and `safeSearch:` keys of a policy level (issue 14), with
/// their defaults: every way around the filter blocked, QUIC itself allowed,
/// no SafeSearch.
public struct BypassPolicy: Sendable, Hashable {
    public enum Action: String, Sendable, Hashable, CaseIterable {
        case block, allow
    }

    /// DNS over HTTPS (known resolvers), over TLS and over QUIC; the canary names.
    public var encryptedDNS: Action = .block
    /// ClientHellos to known ECH public names; `ech` in HTTPS and SVCB answers.
    public var ech: Action = .block
    /// WireGuard, OpenVPN, IKE, SOCKS, CONNECT to anything but the school's proxy, Tor.
    public var tunnels: Action = .block
    /// QUIC of a version hallpass cannot read.
    public var unreadableQUIC: Action = .block
    /// Every QUIC flow (`block`: browsers fall back to TCP).
    public var quic: Action = .allow
    /// SSH to anything but the school's SSH servers.
    public var ssh: Action = .block
    /// The engines whose SafeSearch is enforced.
    public var safeSearch: Set<SafeSearchEngine> = []
    /// The school's own proxies: SOCKS and CONNECT to them are not tunnels
    /// (a CONNECT is then judged by the name it asks for).
    public var proxies: [ProxyEndpoint] = []
    /// The school's own SSH servers (a Linux class's shell server, a Git host): SSH
    /// to them is not a way around the filter, whatever `ssh` says.
    public var sshServers: [ProxyEndpoint] = []

    public init() {}

    /// Whether a flow to `destination`, `port` goes to one of the school's proxies.
    public func isSchoolProxy(_ destination: IPAddress?, port: UInt16?) -> Bool {
        Self.reaches(proxies, destination, port: port)
    }

    /// Whether a flow to `destination`, `port` goes to one of the school's SSH servers.
    public func isSchoolSSHServer(_ destination: IPAddress?, port: UInt16?) -> Bool {
        Self.reaches(sshServers, destination, port: port)
    }

    private static func reaches(_ endpoints: [ProxyEndpoint], _ destination: IPAddress?, port: UInt16?) -> Bool {
        guard let destination else { return false }
        return endpoints.contains { $0.matches(destination, port: port) }
    }

    /// The category of known DNS-over-HTTPS resolvers (rules/bypass/doh), blocked with `encryptedDNS: block`.
    public static let encryptedDNSCategory = "doh"
    /// The category of ECH public names (rules/bypass/ech-front), blocked with `ech: block`.
    public static let echFrontCategory = "ech-front"
    /// The category of Tor relay addresses (the school's list), a tunnel with `tunnels: block`.
    public static let torCategory = "tor"

    /// The keys under `bypass:`.
    public static let bypassKeyNames = ["encryptedDNS", "ech", "tunnels", "unreadableQUIC", "quic", "ssh", "proxy", "sshServers"]
}

/// One of the school's proxies (`bypass.proxy`) or SSH servers (`bypass.sshServers`): an address or an address
/// block, and the port (any port when absent). Written `10.0.0.8:3128`,
/// `10.0.0.0/24`, `[2001:db8::8]:3128`, `2001:db8::/64` or `[2001:db8::/64]:3128`.
public struct ProxyEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var network: IPNetwork
    public var port: UInt16?

    public init(network: IPNetwork, port: UInt16? = nil) {
        self.network = network
        self.port = port
    }

    public init?(_ text: some StringProtocol) {
        let text = Substring(text)
        if text.hasPrefix("[") {
            // [IPv6] or [IPv6]:PORT, also with an address block inside the brackets.
            guard let close = text.firstIndex(of: "]") else { return nil }
            guard let network = IPNetwork(text[text.index(after: text.startIndex)..<close]), !network.address.isIPv4 else { return nil }
            let rest = text[text.index(after: close)...]
            if rest.isEmpty {
                self.init(network: network)
            } else {
                guard rest.hasPrefix(":"), let port = Self.port(rest.dropFirst()) else { return nil }
                self.init(network: network, port: port)
            }
            return
        }
        let colons = text.count { $0 == ":" }
        if colons == 1 {
            // IPv4 (or an IPv4 block) with a port.
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard let network = IPNetwork(parts[0]), network.address.isIPv4, let port = Self.port(parts[1]) else { return nil }
            self.init(network: network, port: port)
        } else {
            guard let network = IPNetwork(text) else { return nil }
            self.init(network: network)
        }
    }

    private static func port(_ text: Substring) -> UInt16? {
        guard !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }), let port = UInt16(text), port > 0 else { return nil }
        return port
    }

    public func matches(_ destination: IPAddress, port: UInt16?) -> Bool {
        guard network.contains(destination) else { return false }
        guard let wanted = self.port else { return true }
        return port == wanted
    }

    public var description: String {
        guard let port else { return network.description }
        return network.address.isIPv4 ? "\(network):\(port)" : "[\(network)]:\(port)"
    }
}

/// The `safeSearch:` and `bypass:` keys one policy level sets (nil: the
/// level does not set it, and inherits it from the level below).
public struct BypassKeys: Sendable, Hashable {
    public var safeSearch: Set<SafeSearchEngine>?
    public var encryptedDNS: BypassPolicy.Action?
    public var ech: BypassPolicy.Action?
    public var tunnels: BypassPolicy.Action?
    public var unreadableQUIC: BypassPolicy.Action?
    public var quic: BypassPolicy.Action?
    public var ssh: BypassPolicy.Action?
    public var proxies: [ProxyEndpoint]?
    public var sshServers: [ProxyEndpoint]?

    public init() {}

    /// The `bypass:` keys alone.
    public var withoutSafeSearch: BypassKeys {
        var keys = self
        keys.safeSearch = nil
        return keys
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
        if let ssh { result.ssh = ssh }
        if let proxies { result.proxies = proxies }
        if let sshServers { result.sshServers = sshServers }
        return result
    }
}
