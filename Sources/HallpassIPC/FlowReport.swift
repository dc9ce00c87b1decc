public import VerdictCore

/// A decision filter-data reports to filter-control: every flow's first
/// decision and every blocked DNS query, with what it was made on. filter-
/// control keeps the allowed connections' reports to judge them again when
/// the policy changes, and writes the audit log from them.
public struct FlowReport: Sendable, Hashable {
    public var flow: FlowKey
    public var uid: UInt32?
    public var kind: String
    public var host: String?
    /// The HTTP request's path and query (plain HTTP, and requests the proxy inspected).
    public var path: String?
    public var verdict: Verdict
    public var reason: Reason
    /// The search terms of an inspected request (`inspect.searchTerms`), joined by " | "; nil for none.
    public var searchTerm: String?

    public init(
        flow: FlowKey, uid: UInt32?, kind: String, host: String?, path: String?, verdict: Verdict, reason: Reason, searchTerm: String? = nil
    ) {
        self.flow = flow
        self.uid = uid
        self.kind = kind
        self.host = host
        self.path = path
        self.verdict = verdict
        self.reason = reason
        self.searchTerm = searchTerm
    }

    /// `PROTO SRC SPORT DST DPORT UID KIND HOST VERDICT SOURCE CATEGORY RULE PATH [SEARCHTERM]`,
    /// tab-separated, '-' for none; the search term only when there is one (filter-data's
    /// lines never have it, so its reports stay as they were).
    var line: String {
        var bytes: [UInt8] = []
        appendLine(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `line` as UTF-8.
    public func appendLine(to bytes: inout [UInt8]) {
        FlowReport.appendLine(
            to: &bytes, flow: flow, uid: uid, kind: kind, host: host.map { Array($0.utf8) }, path: path, verdict: verdict, reason: reason)
        if let searchTerm, !searchTerm.isEmpty {
            bytes.append(0x09)
            FlowReport.appendField(searchTerm.utf8, to: &bytes)
        }
    }

    /// One field: at most 256 bytes, without the bytes that separate fields and lines (as bytes:
    /// as Characters "\r\n" is one, and a filter on "\n" would keep its line feed).
    static func appendField(_ text: some Collection<UInt8>, to bytes: inout [UInt8]) {
        let start = bytes.count
        for byte in text where byte != 0x09 && byte != 0x0A && byte != 0x0D {
            bytes.append(byte)
        }
        if bytes.count - start > 256 {
            // Cut at a character boundary: not before a UTF-8 continuation byte.
            var end = start + 256
            while end > start, bytes[end] & 0xC0 == 0x80 { end -= 1 }
            bytes.removeSubrange(end...)
        }
        if bytes.count == start { bytes.append(UInt8(ascii: "-")) }
    }

    /// Writes a report's line from its parts (filter-data writes one as it
    /// decides, with the name's canonical bytes, without a FlowReport).
    public static func appendLine(
        to bytes: inout [UInt8], flow: FlowKey, uid: UInt32?, kind: String, host: [UInt8]?, path: String?, verdict: Verdict, reason: Reason
    ) {
        func field(_ text: some Collection<UInt8>) { appendField(text, to: &bytes) }
        func field(_ text: String?) {
            if let text { field(text.utf8) } else { bytes.append(UInt8(ascii: "-")) }
        }
        func tab() { bytes.append(0x09) }
        appendDecimal(UInt64(flow.protocolNumber), to: &bytes)
        tab()
        flow.source.appendDescription(to: &bytes)
        tab()
        appendDecimal(UInt64(flow.sourcePort), to: &bytes)
        tab()
        flow.destination.appendDescription(to: &bytes)
        tab()
        appendDecimal(UInt64(flow.destinationPort), to: &bytes)
        tab()
        if let uid { appendDecimal(UInt64(uid), to: &bytes) } else { bytes.append(UInt8(ascii: "-")) }
        tab()
        field(kind)
        tab()
        if let host { field(host) } else { bytes.append(UInt8(ascii: "-")) }
        tab()
        bytes.append(contentsOf: verdict.rawValue.utf8)
        tab()
        bytes.append(contentsOf: reason.source.rawValue.utf8)
        tab()
        field(reason.category)
        tab()
        field(reason.rule)
        tab()
        field(path)
    }

    init?(line: String) {
        self.init(line: Array(line.utf8)[...])
    }

    /// Reads a line of valid UTF-8 (the message was checked as a whole).
    public init?(line: ArraySlice<UInt8>) {
        guard let fields = Fields(line: line) else { return nil }
        func text(_ number: Int) -> String { String(decoding: fields[number], as: UTF8.self) }
        func optional(_ number: Int) -> String? { fields.isNone(number) ? nil : text(number) }
        guard let proto = fields.protocolNumber, let source = IPAddress(utf8: fields[1]),
            let sourcePort = parseDecimal(fields[2], as: UInt16.self), let destination = IPAddress(utf8: fields[3]),
            let destinationPort = parseDecimal(fields[4], as: UInt16.self), let verdict = fields.verdict,
            let reasonSource = fields.reasonSource
        else { return nil }
        let uid: UInt32?
        if fields.isNone(5) {
            uid = nil
        } else {
            guard let number = parseDecimal(fields[5], as: UInt32.self) else { return nil }
            uid = number
        }
        self.init(
            flow: FlowKey(protocolNumber: proto, source: source, sourcePort: sourcePort, destination: destination, destinationPort: destinationPort),
            uid: uid, kind: text(6), host: optional(7), path: optional(12), verdict: verdict,
            reason: Reason(source: reasonSource, category: optional(10), rule: optional(11)),
            searchTerm: fields.hasSearchTerm ? optional(13) : nil)
    }
}
