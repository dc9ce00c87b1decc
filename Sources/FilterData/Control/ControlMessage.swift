// The messages between filter-control and filter-data on their inherited
// socket pair (AF_UNIX, SOCK_SEQPACKET: one message per datagram, in order,
// and the end of the other process is seen as end of file).
//
// A message is UTF-8 text: its fields separated by line feeds, the first
// field the message's name. No field may contain a line feed; paths and
// reasons may contain spaces. A datagram is at most `maximumSize` bytes.
//
//   filter-control -> filter-data
//     rules STORE POLICY          map this store and policy, swap, unmap the old (rulesChanged)
//     policy POLICY               read the policy set again, keep the store (a schedule, an exam, an override)
//     user UID AUDIENCE           the group of a user filter-data asked about ('-' no group, 'system')
//     answer HOST TTL CATEGORY... the lookup's categories of HOST (none: known, but in no category)
//     noanswer HOST               no answer for HOST: its waiting flows get policy.askDefault now
//     ping N                      health check; filter-data answers pong N with its counters
//
//   filter-data -> filter-control
//     hello PID VERSION           running, sandboxed, with this rules version
//     ask HOST KIND DEST PORT UID needRules: a flow to HOST waits (UID '-' when unknown)
//     askuser UID                 a flow of UID waits: which group is this user in?
//     report LINE...              decisions worth recording, one per line (FlowReport, tab-separated)
//     loaded VERSION              a `rules` message was applied
//     refused CODE MESSAGE        a `rules` message was refused; the old rules stay
//     pong N KEY=VALUE...         the answer to ping N, with counters
public import VerdictCore

public enum ControlMessage: Sendable, Hashable {
    case useRules(store: String, policy: String)
    case usePolicy(String)
    case userPlacement(uid: UInt32, audience: Audience)
    case answer(host: HostName, categories: [String], timeToLive: UInt32)
    case noAnswer(host: HostName)
    case ping(UInt64)

    case hello(pid: Int32, rulesVersion: UInt64)
    case ask(NeedRulesQuestion)
    case askUser(UInt32)
    case reports(FlowReportLines)
    case rulesLoaded(version: UInt64)
    case rulesRefused(code: String, message: String)
    case pong(UInt64, counters: [Counter])

    /// The largest datagram either side sends or accepts.
    public static let maximumSize = 8192

    public struct Counter: Sendable, Hashable {
        public var name: String
        public var value: UInt64

        public init(_ name: String, _ value: UInt64) {
            self.name = name
            self.value = value
        }
    }

    public struct DecodingError: Error, Hashable, Sendable, CustomStringConvertible {
        public var reason: String
        public var description: String { "control message: \(reason)" }
    }

    public var encoded: [UInt8] {
        if case .reports(let lines) = self {
            // The most frequent message: its lines as they are.
            var bytes: [UInt8] = []
            bytes.reserveCapacity(7 + lines.bytes.count)
            bytes.append(contentsOf: "report".utf8)
            if !lines.isEmpty {
                bytes.append(0x0A)
                bytes.append(contentsOf: lines.bytes.dropLast())
            }
            return bytes
        }
        var fields: [String]
        switch self {
        case .useRules(let store, let policy): fields = ["rules", store, policy]
        case .usePolicy(let policy): fields = ["policy", policy]
        case .userPlacement(let uid, let audience): fields = ["user", String(uid), PolicySet.token(audience)]
        case .askUser(let uid): fields = ["askuser", String(uid)]
        case .reports: fields = []  // written above
        case .answer(let host, let categories, let timeToLive): fields = ["answer", host.description, String(timeToLive)] + categories
        case .noAnswer(let host): fields = ["noanswer", host.description]
        case .ping(let number): fields = ["ping", String(number)]
        case .hello(let pid, let version): fields = ["hello", String(pid), String(version)]
        case .ask(let question):
            fields = [
                "ask", question.host.description, question.kind, question.destination, String(question.port),
                question.uid.map { String($0) } ?? "-",
            ]
        case .rulesLoaded(let version): fields = ["loaded", String(version)]
        case .rulesRefused(let code, let message): fields = ["refused", code, message]
        case .pong(let number, let counters): fields = ["pong", String(number)] + counters.map { "\($0.name)=\($0.value)" }
        }
        // A line feed inside a field would split it; no field the encoder is given has one
        // (names are canonical, paths come from the config), but keep the framing safe.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fields.reduce(fields.count) { $0 + $1.utf8.count })
        for (index, field) in fields.enumerated() {
            if index > 0 { bytes.append(0x0A) }
            for byte in field.utf8 { bytes.append(byte == 0x0A ? 0x20 : byte) }
        }
        return bytes
    }

    public init(decoding bytes: Span<UInt8>) throws(DecodingError) {
        guard !bytes.isEmpty, bytes.count <= ControlMessage.maximumSize else {
            throw DecodingError(reason: "a message of \(bytes.count) bytes (1 to \(ControlMessage.maximumSize) expected)")
        }
        do {
            _ = try UTF8Span(validating: bytes)
        } catch {
            throw DecodingError(reason: "not UTF-8")
        }
        if bytes.count >= 6, bytes[0] == UInt8(ascii: "r"), bytes[1] == UInt8(ascii: "e"), bytes[2] == UInt8(ascii: "p"),
            bytes[3] == UInt8(ascii: "o"), bytes[4] == UInt8(ascii: "r"), bytes[5] == UInt8(ascii: "t"), bytes.count == 6 || bytes[6] == 0x0A
        {
            // Reports come with every decision: checked, and kept as their lines.
            self = .reports(try FlowReportLines(decoding: bytes.copied(6..<bytes.count)[...]))
            return
        }
        // Split on the byte: as Characters, "\r\n" is one, and a field ending in
        // "\r" would swallow the line feed after it.
        let fields = bytes.copied(0..<bytes.count).split(separator: 0x0A, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        let arguments = fields.dropFirst()
        func count(_ expected: Int) throws(DecodingError) {
            guard arguments.count == expected else {
                throw DecodingError(reason: "'\(fields[0])' takes \(expected) fields, got \(arguments.count)")
            }
        }
        func host(_ text: String) throws(DecodingError) -> HostName {
            do {
                return try HostName(text)
            } catch {
                throw DecodingError(reason: "'\(text)' is not a host name")
            }
        }
        func number<N: FixedWidthInteger>(_ text: String, as type: N.Type = N.self) throws(DecodingError) -> N {
            guard let value = N(text) else { throw DecodingError(reason: "'\(text)' is not a number") }
            return value
        }
        let values = Array(arguments)
        switch fields[0] {
        case "rules":
            try count(2)
            guard values.allSatisfy({ $0.hasPrefix("/") }) else { throw DecodingError(reason: "rules paths must be absolute") }
            self = .useRules(store: values[0], policy: values[1])
        case "answer":
            guard values.count >= 2, values.count <= 66 else { throw DecodingError(reason: "'answer' takes a host, a TTL and up to 64 categories") }
            let categories = values.dropFirst(2).map { $0.lowercased() }
            guard categories.allSatisfy({ !$0.isEmpty && $0.count <= 64 }) else { throw DecodingError(reason: "an empty or overlong category") }
            self = .answer(host: try host(values[0]), categories: categories, timeToLive: try number(values[1]))
        case "noanswer":
            try count(1)
            self = .noAnswer(host: try host(values[0]))
        case "ping":
            try count(1)
            self = .ping(try number(values[0]))
        case "hello":
            try count(2)
            self = .hello(pid: try number(values[0]), rulesVersion: try number(values[1]))
        case "ask":
            try count(5)
            let uid: UInt32? = values[4] == "-" ? nil : try number(values[4])
            self = .ask(
                NeedRulesQuestion(host: try host(values[0]), kind: values[1], destination: values[2], port: try number(values[3]), uid: uid))
        case "policy":
            try count(1)
            guard values[0].hasPrefix("/") else { throw DecodingError(reason: "the policy path must be absolute") }
            self = .usePolicy(values[0])
        case "user":
            try count(2)
            guard let audience = PolicySet.audience(token: values[1]) else { throw DecodingError(reason: "'\(values[1])' is not a group") }
            self = .userPlacement(uid: try number(values[0]), audience: audience)
        case "askuser":
            try count(1)
            self = .askUser(try number(values[0]))
        case "loaded":
            try count(1)
            self = .rulesLoaded(version: try number(values[0]))
        case "refused":
            try count(2)
            self = .rulesRefused(code: values[0], message: values[1])
        case "pong":
            guard values.count >= 1 else { throw DecodingError(reason: "'pong' needs its number") }
            var counters: [Counter] = []
            for field in values.dropFirst() {
                guard let equals = field.firstIndex(of: "="), let value = UInt64(field[field.index(after: equals)...]) else {
                    throw DecodingError(reason: "'\(field)' is not NAME=NUMBER")
                }
                counters.append(Counter(String(field[..<equals]), value))
            }
            self = .pong(try number(values[0]), counters: counters)
        default:
            throw DecodingError(reason: "unknown message '\(fields[0].prefix(32))'")
        }
    }

    public init(decoding bytes: [UInt8]) throws(DecodingError) {
        try self.init(decoding: bytes.span)
    }
}

/// What filter-data tells filter-control about a flow that waits for rules.
public struct NeedRulesQuestion: Sendable, Hashable {
    public var host: HostName
    /// `tls`, `http`, `quic`, `dns` or `none`.
    public var kind: String
    public var destination: String
    public var port: UInt16
    public var uid: UInt32?

    public init(host: HostName, kind: String, destination: String, port: UInt16, uid: UInt32?) {
        self.host = host
        self.kind = kind
        self.destination = destination
        self.port = port
        self.uid = uid
    }
}

/// A decision filter-data reports to filter-control: every flow's first
/// decision and every blocked DNS query, with what it was made on. filter-
/// control keeps the allowed connections' reports to judge them again when
/// the policy changes, and writes the audit log from them.
public struct FlowReport: Sendable, Hashable {
    public var flow: FlowKey
    public var uid: UInt32?
    public var kind: String
    public var host: String?
    /// The HTTP request's path (plain HTTP only).
    public var path: String?
    public var verdict: Verdict
    public var reason: Reason

    public init(flow: FlowKey, uid: UInt32?, kind: String, host: String?, path: String?, verdict: Verdict, reason: Reason) {
        self.flow = flow
        self.uid = uid
        self.kind = kind
        self.host = host
        self.path = path
        self.verdict = verdict
        self.reason = reason
    }

    /// `PROTO SRC SPORT DST DPORT UID KIND HOST VERDICT SOURCE CATEGORY RULE PATH`, tab-separated, '-' for none.
    var line: String {
        var bytes: [UInt8] = []
        appendLine(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `line` as UTF-8.
    public func appendLine(to bytes: inout [UInt8]) {
        FlowReport.appendLine(
            to: &bytes, flow: flow, uid: uid, kind: kind, host: host.map { Array($0.utf8) }, path: path, verdict: verdict, reason: reason)
    }

    /// Writes a report's line from its parts (filter-data writes one as it
    /// decides, with the name's canonical bytes, without a FlowReport).
    public static func appendLine(
        to bytes: inout [UInt8], flow: FlowKey, uid: UInt32?, kind: String, host: [UInt8]?, path: String?, verdict: Verdict, reason: Reason
    ) {
        func field(_ text: some Collection<UInt8>) {
            // At most 256 bytes, without the bytes that separate fields and lines (as bytes:
            // as Characters "\r\n" is one, and a filter on "\n" would keep its line feed).
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
            reason: Reason(source: reasonSource, category: optional(10), rule: optional(11)))
    }
}
