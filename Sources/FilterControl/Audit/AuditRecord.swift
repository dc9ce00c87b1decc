#if canImport(Glibc)
import Glibc
#endif
public import Foundation

/// One decision filter-data reported, as filter-control receives it: who
/// (uid, gid), what (kind, host, URL, destination), and the verdict with its
/// reason. filter-control turns it into an `AuditRecord` (adding the
/// machine, the user's and group's names as `log.users` allows) and, for a
/// blocked flow that gets no block page, a desktop notice.
public struct DecisionRecord: Sendable, Hashable {
    /// How the flow showed its name (or that it showed none).
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        case dns, http, tls, quic
        /// No name: a bare address, a protocol filter-data does not read.
        case other
        /// Ways around the filter filter-data recognized (docs/bypass.md).
        case wireguard, openvpn, ike, socks, connect, tor, dot, doq, ssh
        /// A ClientHello too large to read whole (blocked with `bypass.tunnels`).
        case oversizedHello
    }

    public enum Action: String, Sendable, Hashable, Codable, CaseIterable {
        case allow, block
    }

    public var time: Date
    public var uid: UInt32?
    public var gid: UInt32?
    public var kind: Kind
    public var host: String?
    /// The whole URL, for plain HTTP only (HTTPS paths are never seen).
    public var url: String?
    public var destination: String?
    public var port: UInt16?
    public var action: Action
    public var category: String?
    public var rule: String?
    /// The reason's stable code (`category`, `local-deny`, `unknown`, `no-name`, `exam`, ... as in VerdictCore's `Reason.Source`).
    public var reason: String
    public var rulesVersion: UInt64?

    public init(
        time: Date = Date(), uid: UInt32? = nil, gid: UInt32? = nil, kind: Kind, host: String? = nil, url: String? = nil,
        destination: String? = nil, port: UInt16? = nil, action: Action, category: String? = nil, rule: String? = nil, reason: String,
        rulesVersion: UInt64? = nil
    ) {
        self.time = time
        self.uid = uid
        self.gid = gid
        self.kind = kind
        self.host = host
        self.url = url
        self.destination = destination
        self.port = port
        self.action = action
        self.category = category
        self.rule = rule
        self.reason = reason
        self.rulesVersion = rulesVersion
    }
}

/// One line of the audit log, with the field names every output uses
/// (JSON keys; `HALLPASS_*` journal fields; RFC 5424 structured data).
/// Fields that do not apply are left out, never written as null.
public struct AuditRecord: Sendable, Hashable, Codable {
    public var time: Date
    public var machine: String
    public var uid: UInt32?
    /// The login name, its pseudonym (`p-` and 20 hex digits), or nothing, as `log.users` says.
    public var user: String?
    /// The person's group in the school's policy; without policy groups, with
    /// `log.users: name` only, their primary group.
    public var group: String?
    public var kind: DecisionRecord.Kind
    public var host: String?
    public var url: String?
    public var destination: String?
    public var port: UInt16?
    public var action: DecisionRecord.Action
    public var category: String?
    public var rule: String?
    public var reason: String
    public var rulesVersion: UInt64?

    /// The field names in the order every output writes them.
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case time, machine, uid, user, group, kind, host, url, destination, port, action, category, rule, reason, rulesVersion
    }

    public init(
        time: Date, machine: String, uid: UInt32? = nil, user: String? = nil, group: String? = nil, kind: DecisionRecord.Kind,
        host: String? = nil, url: String? = nil, destination: String? = nil, port: UInt16? = nil, action: DecisionRecord.Action,
        category: String? = nil, rule: String? = nil, reason: String, rulesVersion: UInt64? = nil
    ) {
        self.time = time
        self.machine = machine
        self.uid = uid
        self.user = user
        self.group = group
        self.kind = kind
        self.host = host
        self.url = url
        self.destination = destination
        self.port = port
        self.action = action
        self.category = category
        self.rule = rule
        self.reason = reason
        self.rulesVersion = rulesVersion
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let timeText = try container.decode(String.self, forKey: .time)
        guard let time = AuditTime.parse(timeText) else {
            throw DecodingError.dataCorruptedError(forKey: .time, in: container, debugDescription: "not an RFC 3339 UTC time: \(timeText)")
        }
        self.time = time
        machine = try container.decode(String.self, forKey: .machine)
        uid = try container.decodeIfPresent(UInt32.self, forKey: .uid)
        user = try container.decodeIfPresent(String.self, forKey: .user)
        group = try container.decodeIfPresent(String.self, forKey: .group)
        kind = try container.decode(DecisionRecord.Kind.self, forKey: .kind)
        host = try container.decodeIfPresent(String.self, forKey: .host)
        url = try container.decodeIfPresent(String.self, forKey: .url)
        destination = try container.decodeIfPresent(String.self, forKey: .destination)
        port = try container.decodeIfPresent(UInt16.self, forKey: .port)
        action = try container.decode(DecisionRecord.Action.self, forKey: .action)
        category = try container.decodeIfPresent(String.self, forKey: .category)
        rule = try container.decodeIfPresent(String.self, forKey: .rule)
        reason = try container.decode(String.self, forKey: .reason)
        rulesVersion = try container.decodeIfPresent(UInt64.self, forKey: .rulesVersion)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(AuditTime.format(time), forKey: .time)
        try container.encode(machine, forKey: .machine)
        try container.encodeIfPresent(uid, forKey: .uid)
        try container.encodeIfPresent(user, forKey: .user)
        try container.encodeIfPresent(group, forKey: .group)
        try container.encode(kind, forKey: .kind)
        try container.encodeIfPresent(host, forKey: .host)
        try container.encodeIfPresent(url, forKey: .url)
        try container.encodeIfPresent(destination, forKey: .destination)
        try container.encodeIfPresent(port, forKey: .port)
        try container.encode(action, forKey: .action)
        try container.encodeIfPresent(category, forKey: .category)
        try container.encodeIfPresent(rule, forKey: .rule)
        try container.encode(reason, forKey: .reason)
        try container.encodeIfPresent(rulesVersion, forKey: .rulesVersion)
    }

    /// The fields that are present, as text, in `CodingKeys` order.
    public var fields: [(key: CodingKeys, value: String)] {
        var result: [(CodingKeys, String)] = [(.time, AuditTime.format(time)), (.machine, machine)]
        if let uid { result.append((.uid, String(uid))) }
        if let user { result.append((.user, user)) }
        if let group { result.append((.group, group)) }
        result.append((.kind, kind.rawValue))
        if let host { result.append((.host, host)) }
        if let url { result.append((.url, url)) }
        if let destination { result.append((.destination, destination)) }
        if let port { result.append((.port, String(port))) }
        result.append((.action, action.rawValue))
        if let category { result.append((.category, category)) }
        if let rule { result.append((.rule, rule)) }
        result.append((.reason, reason))
        if let rulesVersion { result.append((.rulesVersion, String(rulesVersion))) }
        return result.map { (key: $0.0, value: $0.1) }
    }

    /// One line for a person: `block tls casino.example:443 (user alice): category gambling, rule casino.example`.
    public var summary: String {
        var text = "\(action.rawValue) \(kind.rawValue) \(host ?? url ?? destination ?? "?")"
        if let port, host != nil || destination != nil { text += ":\(port)" }
        var who: [String] = []
        if let user { who.append("user \(user)") } else if let uid { who.append("uid \(uid)") }
        if let group { who.append("group \(group)") }
        if !who.isEmpty { text += " (\(who.joined(separator: ", ")))" }
        // `category gambling, rule casino.example`; another reason leads with its code (`local-deny, rule x`).
        let parts = [reason == "category" && category != nil ? nil : reason, category.map { "category \($0)" }, rule.map { "rule \($0)" }]
        return text + ": " + parts.compactMap { $0 }.joined(separator: ", ")
    }
}

/// The audit log's time stamps: RFC 3339 in UTC with milliseconds
/// (`2025-03-01T09:15:02.250Z`), the form RFC 5424 and JSON readers take.
public enum AuditTime {
    public static func format(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        var whole = Int(seconds.rounded(.down))
        var milliseconds = Int(((seconds - Double(whole)) * 1000).rounded(.down))
        if milliseconds >= 1000 {
            whole += 1
            milliseconds -= 1000
        }
        let days = whole >= 0 ? whole / 86_400 : (whole - 86_399) / 86_400
        let secondOfDay = whole - days * 86_400
        let (year, month, day) = civilDate(daysSince1970: days)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = milliseconds < 10 ? "00\(milliseconds)" : milliseconds < 100 ? "0\(milliseconds)" : "\(milliseconds)"
        return "\(year)-\(two(month))-\(two(day))T\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)).\(millis)Z"
    }

    /// Days since 1970-01-01 of a date of the proleptic Gregorian calendar (as
    /// timegm(3) counts them: a day past the month's end runs into the next).
    /// Howard Hinnant's `days_from_civil` ("chrono-Compatible Low-Level Date Algorithms").
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date of a day counted from 1970-01-01 (Hinnant's `civil_from_days`).
    static func civilDate(daysSince1970 days: Int) -> (year: Int, month: Int, day: Int) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (or `+00:00`).
    public static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20 else { return nil }
        func number(_ range: Range<Int>) -> Int32? {
            var value: Int32 = 0
            for index in range {
                guard (48...57).contains(bytes[index]) else { return nil }
                value = value * 10 + Int32(bytes[index] - 48)
            }
            return value
        }
        guard bytes[4] == 45, bytes[7] == 45, bytes[10] == 84 || bytes[10] == 116, bytes[13] == 58, bytes[16] == 58,
            let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), (1...12).contains(month), (1...31).contains(day), hour < 24,
            minute < 60, second < 61
        else { return nil }
        var index = 19
        var fraction = 0.0
        if bytes[index] == 46 {
            index += 1
            var scale = 0.1
            while index < bytes.count, (48...57).contains(bytes[index]) {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        let zone = bytes[index...]
        guard zone.elementsEqual("Z".utf8) || zone.elementsEqual("z".utf8) || zone.elementsEqual("+00:00".utf8) else { return nil }
        let days = daysSince1970(year: Int(year), month: Int(month), day: Int(day))
        let whole = days * 86_400 + Int(hour) * 3600 + Int(minute) * 60 + Int(second)
        return Date(timeIntervalSince1970: Double(whole) + fraction)
    }
}
