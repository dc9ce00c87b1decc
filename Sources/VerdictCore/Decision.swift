/// What filter-data knows about a flow when it asks for a decision.
public struct FlowFacts: Sendable, Hashable {
    /// Where the name came from.
    public enum NameSource: String, Sendable, Hashable {
        case tlsServerName = "tls"
        case httpHost = "http"
        case quicServerName = "quic"
        case dnsQuestion = "dns"
        /// A name or URL given by a person (`filterctl check`).
        case request
        /// An HTTPS request hallpass's proxy terminated (`inspect:`, docs/inspection.md).
        case inspectedRequest = "https"
    }

    public enum Transport: String, Sendable, Hashable {
        case tcp, udp, other
    }

    /// The name the flow is for, when it revealed one (never an IP literal: see `destination`).
    public var host: HostName?
    public var nameSource: NameSource?
    /// The request path (with query), for plain HTTP.
    public var path: String?
    public var destination: IPAddress?
    public var destinationPort: UInt16?
    public var transport: Transport
    /// The local user and group of the socket, when the kernel reported them.
    public var uid: UInt32?
    public var gid: UInt32?
    /// The client offered Encrypted Client Hello; `host` is then the outer name.
    public var encryptedClientHello: Bool
    /// The flow may still reveal a name (the peek bound is not reached yet).
    public var mayRevealName: Bool
    /// The flow was recognized as a way around the filter (a tunnel, a proxy, encrypted DNS).
    public var bypass: BypassKind?
    /// The flow is QUIC (IETF or Google); with no `host`, one hallpass could not read.
    public var quic: Bool

    public init(
        host: HostName? = nil,
        nameSource: NameSource? = nil,
        path: String? = nil,
        destination: IPAddress? = nil,
        destinationPort: UInt16? = nil,
        transport: Transport = .tcp,
        uid: UInt32? = nil,
        gid: UInt32? = nil,
        encryptedClientHello: Bool = false,
        mayRevealName: Bool = false,
        bypass: BypassKind? = nil,
        quic: Bool = false
    ) {
        self.host = host
        self.nameSource = nameSource
        self.path = path
        self.destination = destination
        self.destinationPort = destinationPort
        self.transport = transport
        self.uid = uid
        self.gid = gid
        self.encryptedClientHello = encryptedClientHello
        self.mayRevealName = mayRevealName
        self.bypass = bypass
        self.quic = quic
    }
}

/// The answer for a flow, as in Apple's filter data provider.
public enum Verdict: String, Sendable, Hashable, CaseIterable {
    case allow
    case drop
    /// Hold the flow and ask filter-control; decide again when it answers.
    case needRules
    /// Let this packet through, keep the flow undecided, look at the next one.
    case needMoreData

    /// The word `filterctl` prints: `allow`, `block`, `ask`, `wait`.
    public var actionWord: String {
        switch self {
        case .allow: "allow"
        case .drop: "block"
        case .needRules: "ask"
        case .needMoreData: "wait"
        }
    }
}

/// Why a verdict was given: which list, category and rule, or which default.
public struct Reason: Sendable, Hashable, CustomStringConvertible {
    public enum Source: String, Sendable, Hashable, CaseIterable {
        case localAllowList = "local-allow"
        case localDenyList = "local-deny"
        case category
        case unknownHost = "unknown"
        case noName = "no-name"
        case awaitingName = "awaiting-name"
        /// filter-control's lookup answered with the categories of the name.
        case lookup
        /// With `unknown: ask`, the lookup did not know the name (`policy.askDefault`).
        case lookupUnknown = "lookup-unknown"
        /// With `unknown: ask`, no answer came in time or too many flows waited (`policy.askDefault`).
        case askTimeout = "ask-timeout"
        /// A teacher's override (`filterctl allow`, an approved access request).
        case overrideAllow = "override-allow"
        /// A teacher's override (`filterctl block`).
        case overrideBlock = "override-block"
        /// An exam is in force and the name is on the exam's list.
        case examList = "exam-list"
        /// An exam is in force and the name is not on the exam's list.
        case exam
        /// A live focus is in force and the name is on its list.
        case focusList = "focus-list"
        /// A live focus or pause is in force and the name is not on its list.
        case focus
        /// filter-control has not said yet which group the flow's user is in.
        case unknownUser = "unknown-user"
        /// A way around the filter the policy blocks (`bypass:`); the
        /// category says which key (`tunnels`, `encryptedDNS`, `ssh`, `quic`,
        /// `unreadableQUIC`, `ech`, `safeSearch`), the rule what was recognized
        /// (`wireguard`, `dot`, `ssh`, ...).
        case bypass
        /// Allowed on an inspected host by the `inspect:` keys: the category
        /// says which (`youtube.allowVideos`, `youtube.allowChannels`,
        /// `youtube.player`), the rule what matched (a video ID, a channel).
        case inspectAllow = "inspect-allow"
        /// Blocked on an inspected host by the `inspect:` keys
        /// (`youtube.blockVideos`, `youtube.blockChannels`), or a request
        /// hallpass cannot judge (category `request`).
        case inspectBlock = "inspect-block"
    }

    public var source: Source
    /// The category of the matching rule, for `category` (blocked or not).
    public var category: String?
    /// The matching rule as written in a list (`example.com`, `=a.example.com`, `10.0.0.0/8`).
    public var rule: String?

    public init(source: Source, category: String? = nil, rule: String? = nil) {
        self.source = source
        self.category = category
        self.rule = rule
    }

    public var description: String {
        var bytes: [UInt8] = []
        appendDescription(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the description as UTF-8 (the batch output path builds no Strings).
    public func appendDescription(to bytes: inout [UInt8]) {
        switch source {
        case .localAllowList:
            bytes.append(contentsOf: "local allow list, rule ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .localDenyList:
            bytes.append(contentsOf: "local deny list, rule ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .category:
            bytes.append(contentsOf: "category ".utf8)
            bytes.append(contentsOf: (category ?? "?").utf8)
            bytes.append(contentsOf: ", rule ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .unknownHost: bytes.append(contentsOf: "no rule knows this name (policy.unknown)".utf8)
        case .noName: bytes.append(contentsOf: "the flow shows no name (policy.noName)".utf8)
        case .awaitingName: bytes.append(contentsOf: "waiting for the flow to show its name".utf8)
        case .lookup:
            bytes.append(contentsOf: "lookup: category ".utf8)
            bytes.append(contentsOf: (category ?? "?").utf8)
        case .lookupUnknown: bytes.append(contentsOf: "the lookup service does not know this name (policy.askDefault)".utf8)
        case .askTimeout: bytes.append(contentsOf: "no answer from filter-control in time (policy.askDefault)".utf8)
        case .overrideAllow:
            bytes.append(contentsOf: "allowed by a teacher's override, rule ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .overrideBlock:
            bytes.append(contentsOf: "blocked by a teacher's override, rule ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .examList:
            bytes.append(contentsOf: "an exam is in force; on the exam's list, rule ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .exam: bytes.append(contentsOf: "an exam is in force: only the exam's list is reachable".utf8)
        case .focusList:
            bytes.append(contentsOf: "a focus is in force; on its list, rule ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .focus: bytes.append(contentsOf: "a focus or pause is in force: only its list is reachable".utf8)
        case .unknownUser: bytes.append(contentsOf: "waiting for filter-control to say which group the user is in".utf8)
        case .bypass:
            bytes.append(contentsOf: "a way around the filter (policy.bypass.".utf8)
            bytes.append(contentsOf: (category ?? "?").utf8)
            bytes.append(contentsOf: "): ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .inspectAllow:
            bytes.append(contentsOf: "allowed on an inspected site (inspect.".utf8)
            bytes.append(contentsOf: (category ?? "?").utf8)
            bytes.append(contentsOf: "): ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        case .inspectBlock:
            bytes.append(contentsOf: "blocked on an inspected site (inspect.".utf8)
            bytes.append(contentsOf: (category ?? "?").utf8)
            bytes.append(contentsOf: "): ".utf8)
            bytes.append(contentsOf: (rule ?? "?").utf8)
        }
    }
}

public struct Decision: Sendable, Hashable, CustomStringConvertible {
    public var verdict: Verdict
    public var reason: Reason

    public init(_ verdict: Verdict, _ reason: Reason) {
        self.verdict = verdict
        self.reason = reason
    }

    public var description: String { "\(verdict.actionWord) (\(reason))" }
}
