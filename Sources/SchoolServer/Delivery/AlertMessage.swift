import Foundation

/// One safeguarding alert as it is delivered: what the email and the
/// webhook say (docs/server.md, "Alert delivery"). `AlertDeliveryService.enqueue`
/// takes it; the alerts of the ingest are turned into these where they are
/// read (`AlertOutbox`). Every field that comes from a record is the
/// record's, unchecked: the email and the webhook escape it where they write it.
public struct AlertMessage: Sendable, Hashable, Codable {
    /// How urgent: `danger` reaches the safeguarding lead at once; the others wait for the console and the digests.
    public enum Severity: String, Sendable, Hashable, Codable, CaseIterable {
        case danger, caution, advisory
    }

    /// The alert's id (the console's `/console/alerts/{id}`).
    public var id: String
    /// The record's time, Unix milliseconds.
    public var time: Int64
    public var severity: Severity
    /// The safeguarding rule's id (`self-harm-search`).
    public var rule: String
    /// The user name (or pseudonym) as the record has it.
    public var user: String?
    public var group: String?
    public var room: String?
    /// The machine's id.
    public var machine: String?
    /// `allow` or `block`: what the filter did.
    public var action: String
    public var host: String?
    /// Host, path and query, as records carry it.
    public var url: String?
    public var category: String?
    public var searchTerm: String?

    public init(
        id: String, time: Int64, severity: Severity, rule: String, user: String? = nil, group: String? = nil, room: String? = nil,
        machine: String? = nil, action: String, host: String? = nil, url: String? = nil, category: String? = nil, searchTerm: String? = nil
    ) {
        self.id = id
        self.time = time
        self.severity = severity
        self.rule = rule
        self.user = user
        self.group = group
        self.room = room
        self.machine = machine
        self.action = action
        self.host = host
        self.url = url
        self.category = category
        self.searchTerm = searchTerm
    }

    /// Why the message cannot be delivered: an id or rule that is empty or
    /// too long for a link and a subject. Nil when it can.
    public var refusal: String? {
        guard (1...128).contains(id.utf8.count), id.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else {
            return "an alert's id is 1 to 128 printable ASCII characters without spaces"
        }
        guard (1...200).contains(rule.utf8.count) else { return "an alert's rule is 1 to 200 bytes" }
        return nil
    }
}

/// A delivery to be added: one email address or one webhook URL for one alert.
public struct NewAlertDelivery: Sendable, Hashable {
    public var alertID: String
    public var channel: AlertChannel
    /// The email address or the webhook's URL.
    public var target: String
    /// The message as JSON (an `AlertMessage`): what is sent, fixed when the alert is enqueued.
    public var message: String

    public init(alertID: String, channel: AlertChannel, target: String, message: String) {
        self.alertID = alertID
        self.channel = channel
        self.target = target
        self.message = message
    }
}

public enum AlertChannel: String, Sendable, Hashable, Codable, CaseIterable {
    case email, webhook
}

/// What a delivery carries: an alert (its `message` is the `AlertMessage`
/// as JSON, rendered when sent) or a safeguarding digest (its `message` is
/// the whole email, written when the digest was made).
public enum DeliveryKind: String, Sendable, Hashable, Codable, CaseIterable {
    case alert, digest
}

/// Where a delivery is: waiting (for its first attempt or a retry), sent, or failed for good.
public enum AlertDeliveryState: String, Sendable, Hashable, Codable, CaseIterable {
    case waiting, sent, failed
}

/// A delivery as stored.
public struct StoredAlertDelivery: Sendable, Hashable {
    public var id: String
    public var alertID: String
    public var channel: AlertChannel
    public var target: String
    public var state: AlertDeliveryState
    /// Attempts made so far.
    public var attempts: Int
    /// Unix seconds: when it is due.
    public var nextAttemptAt: Int64
    /// The last failure: sendmail's first line of error, or the HTTP status.
    public var lastError: String?
    public var sentAt: Int64?
    public var leaseUntil: Int64?
    public var leaseOwner: String?
    public var createdAt: Int64
    public var message: String
    public var kind: DeliveryKind

    public init(
        id: String, alertID: String, channel: AlertChannel, target: String, state: AlertDeliveryState, attempts: Int, nextAttemptAt: Int64,
        lastError: String?, sentAt: Int64?, leaseUntil: Int64?, leaseOwner: String?, createdAt: Int64, message: String,
        kind: DeliveryKind = .alert
    ) {
        self.kind = kind
        self.id = id
        self.alertID = alertID
        self.channel = channel
        self.target = target
        self.state = state
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.sentAt = sentAt
        self.leaseUntil = leaseUntil
        self.leaseOwner = leaseOwner
        self.createdAt = createdAt
        self.message = message
    }
}

/// What one attempt came to.
public enum AlertDeliveryOutcome: Sendable, Hashable {
    case sent
    /// Failed; tried again at `next` (Unix seconds).
    case retry(error: String, next: Int64)
    /// Failed for good (24 hours of retries, or nothing left to send it with).
    case failed(error: String)
}

public struct AlertDeliveryCount: Sendable, Hashable {
    public var channel: AlertChannel
    public var state: AlertDeliveryState
    public var count: Int64

    public init(channel: AlertChannel, state: AlertDeliveryState, count: Int64) {
        self.channel = channel
        self.state = state
        self.count = count
    }
}

/// An email address as people's accounts, `alerts.escalation` and
/// `alerts.from` hold it: plain `local@domain`, ASCII, nothing a header
/// could be made of beside it (no space, CR, LF, comma, angle bracket,
/// double quote, semicolon, colon, parenthesis, backslash or square
/// bracket). An apostrophe is a letter of some names (o'brien@...) and stays.
public enum MailAddress {
    public static let maximumBytes = 254

    /// Why `text` is not an address the server sends to; nil when it is.
    public static func refusal(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard (3...maximumBytes).contains(bytes.count) else { return "an email address is 3 to \(maximumBytes) characters" }
        let forbidden = Set(" ,<>\"();:\\[]".utf8)
        guard bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7f && !forbidden.contains($0) }) else {
            return "an email address is plain ASCII without spaces, commas, quotes, brackets or control characters"
        }
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return "an email address has exactly one @" }
        let local = parts[0]
        let domain = parts[1]
        guard (1...64).contains(local.utf8.count), !local.hasPrefix("."), !local.hasSuffix("."), !local.contains("..") else {
            return "the part of an email address before the @ is 1 to 64 characters, without a dot at either end or two in a row"
        }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        let validLabels = labels.allSatisfy { label in
            (1...63).contains(label.utf8.count) && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.utf8.allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 65 && $0 <= 90) || ($0 >= 48 && $0 <= 57) || $0 == 45 }
        }
        guard validLabels, domain.utf8.count <= 253 else {
            return "the part of an email address after the @ is a domain name (letters, digits, '-' and dots)"
        }
        return nil
    }

    /// The domain of a checked address.
    static func domain(_ address: String) -> String {
        address.split(separator: "@").last.map(String.init) ?? "localhost"
    }
}
