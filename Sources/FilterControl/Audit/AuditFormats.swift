/// How an `AuditLine` is written for each output. Pure functions of the
/// line: the unit tests check them byte for byte.
public enum AuditFormat {
    // MARK: JSON lines

    /// One JSON object and a newline, keys in `AuditLine.Field` order,
    /// absent fields left out; numbers (uid, port, rulesVersion) are JSON numbers.
    public static func jsonLine(_ record: AuditLine) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        var first = true
        for (key, value) in record.fields {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            appendJSONString(key.rawValue, to: &out)
            out.append(UInt8(ascii: ":"))
            if key.isNumber {
                out.append(contentsOf: value.utf8)
            } else {
                appendJSONString(value, to: &out)
            }
        }
        out.append(contentsOf: "}\n".utf8)
        return out
    }

    /// A record as the school's server takes it (`POST /api/v1/machine/records`):
    /// `sequence` first, then the fields of `jsonLine` but `machine` (the
    /// server knows the machine by its signature). No newline.
    public static func serverRecord(_ record: AuditLine, sequence: UInt64) -> [UInt8] {
        var out = Array("{\"sequence\":\(sequence)".utf8)
        for (key, value) in record.fields where key != .machine {
            out.append(UInt8(ascii: ","))
            appendJSONString(key.rawValue, to: &out)
            out.append(UInt8(ascii: ":"))
            if key.isNumber {
                out.append(contentsOf: value.utf8)
            } else {
                appendJSONString(value, to: &out)
            }
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func appendJSONString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        let hex = Array("0123456789abcdef".utf8)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: "\\\"".utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: "\\\\".utf8)
            case UInt8(ascii: "\n"): out.append(contentsOf: "\\n".utf8)
            case UInt8(ascii: "\r"): out.append(contentsOf: "\\r".utf8)
            case UInt8(ascii: "\t"): out.append(contentsOf: "\\t".utf8)
            case 0..<0x20, 0x7f:
                out.append(contentsOf: "\\u00".utf8)
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xf)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    // MARK: RFC 5424

    /// The structured-data id of the record's parameters. 32473 is the
    /// private enterprise number RFC 5612 reserves for documentation:
    /// hallpass has none of its own, and collectors match on the name.
    public static let structuredDataID = "hallpass@32473"

    /// An RFC 5424 message (no framing): `<PRI>1 TIME HOST hallpass PID decision [hallpass@32473 k="v" ...] summary`.
    /// Severity: notice (5) for a block, informational (6) for an allow.
    public static func syslogMessage(_ record: AuditLine, facility: AuditSettings.Facility, processID: Int32) -> [UInt8] {
        let severity = record.action == .block ? 5 : 6
        var out = Array("<\(facility.code * 8 + severity)>1 ".utf8)
        out.append(contentsOf: (record[.time] ?? "-").utf8)
        out.append(UInt8(ascii: " "))
        out.append(contentsOf: headerField(record[.machine] ?? "", limit: 255))
        out.append(contentsOf: " hallpass \(processID) decision [\(structuredDataID)".utf8)
        for (key, value) in record.fields where key != .time && key != .machine {
            out.append(UInt8(ascii: " "))
            out.append(contentsOf: key.rawValue.utf8)
            out.append(contentsOf: "=\"".utf8)
            appendParameterValue(value, to: &out)
            out.append(UInt8(ascii: "\""))
        }
        out.append(contentsOf: "] ".utf8)
        // MSG-ANY: the summary with control characters made visible (no BOM;
        // it is UTF-8 all the same, as the structured data must be).
        for byte in record.summary.utf8 {
            out.append(byte < 0x20 || byte == 0x7f ? UInt8(ascii: "?") : byte)
        }
        return out
    }

    /// An RFC 5424 header field: printable US-ASCII, `-` when empty.
    static func headerField(_ text: String, limit: Int) -> [UInt8] {
        let bytes = text.utf8.prefix(limit).map { (33...126).contains($0) ? $0 : UInt8(ascii: "_") }
        return bytes.isEmpty ? [UInt8(ascii: "-")] : bytes
    }

    /// PARAM-VALUE escaping (RFC 5424 6.3.3): `"`, `\` and `]` get a backslash.
    static func appendParameterValue(_ text: String, to out: inout [UInt8]) {
        for byte in text.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "]") {
                out.append(UInt8(ascii: "\\"))
            }
            out.append(byte)
        }
    }

    /// RFC 6587 octet counting (also RFC 5425 for TLS): `LENGTH SP MESSAGE`.
    public static func octetCounted(_ message: [UInt8]) -> [UInt8] {
        Array("\(message.count) ".utf8) + message
    }

    // MARK: journald

    /// The journal field of each record field (`HALLPASS_RULES_VERSION` for `rulesVersion`).
    public static func journalFieldName(_ key: AuditLine.Field) -> String {
        switch key {
        case .rulesVersion: "HALLPASS_RULES_VERSION"
        case .searchTerm: "HALLPASS_SEARCH_TERM"
        default: "HALLPASS_" + key.rawValue.uppercased()
        }
    }

    /// The journal's id for "hallpass decided a flow" (`journalctl MESSAGE_ID=...`).
    public static let journalMessageID = "4a1c5e0b8f3d4d6e9b2a7c1f0e8d6b35"

    /// A datagram of the journal's native protocol: `KEY=value\n` per field;
    /// a value with a newline is `KEY\n`, its length as 64-bit little endian,
    /// the bytes and `\n` (systemd's "binary safe" form).
    public static func journalDatagram(_ record: AuditLine, identifier: String = "hallpass") -> [UInt8] {
        var fields: [(String, String)] = [
            ("MESSAGE", record.summary), ("MESSAGE_ID", journalMessageID), ("PRIORITY", record.action == .block ? "5" : "6"),
            ("SYSLOG_IDENTIFIER", identifier),
        ]
        for (key, value) in record.fields {
            fields.append((journalFieldName(key), value))
        }
        return JournalLogHandler.encode(fields)
    }
}
