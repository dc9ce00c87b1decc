// The messages between filter-control and filter-data on their inherited
// socket pair (AF_UNIX, SOCK_SEQPACKET: one message per datagram, in order,
// and the end of the other process is seen as end of file).
//
// Each direction has its own type, so neither side can send what only the
// other may (filter-data cannot send `rules`, filter-control cannot send
// `report`), and a message that arrives on the wrong side does not decode.
//
// A message is UTF-8 text: its fields separated by line feeds, the first
// field the message's name. No field may contain a line feed; paths and
// reasons may contain spaces. A datagram is at most `controlMessageMaximumSize` bytes.
//
//   filter-control -> filter-data (ControlCommand)
//     rules STORE POLICY          map this store and policy, swap, unmap the old (rulesChanged)
//     policy POLICY               read the policy set again, keep the store (a schedule, an exam, an override)
//     user UID AUDIENCE           the group of a user filter-data asked about ('-' no group, 'system')
//     answer HOST TTL CATEGORY... the lookup's categories of HOST (none: known, but in no category)
//     noanswer HOST               no answer for HOST: its waiting flows get policy.askDefault now
//     ping N                      health check; filter-data answers pong N with its counters
//     intercept KEY CERT UNTRUSTED...  hallpass-proxy only: the interception CA (its P-256 key's 32
//                                 bytes and its certificate's DER, in hex), and the SHA-256 (hex)
//                                 of the public keys (SPKI) its checks of servers must not trust
//
//   filter-data -> filter-control (DataEvent)
//     hello PID VERSION           running, sandboxed, with this rules version
//     ask HOST KIND DEST PORT UID needRules: a flow to HOST waits (UID '-' when unknown)
//     askuser UID                 a flow of UID waits: which group is this user in?
//     report LINE...              decisions worth recording, one per line (FlowReport, tab-separated)
//     loaded VERSION              a `rules` message was applied
//     refused CODE MESSAGE        a `rules` message was refused; the old rules stay
//     pong N NAME=VALUE...        the answer to ping N: every field of FilterDataCounters, in order
public import VerdictCore
import HallpassWire

/// The largest datagram either side sends or accepts.
public let controlMessageMaximumSize = 8192

/// A message of one direction of the control channel.
public protocol ControlChannelMessage: Sendable {
    /// The datagram's bytes.
    var encoded: [UInt8] { get }
    init(decoding bytes: Span<UInt8>) throws(ControlMessageError)
}

extension ControlChannelMessage {
    public init(decoding bytes: [UInt8]) throws(ControlMessageError) {
        try self.init(decoding: bytes.span)
    }
}

/// Why a datagram is no message of its direction.
public struct ControlMessageError: Error, Hashable, Sendable, CustomStringConvertible {
    public var reason: String
    public init(reason: String) { self.reason = reason }
    public var description: String { "control message: \(reason)" }
}

/// What filter-control tells filter-data.
public enum ControlCommand: ControlChannelMessage, Hashable {
    case useRules(store: String, policy: String)
    case usePolicy(String)
    case userPlacement(uid: UInt32, audience: Audience)
    case answer(host: HostName, categories: [String], timeToLive: UInt32)
    case noAnswer(host: HostName)
    case ping(UInt64)
    /// hallpass-proxy's interception CA and the keys it must not trust upstream (hallpass's own CAs).
    case interception(InterceptionHandover)

    public var encoded: [UInt8] {
        switch self {
        case .useRules(let store, let policy): ControlFields.encode(["rules", store, policy])
        case .usePolicy(let policy): ControlFields.encode(["policy", policy])
        case .userPlacement(let uid, let audience): ControlFields.encode(["user", String(uid), PolicySet.token(audience)])
        case .answer(let host, let categories, let timeToLive):
            ControlFields.encode(["answer", host.description, String(timeToLive)] + categories)
        case .noAnswer(let host): ControlFields.encode(["noanswer", host.description])
        case .ping(let number): ControlFields.encode(["ping", String(number)])
        case .interception(let handover):
            ControlFields.encode(["intercept", Hex.encode(handover.key), Hex.encode(handover.certificate)] + handover.untrustedKeys.map(Hex.encode))
        }
    }

    public init(decoding bytes: Span<UInt8>) throws(ControlMessageError) {
        let fields = try ControlFields(bytes)
        let values = fields.values
        switch fields.name {
        case "rules":
            try fields.expect(2)
            guard values.allSatisfy({ $0.hasPrefix("/") }) else { throw ControlMessageError(reason: "rules paths must be absolute") }
            self = .useRules(store: values[0], policy: values[1])
        case "policy":
            try fields.expect(1)
            guard values[0].hasPrefix("/") else { throw ControlMessageError(reason: "the policy path must be absolute") }
            self = .usePolicy(values[0])
        case "user":
            try fields.expect(2)
            guard let audience = PolicySet.audience(token: values[1]) else { throw ControlMessageError(reason: "'\(values[1])' is not a group") }
            self = .userPlacement(uid: try ControlFields.number(values[0]), audience: audience)
        case "answer":
            guard values.count >= 2, values.count <= 66 else {
                throw ControlMessageError(reason: "'answer' takes a host, a TTL and up to 64 categories")
            }
            let categories = values.dropFirst(2).map { $0.lowercased() }
            guard categories.allSatisfy({ !$0.isEmpty && $0.count <= 64 }) else { throw ControlMessageError(reason: "an empty or overlong category") }
            self = .answer(host: try ControlFields.host(values[0]), categories: categories, timeToLive: try ControlFields.number(values[1]))
        case "noanswer":
            try fields.expect(1)
            self = .noAnswer(host: try ControlFields.host(values[0]))
        case "ping":
            try fields.expect(1)
            self = .ping(try ControlFields.number(values[0]))
        case "intercept":
            guard values.count >= 2, values.count <= 2 + InterceptionHandover.maximumUntrustedKeys else {
                throw ControlMessageError(reason: "'intercept' takes a key, a certificate and up to \(InterceptionHandover.maximumUntrustedKeys) key hashes")
            }
            guard let key = Hex.decode(values[0]), key.count == 32, let certificate = Hex.decode(values[1]), !certificate.isEmpty else {
                throw ControlMessageError(reason: "'intercept' needs a 32-byte key and a certificate, in hex")
            }
            var untrusted: [[UInt8]] = []
            for value in values.dropFirst(2) {
                guard let hash = Hex.decode(value), hash.count == 32 else { throw ControlMessageError(reason: "'intercept' key hashes are SHA-256, in hex") }
                untrusted.append(hash)
            }
            self = .interception(InterceptionHandover(key: key, certificate: certificate, untrustedKeys: untrusted))
        default:
            throw ControlMessageError(reason: "unknown message '\(fields.name.prefix(32))' for filter-data")
        }
    }
}

/// What filter-data tells filter-control.
public enum DataEvent: ControlChannelMessage, Hashable {
    case hello(pid: Int32, rulesVersion: UInt64)
    case ask(NeedRulesQuestion)
    case askUser(UInt32)
    case reports(FlowReportLines)
    case rulesLoaded(version: UInt64)
    case rulesRefused(code: String, message: String)
    case pong(UInt64, counters: FilterDataCounters)

    public var encoded: [UInt8] {
        switch self {
        case .reports(let lines):
            // The most frequent message: its lines as they are.
            var bytes: [UInt8] = []
            bytes.reserveCapacity(7 + lines.bytes.count)
            bytes.append(contentsOf: "report".utf8)
            if !lines.isEmpty {
                bytes.append(0x0A)
                bytes.append(contentsOf: lines.bytes.dropLast())
            }
            return bytes
        case .hello(let pid, let version): return ControlFields.encode(["hello", String(pid), String(version)])
        case .ask(let question):
            return ControlFields.encode([
                "ask", question.host.description, question.kind, question.destination, String(question.port),
                question.uid.map { String($0) } ?? "-",
            ])
        case .askUser(let uid): return ControlFields.encode(["askuser", String(uid)])
        case .rulesLoaded(let version): return ControlFields.encode(["loaded", String(version)])
        case .rulesRefused(let code, let message): return ControlFields.encode(["refused", code, message])
        case .pong(let number, let counters):
            return ControlFields.encode(["pong", String(number)] + counters.fields.map { "\($0.name)=\($0.value)" })
        }
    }

    public init(decoding bytes: Span<UInt8>) throws(ControlMessageError) {
        if bytes.count >= 6, bytes.count <= controlMessageMaximumSize, bytes.matches(Array("report".utf8)),
            bytes.count == 6 || bytes[6] == 0x0A
        {
            do {
                _ = try UTF8Span(validating: bytes)
            } catch {
                throw ControlMessageError(reason: "not UTF-8")
            }
            // Reports come with every decision: checked, and kept as their lines.
            self = .reports(try FlowReportLines(decoding: bytes.copied(6..<bytes.count)[...]))
            return
        }
        let fields = try ControlFields(bytes)
        let values = fields.values
        switch fields.name {
        case "hello":
            try fields.expect(2)
            self = .hello(pid: try ControlFields.number(values[0]), rulesVersion: try ControlFields.number(values[1]))
        case "ask":
            try fields.expect(5)
            let uid: UInt32? = values[4] == "-" ? nil : try ControlFields.number(values[4])
            self = .ask(
                NeedRulesQuestion(
                    host: try ControlFields.host(values[0]), kind: values[1], destination: values[2], port: try ControlFields.number(values[3]),
                    uid: uid))
        case "askuser":
            try fields.expect(1)
            self = .askUser(try ControlFields.number(values[0]))
        case "loaded":
            try fields.expect(1)
            self = .rulesLoaded(version: try ControlFields.number(values[0]))
        case "refused":
            try fields.expect(2)
            self = .rulesRefused(code: values[0], message: values[1])
        case "pong":
            guard values.count >= 1 else { throw ControlMessageError(reason: "'pong' needs its number") }
            self = .pong(try ControlFields.number(values[0]), counters: try FilterDataCounters(fields: values.dropFirst()))
        default:
            throw ControlMessageError(reason: "unknown message '\(fields.name.prefix(32))' for filter-control")
        }
    }
}

/// What filter-control hands hallpass-proxy at its start and when the CA
/// changes: the interception CA, and the public keys that must never make a
/// server's certificate trusted (hallpass's own CAs, should an admin have put
/// them in the system's trust store).
public struct InterceptionHandover: Sendable, Hashable {
    /// The CA's P-256 private key, its 32 bytes.
    public var key: [UInt8]
    /// The CA certificate, DER.
    public var certificate: [UInt8]
    /// SHA-256 of each untrusted key's SubjectPublicKeyInfo (DER).
    public var untrustedKeys: [[UInt8]]

    public static let maximumUntrustedKeys = 8

    public init(key: [UInt8], certificate: [UInt8], untrustedKeys: [[UInt8]]) {
        self.key = key
        self.certificate = certificate
        self.untrustedKeys = untrustedKeys
    }

    /// Whether its message fits a datagram (a CA constrained to very many names would not).
    public var fits: Bool { ControlCommand.interception(self).encoded.count <= controlMessageMaximumSize }
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

/// A message's fields: checked for size and UTF-8, split on line feeds.
struct ControlFields {
    let name: String
    let values: [String]

    init(_ bytes: Span<UInt8>) throws(ControlMessageError) {
        guard !bytes.isEmpty, bytes.count <= controlMessageMaximumSize else {
            throw ControlMessageError(reason: "a message of \(bytes.count) bytes (1 to \(controlMessageMaximumSize) expected)")
        }
        do {
            _ = try UTF8Span(validating: bytes)
        } catch {
            throw ControlMessageError(reason: "not UTF-8")
        }
        // Split on the byte: as Characters, "\r\n" is one, and a field ending in
        // "\r" would swallow the line feed after it.
        let fields = bytes.copied(0..<bytes.count).split(separator: 0x0A, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        name = fields[0]
        values = Array(fields.dropFirst())
    }

    func expect(_ count: Int) throws(ControlMessageError) {
        guard values.count == count else {
            throw ControlMessageError(reason: "'\(name)' takes \(count) fields, got \(values.count)")
        }
    }

    static func host(_ text: String) throws(ControlMessageError) -> HostName {
        do {
            return try HostName(text)
        } catch {
            throw ControlMessageError(reason: "'\(text)' is not a host name")
        }
    }

    static func number<N: FixedWidthInteger>(_ text: String, as type: N.Type = N.self) throws(ControlMessageError) -> N {
        guard let value = N(text) else { throw ControlMessageError(reason: "'\(text)' is not a number") }
        return value
    }

    /// The fields joined by line feeds. A line feed inside a field would split
    /// it; no field the encoder is given has one (names are canonical, paths
    /// come from the configuration), but the framing stays safe: it becomes a space.
    static func encode(_ fields: [String]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fields.reduce(fields.count) { $0 + $1.utf8.count })
        for (index, field) in fields.enumerated() {
            if index > 0 { bytes.append(0x0A) }
            for byte in field.utf8 { bytes.append(byte == 0x0A ? 0x20 : byte) }
        }
        return bytes
    }
}
