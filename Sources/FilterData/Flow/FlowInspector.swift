// The per-packet logic of the data path, pure: bytes of one queued IP packet
// in, a verdict with its reason and the flow's facts out. No I/O, no clock
// (time is passed in), no logging; filter-data's NFQUEUE loop and
// `filterctl replay` both run packets through this one type.
//
// Packet rules, in order:
// 1. Bytes that do not parse as an IPv4/IPv6 packet, packets of protocols
//    other than TCP and UDP, and IP fragments are accepted and counted,
//    never tracked. The kernel rules queue only TCP and UDP; the kernel has
//    already refused truly broken IP headers, and connection tracking
//    reassembles fragments before the queue, so such a packet is an anomaly
//    to count, not a flow to judge.
// 2. A packet of a known flow (either direction) goes to that flow's state
//    machine. A decided flow answers with its stored decision: a late packet
//    never overturns it.
// 3. A packet of an unknown flow starts one. The client side is the sender
//    of a TCP SYN without ACK, the receiver of a SYN-ACK, the sender of a DNS
//    query (the receiver of a DNS response), otherwise the sender of the
//    first packet seen (a flow picked up mid-stream).
// 4. TCP: client bytes are reassembled (StreamPeek, bounded) and read as a
//    TLS ClientHello, else an HTTP request head (port 53: a DNS message).
//    UDP port 53: each query is judged by its question (per packet, never
//    cached as the flow's decision). UDP starting with a QUIC long header:
//    client Initials are decrypted and their CRYPTO frames reassembled until
//    the ClientHello is complete. Other UDP: judged at once, without a name.

import HallpassWire
public import HallpassIPC
public import VerdictCore

/// Settings of a `FlowInspector`. Every field has a default.
public struct FlowInspectorSettings: Sendable, Hashable {
    public var table: FlowTableSettings
    public var limits: FlowLimits
    /// Flows in stage `.inspecting` (holding reassembly buffers) at most; when
    /// a new one would exceed it, the least recently used one is judged on
    /// what it showed so far (as if it had reached its peek bound).
    /// Buffers grow as bytes arrive (a ClientHello needs 1 to 2 KiB); 1,024
    /// flows each holding a full 16 KiB peek and its bitmap would be about
    /// 18 MiB; with the most large hellos (`maximumLargeHelloFlows`, 90 KiB
    /// each) about 23 MiB, the most a hostile program on the machine can make
    /// filter-data hold this way.
    public var maximumInspectingFlows: Int
    /// Of those, flows reading a ClientHello larger than the peek bound
    /// whole (up to 80 KiB and a 10 KiB bitmap each), at most; one more is
    /// judged at once as a hello not read (`oversizedHello`). No browser sends
    /// such a hello, so the bound costs only programs that pad theirs: 64
    /// of them hold under 6 MiB.
    public var maximumLargeHelloFlows: Int
    /// UDP and TCP ports whose traffic is DNS.
    public var dnsPort: UInt16
    /// Expired entries removed, at most, each time a flow is created.
    public var expirySweepPerNewFlow: Int

    public init(
        table: FlowTableSettings = FlowTableSettings(),
        limits: FlowLimits = FlowLimits(),
        maximumInspectingFlows: Int = 1_024,
        maximumLargeHelloFlows: Int = 64,
        dnsPort: UInt16 = 53,
        expirySweepPerNewFlow: Int = 8
    ) {
        self.table = table
        self.limits = limits
        self.maximumInspectingFlows = maximumInspectingFlows
        self.maximumLargeHelloFlows = maximumLargeHelloFlows
        self.dnsPort = dnsPort
        self.expirySweepPerNewFlow = expirySweepPerNewFlow
    }
}

/// Counts of what the inspector saw. Plain numbers, cheap to copy and report.
public struct InspectorCounters: Sendable, Hashable {
    /// Every packet given to `inspect`.
    public var packets: UInt64 = 0
    /// Packets that are not IPv4/IPv6 with a readable header (accepted).
    public var parseErrors: UInt64 = 0
    /// IP packets that are neither TCP nor UDP, or are fragments (accepted, not tracked).
    public var untrackedPackets: UInt64 = 0
    /// Flows entered into the table.
    public var flowsCreated: UInt64 = 0
    /// Packets by verdict.
    public var allowed: UInt64 = 0
    public var dropped: UInt64 = 0
    public var neededRules: UInt64 = 0
    public var neededMoreData: UInt64 = 0
    /// First final decisions of flows (allow or drop).
    public var flowDecisions: UInt64 = 0
    /// Packets of decided flows answered with the stored decision.
    public var repeatedDecisions: UInt64 = 0
    /// DNS queries judged one by one.
    public var queryDecisions: UInt64 = 0
    /// Flows that left the table after their idle timeout.
    public var expirations: UInt64 = 0
    /// Flows evicted because the table was full.
    public var evictions: UInt64 = 0
    /// Decided TCP flows forgotten once the packets queued before their verdict were in (`forgetDecided`).
    public var decidedForgotten: UInt64 = 0
    /// Decided TCP flows forgotten because a SYN opened a new connection on their addresses and ports.
    public var reopenedFlows: UInt64 = 0
    /// Decided UDP flows judged again because a QUIC connection's first Initial came on their ports.
    public var reopenedQUICFlows: UInt64 = 0
    /// Flows judged before showing a name because too many flows held buffers.
    public var inspectionsCutShort: UInt64 = 0

    public init() {}

    mutating func count(_ verdict: Verdict) {
        switch verdict {
        case .allow: allowed += 1
        case .drop: dropped += 1
        case .needRules: neededRules += 1
        case .needMoreData: neededMoreData += 1
        }
    }
}

/// What the inspector concluded about one packet.
public struct Inspection: Sendable {
    /// How this packet relates to the flow's decision.
    public enum Finality: Sendable, Hashable {
        /// No final decision yet (needMoreData, or needRules: hold the packet).
        case undecided
        /// The flow's first final decision: mark the connection.
        case firstDecision
        /// A later packet of a decided flow: the stored decision, unchanged.
        case repeatedDecision
        /// A decision for this packet only (a DNS query): do not mark the connection.
        case packetDecision
        /// The packet belongs to no flow (not TCP/UDP, a fragment, unreadable).
        case untracked
    }

    public enum Direction: Sendable, Hashable {
        case clientToServer, serverToClient
    }

    /// The flow's 5-tuple in the client's direction; nil for untracked packets.
    public var flow: FlowKey?
    public var direction: Direction
    /// True for the packet that created the flow's table entry.
    public var createdFlow: Bool
    public var finality: Finality
    public var decision: Decision
    /// The facts the decision was made on (for undecided flows, what is known so far).
    public var facts: FlowFacts
    public var findings: FlowFindings

    /// The verdict for this packet.
    public var verdict: Verdict { decision.verdict }
    public var kind: FlowKind { findings.kind }

    /// The category of the refusal of an inspected name seen outside the
    /// redirect (`FlowInspector.outsideRedirect`); its rule is the address.
    public static let outsideRedirectCategory = "outside-redirect"

    /// Whether this is the first decision of a connection refused because
    /// it showed an inspected name outside the redirect: its destination
    /// goes into the inspection sets, so the next try reaches the proxy.
    public var selectsDestinationForInspection: Bool {
        finality == .firstDecision && decision.verdict == .drop && decision.reason.source == .inspectBlock
            && decision.reason.category == Self.outsideRedirectCategory
    }
}

/// Runs packets through flows and decides them against a `VerdictEngine`.
public struct FlowInspector<Rules: RuleSource>: Sendable {
    /// One engine per audience: a flow is judged with its user's policy.
    public private(set) var engines: PolicyEngines<Rules>
    /// The engine of people in no group; the machine's own settings (DNS
    /// rewriting) are the same in every engine.
    public var engine: VerdictEngine<Rules> { engines.fallback }
    public let settings: FlowInspectorSettings
    public private(set) var table: FlowTable<FlowStateMachine>
    private var tally = InspectorCounters()

    /// What the inspector has seen so far.
    public var counters: InspectorCounters {
        var result = tally
        result.expirations = table.expiredCount
        result.evictions = table.evictedCount
        return result
    }

    /// The answer for packets outside any flow (rule 1 above).
    public static var untrackedDecision: Decision { Decision(.allow, Reason(source: .noName)) }

    public init(engines: PolicyEngines<Rules>, settings: FlowInspectorSettings = FlowInspectorSettings()) {
        self.engines = engines
        self.settings = settings
        self.table = FlowTable(settings: settings.table)
    }

    /// One policy for everyone.
    public init(engine: VerdictEngine<Rules>, settings: FlowInspectorSettings = FlowInspectorSettings()) {
        self.init(engines: PolicyEngines(single: engine), settings: settings)
    }

    // MARK: Packets

    /// Inspects one IP packet (starting at the IP header), as NFQUEUE hands it
    /// over, with the socket's uid/gid when the kernel reported them and the
    /// current monotonic time in nanoseconds.
    public mutating func inspect(_ packet: Span<UInt8>, uid: UInt32?, gid: UInt32?, now: UInt64) -> Inspection {
        tally.packets += 1
        let parsed: IPPacket
        do {
            parsed = try IPPacketParser.parse(packet)
        } catch {
            tally.parseErrors += 1
            return untracked()
        }
        guard parsed.fragmentation == .unfragmented, let key = parsed.flowKey,
              parsed.protocolNumber == 6 || parsed.protocolNumber == 17 else {
            tally.untrackedPackets += 1
            return untracked()
        }
        let payload = packet.extracting(parsed.payload)
        let result = parsed.protocolNumber == 6
            ? inspectTCP(key, parsed.tcp!, payload, uid: uid, gid: gid, now: now)
            : inspectUDP(key, payload, uid: uid, gid: gid, now: now)
        tally.count(result.verdict)
        return result
    }

    /// Convenience for an array or a capture record's slice.
    public mutating func inspect(_ packet: ArraySlice<UInt8>, uid: UInt32? = nil, gid: UInt32? = nil, now: UInt64) -> Inspection {
        inspect(packet.span, uid: uid, gid: gid, now: now)
    }

    /// Convenience for an array.
    public mutating func inspect(_ packet: [UInt8], uid: UInt32? = nil, gid: UInt32? = nil, now: UInt64) -> Inspection {
        inspect(packet.span, uid: uid, gid: gid, now: now)
    }

    // MARK: Rules

    /// Uses new rules (or a new policy) for every decision from now on.
    /// Decided flows keep their decisions; flows waiting for rules are
    /// decided again by `resolve(flow:now:)` or `resolveWaitingFlows(now:)`.
    public mutating func replaceEngines(_ engines: PolicyEngines<Rules>) {
        self.engines = engines
    }

    /// One policy for everyone from now on.
    public mutating func replaceEngine(_ engine: VerdictEngine<Rules>) {
        replaceEngines(PolicyEngines(single: engine))
    }

    /// filter-control placed `uid` in `audience`: flows of that user waiting
    /// for it are decided by `resolve(flow:uid:now:)`.
    public mutating func place(uid: UInt32, in audience: Audience) {
        engines.place(uid: uid, in: audience)
    }

    /// Records filter-control's answer to a needRules question. Waiting
    /// flows are not decided here: call `resolve(flow:now:)` for them.
    public mutating func recordAnswer(_ answer: LookupAnswers.Answer, for host: HostName) {
        engines.recordAnswer(answer, for: host)
    }

    /// Forgets answers whose time to live has passed.
    @discardableResult
    public mutating func removeExpiredAnswers(now: UInt64) -> Int {
        engines.removeExpiredAnswers(now: now)
    }

    /// Gives a flow that waits for rules this decision, without asking the
    /// engine (no answer in time: `policy.askDefault`). Nil when the flow is
    /// unknown or not waiting.
    public mutating func settle(flow key: FlowKey, with decision: Decision, uid: UInt32? = nil, now: UInt64) -> Inspection? {
        guard let slot = table.find(key, now: now) else { return nil }
        guard let step = table[slot].rulesChanged(), case .decide(let findings) = step else { return nil }
        let facts = makeFacts(findings, key: key, uid: uid, gid: nil)
        return conclude(slot, key, findings, facts: facts, direction: .clientToServer, created: false, decision: decision)
    }

    /// Decides a flow that waits for rules (or a DNS flow holding a query)
    /// again with the current engines, as a flow of `uid`. Nil when the flow
    /// is unknown or not waiting.
    public mutating func resolve(flow key: FlowKey, uid: UInt32? = nil, now: UInt64) -> Inspection? {
        guard let slot = table.find(key, now: now) else { return nil }
        guard let step = table[slot].rulesChanged(), case .decide(let findings) = step else { return nil }
        let facts = makeFacts(findings, key: key, uid: uid, gid: nil)
        return conclude(slot, key, findings, facts: facts, direction: .clientToServer, created: false)
    }

    /// `resolve(flow:now:)` for every flow waiting for rules.
    public mutating func resolveWaitingFlows(now: UInt64) -> [Inspection] {
        let waiting = table.slotsByRecency.filter { table.stage(of: $0) == .waitingForRules }.map { table.key(of: $0) }
        return waiting.compactMap { resolve(flow: $0, now: now) }
    }

    /// Forgets flows idle past their timeouts (looking at `limit` entries at most).
    @discardableResult
    public mutating func removeExpiredFlows(now: UInt64, limit: Int = .max) -> Int {
        table.removeExpired(now: now, limit: limit)
    }

    /// Forgets these TCP flows if they are still decided (a new flow on the same
    /// key, still being inspected, stays). Returns how many went.
    @discardableResult
    public mutating func forgetDecided(_ keys: some Sequence<FlowKey>) -> Int {
        var forgotten = 0
        for key in keys {
            guard let slot = table.slot(for: key), table.stage(of: slot) == .decided else { continue }
            _ = table.remove(slot)
            forgotten += 1
        }
        tally.decidedForgotten += UInt64(forgotten)
        return forgotten
    }

    /// Judges every flow still gathering bytes on what it has shown (the end
    /// of a capture, or shutdown). Returns their inspections.
    public mutating func finishInspections(now: UInt64) -> [Inspection] {
        let inspecting = table.slotsByRecency.filter { table.stage(of: $0).holdsBuffers }
        return inspecting.compactMap { slot in
            guard case .decide(let findings)? = table[slot].stopInspecting() else { return nil }
            let key = table.key(of: slot)
            return conclude(slot, key, findings, facts: makeFacts(findings, key: key, uid: nil, gid: nil),
                            direction: .clientToServer, created: false)
        }
    }

    // MARK: TCP

    private mutating func inspectTCP(_ packetKey: FlowKey, _ header: TCPSegmentHeader, _ payload: Span<UInt8>,
                                     uid: UInt32?, gid: UInt32?, now: UInt64) -> Inspection {
        var existing = table.find(packetKey, now: now)
        if let slot = existing, packetKey.destinationPort == settings.dnsPort, !payload.isEmpty,
            table.stage(of: slot) == .decided || !table[slot].continuesStream(at: header.sequenceNumber)
        {
            // DNS over TCP: each write of queries is judged (the kernel queues them all), not
            // only the first: the decision of one query is not another's. A write that does
            // not continue what the flow holds (the flow began at an old segment sent again)
            // starts the flow afresh: a client writes whole queries, so it starts one.
            _ = table.remove(slot)
            existing = nil
        }
        if let slot = existing, header.flags.contains(.syn), !header.flags.contains(.ack), table.stage(of: slot) == .decided {
            // A new connection from the same port to the same place as a decided one
            // (the kernel queues such SYNs and clears the old connection's decision:
            // KernelRules). Judged afresh: the old decision is not the new connection's.
            _ = table.remove(slot)
            existing = nil
            tally.reopenedFlows += 1
        }
        if let slot = existing {
            let step = clientSegment(slot, header, payload)
            return finish(step, slot, packetKey, direction: .clientToServer, uid: uid, gid: gid, created: false)
        }
        let reversedKey = packetKey.reversed
        if let slot = table.find(reversedKey, now: now) {
            let step = table[slot].serverPacket()
            return finish(step, slot, reversedKey, direction: .serverToClient, uid: uid, gid: gid, created: false)
        }
        // A new flow. A SYN-ACK means the client is the receiver.
        let isSynAck = header.flags.contains(.syn) && header.flags.contains(.ack)
        let clientKey = isSynAck ? reversedKey : packetKey
        let carriesDNS = clientKey.destinationPort == settings.dnsPort
        let slot = create(
            clientKey, FlowStateMachine.tcp(limits: settings.limits, carriesDNS: carriesDNS, serverPort: clientKey.destinationPort), now: now)
        if isSynAck {
            let step = table[slot].serverPacket()
            return finish(step, slot, clientKey, direction: .serverToClient, uid: uid, gid: gid, created: true)
        }
        let step = clientSegment(slot, header, payload)
        return finish(step, slot, clientKey, direction: .clientToServer, uid: uid, gid: gid, created: true)
    }

    /// A client segment of a TCP flow. A flow whose peek grew with it, to read
    /// a large ClientHello whole, moves to stage `.inspectingLargeHello`;
    /// when `maximumLargeHelloFlows` flows read one already, it is judged now
    /// instead, as a hello not read (`oversizedHello`).
    private mutating func clientSegment(_ slot: FlowSlot, _ header: TCPSegmentHeader, _ payload: Span<UInt8>) -> FlowStep {
        let step = table[slot].clientSegment(header, payload: payload)
        guard case .awaitMoreData = step, table.stage(of: slot) == .inspecting, table[slot].stage == .inspectingLargeHello else { return step }
        if table.largeHelloCount >= settings.maximumLargeHelloFlows {
            tally.inspectionsCutShort += 1
            return table[slot].stopInspecting() ?? step
        }
        table.setStage(slot, .inspectingLargeHello)
        return step
    }

    // MARK: UDP

    private mutating func inspectUDP(_ packetKey: FlowKey, _ payload: Span<UInt8>,
                                     uid: UInt32?, gid: UInt32?, now: UInt64) -> Inspection {
        let isDNS = packetKey.sourcePort == settings.dnsPort || packetKey.destinationPort == settings.dnsPort
        var message: DNSMessage? = nil
        if isDNS, case .success(let parsed) = DNSMessageParser.parse(payload) { message = parsed }

        var existing = table.find(packetKey, now: now)
        if let slot = existing, !isDNS, table.stage(of: slot) == .decided, FlowInspector.startsQUICConnection(payload) {
            // The start of a QUIC connection's ClientHello on a decided flow: a new connection
            // from the same port (the kernel queues client Initials of decided connections and
            // clears the old decision: KernelRules), or the client's first Initial sent again
            // before the server answered. Judged afresh on its ClientHello either way: the old
            // decision (of another connection, or of a datagram that showed no name) is not
            // this connection's. Later Initials of a connection carry ACKs, not the ClientHello.
            _ = table.remove(slot)
            existing = nil
            tally.reopenedQUICFlows += 1
        }
        if let slot = existing {
            let step = udpStep(slot, fromClient: true, isDNS: isDNS, message: message, payload: payload)
            return finish(step, slot, packetKey, direction: .clientToServer, uid: uid, gid: gid, created: false)
        }
        let reversedKey = packetKey.reversed
        if let slot = table.find(reversedKey, now: now) {
            let step = udpStep(slot, fromClient: false, isDNS: isDNS, message: message, payload: payload)
            return finish(step, slot, reversedKey, direction: .serverToClient, uid: uid, gid: gid, created: false)
        }

        // A new flow.
        if isDNS {
            // The client sends queries; when the message cannot be read, the side that is not port 53.
            let senderIsClient: Bool
            if let message {
                senderIsClient = !message.header.isResponse
            } else {
                senderIsClient = packetKey.destinationPort == settings.dnsPort
            }
            let clientKey = senderIsClient ? packetKey : reversedKey
            let slot = create(clientKey, FlowStateMachine.dns(), now: now)
            let step = udpStep(slot, fromClient: senderIsClient, isDNS: true, message: message, payload: payload)
            return finish(step, slot, clientKey, direction: senderIsClient ? .clientToServer : .serverToClient,
                          uid: uid, gid: gid, created: true)
        }
        // WireGuard, OpenVPN and IKE show themselves in their first datagram (IKE's
        // SPI may start with the bit a QUIC long header sets, so this comes first).
        let machine: FlowStateMachine
        if case .recognized(let recognition) = TunnelRecognizer.examine(datagram: payload, serverPort: packetKey.destinationPort) {
            machine = FlowStateMachine.recognized(recognition.kind)
        } else if !payload.isEmpty && payload[0] & 0x80 != 0 || GoogleQUICParser.version(ofClientDatagram: payload) != nil {
            // An IETF QUIC long header, or Google QUIC (also its public header, Q043 and earlier).
            machine = FlowStateMachine.quic(limits: settings.limits)
        } else {
            machine = FlowStateMachine.nameless()
        }
        let slot = create(packetKey, machine, now: now)
        let step = table[slot].clientDatagram(payload)
        return finish(step, slot, packetKey, direction: .clientToServer, uid: uid, gid: gid, created: true)
    }

    /// Whether a client datagram carries the start of a QUIC connection's
    /// handshake: an IETF QUIC Initial that opens with the keys of its own
    /// Destination Connection ID (RFC 9001 section 5.2) and holds a CRYPTO
    /// frame at offset 0, or Google QUIC with a handshake piece at offset 0.
    static func startsQUICConnection(_ payload: Span<UInt8>) -> Bool {
        guard payload.count >= 5 else { return false }
        if GoogleQUICParser.version(ofClientDatagram: payload) != nil {
            if case .handshake(_, let pieces, _) = GoogleQUICParser.parse(datagram: payload) { return pieces.contains { $0.offset == 0 } }
            return false
        }
        guard payload[0] & 0x80 != 0 else { return false }
        guard case .packets(let summary) = QUICInitialParser.parse(datagram: payload) else { return false }
        return summary.initials.contains { packet in packet.cryptoFrames.contains { $0.offset == 0 } }
    }

    private mutating func udpStep(_ slot: FlowSlot, fromClient: Bool, isDNS: Bool, message: DNSMessage?,
                                  payload: Span<UInt8>) -> FlowStep {
        if case .judgingQueries = table[slot].state {
            // A query from the client is judged by its question; anything else is a response.
            if fromClient, message.map({ !$0.header.isResponse }) ?? true {
                let name = message?.question.flatMap { $0.name.isEmpty ? nil : $0.name }
                return table[slot].dnsQuery(name, type: message?.question?.type ?? 0)
            }
            return table[slot].serverPacket()
        }
        return fromClient ? table[slot].clientDatagram(payload) : table[slot].serverPacket()
    }

    // MARK: Flow bookkeeping

    private mutating func create(_ key: FlowKey, _ machine: FlowStateMachine, now: UInt64) -> FlowSlot {
        if settings.expirySweepPerNewFlow > 0 {
            removeExpiredFlows(now: now, limit: settings.expirySweepPerNewFlow)
        }
        if machine.stage.holdsBuffers {
            while table.inspectingCount >= max(1, settings.maximumInspectingFlows),
                  let victim = table.leastRecentlyUsedInspecting {
                cutShort(victim)
            }
        }
        tally.flowsCreated += 1
        return table.insert(key, machine, stage: machine.stage, now: now)
    }

    /// Judges an inspecting flow on what it showed, to free its buffers.
    private mutating func cutShort(_ slot: FlowSlot) {
        tally.inspectionsCutShort += 1
        let key = table.key(of: slot)
        guard case .decide(let findings)? = table[slot].stopInspecting() else {
            table.setStage(slot, table[slot].stage)
            return
        }
        _ = conclude(slot, key, findings, facts: makeFacts(findings, key: key, uid: nil, gid: nil),
                     direction: .clientToServer, created: false)
    }

    private mutating func finish(_ step: FlowStep, _ slot: FlowSlot, _ key: FlowKey, direction: Inspection.Direction,
                                 uid: UInt32?, gid: UInt32?, created: Bool) -> Inspection {
        switch step {
        case .repeatDecision(let decided):
            let isQuery: Bool
            if case .judgingQueries = table[slot].state { isQuery = true } else { isQuery = false }
            if !isQuery { tally.repeatedDecisions += 1 }
            let findings = FlowFindings(kind: decided.kind)
            return Inspection(flow: key, direction: direction, createdFlow: created,
                              finality: isQuery ? .packetDecision : .repeatedDecision,
                              decision: decided.decision, facts: makeFacts(findings, key: key, uid: uid, gid: gid), findings: findings)
        case .awaitMoreData:
            let findings = table[slot].findings
            var facts = makeFacts(findings, key: key, uid: uid, gid: gid)
            facts.mayRevealName = true
            let decision = engines.decide(facts)
            // A way around the filter the policy blocks before any name (`bypass.quic: block`): decided now.
            if decision.verdict == .drop, decision.reason.source == .bypass {
                return conclude(slot, key, findings, facts: facts, direction: direction, created: created, decision: decision)
            }
            return Inspection(flow: key, direction: direction, createdFlow: created, finality: .undecided,
                              decision: decision, facts: facts, findings: findings)
        case .holdForRules(let findings):
            let facts = makeFacts(findings, key: key, uid: uid, gid: gid)
            return Inspection(flow: key, direction: direction, createdFlow: created, finality: .undecided,
                              decision: Decision(.needRules, Reason(source: .unknownHost)), facts: facts, findings: findings)
        case .decide(let findings):
            let facts = makeFacts(findings, key: key, uid: uid, gid: gid)
            if findings.kind == .dns, key.protocolNumber == 6 {
                let (judged, judgedFacts, decision) = judgeTCPQueries(findings, facts: facts, key: key, uid: uid, gid: gid)
                return conclude(slot, key, judged, facts: judgedFacts, direction: direction, created: created, decision: decision)
            }
            return conclude(slot, key, findings, facts: facts, direction: direction, created: created)
        }
    }

    /// DNS over TCP: every query of the write is judged, the first refused one
    /// decides. Its answers pass unchanged (filter-data rewrites UDP answers
    /// only), so a query whose answer the policy would change is refused
    /// instead: an HTTPS or SVCB query with `bypass.ech: block` (its answer
    /// could carry an ECH key), a name SafeSearch covers once the enforcement
    /// host's addresses are known (as over UDP). A query is not held for a
    /// lookup (`unknown: ask`): the other queries of its connection would wait
    /// unread behind it; it gets `askDefault` at once. Bytes after the queries
    /// that are no DNS query are a tunnel on port 53 (`bypass.tunnels`).
    private func judgeTCPQueries(_ findings: FlowFindings, facts: FlowFacts, key: FlowKey, uid: UInt32?, gid: UInt32?)
        -> (FlowFindings, FlowFacts, Decision)
    {
        let engine = engines.engine(for: uid) ?? engines.fallback
        let policy = engine.policy
        var queries = findings.moreQueries
        if findings.wireName != nil || !findings.unreadableRest { queries.insert(FlowFindings.DNSQuery(name: findings.wireName, type: findings.dnsType), at: 0) }
        var first: (FlowFindings, FlowFacts, Decision)? = nil
        for query in queries {
            let single = FlowFindings(kind: .dns, wireName: query.name, dnsType: query.type)
            let singleFacts = makeFacts(single, key: key, uid: uid, gid: gid)
            var decision = engines.decide(singleFacts)
            if decision.verdict == .needRules { decision = engine.askDefault(Reason(source: .askTimeout)) }
            if decision.verdict == .allow, let host = singleFacts.host {
                if policy.bypass.ech == .block, query.type == 65 || query.type == 64 {
                    decision = Decision(.drop, Reason(source: .bypass, category: "ech", rule: "https-record-over-tcp"))
                } else if let safe = SafeSearch.engine(for: host, among: policy.bypass.safeSearch), engines.set.safeSearchTargets[safe] != nil {
                    decision = Decision(.drop, Reason(source: .bypass, category: "safeSearch", rule: safe.enforcementHost))
                }
            }
            if first == nil { first = (single, singleFacts, decision) }
            if decision.verdict == .drop { return (single, singleFacts, decision) }
        }
        if findings.unreadableRest {
            let unread = Decision(.drop, Reason(source: .bypass, category: "tunnels", rule: "unreadable-dns-over-tcp"))
            if policy.bypass.tunnels == .block { return (first?.0 ?? findings, first?.1 ?? facts, unread) }
            // Tunnels allowed: what cannot be read is judged as nameless, after the queries that could.
            let nameless = engines.decide(makeFacts(FlowFindings(kind: .dns), key: key, uid: uid, gid: gid))
            if nameless.verdict == .drop { return (findings, facts, nameless) }
        }
        return first ?? (findings, facts, engines.decide(facts))
    }

    /// Asks the engine, records the answer in the flow, and reports it.
    private mutating func conclude(_ slot: FlowSlot, _ key: FlowKey, _ findings: FlowFindings, facts: FlowFacts,
                                   direction: Inspection.Direction, created: Bool, decision given: Decision? = nil) -> Inspection {
        var decision = given ?? engines.decide(facts)
        if decision.verdict == .allow, engines.inspectsAnything, Self.outsideRedirect(findings, key: key, host: facts.host, engines: engines) {
            decision = Decision(.drop, Reason(source: .inspectBlock, category: Inspection.outsideRedirectCategory, rule: key.destination.description))
        }
        var findings = findings
        // A flow to a Tor relay is of that kind, whatever its ClientHello looked like.
        if decision.reason.source == .bypass, decision.reason.rule == BypassKind.tor.rawValue { findings.kind = .tor }
        let wasQueries: Bool
        if case .judgingQueries = table[slot].state { wasQueries = true } else { wasQueries = false }
        let stage = table[slot].apply(decision, findings: findings, facts: facts)
        table.setStage(slot, stage)
        let finality: Inspection.Finality
        switch decision.verdict {
        case .allow, .drop:
            if wasQueries {
                tally.queryDecisions += 1
                finality = .packetDecision
            } else {
                tally.flowDecisions += 1
                finality = .firstDecision
            }
        case .needRules, .needMoreData:
            finality = .undecided
        }
        return Inspection(flow: key, direction: direction, createdFlow: created, finality: finality,
                          decision: decision, facts: facts, findings: findings)
    }

    /// Whether a TLS or QUIC connection to port 443 shows a name some
    /// audience inspects while it goes to the server itself: the kernel
    /// redirects a connection to a selected address to the proxy before it
    /// is queued, so one that reaches filter-data with any other destination
    /// than the machine's own (the proxy's listener) went to an address the
    /// sets do not hold (a hard-coded address, an answer filter-data never
    /// saw, a connection that raced its own answer). Such a connection is
    /// refused (a reset; a QUIC datagram dropped) and its address selected
    /// (`DataPath`), so the program's next try reaches the proxy.
    static func outsideRedirect(_ findings: FlowFindings, key: FlowKey, host: HostName?, engines: PolicyEngines<Rules>) -> Bool {
        guard findings.kind == .tls || findings.kind == .quic, key.destinationPort == 443, let host, !key.destination.isLoopback else { return false }
        return engines.inspectedForSomeone(host)
    }

    private func makeFacts(_ findings: FlowFindings, key: FlowKey, uid: UInt32?, gid: UInt32?) -> FlowFacts {
        FlowFacts(
            host: findings.host,
            nameSource: findings.host == nil ? nil : findings.kind.nameSource,
            path: findings.path,
            destination: key.destination,
            destinationPort: key.destinationPort,
            transport: key.protocolNumber == 6 ? .tcp : .udp,
            uid: uid,
            gid: gid,
            encryptedClientHello: findings.encryptedClientHello,
            mayRevealName: false,
            bypass: findings.kind.bypass,
            quic: findings.kind == .quic
        )
    }

    private func untracked() -> Inspection {
        Inspection(flow: nil, direction: .clientToServer, createdFlow: false, finality: .untracked,
                   decision: Self.untrackedDecision, facts: FlowFacts(), findings: .nothing)
    }
}
