import HallpassConfig

/// `log:` in hallpass.yaml: where filter-control writes the audit records
/// (one per blocked flow, and per first decision of an allowed flow when
/// the school asks) and what they say about the person.
public struct AuditSettings: Sendable, Hashable {
    /// What a record says about the person whose program opened the flow.
    public enum Users: String, Sendable, Hashable, CaseIterable {
        /// The login name and uid.
        case name
        /// A keyed hash of the login name, the same on every machine that holds the school's key; no uid.
        case pseudonym
        /// Neither name nor uid.
        case none
    }

    /// Which allowed flows are recorded besides every blocked one.
    public enum Allowed: String, Sendable, Hashable, CaseIterable {
        case none
        /// The first decision of every allowed flow.
        case all
    }

    /// `syslog: udp://host[:port] | tcp://host[:port] | tls://host[:port]`.
    public struct SyslogTarget: Sendable, Hashable, CustomStringConvertible {
        public enum Transport: String, Sendable, Hashable, CaseIterable {
            case udp, tcp, tls
        }

        public var transport: Transport
        /// A name or an address (IPv6 without brackets).
        public var host: String
        public var port: Int

        public init(transport: Transport, host: String, port: Int) {
            self.transport = transport
            self.host = host
            self.port = port
        }

        /// Reads `udp://logs.example:514`, `tcp://[2001:db8::5]`, `tls://logs.example` (ports 514, 514, 6514 when left out).
        public init?(parsing text: String) {
            guard let separator = text.range(of: "://"), let transport = Transport(rawValue: String(text[..<separator.lowerBound])) else { return nil }
            var rest = Substring(text[separator.upperBound...])
            if rest.hasSuffix("/") { rest = rest.dropLast() }
            var host: Substring
            var portText: Substring?
            if rest.hasPrefix("[") {
                guard let close = rest.firstIndex(of: "]") else { return nil }
                host = rest[rest.index(after: rest.startIndex)..<close]
                let after = rest[rest.index(after: close)...]
                if !after.isEmpty {
                    guard after.hasPrefix(":") else { return nil }
                    portText = after.dropFirst()
                }
            } else if let colon = rest.lastIndex(of: ":") {
                host = rest[..<colon]
                portText = rest[rest.index(after: colon)...]
            } else {
                host = rest
            }
            guard !host.isEmpty, host.count <= 253,
                host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == ":" || $0 == "_") })
            else { return nil }
            var port = transport == .tls ? 6514 : 514
            if let portText {
                guard let value = Int(portText), (1...65535).contains(value) else { return nil }
                port = value
            }
            self.init(transport: transport, host: String(host), port: port)
        }

        public var description: String {
            let shownHost = host.contains(":") ? "[\(host)]" : host
            return "\(transport.rawValue)://\(shownHost):\(port)"
        }
    }

    /// The syslog facility of the records (RFC 5424 numbers).
    public enum Facility: String, Sendable, Hashable, CaseIterable {
        case user, daemon, auth, authpriv, local0, local1, local2, local3, local4, local5, local6, local7

        public var code: Int {
            switch self {
            case .user: 1
            case .daemon: 3
            case .auth: 4
            case .authpriv: 10
            case .local0: 16
            case .local1: 17
            case .local2: 18
            case .local3: 19
            case .local4: 20
            case .local5: 21
            case .local6: 22
            case .local7: 23
            }
        }
    }

    public static let defaultFile = "/var/log/hallpass/audit.jsonl"

    /// The JSON-lines file; nil: no file (`file: none`).
    public var file: String? = AuditSettings.defaultFile
    /// Rotate the file when it grows past this many bytes.
    public var maxFileBytes: Int = 16 << 20
    /// Rotated files kept (`audit.jsonl.1` is the newest).
    public var keepFiles: Int = 10
    /// Rotated files older than this are removed, and the file in use is
    /// rotated once its first record is this old.
    public var retentionDays: Int = 365
    /// Records to the systemd journal, with HALLPASS_* fields (when journald runs).
    public var journald: Bool = true
    /// The school's central collector; nil: none.
    public var syslog: SyslogTarget?
    /// An extra CA for a `tls://` collector, besides the system store.
    public var caFile: String?
    public var facility: Facility = .local0
    /// Records kept while the collector cannot be reached; older ones go first (counted).
    public var syslogBuffer: Int = 10_000
    public var users: Users = .name
    public var allowed: Allowed = .none
    /// The per-school key of `users: pseudonym`; nil: `<rules.directory>/pseudonym.key`, made at first use.
    public var pseudonymKey: String?
    /// The name records give for this machine; nil: the host name.
    public var machine: String?

    public init() {}

    /// Where the pseudonym key is read (or made), given the rule folder.
    public func pseudonymKeyPath(rulesDirectory: String) -> String {
        pseudonymKey ?? rulesDirectory + "/pseudonym.key"
    }
}

/// `notify:` in hallpass.yaml: the desktop notice a person gets when a flow
/// of theirs is blocked where no block page can show (HTTPS without the
/// local CA, QUIC, a program that is not a browser).
public struct NoticeSettings: Sendable, Hashable {
    public var enabled = true
    /// At most one notice per person and name in this many seconds.
    public var interval = 600
    public init() {}
}

extension AuditSettings {
    static let keys = [
        "file", "maxFileSize", "keepFiles", "retentionDays", "journald", "syslog", "caFile", "facility", "syslogBuffer", "users",
        "allowed", "pseudonymKey", "machine",
    ]

    init(_ node: ConfigNode) throws(ConfigurationError) {
        self.init()
        let fields = try node.mapping(allowed: Self.keys)
        if let file = fields["file"] {
            let text = try file.string()
            if ["none", "false", "off", ""].contains(text) || file.node.null != nil {
                self.file = nil
            } else {
                self.file = try file.absolutePath()
            }
        }
        if let size = fields["maxFileSize"] { maxFileBytes = try size.byteSize(in: (64 << 10)...(1 << 34)) }
        if let keep = fields["keepFiles"] { keepFiles = try keep.integer(in: 1...1000) }
        if let days = fields["retentionDays"] { retentionDays = try days.integer(in: 1...3650) }
        if let journald = fields["journald"] { self.journald = try journald.boolean() }
        if let syslog = fields["syslog"] {
            let text = try syslog.string()
            if ["none", "false", "off", ""].contains(text) || syslog.node.null != nil {
                self.syslog = nil
            } else {
                guard let target = SyslogTarget(parsing: text) else {
                    throw syslog.error("expected udp://HOST[:PORT], tcp://HOST[:PORT] or tls://HOST[:PORT] (or none), got '\(text)'")
                }
                self.syslog = target
            }
        }
        if let ca = fields["caFile"] { caFile = try ca.absolutePath() }
        if let facility = fields["facility"] { self.facility = try facility.choice(Facility.self) }
        if let buffer = fields["syslogBuffer"] { syslogBuffer = try buffer.integer(in: 10...1_000_000) }
        if let users = fields["users"] { self.users = try users.choice(Users.self) }
        if let allowed = fields["allowed"] { self.allowed = try allowed.choice(Allowed.self) }
        if let key = fields["pseudonymKey"] { pseudonymKey = try key.absolutePath() }
        if let machine = fields["machine"] {
            let text = try machine.string()
            guard (1...255).contains(text.utf8.count), text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-._".contains($0)) }) else {
                throw machine.error("a machine name is 1 to 255 of a-z, A-Z, 0-9, '-', '.', '_'")
            }
            self.machine = text
        }
        if caFile != nil, syslog?.transport != .tls {
            throw (fields["caFile"] ?? node).error("caFile is for a tls:// syslog collector; log.syslog is not one")
        }
    }
}

extension NoticeSettings {
    init(_ node: ConfigNode) throws(ConfigurationError) {
        self.init()
        if case .scalar = node.node, node.node.null == nil {
            enabled = try node.boolean()
            return
        }
        let fields = try node.mapping(allowed: ["enabled", "interval"])
        if let enabled = fields["enabled"] { self.enabled = try enabled.boolean() }
        if let interval = fields["interval"] { self.interval = try interval.duration(minimum: 10) }
    }
}
