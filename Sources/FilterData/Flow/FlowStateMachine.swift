// The life of one flow, as a pure value: events in (client bytes, server
// packets, a decision from the engine, new rules), steps out (wait, decide
// with these findings, repeat the stored decision, hold for rules). It knows
// nothing of the rule store or of the flow table; `FlowInspector` drives it.

import HallpassWire
public import VerdictCore

/// The protocol a flow revealed its name through, or the way around the
/// filter it was recognized as (a tunnel, a proxy, encrypted DNS).
public enum FlowKind: String, Sendable, Hashable, CaseIterable {
    case tls, http, quic, dns
    /// No name-bearing protocol was recognised (or not yet).
    case none
    case wireguard, openvpn, ike, socks, connect, tor, dot, doq, ssh
    /// A ClientHello too large to read whole (`BypassKind.oversizedHello`).
    case oversizedHello

    public init(_ bypass: BypassKind) {
        self.init(rawValue: bypass.rawValue)!
    }

    /// The `FlowFacts` name source for a name found this way.
    public var nameSource: FlowFacts.NameSource? {
        switch self {
        case .tls, .dot: .tlsServerName
        case .http, .connect: .httpHost
        case .quic, .doq: .quicServerName
        case .dns: .dnsQuestion
        case .none, .wireguard, .openvpn, .ike, .socks, .tor, .ssh, .oversizedHello: nil
        }
    }

    /// The way around the filter this kind is, if it is one. A switch of cases,
    /// not `BypassKind(rawValue:)`: this runs for every flow judged, and the
    /// raw value's init is a switch over strings (seen in a profile).
    public var bypass: BypassKind? {
        switch self {
        case .tls, .http, .quic, .dns, .none: nil
        case .wireguard: .wireguard
        case .openvpn: .openvpn
        case .ike: .ike
        case .socks: .socks
        case .connect: .connect
        case .tor: .tor
        case .ssh: .ssh
        case .dot: .dot
        case .doq: .doq
        case .oversizedHello: .oversizedHello
        }
    }
}

/// What a flow revealed about where it goes.
public struct FlowFindings: Sendable, Hashable {
    public var kind: FlowKind
    /// The name as it came off the wire (SNI, Host, DNS question; the parsers
    /// lower-case ASCII letters), also when it is no usable host name.
    public var wireName: [UInt8]?
    /// `wireName` in canonical form; nil when absent or not a valid host name
    /// (an IPv6 literal, stray bytes): the flow is then judged as nameless.
    public var host: HostName?
    /// The HTTP request target's path and query.
    public var path: String?
    /// The ClientHello offered Encrypted Client Hello (`host` is the outer name).
    public var encryptedClientHello: Bool
    /// A DNS query's question type (1 A, 28 AAAA, 65 HTTPS, ...); 0 otherwise.
    public var dnsType: UInt16 = 0
    /// DNS over TCP: the queries after the first that came with it (pipelined
    /// in one write), each judged too (FlowInspector); the first refused wins.
    public var moreQueries: [DNSQuery] = []
    /// DNS over TCP: after the queries read, the stream held something that is
    /// no DNS query (malformed, past the peek bound, too many queries).
    public var unreadableRest = false

    /// One query's question.
    public struct DNSQuery: Sendable, Hashable {
        public var name: [UInt8]?
        public var type: UInt16
    }

    public init(kind: FlowKind, wireName: [UInt8]? = nil, path: String? = nil, encryptedClientHello: Bool = false, dnsType: UInt16 = 0) {
        self.kind = kind
        self.dnsType = dnsType
        self.wireName = wireName
        self.host = wireName.flatMap { try? HostName(bytes: $0) }
        self.path = path
        self.encryptedClientHello = encryptedClientHello
    }

    /// Nothing found.
    public static let nothing = FlowFindings(kind: .none)

    /// The wire name as text, for display.
    public var name: String? { wireName.map { String(decoding: $0, as: UTF8.self) } }
}

/// Bounds the state machine works within.
public struct FlowLimits: Sendable, Hashable {
    /// DNS over TCP: queries read from one write, at most (a resolver may pipeline many).
    public static let maximumQueriesPerWrite = 128

    /// Client bytes of a TCP stream examined for a name (the peek bound).
    public var streamPeekBound: Int
    /// Bytes of a QUIC CRYPTO stream assembled for the ClientHello.
    public var quicCryptoBound: Int
    /// Client datagrams of a QUIC flow examined before the flow counts as nameless.
    public var quicDatagramBound: Int

    public init(
        streamPeekBound: Int = StreamPeek.defaultCapacity,
        quicCryptoBound: Int = 16_384,
        quicDatagramBound: Int = 16
    ) {
        self.streamPeekBound = streamPeekBound
        self.quicCryptoBound = quicCryptoBound
        self.quicDatagramBound = quicDatagramBound
    }
}

/// What the driver should do after an event.
public enum FlowStep: Sendable, Hashable {
    /// No name yet and one may still come: let the packet pass (needMoreData).
    case awaitMoreData
    /// Ask the engine about these findings; the flow can reveal nothing more.
    /// Report the engine's answer with `apply(_:)`.
    case decide(FlowFindings)
    /// The flow was decided before: this is its decision (a late packet never changes it).
    case repeatDecision(DecidedFlow)
    /// The flow waits for rules: hold the packet.
    case holdForRules(FlowFindings)
}

/// What a decided flow keeps: enough to answer its later packets as its
/// first one was answered, and no more. The names, path and facts the
/// decision was made on went out with the first decision (`Inspection`);
/// a decided flow is kept only for the packets queued before the kernel
/// saved its mark, so it is kept small: three bytes, no allocation.
public struct DecidedFlow: Sendable, Hashable {
    public var verdict: Verdict
    public var kind: FlowKind
    public var source: Reason.Source

    public init(verdict: Verdict, kind: FlowKind, source: Reason.Source) {
        self.verdict = verdict
        self.kind = kind
        self.source = source
    }

    /// The decision as later packets get it (the reason without its rule and category).
    public var decision: Decision { Decision(verdict, Reason(source: source)) }
}

/// The state of one flow. Pure and self-contained: every transition is a
/// method that returns what to do, and the tests drive it directly.
public struct FlowStateMachine: Sendable {
    /// Progress of a TCP client stream towards a name.
    public struct StreamProgress: Sendable {
        public var peek: StreamPeek
        public let limits: FlowLimits
        /// Port 53: the stream carries DNS messages with a length prefix.
        public var carriesDNS: Bool
        /// The server's port (DNS over TLS is known by it).
        public var serverPort: UInt16 = 0
        /// The tunnel recognizers (SOCKS, CONNECT, OpenVPN over TCP) have ruled the stream out.
        var tunnelRuledOut = false
        /// Do not parse TLS again before the contiguous prefix has this many bytes.
        var tlsBytesNeeded = 0
        /// The prefix bytes already scanned for an HTTP head (it can only
        /// complete once a line feed arrives beyond them).
        var httpScannedCount = 0
        var tlsRuledOut = false
        var httpRuledOut = false
        /// Where the client's FIN sits in the stream, once seen.
        var finOffset: Int?

        /// The peek grew past the bound to read a large ClientHello whole.
        var readsLargeHello: Bool { peek.capacity > limits.streamPeekBound }

        /// The protocol an unfinished stream was heading for.
        var unfinishedKind: FlowKind {
            if carriesDNS { return .dns }
            if peek.contiguousCount == 0 { return .none }
            if !tlsRuledOut { return .tls }
            if !httpRuledOut { return .http }
            return .none
        }

        /// What a stream is judged as when it ends or is cut short before it
        /// showed a name: a large ClientHello that never came whole was not read.
        var abandonedKind: FlowKind { readsLargeHello ? .oversizedHello : unfinishedKind }

        /// One segment can reach past the peek bound before the parser has
        /// seen a byte: with GSO (the queue hands over packets of up to 64 KiB)
        /// or a large MSS, a padded hello arrives in one packet, and its bytes
        /// past the bound would be dropped and the hello never read. A stream
        /// that opens with a TLS handshake record (0x16 0x03) grows first.
        mutating func makeRoomForLargeHello(header: TCPSegmentHeader, payload: Span<UInt8>) {
            guard !readsLargeHello, !carriesDNS, !tlsRuledOut, !payload.isEmpty else { return }
            let start = header.flags.contains(.syn) ? header.sequenceNumber &+ 1 : header.sequenceNumber
            let offset = peek.initialSequence.map { StreamPeek.relativeOffset(of: start, from: $0) } ?? 0
            guard offset >= 0, offset + payload.count > peek.capacity else { return }
            let opensWithHandshake: Bool
            if peek.contiguousCount >= 2 {
                opensWithHandshake = peek.withContiguousPrefix { $0[0] == 22 && $0[1] == 3 }
            } else if offset == 0, payload.count >= 2 {
                opensWithHandshake = payload[0] == 22 && payload[1] == 3
            } else {
                opensWithHandshake = false
            }
            if opensWithHandshake { _ = peek.grow(to: ClientHelloParser.maximumRecordStreamLength) }
        }
    }

    /// Progress of a QUIC flow towards the ClientHello.
    public struct QUICProgress: Sendable {
        public var assembler: QUICCryptoAssembler
        public var clientDatagrams = 0
        public let limits: FlowLimits
        /// Set when the flow's first datagram carried a Google QUIC version tag.
        public var googleQUIC: GoogleQUICHandshake?
    }

    /// A DNS flow: each query is judged on its own.
    public struct QueryLog: Sendable {
        public var firstQuestion: FlowFindings?
        public var queries = 0
        /// The latest query's decision (responses get it too).
        public var latest: DecidedFlow?
        /// A query the engine answered needRules for (the caller holds it).
        public var heldQuery: FlowFindings?
    }

    /// Every case holds one reference at most, so a machine is one word: the
    /// flow table keeps one per flow (its size is the table's memory), and a
    /// copy costs a retain, not one per name, path and buffer. The boxes of
    /// the indirect cases are replaced, never shared, when the state moves on.
    public enum State: Sendable {
        /// Can show no name and is not judged yet.
        case nameless
        /// Recognized as a way around the filter and not judged yet.
        case recognized(BypassKind)
        indirect case peekingStream(StreamProgress)
        indirect case assemblingQUIC(QUICProgress)
        /// A DNS flow: each query judged on its own (`queryLog` holds what it saw).
        case judgingQueries
        indirect case waitingForRules(FlowFindings)
        case decided(DecidedFlow)
    }

    public private(set) var state: State
    /// A DNS flow's queries, updated in place for every query (copy on write:
    /// a copy of the machine keeps its own). Nil for other flows.
    private var queryStorage: QueryLogStorage?

    /// A DNS flow's log of queries.
    public var queryLog: QueryLog? { queryStorage?.log }

    /// A TCP flow; `carriesDNS` for port 53.
    public static func tcp(limits: FlowLimits = FlowLimits(), carriesDNS: Bool = false, serverPort: UInt16 = 0) -> FlowStateMachine {
        var progress = StreamProgress(peek: StreamPeek(capacity: limits.streamPeekBound), limits: limits, carriesDNS: carriesDNS)
        progress.serverPort = serverPort
        return FlowStateMachine(state: .peekingStream(progress))
    }

    /// A UDP flow whose first client datagram looked like a QUIC long header.
    public static func quic(limits: FlowLimits = FlowLimits()) -> FlowStateMachine {
        FlowStateMachine(state: .assemblingQUIC(QUICProgress(assembler: QUICCryptoAssembler(capacity: limits.quicCryptoBound), limits: limits)))
    }

    /// A DNS flow (UDP port 53).
    public static func dns() -> FlowStateMachine {
        var machine = FlowStateMachine(state: .judgingQueries)
        machine.queryStorage = QueryLogStorage()
        return machine
    }

    /// A flow that can reveal no name (other UDP): its first step decides.
    public static func nameless() -> FlowStateMachine {
        FlowStateMachine(state: .nameless)
    }

    /// A flow recognized from its first packet as a way around the filter
    /// (a WireGuard, OpenVPN or IKE datagram, DNS over QUIC's port): its
    /// first step decides with that kind.
    public static func recognized(_ kind: BypassKind) -> FlowStateMachine {
        FlowStateMachine(state: .recognized(kind))
    }

    private init(state: State) {
        self.state = state
    }

    /// The table stage this state belongs to.
    public var stage: FlowStage {
        switch state {
        case .peekingStream(let progress): progress.readsLargeHello ? .inspectingLargeHello : .inspecting
        case .nameless, .recognized, .assemblingQUIC: .inspecting
        case .waitingForRules: .waitingForRules
        case .judgingQueries: queryStorage?.log.heldQuery == nil ? .decided : .waitingForRules
        case .decided: .decided
        }
    }

    /// The flow's decision, once it has a final one.
    public var decision: Decision? {
        if case .decided(let decided) = state { return decided.decision }
        return nil
    }

    /// What the flow revealed so far (for DNS, the first question).
    public var findings: FlowFindings {
        switch state {
        case .nameless: .nothing
        case .recognized(let kind): FlowFindings(kind: FlowKind(kind))
        case .peekingStream(let progress): FlowFindings(kind: progress.unfinishedKind)
        case .assemblingQUIC: FlowFindings(kind: .quic)
        case .judgingQueries: queryStorage?.log.firstQuestion ?? FlowFindings(kind: .dns)
        case .waitingForRules(let findings): findings
        case .decided(let decided): FlowFindings(kind: decided.kind)
        }
    }

    // MARK: Events

    /// Whether a TCP segment starting at `sequenceNumber` adds right after the
    /// bytes the flow holds (true for any state but an unfinished stream).
    public func continuesStream(at sequenceNumber: UInt32) -> Bool {
        guard case .peekingStream(let progress) = state, let base = progress.peek.initialSequence else { return true }
        return StreamPeek.relativeOffset(of: sequenceNumber, from: base) <= progress.peek.contiguousCount
    }

    /// A client-to-server TCP segment.
    public mutating func clientSegment(_ header: TCPSegmentHeader, payload: Span<UInt8>) -> FlowStep {
        switch state {
        case .decided(let decided): return .repeatDecision(decided)
        case .waitingForRules(let findings): return .holdForRules(findings)
        case .nameless: return decideNow(.nothing)
        case .recognized(let kind): return decideNow(FlowFindings(kind: FlowKind(kind)))
        case .assemblingQUIC, .judgingQueries: return .awaitMoreData
        case .peekingStream(var progress):
            // Move the progress out of `state` (its box goes) so the buffer is
            // uniquely referenced and not copied on write.
            state = .nameless
            let step = advance(&progress, header: header, payload: payload)
            state = .peekingStream(progress)
            return step
        }
    }

    /// A packet from the server side (no name can be in it).
    public mutating func serverPacket() -> FlowStep {
        switch state {
        case .decided(let decided): return .repeatDecision(decided)
        case .waitingForRules(let findings): return .holdForRules(findings)
        case .judgingQueries:
            if let latest = queryStorage?.log.latest { return .repeatDecision(latest) }
            return decideNow(FlowFindings(kind: .dns))
        case .nameless: return decideNow(.nothing)
        case .recognized(let kind): return decideNow(FlowFindings(kind: FlowKind(kind)))
        case .peekingStream, .assemblingQUIC: return .awaitMoreData
        }
    }

    /// A client-to-server UDP datagram of a QUIC flow.
    public mutating func clientDatagram(_ payload: Span<UInt8>) -> FlowStep {
        switch state {
        case .decided(let decided): return .repeatDecision(decided)
        case .waitingForRules(let findings): return .holdForRules(findings)
        case .nameless: return decideNow(.nothing)
        case .recognized(let kind): return decideNow(FlowFindings(kind: FlowKind(kind)))
        case .judgingQueries, .peekingStream: return .awaitMoreData
        case .assemblingQUIC(var progress):
            state = .nameless
            let step = advance(&progress, payload: payload)
            state = .assemblingQUIC(progress)
            return step
        }
    }

    /// A DNS message on a DNS flow: a query's question (nil when the query
    /// cannot be read: it is judged as nameless).
    public mutating func dnsQuery(_ question: [UInt8]?, type: UInt16 = 0) -> FlowStep {
        guard case .judgingQueries = state else { return serverPacket() }
        let findings = question.map { FlowFindings(kind: .dns, wireName: $0, dnsType: type) } ?? FlowFindings(kind: .dns)
        updateQueryLog { log in
            log.queries += 1
            if log.firstQuestion == nil, question != nil { log.firstQuestion = findings }
        }
        return .decide(findings)
    }

    /// Changes the DNS log in place (after a copy if another machine shares it).
    private mutating func updateQueryLog(_ change: (inout QueryLog) -> Void) {
        if queryStorage == nil {
            queryStorage = QueryLogStorage()
        } else if !isKnownUniquelyReferenced(&queryStorage!) {
            queryStorage = QueryLogStorage(queryStorage!.log)
        }
        change(&queryStorage!.log)
    }

    /// The engine's answer to the last `.decide` step, with the findings that
    /// step carried and the facts the engine was given. Returns the stage the
    /// flow is in now. `needMoreData` (which the engine gives only to flows
    /// that may still show a name) leaves the flow as it was.
    @discardableResult
    public mutating func apply(_ decision: Decision, findings: FlowFindings, facts: FlowFacts = FlowFacts()) -> FlowStage {
        switch decision.verdict {
        case .needMoreData:
            break
        case .needRules:
            if case .judgingQueries = state {
                updateQueryLog { $0.heldQuery = findings }
            } else {
                state = .waitingForRules(findings)
            }
        case .allow, .drop:
            let judged = DecidedFlow(verdict: decision.verdict, kind: findings.kind, source: decision.reason.source)
            if case .judgingQueries = state {
                updateQueryLog { log in
                    log.latest = judged
                    log.heldQuery = nil
                }
            } else {
                state = .decided(judged)
            }
        }
        return stage
    }

    /// New rules arrived: a flow waiting for rules asks again with what it has.
    /// Other flows keep their state (a decision is never overturned).
    public mutating func rulesChanged() -> FlowStep? {
        switch state {
        case .waitingForRules(let findings):
            return decideNow(findings)
        case .judgingQueries:
            guard let held = queryStorage?.log.heldQuery else { return nil }
            return decideNow(held)
        default:
            return nil
        }
    }

    /// Gives up on finding a name (the table needs the buffer back, or the
    /// caller's deadline passed): the flow is judged on what it showed.
    public mutating func stopInspecting() -> FlowStep? {
        switch state {
        case .peekingStream(let progress): return decideNow(FlowFindings(kind: progress.abandonedKind))
        case .assemblingQUIC: return decideNow(FlowFindings(kind: .quic))
        case .nameless: return decideNow(.nothing)
        case .recognized(let kind): return decideNow(FlowFindings(kind: FlowKind(kind)))
        default: return nil
        }
    }

    // MARK: TCP

    private mutating func advance(_ progress: inout StreamProgress, header: TCPSegmentHeader, payload: Span<UInt8>) -> FlowStep {
        progress.makeRoomForLargeHello(header: header, payload: payload)
        let grew = progress.peek.add(sequenceNumber: header.sequenceNumber, isSYN: header.flags.contains(.syn), payload: payload)
        if header.flags.contains(.fin), !header.flags.contains(.syn), let base = progress.peek.initialSequence {
            // The stream ends at the FIN; it is complete once every byte before it is in.
            let end = StreamPeek.relativeOffset(of: header.sequenceNumber &+ UInt32(truncatingIfNeeded: payload.count), from: base)
            progress.finOffset = max(0, end)
        } else if header.flags.contains(.fin), payload.isEmpty, progress.peek.initialSequence == nil {
            progress.finOffset = 0  // a bare FIN before any data: nothing will come
        }
        var step: FlowStep = .awaitMoreData
        if grew {
            step = examine(&progress)
        }
        guard case .awaitMoreData = step else { return step }
        // A client RST aborts the stream (the server discards what it has); a FIN
        // ends it once the bytes before it are all in. Either way no name comes later.
        let complete = progress.finOffset.map { progress.peek.contiguousCount >= $0 } ?? false
        if header.flags.contains(.rst) || complete || progress.peek.isFull {
            return decideNow(FlowFindings(kind: progress.abandonedKind))
        }
        return step
    }

    private mutating func examine(_ progress: inout StreamProgress) -> FlowStep {
        let available = progress.peek.contiguousCount
        let bound = progress.limits.streamPeekBound
        if progress.carriesDNS {
            // SSH on port 53 is SSH (`bypass.ssh`), not a stream of queries that cannot be read (`tunnels`).
            switch progress.peek.withContiguousPrefix({ TunnelRecognizer.ssh($0) }) {
            case .recognized(let recognition): return decideNow(FlowFindings(kind: FlowKind(recognition.kind)))
            case .needMoreData: return .awaitMoreData
            case .notRecognized: break
            }
            // Every query of the stream so far, not only the first: a client may
            // send several in one write (RFC 7766 section 6.2.1.1). The flow is
            // judged once the last one is complete, so a query is never cut in two
            // by a decision (filter-data judges each later write again: FlowInspector).
            var queries: [FlowFindings.DNSQuery] = []
            var offset = 0
            var unreadableRest = false
            reading: while offset < available {
                let outcome = progress.peek.withContiguousPrefix { DNSMessageParser.parse(tcpStream: $0.extracting(offset..<$0.count)) }
                switch outcome {
                case .message(let message, let range):
                    let name = message.question.map(\.name).flatMap { $0.isEmpty ? nil : $0 }
                    queries.append(FlowFindings.DNSQuery(name: name, type: message.question?.type ?? 0))
                    offset += range.upperBound
                case .needMoreData(let total):
                    if offset + total <= bound { return .awaitMoreData }
                    unreadableRest = true
                    break reading
                case .malformed:
                    unreadableRest = true
                    break reading
                }
                if queries.count > FlowLimits.maximumQueriesPerWrite {
                    unreadableRest = true
                    break reading
                }
            }
            // The queries read are judged, and what follows them is not let through unread.
            var findings = FlowFindings(kind: .dns, wireName: queries.first?.name, dnsType: queries.first?.type ?? 0)
            findings.moreQueries = Array(queries.dropFirst())
            findings.unreadableRest = unreadableRest
            return decideNow(findings)
        }
        // DNS over TLS has its own port (RFC 7858 section 3.1): its ClientHello still names the resolver.
        let tlsKind: FlowKind = progress.serverPort == TunnelRecognizer.Ports.encryptedDNS ? .dot : .tls
        if !progress.tlsRuledOut {
            guard available >= progress.tlsBytesNeeded else { return .awaitMoreData }
            let outcome = progress.peek.withContiguousPrefix { ClientHelloParser.parse(recordStream: $0) }
            switch outcome {
            case .clientHello(let info):
                // DNS over TLS on another port shows itself by its ALPN (RFC 7858 registers "dot").
                var kind = tlsKind
                if kind == .tls, !info.alpnProtocols.isEmpty, TunnelRecognizer.encryptedDNS(alpnProtocols: info.alpnProtocols, quic: false) != nil {
                    kind = .dot
                }
                return decideNow(FlowFindings(kind: kind, wireName: info.serverName, encryptedClientHello: info.hasEncryptedClientHello))
            case .needMoreData(let total):
                let needed = total ?? available + 1
                // A ClientHello larger than the peek bound is read whole, up to the
                // parser's bound (past it the parser answers tooLarge). Its first
                // bytes say so, before any byte past the peek bound came: one that
                // did come first was let through unread, and the hello is not read.
                if needed > progress.peek.capacity, !progress.peek.grow(to: ClientHelloParser.maximumRecordStreamLength) {
                    return decideNow(FlowFindings(kind: .oversizedHello))
                }
                progress.tlsBytesNeeded = max(needed, available + 1)
                return .awaitMoreData
            case .tooLarge:
                return decideNow(FlowFindings(kind: .oversizedHello))
            case .malformed:
                return decideNow(FlowFindings(kind: tlsKind))
            case .notTLS:
                progress.tlsRuledOut = true
            }
        }
        if !progress.tunnelRuledOut {
            // A proxy greeting (SOCKS4/5), a CONNECT request or OpenVPN's length-prefixed
            // packets; a CONNECT line is also an HTTP head, so this comes first.
            let serverPort = progress.serverPort
            switch progress.peek.withContiguousPrefix({ TunnelRecognizer.examine(stream: $0, serverPort: serverPort) }) {
            case .recognized(let recognition):
                // A proxy request names where it goes: reported, and judged by it where the policy allows proxies.
                return decideNow(FlowFindings(kind: FlowKind(recognition.kind), wireName: recognition.target.map { Array($0.host.lowercased().utf8) }))
            case .needMoreData:
                // An HTTP head may still decide first; the recognizers look again at the next bytes.
                break
            case .notRecognized:
                progress.tunnelRuledOut = true
            }
        }
        if !progress.httpRuledOut {
            // The head can only complete with a new line feed; skip the parse until one arrives.
            let scanned = progress.httpScannedCount
            let sawLineFeed = progress.peek.withContiguousPrefix { prefix in
                prefix.contains(0x0A, in: scanned..<prefix.count)
            }
            let methodUnknown = scanned < 16  // the method is checked on the first bytes
            progress.httpScannedCount = available
            guard sawLineFeed || methodUnknown else { return .awaitMoreData }
            let outcome = progress.peek.withContiguousPrefix { HTTPRequestHeadParser.parse($0, maximumHeadLength: bound) }
            switch outcome {
            case .request(let head):
                let path = head.path.map { String(decoding: $0, as: UTF8.self) }
                return decideNow(FlowFindings(kind: .http, wireName: head.host, path: path))
            case .needMoreData:
                return .awaitMoreData
            case .malformed:
                return decideNow(FlowFindings(kind: .http))
            case .notHTTP:
                progress.httpRuledOut = true
            }
        }
        // Neither TLS nor HTTP: no name will come from this stream, and
        // once the tunnel recognizers have ruled it out too, it is judged as nameless.
        return progress.tunnelRuledOut ? decideNow(.nothing) : .awaitMoreData
    }

    // MARK: QUIC

    private mutating func advance(_ progress: inout QUICProgress, payload: Span<UInt8>) -> FlowStep {
        if progress.googleQUIC != nil || (progress.clientDatagrams == 0 && GoogleQUICParser.version(ofClientDatagram: payload) != nil) {
            return advanceGoogleQUIC(&progress, payload: payload)
        }
        guard !payload.isEmpty, payload[0] & 0x80 != 0 else {
            // A short-header packet: the handshake is over (or this is no QUIC), no Initial will follow.
            return decideNow(FlowFindings(kind: progress.clientDatagrams > 0 ? .quic : .none))
        }
        progress.clientDatagrams += 1
        let outcome = progress.assembler.add(datagram: payload)
        if case .packets(let summary) = outcome, !summary.initials.isEmpty {
            switch progress.assembler.clientHello() {
            case .clientHello(let info):
                return decideNow(FlowFindings(kind: Self.quicKind(alpnProtocols: info.alpnProtocols), wireName: info.serverName,
                                              encryptedClientHello: info.hasEncryptedClientHello))
            case .needMoreData(let total):
                if let total, total > progress.limits.quicCryptoBound { return decideNow(FlowFindings(kind: .quic)) }
            case .notTLS, .malformed, .tooLarge:
                return decideNow(FlowFindings(kind: .quic))
            }
        }
        // A version hallpass has no keys for, and not one reserved for greasing
        // version negotiation (0x?a?a?a?a, RFC 9000 section 15): this flow will
        // never show a name, so it is judged now.
        if payload.count >= 5 {
            let version = UInt32(payload[1]) << 24 | UInt32(payload[2]) << 16 | UInt32(payload[3]) << 8 | UInt32(payload[4])
            if version != 0, version & 0x0f0f_0f0f != 0x0a0a_0a0a, QUICInitialParser.initialParameters(for: version) == nil {
                return decideNow(FlowFindings(kind: .quic))
            }
        }
        // Version negotiation, greased versions, Retry, undecryptable
        // packets: the client may still send an Initial we can open, so wait, within a bound.
        if progress.clientDatagrams >= progress.limits.quicDatagramBound {
            return decideNow(FlowFindings(kind: .quic))
        }
        return .awaitMoreData
    }

    /// Chrome's old QUIC (Q024-Q043, Q046, Q050, T050, T051): the CHLO or
    /// ClientHello from the handshake stream, read from offset 0 as the server
    /// reads it. A version it cannot read, or a handshake that does not come
    /// within the datagram bound, is judged without a name (`unreadableQUIC`).
    private mutating func advanceGoogleQUIC(_ progress: inout QUICProgress, payload: Span<UInt8>) -> FlowStep {
        progress.clientDatagrams += 1
        // Moved out while it grows, so its buffer is not copied on write.
        var handshake = progress.googleQUIC.take() ?? GoogleQUICHandshake(capacity: progress.limits.quicCryptoBound)
        let outcome = handshake.add(datagram: payload)
        progress.googleQUIC = handshake
        switch outcome {
        case .hello(let hello):
            return decideNow(FlowFindings(kind: Self.quicKind(alpnProtocols: hello.alpnProtocols), wireName: hello.serverName,
                                          encryptedClientHello: hello.encryptedClientHello))
        case .needMoreData:
            return progress.clientDatagrams >= progress.limits.quicDatagramBound ? decideNow(FlowFindings(kind: .quic)) : .awaitMoreData
        case .notGoogleQUIC, .unreadableVersion, .malformed:
            return decideNow(FlowFindings(kind: .quic))
        }
    }

    /// `doq` when the ClientHello's ALPN asks for DNS over QUIC (RFC 9250), on any port.
    private static func quicKind(alpnProtocols: [[UInt8]]) -> FlowKind {
        guard !alpnProtocols.isEmpty, let recognition = TunnelRecognizer.encryptedDNS(alpnProtocols: alpnProtocols, quic: true) else { return .quic }
        return FlowKind(recognition.kind)
    }

    // MARK: Helpers

    private func decideNow(_ findings: FlowFindings) -> FlowStep {
        .decide(findings)
    }
}

/// The heap storage of a DNS flow's `QueryLog`, changed only while one
/// machine holds it (`FlowStateMachine.updateQueryLog` copies it first otherwise).
final class QueryLogStorage: @unchecked Sendable {
    // @unchecked Sendable: mutated only when uniquely referenced (copy on write).
    var log: FlowStateMachine.QueryLog

    init(_ log: FlowStateMachine.QueryLog = .init()) {
        self.log = log
    }
}
