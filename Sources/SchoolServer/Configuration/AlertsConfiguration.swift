import Foundation
public import HallpassConfig
import Yams

/// `alerts:` in server.yaml: how safeguarding alerts leave the server
/// (docs/server.md, "Alert delivery"). Email goes through the host's sendmail
/// interface (msmtp, Postfix or Exim, as Debian sets them up); a webhook, if
/// set, gets each alert as JSON signed with HMAC-SHA256. Every key is
/// checked as the rest of the file is.
public struct AlertsConfiguration: Sendable, Hashable {
    /// The sender of the emails: `Name <address>` or `address`.
    public struct Sender: Sendable, Hashable {
        public var name: String?
        public var address: String

        public init(name: String?, address: String) {
            self.name = name
            self.address = address
        }
    }

    public struct Webhook: Sendable, Hashable {
        /// https, or http to this host only (127.0.0.1, ::1, localhost).
        public var url: String
        /// A file whose first line is the HMAC-SHA256 key; never readable by others.
        public var secretFile: String
        public var severities: Set<AlertMessage.Severity> = [.danger]

        public init(url: String, secretFile: String, severities: Set<AlertMessage.Severity> = [.danger]) {
            self.url = url
            self.secretFile = secretFile
            self.severities = severities
        }
    }

    /// nil: `hallpass <hallpass@HOSTNAME>`.
    public var from: Sender? = nil
    /// The sendmail command, run without a shell: the message on its
    /// standard input, the recipient in its To: header (`-t`), `-oi` so that
    /// a line of a single dot does not end it.
    public var sendmail: [String] = ["/usr/sbin/sendmail", "-t", "-oi"]
    /// The severities emailed to the safeguarding leads (empty: no emails).
    public var email: Set<AlertMessage.Severity> = [.danger]
    /// Per group, extra addresses for its danger alerts.
    public var escalation: [String: [String]] = [:]
    public var webhook: Webhook? = nil
    /// When the safeguarding digests are sent (`digests:`; DigestSchedule.swift).
    public var digests = DigestSchedule()

    public init() {}

    static let keys = ["from", "sendmail", "email", "escalation", "webhook", "digests"]
    /// Bounds: a school's groups and their heads of year, not a mailing list.
    static let maxEscalationGroups = 1000
    static let maxEscalationAddresses = 50

    /// Reads `alerts:`.
    public init(_ node: ConfigNode) throws(ConfigurationError) {
        self.init()
        let keys = try node.mapping(allowed: Self.keys)
        if let fromNode = keys["from"] {
            let text = try fromNode.string()
            guard let sender = Self.sender(text) else {
                throw fromNode.error(
                    "expected the sender as \"Name <address@domain>\" or address@domain (the name without quotes, angle brackets or control characters), got '\(text.prefix(120))'")
            }
            from = sender
        }
        if let sendmailNode = keys["sendmail"] {
            let items = try sendmailNode.list()
            guard !items.isEmpty, items.count <= 32 else {
                throw sendmailNode.error("expected the command as a list, e.g. [/usr/sbin/sendmail, -t, -oi] (1 to 32 items)")
            }
            var command: [String] = []
            for (index, item) in items.enumerated() {
                let argument = try item.string()
                guard !argument.isEmpty, argument.utf8.count <= 1024, argument.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f })
                else { throw item.error("expected an argument of 1 to 1024 characters without control characters") }
                if index == 0, !argument.hasPrefix("/") {
                    throw item.error("expected the program as an absolute path (it is run without a shell or a PATH search), got '\(argument)'")
                }
                command.append(argument)
            }
            sendmail = command
        }
        if let emailNode = keys["email"] { email = try Self.severities(emailNode) }
        if let escalationNode = keys["escalation"] { escalation = try Self.escalation(escalationNode, document: node.document) }
        if let webhookNode = keys["webhook"] {
            let hook = try webhookNode.mapping(allowed: ["url", "secretFile", "severities"])
            guard let urlNode = hook["url"] else { throw webhookNode.error("give url: where the alerts are posted (https)") }
            guard let secretNode = hook["secretFile"] else {
                throw webhookNode.error("give secretFile: a file whose first line is the key the posts are signed with (HMAC-SHA256)")
            }
            let url = try urlNode.string()
            guard Self.isWebhookURL(url) else {
                throw urlNode.error(
                    "expected an https URL without user or fragment (http only to 127.0.0.1, ::1 or localhost), got '\(url.prefix(200))'")
            }
            var webhook = Webhook(url: url, secretFile: try secretNode.absolutePath())
            if let severitiesNode = hook["severities"] {
                webhook.severities = try Self.severities(severitiesNode)
                guard !webhook.severities.isEmpty else {
                    throw severitiesNode.error("give at least one severity (danger, caution, advisory), or leave webhook: out")
                }
            }
            self.webhook = webhook
        }
        if let digestsNode = keys["digests"] { digests = try DigestSchedule(digestsNode) }
    }

    /// `escalation:`: groups to lists of addresses, each checked.
    static func escalation(_ escalationNode: ConfigNode, document: String) throws(ConfigurationError) -> [String: [String]] {
        guard case .mapping(let mapping) = escalationNode.node else {
            if escalationNode.node.null != nil { return [:] }
            throw escalationNode.error("expected a mapping of groups to lists of addresses, e.g. year7: [head.y7@school.example]")
        }
        guard mapping.count <= Self.maxEscalationGroups else {
            throw escalationNode.error("at most \(Self.maxEscalationGroups) groups")
        }
        // The groups are the policy's: any name a record may carry, so the
        // mapping's keys are read as names here, not as keys of this file.
        var lists: [String: [String]] = [:]
        for (keyNode, value) in mapping {
            guard let group = keyNode.string else { throw escalationNode.error("a group is not a string") }
            let path = escalationNode.key + "." + group
            let line = keyNode.mark.map { $0.line }
            guard Scope.refusal(Scope(groups: [group])) == nil else {
                throw ConfigurationError(
                    key: path, line: line, message: "a group is 1 to 256 characters without control characters", document: document)
            }
            guard lists[group] == nil else {
                throw ConfigurationError(key: path, line: line, message: "the group appears twice", document: document)
            }
            let items = try ConfigNode(value, key: path, document: document).list()
            guard items.count <= Self.maxEscalationAddresses else {
                throw ConfigurationError(
                    key: path, line: line, message: "at most \(Self.maxEscalationAddresses) addresses a group", document: document)
            }
            var addresses: [String] = []
            for item in items {
                let address = try item.string()
                if let refusal = MailAddress.refusal(address) { throw item.error("\(refusal), got '\(address.prefix(120))'") }
                if !addresses.contains(where: { $0.lowercased() == address.lowercased() }) { addresses.append(address) }
            }
            lists[group] = addresses
        }
        return lists
    }

    /// `[danger, caution]`: each once.
    static func severities(_ node: ConfigNode) throws(ConfigurationError) -> Set<AlertMessage.Severity> {
        var result: Set<AlertMessage.Severity> = []
        for item in try node.list() {
            let severity = try item.choice(AlertMessage.Severity.self)
            guard result.insert(severity).inserted else { throw item.error("\(severity.rawValue) is given twice") }
        }
        return result
    }

    /// `Name <address>` or `address`; nil when it is neither (or the address is not one `MailAddress` takes).
    static func sender(_ text: String) -> Sender? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasSuffix(">"), let open = trimmed.lastIndex(of: "<") {
            let address = String(trimmed[trimmed.index(after: open)..<trimmed.index(before: trimmed.endIndex)])
            let name = trimmed[..<open].trimmingCharacters(in: .whitespaces)
            guard MailAddress.refusal(address) == nil, name.unicodeScalars.count <= 100,
                name.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f && !"\"\\<>".unicodeScalars.contains($0) })
            else { return nil }
            return Sender(name: name.isEmpty ? nil : name, address: address)
        }
        guard MailAddress.refusal(trimmed) == nil else { return nil }
        return Sender(name: nil, address: trimmed)
    }

    /// An https URL with a host and no user or fragment; http only to this host.
    static func isWebhookURL(_ text: String) -> Bool {
        guard text.utf8.count <= 2048, text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }),
            let components = URLComponents(string: text), let host = components.host, !host.isEmpty,
            components.user == nil, components.password == nil, components.fragment == nil
        else { return false }
        switch components.scheme {
        case "https": return true
        case "http": return ["127.0.0.1", "::1", "[::1]", "localhost"].contains(host)
        default: return false
        }
    }

    /// The sender `from` names, or `hallpass <hallpass@HOST>` with this host's name.
    public var sender: Sender {
        if let from { return from }
        let host = ProcessInfo.processInfo.hostName.lowercased()
        let domain = MailAddress.refusal("hallpass@\(host)") == nil ? host : "localhost"
        return Sender(name: "hallpass", address: "hallpass@\(domain)")
    }
}

extension ServerConfiguration {
    /// `console.url`, or `https://HOSTNAME:PORT` with this host's name and
    /// the listener's port: the start of the links in alert emails, without
    /// a slash at its end.
    public var consoleURL: String {
        if let url = console.url { return url }
        return "https://\(ProcessInfo.processInfo.hostName.lowercased()):\(listen.port)"
    }

    /// Reads `console.url`: http or https, a host, no query, fragment or user.
    static func consoleURL(_ node: ConfigNode) throws(ConfigurationError) -> String {
        let text = try node.string()
        guard text.utf8.count <= 512, text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }),
            let components = URLComponents(string: text), components.scheme == "https" || components.scheme == "http",
            let host = components.host, !host.isEmpty, components.user == nil, components.password == nil, components.query == nil,
            components.fragment == nil
        else {
            throw node.error("expected the console's address as people's browsers reach it, e.g. https://hallpass.school.example:8443, got '\(text.prefix(200))'")
        }
        var url = text
        while url.hasSuffix("/") { url.removeLast() }
        return url
    }
}
