import HallpassWire
public import HallpassIPC
import CHallpassSys
import HallpassSystem
public import SharedStore
public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

/// Why `DataPath.run` returned.
public enum DataPathStop: Sendable, Hashable {
    /// SIGTERM or SIGINT.
    case signal
    /// filter-control closed the channel (it exited): a new filter-data will be started.
    case controlClosed
}

/// filter-data's packet path, top to bottom: wait for the queue or the
/// control channel; receive a batch, inspect each packet (parse, flow
/// table, facts, decide), queue its verdict, send the batch of verdicts in
/// one write; hold the packets of flows that need rules until
/// filter-control answers or their time runs out; apply control messages
/// (new rules, answers, health checks) between batches, so no packet is
/// judged against half-loaded rules.
///
/// The waiting is `run`'s; everything after a wait is `turn`, which the unit
/// tests call on a queue and a clock of their own. What is held is
/// `HeldPackets`, the reports owed to filter-control `FlowReportBatch`, new
/// engines come from `PolicyEngines.load` (RuleLoading.swift); this class
/// ties them to the queue and the channel. Generic rather than over an
/// existential: filter-data's build specialises it for NetfilterQueueSocket.
public final class DataPath<Queue: PacketQueue, Clock: NanosecondClock> {
    public let queue: Queue
    public let clock: Clock
    public private(set) var inspector: FlowInspector<RuleStore>
    public let marks: FlowMarks
    /// The channel to filter-control; nil when run by hand (needRules then gets `policy.askDefault` at once).
    public let control: DataEnd?
    public private(set) var held: HeldPackets
    /// The DNS message ID of each held query packet (by queue packet ID):
    /// a query decided once its question is answered gets the plan for its
    /// answer (the block page, NXDOMAIN, SafeSearch) as a query judged on
    /// arrival does. As bounded as `held`; an entry goes with its verdict.
    private var heldDNSIDs: [UInt32: UInt16] = [:]
    /// Queries judged on the way out whose answers are changed on the way in.
    public private(set) var answerPlans = DNSAnswerPlans()
    /// What the path counts itself (questions, answers, rule swaps, DNS
    /// rewrites, reports, ...), kept in the pong's own type; `report()`
    /// adds the inspector's, the queue's and the hold's.
    public private(set) var counters = FilterDataCounters()
    private var roundTrips = RoundTripLog(capacity: 1024)
    private var lastSweep: UInt64 = 0
    /// Decisions not reported to filter-control yet.
    public private(set) var reports = FlowReportBatch()
    /// TCP flows decided since their entries were last forgotten (see `forgetDecidedFlows`).
    private var decided: [FlowKey] = []
    /// The sequence numbers of the kernel set requests (`selectForInspection`).
    private var setRequests: UInt32 = 0

    public init(
        queue: Queue, clock: Clock, inspector: FlowInspector<RuleStore>, control: DataEnd? = nil,
        marks: FlowMarks = FlowMarks(), heldPacketCapacity: Int = 1024
    ) {
        self.queue = queue
        self.clock = clock
        self.inspector = inspector
        self.control = control
        self.marks = marks
        self.held = HeldPackets(capacity: heldPacketCapacity)
    }

    // MARK: The loop

    /// Runs until SIGTERM or SIGINT (or the end of filter-control), then
    /// gives every held packet the default, sends the verdicts in hand and returns.
    public func run() throws(QueueSocketError) -> DataPathStop {
        var stop = DataPathStop.signal
        var descriptors = [pollfd(fd: queue.descriptor, events: Int16(POLLIN), revents: 0)]
        if let control { descriptors.append(pollfd(fd: control.descriptor.rawValue, events: Int16(POLLIN), revents: 0)) }
        while hp_stop_requested() == 0 {
            let timeout = pollTimeout()
            for index in descriptors.indices { descriptors[index].revents = 0 }
            // nil: a signal interrupted the wait (SIGTERM: the loop's condition ends it).
            let ready: Int?
            do {
                ready = try Poll.wait(&descriptors, timeoutMilliseconds: timeout)
            } catch {
                throw QueueSocketError(operation: "poll", errno: error.rawValue)
            }
            let anyReady = (ready ?? 0) > 0
            let queueReady = anyReady && descriptors[0].revents != 0
            let controlReady = anyReady && descriptors.count > 1 && descriptors[1].revents != 0
            if let ended = try turn(queueReady: queueReady, controlReady: controlReady, interrupted: ready == nil) {
                stop = ended
                break
            }
        }
        try finish()
        return stop
    }

    /// How long `run` may wait (ms): until the earliest of a held flow's
    /// deadline and the waiting reports' delay, a quarter of a second at
    /// most. Decided flows are forgotten in the turn that decides them,
    /// unless packets kept coming after the verdicts went: then the next
    /// turn comes within a millisecond.
    func pollTimeout() -> Int32 {
        var timeout: Int32 = 250
        var next = held.nextDeadline
        if let due = reports.due { next = min(next ?? .max, due) }
        if let deadline = next {
            let now = clock.nanoseconds()
            timeout = deadline <= now ? 0 : Int32(min(250, (deadline - now) / 1_000_000 + 1))
        }
        if !decided.isEmpty { timeout = min(timeout, 1) }
        return timeout
    }

    /// What follows a wait: reads the queue if it is ready, applies the
    /// control messages if they are, gives expired held flows the default,
    /// sends the verdicts, forgets the flows they decided, sends the reports
    /// that are due and now and then sweeps the tables. `interrupted`: the
    /// wait was cut short by a signal, which says nothing of the queue.
    /// Returns why filtering must stop, nil to go on.
    func turn(queueReady: Bool, controlReady: Bool, interrupted: Bool = false) throws(QueueSocketError) -> DataPathStop? {
        var drained = !interrupted
        if queueReady {
            drained = try readQueue() < Self.readLimit
        }
        if controlReady, !serveControl() { return .controlClosed }
        let now = clock.nanoseconds()
        if !held.isEmpty { settleExpired(now: now) }
        try queue.flushVerdicts()
        if drained, !decided.isEmpty { try forgetDecidedFlows() }
        sendReports(now: now)
        if now &- lastSweep > 1_000_000_000 {
            _ = inspector.removeExpiredFlows(now: now, limit: 4096)
            inspector.removeExpiredAnswers(now: now)
            answerPlans.removeExpired(now: now)
            lastSweep = now
        }
        return nil
    }

    /// Nothing stays held when filter-data stops: every held packet gets its
    /// flow's default, the verdicts in hand go and so does every report.
    /// Packet by packet: settled at the end of time, a flow is found idle past
    /// its timeout, so its connection is not marked and the next filter-data
    /// judges it afresh.
    func finish() throws(QueueSocketError) {
        settleExpired(now: .max)
        try queue.flushVerdicts()
        sendReports(now: clock.nanoseconds(), all: true)
    }

    // MARK: Packets

    /// Packets handled per read of the queue, at most: a read that handles
    /// fewer has emptied it.
    static var readLimit: Int { 64 }

    /// Reads and handles up to `readLimit` queued packets without waiting; returns how many.
    private func readQueue() throws(QueueSocketError) -> Int {
        try queue.receiveReady(limit: Self.readLimit) { packet, bytes in
            handle(packet, bytes, now: clock.nanoseconds())
        }
    }

    private func handle(_ packet: QueuedPacket, _ bytes: Span<UInt8>, now: UInt64) {
        // Only DNS answers come in on the input hook (HALLPASS_IN), and only
        // those of connections whose query asked for it.
        if packet.hook == QueuedPacket.inputHook {
            queue.setVerdict(answer(bytes, now: now), for: packet.id)
            return
        }
        // QUIC Initials come marked too (most are a connection's later ones): counted by the inspector when they start one.
        if packet.mark & marks.reopened != 0, PacketBytes.isTCP(bytes) { counters.reopenedConnections += 1 }
        let inspection = inspector.inspect(bytes, uid: packet.uid, gid: packet.gid, now: now)
        guard inspection.verdict == .needRules, inspection.finality == .undecided, let key = inspection.flow,
            let question = HeldQuestion(for: inspection)
        else {
            var verdict = verdict(for: inspection)
            // A query whose answer is to be changed, or whose addresses go to the
            // inspection proxy, goes on with the mark that brings the answer back.
            let action = DNSAnswerAction(for: inspection, engines: inspector.engines)
            let inspect = inspection.selectsForInspection(engines: inspector.engines)
            if action != nil || inspect {
                verdict = .repeatWithMark(marks.dnsAnswer)
                expectAnswer(to: bytes, inspection, action: action, inspect: inspect, now: now)
            }
            queue.setVerdict(verdict, for: packet.id)
            concluded(inspection, now: now)
            return
        }
        if inspection.kind == .dns, let id = PacketBytes.dnsMessageID(bytes) { heldDNSIDs[packet.id] = id }
        hold(packet.id, of: key, until: question, inspection, now: now)
    }

    /// Forgets the decided TCP flows once the queue, read after their
    /// verdicts were sent, is empty. A decided flow's entry is only there for
    /// packets queued before its verdict saved the decision on the connection
    /// (the verdict's NF_REPEAT saves it within the send): those were all in
    /// the socket when the verdict went, so the read after the send has them,
    /// and they are judged with the entry still there. Kept longer, the entry
    /// would give its decision to a new connection that reuses the addresses
    /// and ports while conntrack starts a fresh entry for it (its SYN is then
    /// not queued). A packet that still comes late is judged as a flow of its
    /// own, and the kernel rules never let that judgement replace the
    /// connection's saved decision.
    ///
    /// Called after a turn read the queue empty and sent its verdicts. The
    /// read here mostly finds nothing, and the flows go in the same turn: no
    /// timer wakes filter-data a millisecond later for them (which cost a
    /// few microseconds per connection at peerbench's rate). A read that
    /// finds packets still empties the queue of what came before the
    /// verdicts sent ahead of it: the flows of those verdicts go, and the
    /// flows the read itself decides wait for the next read, as many as four
    /// in a turn, then for the next turn (within a millisecond). So a busy
    /// queue never keeps a decided flow longer than a read or two.
    private func forgetDecidedFlows() throws(QueueSocketError) {
        // The flows at the front of `decided` whose verdicts have been sent: all of them, after the turn's flush.
        var sent = decided.count
        for _ in 0..<4 {
            let late = try readQueue()
            if late < Self.readLimit, sent > 0 {
                inspector.forgetDecided(decided[..<sent])
                decided.removeFirst(sent)
            }
            try queue.flushVerdicts()
            sent = decided.count
            if late == 0 { return }
            counters.lateReads += 1
        }
    }

    /// A packet or flow judged: reported, and a TCP flow's first decision noted to be forgotten.
    private func concluded(_ inspection: Inspection, now: UInt64) {
        reportDecision(inspection, now: now)
        if inspection.selectsDestinationForInspection, let key = inspection.flow { selectOutsideRedirect(key.destination) }
        guard inspection.finality == .firstDecision, let key = inspection.flow, key.protocolNumber == 6 else { return }
        // Bounded: under a flood the time-based expiry still removes what this list misses.
        if decided.count < 8192 { decided.append(key) }
    }

    /// `policy.askDefault` of `uid`'s policy (no answer in time, too many waiting, or nobody to ask).
    private func askDefault(uid: UInt32?) -> Decision {
        (inspector.engines.engine(for: uid) ?? inspector.engine).askDefault(Reason(source: .askTimeout))
    }

    private func verdict(for inspection: Inspection) -> KernelVerdict {
        KernelVerdict(for: inspection, marks: marks, rewriteDNS: inspector.engine.policy.dnsRewrite != nil)
    }

    // MARK: Held flows

    /// Holds a packet of a flow that needs `question` answered, and asks it
    /// when it is new. Without filter-control, or with `capacity` packets
    /// already held, the flow gets `policy.askDefault` at once.
    private func hold(_ packet: UInt32, of key: FlowKey, until question: HeldQuestion, _ inspection: Inspection, now: UInt64) {
        let uid = inspection.facts.uid
        guard control != nil else {
            // Nobody to ask: the default, at once.
            settle(key, packets: [packet], with: askDefault(uid: uid), uid: uid, now: now)
            return
        }
        switch held.hold(packet: packet, flow: key, question: question, uid: uid, now: now, deadline: deadline(uid: uid, now: now)) {
        case .full:
            counters.holdOverflows += 1
            settle(key, packets: [packet] + held.release(key), with: askDefault(uid: uid), uid: uid, now: now)
        case .held(newQuestion: false):
            break
        case .held(newQuestion: true):
            ask(question, kind: inspection.kind, flow: key, uid: uid, now: now)
        }
    }

    /// When a flow of `uid` held now stops waiting: its policy's `askTimeoutMilliseconds` later.
    private func deadline(uid: UInt32?, now: UInt64) -> UInt64 {
        now &+ UInt64((inspector.engines.engine(for: uid) ?? inspector.engine).policy.askTimeoutMilliseconds) &* 1_000_000
    }

    /// Sends filter-control a question held flows wait for. If it cannot take
    /// it now, the flows waiting for it get the default rather than wait for nothing.
    private func ask(_ question: HeldQuestion, kind: FlowKind, flow key: FlowKey, uid: UInt32?, now: UInt64) {
        guard let control else { return }
        let message: DataEvent
        switch question {
        case .host(let host):
            message = .ask(
                NeedRulesQuestion(host: host, kind: kind.rawValue, destination: key.destination.description, port: key.destinationPort, uid: uid))
        case .user(let uid):
            message = .askUser(uid)
        }
        do {
            try control.send(message)
            counters.questions += 1
        } catch {
            settleWithDefault(waitingFor: question, now: now)
        }
    }

    /// Decides a held flow with `decision` and gives its packets their verdicts.
    private func settle(_ key: FlowKey, packets: [UInt32], with decision: Decision, uid: UInt32?, now: UInt64) {
        if let inspection = inspector.settle(flow: key, with: decision, uid: uid, now: now) {
            concluded(inspection, now: now)
            give(verdict(for: inspection), to: packets, of: key, inspection: inspection, now: now)
        } else {
            // The flow left the table while it waited (idle or evicted): the default, packet by packet.
            give(decision.verdict == .allow ? .accept : .drop, to: packets, of: key, inspection: nil, now: now)
        }
    }

    /// Gives held packets of `key` their verdict; a held DNS query whose
    /// answer is to be changed goes on with the answer mark and its plan.
    private func give(_ verdict: KernelVerdict, to packets: [UInt32], of key: FlowKey, inspection: Inspection?, now: UInt64) {
        for packet in packets {
            if let id = heldDNSIDs.removeValue(forKey: packet), let inspection, let name = inspection.facts.host,
                case let action = DNSAnswerAction(for: inspection, engines: inspector.engines),
                case let inspect = inspection.selectsForInspection(engines: inspector.engines), action != nil || inspect
            {
                answerPlans.expect(.init(flow: key, id: id), name: name, action: action, inspect: inspect, now: now)
                queue.setVerdict(.repeatWithMark(marks.dnsAnswer), for: packet)
            } else {
                queue.setVerdict(verdict, for: packet)
            }
        }
    }

    /// Asks the engine again about a held flow (it knows more now: an answer
    /// or new rules). A flow still unknown keeps waiting, with its packets;
    /// one that now waits for another answer (its user placed, its name not
    /// known yet) waits for that one, asked once for all the flows that need it.
    private func retry(_ key: FlowKey, now: UInt64) {
        let uid = held.uid(of: key)
        guard let inspection = inspector.resolve(flow: key, uid: uid, now: now) else {
            let fallback = askDefault(uid: uid).verdict == .allow ? KernelVerdict.accept : .drop
            give(fallback, to: held.release(key), of: key, inspection: nil, now: now)
            return
        }
        guard inspection.verdict != .needRules else {
            guard let question = HeldQuestion(for: inspection), question != held.question(of: key) else { return }
            let packets = held.release(key)
            let deadline = deadline(uid: uid, now: now)
            var newQuestion = false
            for id in packets {
                if held.hold(packet: id, flow: key, question: question, uid: uid, now: now, deadline: deadline) == .held(newQuestion: true) {
                    newQuestion = true
                }
            }
            if newQuestion { ask(question, kind: inspection.kind, flow: key, uid: uid, now: now) }
            return
        }
        concluded(inspection, now: now)
        give(verdict(for: inspection), to: held.release(key), of: key, inspection: inspection, now: now)
    }

    /// `retry` for every flow waiting for the answer to `question`.
    private func retryWaiting(for question: HeldQuestion, now: UInt64) {
        guard let waiting = held.waiting(for: question) else { return }
        for key in waiting.flows { retry(key, now: now) }
    }

    /// Every flow waiting for the answer to `question` gets its user's `policy.askDefault`.
    private func settleWithDefault(waitingFor question: HeldQuestion, now: UInt64) {
        guard let waiting = held.waiting(for: question) else { return }
        for key in waiting.flows {
            let uid = held.uid(of: key)
            settle(key, packets: held.release(key), with: askDefault(uid: uid), uid: uid, now: now)
        }
    }

    /// Held flows whose time ran out get their `policy.askDefault`.
    private func settleExpired(now: UInt64) {
        for key in held.expired(now: now) {
            counters.askTimeouts += 1
            let uid = held.uid(of: key)
            settle(key, packets: held.release(key), with: askDefault(uid: uid), uid: uid, now: now)
        }
    }

    // MARK: Reports

    /// Keeps a flow's first decision and a blocked DNS query for filter-control
    /// (the audit log; connections to judge again when the policy changes).
    private func reportDecision(_ inspection: Inspection, now: UInt64) {
        guard control != nil, let key = inspection.flow else { return }
        switch (inspection.finality, inspection.verdict) {
        case (.firstDecision, _):
            break
        case (.packetDecision, .drop) where inspection.direction == .clientToServer:
            break
        default:
            return
        }
        let facts = inspection.facts
        // Written as the line it travels in: no FlowReport, no String of the name.
        let kept = reports.add(now: now) { bytes in
            FlowReport.appendLine(
                to: &bytes, flow: key, uid: facts.uid, kind: inspection.kind.rawValue,
                host: facts.host?.bytes ?? inspection.findings.name.map { Array($0.utf8) },
                path: inspection.kind == .http ? facts.path : nil, verdict: inspection.verdict, reason: inspection.decision.reason)
        }
        if !kept { counters.reportsDropped += 1 }
    }

    /// Sends the reports that are due (`FlowReportBatch`), or with `all`
    /// every one (filter-data stops), without ever waiting on the channel.
    private func sendReports(now: UInt64, all: Bool = false) {
        guard let control, !reports.isEmpty else { return }
        let sent = reports.send(now: now, all: all) { lines in
            (try? control.send(.reports(lines))) != nil
        }
        counters.reportsSent += UInt64(sent)
    }

    // MARK: DNS answers

    /// Keeps the judgement of a query whose answer is to be changed.
    private func expectAnswer(to packet: Span<UInt8>, _ inspection: Inspection, action: DNSAnswerAction?, inspect: Bool, now: UInt64) {
        guard let key = inspection.flow, let name = inspection.facts.host, let id = PacketBytes.dnsMessageID(packet) else { return }
        answerPlans.expect(.init(flow: key, id: id), name: name, action: action, inspect: inspect, now: now)
    }

    /// The verdict for a DNS answer: changed as its query's judgement asked
    /// (the addresses of a blocked name become the block page's), else as it is.
    private func answer(_ packet: Span<UInt8>, now: UInt64) -> KernelVerdict {
        guard let response = DNSResponsePacket(packet, port: inspector.settings.dnsPort), let query = response.ip.flowKey?.reversed,
            let outcome = answerPlans.takeOutcome(.init(flow: query, id: response.header.id), name: response.question, now: now)
        else { return .accept }
        let verdict = outcome.action.map { changed(packet, response: response, by: $0) } ?? .accept
        if outcome.inspect {
            // The addresses the program will see: the rewritten answer's (SafeSearch's), or the answer's own.
            if case .acceptRewritten(let bytes) = verdict {
                selectForInspection(bytes.span)
            } else {
                selectForInspection(packet)
            }
        }
        return verdict
    }

    /// Puts the A and AAAA addresses of an answer (a whole IP packet) into
    /// the inspection proxy's kernel sets, each for its TTL (bounded), before
    /// the answer goes on.
    private func selectForInspection(_ packet: Span<UInt8>) {
        guard let ip = try? IPPacketParser.parse(packet), case .success(let records) = DNSMessageParser.addressRecords(in: packet.extracting(ip.payload))
        else { return }
        let base = ip.payload.lowerBound
        for record in records {
            let start = base + record.addressOffset
            guard start + record.addressLength <= packet.count,
                let address = IPAddress(networkBytes: packet.extracting(start..<(start + record.addressLength)))
            else { continue }
            setRequests &+= 1
            queue.sendSetRequest(InspectionSets.addRequest(address, timeout: InspectionSets.timeout(forTTL: record.timeToLive), sequence: setRequests))
            counters.inspectionAddresses += 1
        }
    }

    /// Puts the address of a connection that showed an inspected name
    /// outside the redirect into its kernel set (for
    /// `InspectionSets.outsideRedirectTimeout`), before the connection's
    /// refusal goes: the reset reaches the program after the address is
    /// selected, so its next try is redirected to the proxy.
    private func selectOutsideRedirect(_ address: IPAddress) {
        setRequests &+= 1
        queue.sendSetRequest(InspectionSets.addRequest(address, timeout: InspectionSets.outsideRedirectTimeout, sequence: setRequests))
        counters.inspectionAddresses += 1
        counters.outsideRedirect += 1
    }

    /// The answer changed by `action`.
    private func changed(_ packet: Span<UInt8>, response: DNSResponsePacket, by action: DNSAnswerAction) -> KernelVerdict {
        switch action {
        case .pointAtBlockPage:
            // The policy may have changed since the query (blockedDNS: drop): then the answer passes.
            guard let rewrite = inspector.engine.policy.dnsRewrite else { return .accept }
            guard let rewritten = DNSAnswerRewrite.rewrite(packet, response: response, to: rewrite) else {
                counters.dnsRewritesEmpty += 1
                return .accept
            }
            counters.dnsRewrites += 1
            return .acceptRewritten(rewritten)
        case .nxdomain, .safeSearch, .removeECH:
            do throws(DNSRewriteError) {
                guard let rewritten = try action.rewrite(packet, targets: inspector.engines.set.safeSearchTargets) else {
                    return .accept
                }
                counters.dnsRewrites += 1
                return .acceptRewritten(rewritten)
            } catch {
                // An answer the rewrite cannot read passes as it is (the flow that follows is still judged by its name).
                counters.dnsRewritesEmpty += 1
                return .accept
            }
        }
    }

    // MARK: Control messages

    /// Applies every waiting control message. False when filter-control is gone.
    private func serveControl() -> Bool {
        guard let control else { return true }
        while true {
            let message: ControlCommand?
            do {
                message = try control.receive { _ in self.counters.invalidControlMessages += 1 }
            } catch {
                return false
            }
            guard let message else { return true }
            apply(message, now: clock.nanoseconds())
        }
    }

    private func apply(_ message: ControlCommand, now: UInt64) {
        switch message {
        case .answer(let host, let categories, let timeToLive):
            counters.answers += 1
            inspector.recordAnswer(
                LookupAnswers.Answer(categories: categories, expires: now &+ UInt64(timeToLive) &* 1_000_000_000), for: host)
            if let waiting = held.waiting(for: .host(host)) { roundTrips.record(now &- waiting.asked) }
            retryWaiting(for: .host(host), now: now)
        case .noAnswer(let host):
            counters.answers += 1
            if let waiting = held.waiting(for: .host(host)) { roundTrips.record(now &- waiting.asked) }
            settleWithDefault(waitingFor: .host(host), now: now)
        case .userPlacement(let uid, let audience):
            counters.answers += 1
            inspector.place(uid: uid, in: audience)
            if let waiting = held.waiting(for: .user(uid)) { roundTrips.record(now &- waiting.asked) }
            retryWaiting(for: .user(uid), now: now)
        case .useRules(let storePath, let policyPath):
            swapRules(store: storePath, policy: policyPath, now: now)
        case .usePolicy(let policyPath):
            swapRules(store: nil, policy: policyPath, now: now)
        case .ping(let number):
            try? control?.send(.pong(number, counters: report()))
        case .interception:
            // The proxy's alone: filter-control never sends it here, and filter-data holds no CA.
            break
        }
    }

    /// Maps and checks the new store and reads the policy first; only then
    /// swaps (between two batches), so every packet is judged by the old
    /// rules or by the new ones, whole. The old store is unmapped when the
    /// last reference to it goes, right after the swap. Refused, the old
    /// rules stay and filter-control is told why.
    /// With no `store`, only the policy set is read again (the store in force stays mapped).
    private func swapRules(store storePath: String?, policy policyPath: String, now: UInt64) {
        let engines: PolicyEngines<RuleStore>
        do {
            engines = try inspector.engines.replacing(store: storePath, policy: policyPath)
        } catch {
            counters.ruleSwapsRefused += 1
            try? control?.send(.rulesRefused(code: error.code, message: error.description))
            return
        }
        inspector.replaceEngines(engines)
        counters.ruleSwaps += 1
        try? control?.send(.rulesLoaded(version: engines.rules.version))
        // Flows waiting for rules may be decided now; the others keep waiting.
        for key in held.allFlows { retry(key, now: now) }
    }

    /// The counters filter-control asks for (`pong`).
    public func report() -> FilterDataCounters {
        let inspection = inspector.counters
        let queue = queue.counters
        let percentiles = roundTrips.percentiles()
        var report = counters
        report.rulesVersion = inspector.engine.rules.version
        report.packets = inspection.packets
        report.flows = inspection.flowsCreated
        report.reopenedFlows = inspection.reopenedFlows
        report.reopenedQUICFlows = inspection.reopenedQUICFlows
        report.decidedForgotten = inspection.decidedForgotten
        report.allowed = inspection.allowed
        report.dropped = inspection.dropped
        report.neededRules = inspection.neededRules
        report.neededMoreData = inspection.neededMoreData
        report.parseErrors = inspection.parseErrors
        report.heldPackets = UInt64(held.packetCount)
        report.heldFlows = UInt64(held.flowCount)
        report.verdictsSent = queue.verdictsSent
        report.netlinkErrors = queue.netlinkErrors
        report.receiveOverruns = queue.receiveOverruns
        report.roundTrips = UInt64(percentiles.count)
        report.roundTripP50Micros = percentiles.p50 / 1000
        report.roundTripP99Micros = percentiles.p99 / 1000
        return report
    }
}

/// What the data path reads of a packet's bytes before (or besides) the inspector.
enum PacketBytes {
    /// Whether an IP packet carries TCP (IPv6: right after the fixed header).
    static func isTCP(_ packet: Span<UInt8>) -> Bool {
        guard packet.count >= 20 else { return false }
        return packet[0] >> 4 == 4 ? packet[9] == 6 : packet.count >= 40 && packet[6] == 6
    }

    /// The DNS message id of a UDP packet (the first two bytes after the UDP header).
    static func dnsMessageID(_ packet: Span<UInt8>) -> UInt16? {
        guard let ip = try? IPPacketParser.parse(packet), ip.protocolNumber == 17, ip.payload.count >= 2 else { return nil }
        return packet.bigEndianU16(at: ip.payload.lowerBound)
    }
}

/// The latest needRules round trips (question sent to answer applied), for percentiles.
struct RoundTripLog {
    private var samples: [UInt64] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    mutating func record(_ nanoseconds: UInt64) {
        if samples.count < capacity {
            samples.append(nanoseconds)
        } else {
            samples[next] = nanoseconds
            next = (next + 1) % capacity
        }
    }

    func percentiles() -> (count: Int, p50: UInt64, p99: UInt64) {
        guard !samples.isEmpty else { return (0, 0, 0) }
        let sorted = samples.sorted()
        func at(_ fraction: Double) -> UInt64 { sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))] }
        return (sorted.count, at(0.5), at(0.99))
    }
}
