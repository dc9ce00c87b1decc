#if canImport(Glibc)
import Glibc
#endif
public import Foundation
public import HallpassIPC

/// A decision on its way to the audit log and the desktop notices: what
/// filter-data reported (`report`, its fields as filter-data wrote them),
/// when filter-control received it, and under which rules. Nothing here
/// restates the report: the audit line's fields are computed from it, once,
/// by `AuditLine(_:machine:...)`.
public struct AuditRecord: Sendable, Hashable {
    public var report: FlowReport
    public var time: Date
    public var rulesVersion: UInt64?

    public init(report: FlowReport, time: Date, rulesVersion: UInt64? = nil) {
        self.report = report
        self.time = time
        self.rulesVersion = rulesVersion
    }

    /// How the flow showed its name (or that it showed none): the report's kind, or `other` for one the audit log does not know.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case dns, http, tls, quic
        /// An HTTPS request the inspection proxy read (docs/inspection.md): its URL is known.
        case https
        /// No name: a bare address, a protocol filter-data does not read.
        case other
        /// Ways around the filter filter-data recognized (docs/bypass.md).
        case wireguard, openvpn, ike, socks, connect, tor, dot, doq, ssh
        /// A ClientHello too large to read whole (blocked with `bypass.tunnels`).
        case oversizedHello
    }

    public enum Action: String, Sendable, Hashable, CaseIterable {
        case allow, block
    }

    public var kind: Kind { Kind(rawValue: report.kind) ?? .other }
    /// Every verdict but allow blocks the flow.
    public var action: Action { report.verdict == .allow ? .allow : .block }
    /// The whole URL: for plain HTTP, and for HTTPS requests the proxy
    /// inspected (other HTTPS paths are never seen).
    public var url: String? {
        guard let host = report.host else { return nil }
        switch kind {
        case .http: return "http://" + host + (report.path ?? "/")
        case .https: return "https://" + host + (report.path ?? "/")
        default: return nil
        }
    }
    /// Where the flow went.
    public var destination: String { report.flow.destination.description }
}

/// One line of the audit log, as every output writes it (JSON keys;
/// `HALLPASS_*` journal fields; RFC 5424 structured data) and as `filterctl
/// log` reads it back: the value of each field present, as text. Made from
/// an `AuditRecord` (the writer) or from a JSON line (the reader); fields
/// that do not apply are absent, never written as null.
public struct AuditLine: Sendable, Hashable {
    /// The field names, in the order every output writes them (docs/fleet.md, "The record").
    public enum Field: String, Sendable, CaseIterable, CodingKey {
        case time, machine, uid, user, group, kind, host, url, searchTerm, destination, port, action, category, rule, reason, rulesVersion

        /// Written as JSON numbers.
        public var isNumber: Bool { self == .uid || self == .port || self == .rulesVersion }
    }

    /// The value of each field present.
    private var values: [Field: String] = [:]

    /// The line of `record`, with the machine's name and the person as
    /// `AuditLineMaker` lets the line name them: the uid, the user (a login
    /// name or its pseudonym) and the group, each nil to leave it out.
    public init(_ record: AuditRecord, machine: String, uid: UInt32?, user: String?, group: String?) {
        let report = record.report
        self[.time] = AuditTime.format(record.time)
        self[.machine] = machine
        self[.uid] = uid.map { String($0) }
        self[.user] = user
        self[.group] = group
        self[.kind] = record.kind.rawValue
        self[.host] = report.host
        self[.url] = record.url
        self[.searchTerm] = report.searchTerm
        self[.destination] = record.destination
        self[.port] = String(report.flow.destinationPort)
        self[.action] = record.action.rawValue
        self[.category] = report.reason.category
        self[.rule] = report.reason.rule
        self[.reason] = report.reason.source.rawValue
        self[.rulesVersion] = record.rulesVersion.map { String($0) }
    }

    /// A line of an event that is not a flow (`live-refused`: a live item or
    /// state this machine refused), for the school's server through the
    /// outbox; the caller sets the other fields.
    public init(event action: String, time: Date, machine: String) {
        self[.time] = AuditTime.format(time)
        self[.machine] = machine
        self[.action] = action
    }

    /// A line read back; nil unless `time` reads as `AuditTime` writes it,
    /// `kind` and `action` are ones the log writes, and `machine` and `reason` are there.
    init?(values: [Field: String]) {
        guard let time = values[.time], AuditTime.parse(time) != nil, values[.machine] != nil, values[.reason] != nil,
            let kind = values[.kind], AuditRecord.Kind(rawValue: kind) != nil, let action = values[.action], AuditRecord.Action(rawValue: action) != nil
        else { return nil }
        self.values = values
    }

    public subscript(field: Field) -> String? {
        get { values[field] }
        set { values[field] = newValue }
    }

    /// The fields that are present, in `Field` order.
    public var fields: [(key: Field, value: String)] {
        Field.allCases.compactMap { key in values[key].map { (key: key, value: $0) } }
    }

    /// When filter-control received the decision (the `time` field, which both initializers make sure reads).
    public var time: Date { self[.time].flatMap(AuditTime.parse) ?? Date(timeIntervalSince1970: 0) }

    public var action: AuditRecord.Action { self[.action].flatMap(AuditRecord.Action.init(rawValue:)) ?? .block }

    /// One line for a person: `block tls casino.example:443 (user alice): category gambling, rule casino.example`.
    public var summary: String {
        let host = self[.host], destination = self[.destination], user = self[.user], uid = self[.uid], group = self[.group]
        let category = self[.category], rule = self[.rule], reason = self[.reason] ?? "?"
        var text = "\(self[.action] ?? "?") \(self[.kind] ?? "?") \(host ?? self[.url] ?? destination ?? "?")"
        if let port = self[.port], host != nil || destination != nil { text += ":\(port)" }
        var who: [String] = []
        if let user { who.append("user \(user)") } else if let uid { who.append("uid \(uid)") }
        if let group { who.append("group \(group)") }
        if !who.isEmpty { text += " (\(who.joined(separator: ", ")))" }
        // `category gambling, rule casino.example`; another reason leads with its code (`local-deny, rule x`).
        let parts = [reason == "category" && category != nil ? nil : reason, category.map { "category \($0)" }, rule.map { "rule \($0)" }]
        return text + ": " + parts.compactMap { $0 }.joined(separator: ", ")
    }
}

extension AuditLine: Decodable {
    /// Reads a JSON line as `AuditFormat.jsonLine` writes it: strings, and numbers for `uid`, `port` and `rulesVersion`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Field.self)
        var values: [Field: String] = [:]
        for field in Field.allCases where container.contains(field) {
            switch field {
            case .uid: values[field] = String(try container.decode(UInt32.self, forKey: field))
            case .port: values[field] = String(try container.decode(UInt16.self, forKey: field))
            case .rulesVersion: values[field] = String(try container.decode(UInt64.self, forKey: field))
            default: values[field] = try container.decode(String.self, forKey: field)
            }
        }
        guard let line = AuditLine(values: values) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an audit record: \(values)"))
        }
        self = line
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
