public import HallpassConfig
import HallpassSystem
public import SharedStore
public import VerdictCore
import ExtrasBase64
import Yams

/// hallpass's one configuration file (default `/etc/hallpass/hallpass.yaml`),
/// parsed once into immutable values with defaults. `filterctl config example`
/// prints every key with its meaning; `ConfigurationError` names the key that is wrong.
public struct Configuration: Sendable, Hashable {
    public static let defaultPath = "/etc/hallpass/hallpass.yaml"

    /// What happens to traffic while the filter cannot judge it.
    public enum FailMode: String, Sendable, Hashable, CaseIterable {
        /// Traffic flows uninspected while filter-data is down or the queue is full.
        case open
        /// Nothing new leaves the machine while filter-data is down.
        case closed
    }

    public struct Queue: Sendable, Hashable {
        public var number: UInt16 = 0
        public var failMode: FailMode = .open
        /// How many bytes of a flow filter-data reads, at most, looking for a name.
        public var peekBytes: Int = 16 * 1024
        /// The system user filter-data runs as once sandboxed: the package's own
        /// (made by systemd-sysusers), shared with no other service. filter-control
        /// looks it up at start and hands filter-data the numbers (`DataUser`).
        public var user: String = DataUser.packageUser
    }

    /// The inspection proxy, `hallpass-proxy` (docs/inspection.md): where the
    /// kernel sends connections to the addresses of inspected names.
    public struct Proxy: Sendable, Hashable {
        /// The port it listens on, on 127.0.0.1 and ::1. Below 1024 by default:
        /// only root binds it, so no local user can listen there first while
        /// the proxy restarts and get the connections the kernel redirects.
        public var port: UInt16 = 1023
        /// The system user it runs as once sandboxed, as `queue.user` is filter-data's.
        public var user: String = "_hallpass-proxy"
        /// The most connections it relays at once; more are refused (a reset).
        public var connections: Int = 4096
        /// A relayed connection with no byte either way for this long is closed (seconds).
        public var idleTimeout: Int = 600
        /// The interception CA's folder (`ca-key.pem` 0600 and `ca.pem`, folder 0700,
        /// root's): filter-control makes it when the policy first inspects a name and
        /// hands the key to the proxy over its control channel (docs/inspection.md).
        public var ca: String = "/var/lib/hallpass/inspect-ca"
        /// The certificates the servers of inspected names are checked against
        /// (hallpass's own CAs are left out whatever the file holds).
        public var trustFile: String = "/etc/ssl/certs/ca-certificates.crt"
        /// The line of `port` in the file, for `unprivilegedPortProblems`.
        public var portLine: Int?
        /// The line of `ca` in the file, for the error when it is the block page's folder.
        public var caLine: Int?

        public init() {}
    }

    public struct Rules: Sendable, Hashable {
        public var directory: String = "/var/lib/hallpass"
        /// `https://...` (a bundle folder URL) or `file:///...`; nil: use what is installed.
        public var source: String?
        public var trustedKeys: [BundlePublicKey] = []
        public var caFile: String?
        /// `sha256/BASE64` SPKI pins.
        public var pins: [String] = []
        /// Set when the rules come from the school's server (`school.bundleKeys`
        /// without `rules.source`): its certificate is accepted when, and only
        /// when, its key is this one (`school.fingerprint`), as for the school's
        /// own connection; `caFile` and `pins` do not apply. Not a key of its own.
        public var serverKey: ServerFingerprint?
        /// Seconds between fetches.
        public var refresh: Int = 30 * 60
        /// The most bytes one bundle may hold (manifest, signature and files together).
        public var maxBundleBytes: Int = 256 << 20
    }

    public struct RequestAccess: Sendable, Hashable {
        public var text: String
        public var url: String
        /// How many requests one person may make with the built-in form (`perUser: {pending, perDay}`).
        public var perUser = AccessRequestStore.Limits()
    }

    /// What filter-data does with a DNS query for a blocked name (`policy.blockedDNS`).
    public enum BlockedDNS: String, Sendable, Hashable, CaseIterable {
        /// Let it go and point the answer's A/AAAA records at the block page.
        case rewrite
        /// Drop the query: the name does not resolve.
        case drop
    }

    public struct BlockPage: Sendable, Hashable {
        /// The IPv4 address the block page listens on (and blocked names resolve to).
        public var address: String = "127.0.0.1"
        /// The IPv6 address the block page listens on (and blocked names resolve to).
        public var address6: String = "::1"
        /// The port of the page at http://address:port/ (for a direct look and the
        /// desktop notice's link); by default the same listener as `httpPort`.
        public var port: UInt16 = 80
        /// Where browsers sent to the block page by a rewritten DNS answer arrive.
        public var httpPort: UInt16 = 80
        public var httpsPort: UInt16 = 443
        public var organization: String = "Your school"
        /// nil: the page offers no link.
        public var requestAccess: RequestAccess?
        /// A folder with custom templates and strings (docs/block-page.md); nil: the built-in page.
        public var templates: String?
        /// The language of the page when the browser asks for none the page has.
        public var language: String = "en"
        /// The local CA for HTTPS block pages (`filterctl ca init` makes it; only filter-control reads it).
        public var ca: String = "/etc/hallpass/ca"

        /// The line of each port key in the file (`port`, `httpPort`,
        /// `httpsPort`), for `unprivilegedPortProblems`; empty for defaults.
        public var portLines: [String: Int] = [:]

        /// The port the page's own address is served on: `port`, unless a
        /// local user could take it (at or above `unprivilegedPortStart`),
        /// then `httpPort`, where filter-control listens anyway (80 by default).
        public func pagePort(unprivilegedPortStart: Int) -> UInt16 {
            Int(port) < unprivilegedPortStart ? port : httpPort
        }

        /// The page's own address as served, `http://127.0.0.1/` (the port only when not 80):
        /// the desktop notice's link.
        public func pageURL(unprivilegedPortStart: Int) -> String {
            let served = pagePort(unprivilegedPortStart: unprivilegedPortStart)
            return "http://\(address)\(served == 80 ? "" : ":\(served)")/"
        }
    }

    public struct Admin: Sendable, Hashable {
        public var socket: String = "/run/hallpass/control.sock"
        /// A group whose members may use filterctl besides root.
        public var group: String?
    }

    public var queue = Queue()
    public var proxy = Proxy()
    public var rules = Rules()
    public var policy = Policy()
    /// The policy keys written in this file's `policy:` (to tell an
    /// unset key from a default when a bundle brings the school's policy).
    public var policyKeys = PolicyKeys()
    public var blockPage = BlockPage()
    public var admin = Admin()
    public var blockedDNS = BlockedDNS.rewrite
    /// The audit records: file, journald, syslog, and what they say about people.
    public var log = AuditSettings()
    /// The desktop notice for blocked flows that get no block page.
    public var notify = NoticeSettings()
    /// The Prometheus endpoint; nil (no `metrics:`): none.
    public var metrics: Metrics?
    /// The school's server (`school:`); nil: the machine reports to none.
    public var school: SchoolSettings?

    public struct Metrics: Sendable, Hashable {
        public var address = "127.0.0.1"
        public var port: UInt16 = 9733
    }

    public init() { applyBlockedDNS() }
}

/// A configuration problem, naming the key (`policy.unknown`) and, where
/// known, the line in the file: HallpassConfig's, which the server's
/// configuration shares.
public typealias ConfigurationError = HallpassConfig.ConfigurationError

extension Configuration {
    /// Parses YAML text. Unknown keys are errors (a typo must not silently drop a setting).
    /// Pure: what the machine allows (a port anyone may bind) is
    /// `unprivilegedPortProblems`'s, asked with the machine's bound.
    public init(yaml: String) throws(ConfigurationError) {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(notYAML: error)
        }
        self.init()
        guard let root else { return }
        let top = try ConfigNode(root, key: "").mapping(allowed: [
            "queue", "proxy", "rules", "policy", "blockPage", "admin", "log", "notify", "metrics", "school",
        ])
        if let proxy = top["proxy"] {
            let fields = try proxy.mapping(allowed: ["port", "user", "connections", "idleTimeout", "ca", "trustFile"])
            if let port = fields["port"] {
                self.proxy.port = try port.integer(in: 1...65535).narrowed()
                self.proxy.portLine = port.node.mark?.line
            }
            if let user = fields["user"] {
                let name = try user.string()
                guard DataUser.isUserName(name) else { throw user.error("'\(name)' is not a user name (letters, digits, '_', '.', '-', at most 32, not all digits)") }
                guard name != "root" else { throw user.error("hallpass-proxy never runs as root") }
                self.proxy.user = name
            }
            if let connections = fields["connections"] { self.proxy.connections = try connections.integer(in: 16...65_536) }
            if let idle = fields["idleTimeout"] { self.proxy.idleTimeout = try idle.duration(minimum: 10) }
            if let ca = fields["ca"] {
                self.proxy.ca = try ca.absolutePath()
                self.proxy.caLine = ca.node.mark?.line
            }
            if let trustFile = fields["trustFile"] { self.proxy.trustFile = try trustFile.absolutePath() }
        }

        if let queue = top["queue"] {
            let fields = try queue.mapping(allowed: ["number", "failMode", "peekBytes", "user"])
            if let number = fields["number"] { self.queue.number = try number.integer(in: 0...65535).narrowed() }
            if let mode = fields["failMode"] { self.queue.failMode = try mode.choice(FailMode.self) }
            if let peek = fields["peekBytes"] { self.queue.peekBytes = try peek.integer(in: 512...(1 << 20)) }
            if let user = fields["user"] {
                let name = try user.string()
                guard DataUser.isUserName(name) else {
                    throw user.error("'\(name)' is not a user name (letters, digits, '_', '.', '-', at most 32, not all digits), such as _hallpass or nobody")
                }
                guard name != "root" else { throw user.error("filter-data never runs as root") }
                self.queue.user = name
            }
        }
        if let rules = top["rules"] {
            let fields = try rules.mapping(allowed: [
                "directory", "source", "trustedKeys", "caFile", "pins", "refresh", "maxBundleBytes",
            ])
            if let directory = fields["directory"] { self.rules.directory = try directory.absolutePath() }
            if let source = fields["source"] {
                let text = try source.string()
                do {
                    _ = try BundleSource(parsing: text)
                } catch {
                    throw source.error(error.description)
                }
                self.rules.source = text
            }
            if let keys = fields["trustedKeys"] {
                self.rules.trustedKeys = try keys.bundlePublicKeys()
            }
            if let ca = fields["caFile"] { self.rules.caFile = try ca.absolutePath() }
            if let pins = fields["pins"] {
                self.rules.pins = try pins.list().map { node throws(ConfigurationError) in
                    let pin = try node.string()
                    guard pin.hasPrefix("sha256/"), pin.count == 51,
                        (try? Base64.decode(string: String(pin.dropFirst(7))))?.count == 32
                    else {
                        throw node.error("a pin is 'sha256/' and the base64 SHA-256 of a SubjectPublicKeyInfo (44 characters)")
                    }
                    return pin
                }
            }
            if let refresh = fields["refresh"] { self.rules.refresh = try refresh.duration(minimum: 60) }
            if let limit = fields["maxBundleBytes"] {
                self.rules.maxBundleBytes = try limit.integer(in: (1 << 20)...(1 << 34))
            }
        }
        if let policy = top["policy"] {
            let fields = try policy.mapping(allowed: PolicyKeys.fieldNames + ["blockedDNS"])
            self.policyKeys = try PolicyKeys(fields)
            self.policyKeys.apply(to: &self.policy)
            if let blockedDNS = fields["blockedDNS"] { self.blockedDNS = try blockedDNS.choice(BlockedDNS.self) }
        }
        if let page = top["blockPage"] {
            let fields = try page.mapping(allowed: [
                "address", "address6", "port", "httpPort", "httpsPort", "organization", "requestAccess", "templates", "ca", "language",
            ])
            if let address = fields["address"] {
                let text = try address.string()
                guard let parsed = IPAddress(text), parsed.isIPv4 else { throw address.error("'\(text)' is not an IPv4 address") }
                self.blockPage.address = text
            }
            if let address = fields["address6"] {
                let text = try address.string()
                guard let parsed = IPAddress(text), !parsed.isIPv4 else { throw address.error("'\(text)' is not an IPv6 address") }
                self.blockPage.address6 = text
            }
            if let port = fields["port"] { self.blockPage.port = try port.integer(in: 1...65535).narrowed() }
            if let port = fields["httpPort"] { self.blockPage.httpPort = try port.integer(in: 1...65535).narrowed() }
            if let port = fields["httpsPort"] { self.blockPage.httpsPort = try port.integer(in: 1...65535).narrowed() }
            for name in ["port", "httpPort", "httpsPort"] {
                if let line = fields[name]?.node.mark?.line { self.blockPage.portLines[name] = line }
            }
            if let templates = fields["templates"] { self.blockPage.templates = try templates.absolutePath() }
            if let ca = fields["ca"] { self.blockPage.ca = try ca.absolutePath() }
            if let language = fields["language"] {
                let text = try language.string()
                guard (2...16).contains(text.count), text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
                    throw language.error("'\(text)' is not a language tag such as en, ko or pt-BR")
                }
                self.blockPage.language = text
            }
            if let organization = fields["organization"] {
                let text = try organization.string()
                guard !text.isEmpty, text.count <= 200 else { throw organization.error("1 to 200 characters") }
                self.blockPage.organization = text
            }
            if let request = fields["requestAccess"] {
                if case .scalar = request.node, request.node.null != nil {
                    self.blockPage.requestAccess = nil
                } else {
                    let access = try request.mapping(allowed: ["text", "url", "perUser"])
                    guard let text = access["text"], let url = access["url"] else {
                        throw request.error("needs both 'text' and 'url' (or leave requestAccess out for no link)")
                    }
                    let urlText = try url.string()
                    guard urlText.hasPrefix("https://") || urlText.hasPrefix("http://") || urlText == "builtin" else {
                        throw url.error("expected an http(s):// URL, or 'builtin' for the block page's own form")
                    }
                    var settings = RequestAccess(text: try text.string(), url: urlText)
                    if let perUser = access["perUser"] {
                        let limits = try perUser.mapping(allowed: ["pending", "perDay"])
                        if let pending = limits["pending"] { settings.perUser.pending = try pending.integer(in: 1...100) }
                        if let perDay = limits["perDay"] { settings.perUser.perDay = try perDay.integer(in: 1...1000) }
                    }
                    self.blockPage.requestAccess = settings
                }
            }
        }
        if let admin = top["admin"] {
            let fields = try admin.mapping(allowed: ["socket", "group"])
            if let socket = fields["socket"] { self.admin.socket = try socket.absolutePath() }
            if let group = fields["group"] { self.admin.group = try group.string() }
        }
        if let log = top["log"] { self.log = try AuditSettings(log) }
        if let notify = top["notify"] { self.notify = try NoticeSettings(notify) }
        if let metrics = top["metrics"] {
            let fields = try metrics.mapping(allowed: ["address", "port"])
            var endpoint = Metrics()
            if let address = fields["address"] {
                let text = try address.string()
                guard IPAddress(text) != nil else { throw address.error("'\(text)' is not an IP address (127.0.0.1 keeps the metrics on the machine)") }
                endpoint.address = text
            }
            if let port = fields["port"] { endpoint.port = try port.integer(in: 1...65535).narrowed() }
            self.metrics = endpoint
        }
        if let schoolNode = top["school"], schoolNode.node.null == nil {
            let school = try SchoolSettings(schoolNode)
            self.school = school
            if !school.bundleKeys.isEmpty, self.rules.source == nil {
                try takeRules(from: school, node: schoolNode)
            }
        }
        applyBlockedDNS()
        // Both folders hold `ca-key.pem` and `ca.pem`: in one folder, the first policy that
        // inspects would replace the block page's CA (unconstrained, so not the interception CA's kind).
        func folder(_ path: String) -> Substring {
            var path = Substring(path)
            while path.count > 1, path.hasSuffix("/") { path = path.dropLast() }
            return path
        }
        if folder(proxy.ca) == folder(blockPage.ca) {
            throw ConfigurationError(
                key: "proxy.ca", line: proxy.caLine,
                message: "\(proxy.ca) is the block page's CA folder (blockPage.ca); the interception CA needs a folder of its own")
        }
        if policy.dnsRewrite != nil, blockPage.port == blockPage.httpsPort {
            throw ConfigurationError(
                key: "blockPage.port", line: blockPage.portLines["port"],
                message: "the page's own port is plain HTTP and cannot also be httpsPort (\(blockPage.httpsPort))")
        }
    }

    /// The block page's ports that a user without privilege may bind
    /// (at or above `unprivilegedPortStart`, the machine's
    /// `net.ipv4.ip_unprivileged_port_start`), each naming its key and line:
    /// while filter-control is down (a restart, an update) any local user
    /// could listen there first and show a page of their own where the
    /// desktop notice and rewritten DNS answers send people. Not a reason to
    /// refuse the configuration (no filter-control is no filtering at all):
    /// filter-control logs each and does not listen on such a `port` (the
    /// page's own address is served on `httpPort` instead, `pagePort`); it
    /// keeps serving `httpPort` and `httpsPort`, where rewritten DNS answers
    /// send browsers. `filterctl config check` reports them as errors.
    ///
    /// `port` is named only when it is not `httpPort` (one listener,
    /// named by `httpPort`); `httpPort` when it is listened on (with DNS
    /// rewriting, or serving the page's own address); `httpsPort` with DNS
    /// rewriting.
    public func unprivilegedPortProblems(unprivilegedPortStart bound: Int) -> [ConfigurationError] {
        let page = blockPage
        func free(_ port: UInt16) -> Bool { Int(port) >= bound }
        let remedy =
            bound > 80
            ? { (name: String) in "use a port below \(bound) (the default is \(name == "httpsPort" ? 443 : 80))" }
            : { (_: String) in "raise net.ipv4.ip_unprivileged_port_start (Linux's default is 1024) or choose a port below it" }
        func problem(_ name: String, _ port: UInt16, _ instead: String) -> ConfigurationError {
            ConfigurationError(
                key: "blockPage.\(name)", line: page.portLines[name],
                message: "port \(port) can be taken by any local user (net.ipv4.ip_unprivileged_port_start is \(bound)),"
                    + " who could show a page of their own there while filter-control is down; \(instead); \(remedy(name))")
        }
        var problems: [ConfigurationError] = []
        let rewrite = policy.dnsRewrite != nil
        if free(page.port), page.port != page.httpPort {
            problems.append(
                problem(
                    "port", page.port,
                    "filter-control does not listen on it and serves the page's own address on httpPort (\(page.httpPort)),"
                        + " \(page.pageURL(unprivilegedPortStart: bound))"))
        }
        if free(page.httpPort), rewrite || page.pagePort(unprivilegedPortStart: bound) == page.httpPort {
            problems.append(problem("httpPort", page.httpPort, "filter-control serves the page there all the same"))
        }
        if free(page.httpsPort), rewrite {
            problems.append(problem("httpsPort", page.httpsPort, "filter-control serves the page there all the same"))
        }
        if free(proxy.port) {
            problems.append(
                ConfigurationError(
                    key: "proxy.port", line: proxy.portLine,
                    message: "port \(proxy.port) can be taken by any local user (net.ipv4.ip_unprivileged_port_start is \(bound)),"
                        + " who would get the connections the kernel sends to the inspection proxy while it restarts; "
                        + (bound > 1023 ? "use a port below \(bound) (the default is 1023)" : "raise net.ipv4.ip_unprivileged_port_start (Linux's default is 1024) or choose a port below it")))
        }
        return problems
    }

    /// The first port a user without privilege may bind in this network
    /// namespace (`net.ipv4.ip_unprivileged_port_start`, which covers IPv6
    /// too); 1024, Linux's default, when it cannot be read.
    public static func unprivilegedPortStart(file: String = "/proc/sys/net/ipv4/ip_unprivileged_port_start") -> Int {
        guard let bytes = try? BoundedFile.read(file, limit: 64),
            let value = Int(String(decoding: bytes.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self))
        else { return 1024 }
        return value
    }

    /// The rules from the school's server (`school.bundleKeys` set, `rules.source`
    /// not): its `/bundle/` folder, its pinned key, and its bundle keys unless
    /// `rules.trustedKeys` names others. An explicit `rules.source` wins (a
    /// school that publishes to a CDN as well).
    mutating func takeRules(from school: SchoolSettings, node: ConfigNode) throws(ConfigurationError) {
        let source = BundleSource.https(host: school.server.host, port: school.server.port, path: school.server.path("/bundle/"))
        // The server URL takes a few host names a bundle source does not (an underscore).
        guard (try? BundleSource(parsing: source.description)) == source else {
            throw node.error("the rules cannot come from \(school.server): its host is not a name a bundle source takes; set rules.source")
        }
        rules.source = source.description
        rules.serverKey = school.fingerprint
        if rules.trustedKeys.isEmpty { rules.trustedKeys = school.bundleKeys }
    }

    /// Puts `policy.blockedDNS` and the block page's addresses into the
    /// policy filter-data reads.
    mutating func applyBlockedDNS() {
        switch blockedDNS {
        case .drop:
            policy.dnsRewrite = nil
        case .rewrite:
            // Both were checked as addresses of their family when read.
            policy.dnsRewrite = Policy.DNSRewrite(ipv4: IPAddress(blockPage.address)!, ipv6: IPAddress(blockPage.address6)!)
        }
    }
}

extension Int {
    func narrowed<T: FixedWidthInteger>() -> T { T(self) }
}
