import Foundation
public import HallpassConfig
public import SharedStore
public import VerdictCore
import Yams

/// hallpass-server's configuration (default `/etc/hallpass/server.yaml`),
/// parsed once into immutable values with defaults and checked at start:
/// a wrong key or value is a `ConfigurationError` naming the key and
/// its line. docs/server.md describes every key.
public struct ServerConfiguration: Sendable, Hashable {
    public static let defaultPath = "/etc/hallpass/server.yaml"
    public static let defaultStateDirectory = "/var/lib/hallpass-server"

    public struct Listen: Sendable, Hashable {
        public var address: String = "0.0.0.0"
        public var port: Int = 8443
        /// Plain HTTP instead of HTTPS: only behind a TLS proxy, or in tests.
        /// Machines pin the certificate's key, so they cannot talk to such a listener directly.
        public var plainHTTP: Bool = false
        public init() {}
    }

    public struct TLS: Sendable, Hashable {
        /// PEM files. `hallpass-server init` makes a self-signed P-256 pair at the
        /// default paths when the file has no `tls:` keys.
        public var certificate: String = ServerConfiguration.defaultStateDirectory + "/tls/certificate.pem"
        public var key: String = ServerConfiguration.defaultStateDirectory + "/tls/key.pem"
        /// Whether the paths were written in the file (then `init` makes nothing: they are the school's).
        public var configured = false
        public init() {}
    }

    public struct Machines: Sendable, Hashable {
        /// A machine with no check-in for this long is stale (seconds).
        public var staleAfter: Int = 5 * 60
        /// Enrolments a minute from one address (`machines.enrolRate`).
        public var enrolRate: Int = 30
        /// Signed requests a minute from one machine (`machines.requestRate`):
        /// a machine posts every 10 s and checks in every minute; catching up
        /// after an outage it posts back to back, 1,000 records a post.
        public var requestRate: Int = 120
        public init() {}
    }

    /// How long the server keeps each kind of what it holds about people, in
    /// whole days (`retention:`; docs/safeguarding.md, "How long things are
    /// kept"). The retention service removes what is older, in bounded steps.
    public struct Retention: Sendable, Hashable {
        /// Connection records (`retention.records`, or the older
        /// `records.retentionDays`), by whole UTC days; live items (room
        /// rules, answers to requests) that ended before the same day go with them.
        public var records: Int = 365
        /// Access requests, with their reasons and the decisions on them;
        /// when `retention.accessRequests` is not given, the records' period
        /// (as before it existed: a school with `records.retentionDays: 30`
        /// keeps requests no longer than that).
        public var accessRequests: Int = 365
        /// Safeguarding alerts, with their triage notes and their email and webhook deliveries.
        public var alerts: Int = 7 * 365
        /// The record of which digest went to whom, and its email.
        public var digests: Int = 365
        /// The audit trail of staff actions: at least as long as the alerts,
        /// so that how each concern was handled is on record as long as the concern.
        public var audit: Int = 7 * 365

        /// Each key's range of days: records and requests a day to ten
        /// years; alerts and the audit trail at least a year (a concern is
        /// not forgotten sooner) and up to a hundred; digests at least a
        /// month (a digest's claim keeps it from being sent twice).
        public static let ranges: [(key: String, range: ClosedRange<Int>)] = [
            ("records", 1...3650), ("accessRequests", 1...3650), ("alerts", 365...36_500), ("digests", 31...3650), ("audit", 365...36_500),
        ]

        public init() {}
    }

    /// How the server builds, signs and serves the school's bundles (docs/server.md, "Publishing").
    public struct Publishing: Sendable, Hashable {
        /// The signing key's PEM file; nil: `bundle-signing.key` in the state folder, which `init` makes.
        public var signingKey: String? = nil
        /// `signingKey: offline`: the key is kept off the server, and each
        /// publication waits for its signature (`hallpass-server publish complete`).
        public var offline = false
        /// What machines trust; empty: the signing key's public key (required with `offline`).
        public var trustedKeys: [BundlePublicKey] = []
        /// Each bundle's validity (seconds).
        public var expires: Int = 30 * 86_400
        /// Earlier stores kept to write deltas from.
        public var keepVersions: Int = 3
        /// A folder every publication is also written to (a static server or a CDN's origin).
        public var copyTo: String? = nil
        /// hallpass's own doh and ech-front lists in every store.
        public var builtinProtections = true
        /// The largest list accepted, in bytes.
        public var maxListBytes: Int = 256 << 20
        public init() {}
    }

    /// The console's sessions and sign-in (docs/server.md, "Accounts and sessions").
    public struct Console: Sendable, Hashable {
        /// A session unused for this long ends (seconds).
        public var idleTimeout: Int = 30 * 60
        /// A session ends this long after its sign-in, used or not (seconds).
        public var sessionLifetime: Int = 12 * 3600
        /// This many failed sign-ins in a row lock the account...
        public var lockoutFailures: Int = 5
        /// ...for this long (seconds).
        public var lockoutDuration: Int = 15 * 60
        /// Sign-in attempts from one address in a minute, at most.
        public var signInRate: Int = 20
        /// `console.url`: the console as people's browsers reach it, for the
        /// links in alert emails; nil: `https://HOSTNAME:PORT` (`consoleURL`).
        public var url: String? = nil
        public init() {}
    }

    /// Which ways of signing in the console offers (`signIn:`).
    public struct SignIn: Sendable, Hashable {
        /// Local accounts with a password (`hallpass-server user add`).
        public var local = true
        public init() {}
    }

    public var listen = Listen()
    public var tls = TLS()
    public var console = Console()
    public var signIn = SignIn()
    public var database = DatabaseLocation.sqlite(path: ServerConfiguration.defaultStateDirectory + "/server.db")
    public var machines = Machines()
    public var retention = Retention()
    public var publishing = Publishing()
    /// `alerts:`: how safeguarding alerts are emailed and posted (AlertsConfiguration.swift).
    public var alerts = AlertsConfiguration()
    /// `filteringTest:`: the school's own test names, by category, checked beside the shipped ones (FilteringTestNames.swift).
    public var filteringTest: [FilteringTest.Name] = []
    /// `signIn.oidc`: the school's OpenID provider for the console (OpenIDConfiguration.swift); nil: none.
    public var openID: OpenIDConfiguration? = nil
    /// The console's pages: `console.schoolName`, `pseudonyms`, `language`, `strings`.
    public var consolePages = ConsolePageSettings()
    /// Set by tests and by nothing in server.yaml; see `stateDirectory`.
    public var stateDirectoryOverride: String? = nil

    /// Where the server keeps its files besides the database: the publisher's
    /// bundle folder and the cache of the files it serves. The folder of the
    /// SQLite file (by default /var/lib/hallpass-server), and with PostgreSQL
    /// /var/lib/hallpass-server.
    public var stateDirectory: String {
        if let stateDirectoryOverride { return stateDirectoryOverride }
        if case .sqlite(let path) = database { return (path as NSString).deletingLastPathComponent }
        return Self.defaultStateDirectory
    }

    /// The signing key's file (nil with an offline key).
    public var signingKeyPath: String? {
        publishing.offline ? nil : (publishing.signingKey ?? stateDirectory + "/bundle-signing.key")
    }

    public init() {}
}

/// Where the server keeps its data: `database:` in server.yaml.
public enum DatabaseLocation: Sendable, Hashable, CustomStringConvertible {
    /// An SQLite file (the embedded default).
    case sqlite(path: String)
    /// A PostgreSQL database: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require]`,
    /// or on a unix socket `postgres://USER@/DATABASE?host=/run/postgresql`.
    case postgres(PostgresLocation)

    public var description: String {
        switch self {
        case .sqlite(let path): return "sqlite:\(path)"
        case .postgres(let location): return location.description
        }
    }

    /// Reads the value of `database:`; nil when it is neither an absolute path nor a postgres URL.
    public init?(_ text: String) {
        if text.hasPrefix("/") {
            self = .sqlite(path: text)
        } else if let location = PostgresLocation(url: text) {
            self = .postgres(location)
        } else {
            return nil
        }
    }
}

public struct PostgresLocation: Sendable, Hashable, CustomStringConvertible {
    public enum TLSMode: String, Sendable, Hashable, CaseIterable {
        case disable, prefer, require
    }

    public var host: String?
    public var port: Int = 5432
    /// The folder of the server's unix socket (`?host=/run/postgresql`); the socket is `.s.PGSQL.PORT` in it.
    public var socketDirectory: String?
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    public init(socketDirectory: String, port: Int, user: String, database: String) {
        self.socketDirectory = socketDirectory
        self.port = port
        self.user = user
        self.database = database
        self.tls = .disable
    }

    public init?(url text: String) {
        guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://"),
            let components = URLComponents(string: text),
            let user = components.user, !user.isEmpty
        else { return nil }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/") else { return nil }
        self.user = user.removingPercentEncoding ?? user
        self.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database
        if let port = components.port {
            guard (1...65535).contains(port) else { return nil }
            self.port = port
        }
        var tls: TLSMode?
        for item in components.queryItems ?? [] {
            switch item.name {
            case "host":
                guard let value = item.value, value.hasPrefix("/") else { return nil }
                socketDirectory = value
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else { return nil }
                tls = mode
            default:
                return nil
            }
        }
        if socketDirectory == nil {
            guard let host = components.host, !host.isEmpty else { return nil }
            self.host = host
        }
        self.tls = tls ?? (socketDirectory == nil ? .prefer : .disable)
    }

    /// The location without the password, for logs and messages.
    public var description: String {
        if let socketDirectory {
            return "postgres://\(user)@/\(database)?host=\(socketDirectory)&port=\(port)"
        }
        return "postgres://\(user)@\(host ?? ""):\(port)/\(database)"
    }
}

extension ServerConfiguration {
    /// Parses server.yaml's text. Unknown keys are errors: a typo must not silently drop a setting.
    public init(yaml: String) throws(ConfigurationError) {
        self.init()
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(notYAML: error, document: ConfigurationError.serverDocument)
        }
        guard let root else { return }
        let top = try ConfigNode(root, key: "", document: ConfigurationError.serverDocument).mapping(
            allowed: ["listen", "tls", "database", "machines", "records", "retention", "publishing", "console", "signIn", "alerts", "filteringTest"])
        if let listen = try top["listen"]?.mapping(allowed: ["address", "port", "plainHTTP"]) {
            if let address = listen["address"] {
                let text = try address.string()
                guard !text.isEmpty, !text.contains("/"), !text.contains(" ") else {
                    throw address.error("expected an IP address or a host name to listen on, got '\(text)'")
                }
                self.listen.address = text
            }
            if let port = listen["port"] { self.listen.port = try port.integer(in: 1...65535) }
            if let plain = listen["plainHTTP"] { self.listen.plainHTTP = try plain.boolean() }
        }
        if let tlsNode = top["tls"], let tls = Optional(try tlsNode.mapping(allowed: ["certificate", "key"])), !tls.isEmpty {
            guard let certificate = tls["certificate"], let key = tls["key"] else {
                throw tlsNode.error("give both certificate and key (PEM files), or neither for the ones `hallpass-server init` makes")
            }
            self.tls.certificate = try certificate.absolutePath()
            self.tls.key = try key.absolutePath()
            self.tls.configured = true
        }
        if let databaseNode = top["database"] {
            let text = try databaseNode.string()
            guard let database = DatabaseLocation(text) else {
                throw databaseNode.error(
                    "expected an absolute path of an SQLite file, or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
                        + " (or postgres://USER@/DATABASE?host=/SOCKET/FOLDER)")
            }
            self.database = database
        }
        if let machines = try top["machines"]?.mapping(allowed: ["staleAfter", "enrolRate", "requestRate"]) {
            if let stale = machines["staleAfter"] { self.machines.staleAfter = try stale.duration(in: 60...(7 * 86_400)) }
            if let rate = machines["enrolRate"] { self.machines.enrolRate = try rate.integer(in: 1...100_000) }
            if let rate = machines["requestRate"] { self.machines.requestRate = try rate.integer(in: 10...100_000) }
        }
        try readRetention(records: top["records"], retention: top["retention"])
        if let publishingNode = top["publishing"] {
            try readPublishing(publishingNode)
        }
        if let consoleNode = top["console"] {
            try readConsole(consoleNode)
        }
        if let alertsNode = top["alerts"] { alerts = try AlertsConfiguration(alertsNode) }
        if let testNode = top["filteringTest"] { filteringTest = try FilteringTestNames.read(testNode) }
        if let signIn = try top["signIn"]?.mapping(allowed: ["local", "oidc"]) {
            if let local = signIn["local"] { self.signIn.local = try local.boolean() }
            openID = try Self.openID(signIn)
        }
        // The pair init makes lives with the rest of the state: beside an SQLite
        // file named elsewhere too, never in /var/lib of a server that is not there.
        if !tls.configured {
            tls.certificate = stateDirectory + "/tls/certificate.pem"
            tls.key = stateDirectory + "/tls/key.pem"
        }
    }

    /// `retention:`, and `records.retentionDays` from before it (the same as
    /// `retention.records`; both are accepted when they agree).
    private mutating func readRetention(records recordsNode: ConfigNode?, retention retentionNode: ConfigNode?) throws(ConfigurationError) {
        var older: (node: ConfigNode, days: Int)?
        if let records = try recordsNode?.mapping(allowed: ["retentionDays"]), let node = records["retentionDays"] {
            let days = try node.integer(in: 1...3650)
            older = (node, days)
            self.retention.records = days
        }
        guard let retentionNode else {
            self.retention.accessRequests = self.retention.records
            return
        }
        let keys = try retentionNode.mapping(allowed: Retention.ranges.map(\.key))
        for (key, range) in Retention.ranges {
            guard let node = keys[key] else { continue }
            let days = try node.integer(in: range)
            switch key {
            case "records":
                if let older, older.days != days {
                    throw node.error("records.retentionDays says \(older.days) days and retention.records \(days): give one of them")
                }
                self.retention.records = days
            case "accessRequests": self.retention.accessRequests = days
            case "alerts": self.retention.alerts = days
            case "digests": self.retention.digests = days
            default: self.retention.audit = days
            }
        }
        if keys["accessRequests"] == nil { self.retention.accessRequests = self.retention.records }
        if self.retention.audit < self.retention.alerts {
            throw (keys["audit"] ?? keys["alerts"] ?? retentionNode).error(
                "the audit trail (retention.audit, \(self.retention.audit) days) is to be kept at least as long as the alerts"
                    + " (retention.alerts, \(self.retention.alerts) days): it says who triaged each alert and how")
        }
    }

    private mutating func readPublishing(_ node: ConfigNode) throws(ConfigurationError) {
        let publishing = try node.mapping(allowed: [
            "signingKey", "trustedKeys", "expires", "keepVersions", "copyTo", "builtinProtections", "maxListBytes",
        ])
        if let key = publishing["signingKey"] {
            if try key.string() == "offline" {
                self.publishing.offline = true
            } else {
                self.publishing.signingKey = try key.absolutePath()
            }
        }
        if let keys = publishing["trustedKeys"] {
            var trusted: [BundlePublicKey] = []
            for item in try keys.list() {
                let text = try item.string()
                do {
                    trusted.append(try BundlePublicKey(text))
                } catch {
                    throw item.error(error.description)
                }
            }
            self.publishing.trustedKeys = trusted
        }
        if self.publishing.offline && self.publishing.trustedKeys.isEmpty {
            throw (publishing["signingKey"] ?? node).error(
                "with signingKey: offline, give trustedKeys: the public key (ed25519:BASE64) of the offline key machines are to trust")
        }
        if let expires = publishing["expires"] { self.publishing.expires = try expires.duration(in: 3600...(3650 * 86_400)) }
        if let keep = publishing["keepVersions"] { self.publishing.keepVersions = try keep.integer(in: 0...16) }
        if let copyTo = publishing["copyTo"] { self.publishing.copyTo = try copyTo.absolutePath() }
        if let builtin = publishing["builtinProtections"] { self.publishing.builtinProtections = try builtin.boolean() }
        if let bytes = publishing["maxListBytes"] { self.publishing.maxListBytes = try Self.listBytes(bytes, in: 1024...(1 << 30)) }
    }

    private mutating func readConsole(_ node: ConfigNode) throws(ConfigurationError) {
        // The sessions' keys here, the pages' keys (ConsolePageSettings) beside them.
        let console = try node.mapping(allowed: ["idleTimeout", "sessionLifetime", "lockout", "signInRate", "url"] + ConsolePageSettings.keys)
        try consolePages.read(console)
        if let url = console["url"] { self.console.url = try Self.consoleURL(url) }
        if let idle = console["idleTimeout"] { self.console.idleTimeout = try idle.duration(in: 60...(24 * 3600)) }
        if let lifetime = console["sessionLifetime"] { self.console.sessionLifetime = try lifetime.duration(in: 300...(30 * 86_400)) }
        if let lockout = try console["lockout"]?.mapping(allowed: ["failures", "duration"]) {
            if let failures = lockout["failures"] { self.console.lockoutFailures = try failures.integer(in: 1...100) }
            if let duration = lockout["duration"] { self.console.lockoutDuration = try duration.duration(in: 60...(7 * 86_400)) }
        }
        if let rate = console["signInRate"] { self.console.signInRate = try rate.integer(in: 1...10_000) }
    }

    /// `256MiB`, `64KiB`, `1GiB` (as the publishing contract writes sizes), or
    /// a number of bytes, within `range`.
    static func listBytes(_ node: ConfigNode, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        let text = try node.string()
        var value: Int?
        if let (unit, factor) = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)].first(where: { text.hasSuffix($0.0) }) {
            if let number = Int(text.dropLast(unit.count)), number >= 0, !number.multipliedReportingOverflow(by: factor).overflow {
                value = number * factor
            }
        } else if let number = Int(text), number >= 0 {
            value = number
        }
        guard let value, range.contains(value) else {
            throw node.error("expected a size like 256MiB, 64KiB or 1GiB, from \(range.lowerBound) to \(range.upperBound) bytes")
        }
        return value
    }

    /// Reads and parses the file; a missing default file gives the defaults.
    public static func load(path: String, required: Bool) throws(ConfigurationError) -> ServerConfiguration {
        guard FileManager.default.fileExists(atPath: path) else {
            if required { throw ConfigurationError(key: "", message: "no configuration file at \(path)", document: ConfigurationError.serverDocument) }
            return ServerConfiguration()
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw ConfigurationError(key: "", message: "cannot read \(path) as UTF-8 text", document: ConfigurationError.serverDocument)
        }
        return try ServerConfiguration(yaml: text)
    }
}
