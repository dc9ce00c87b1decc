import HallpassWire
public import HallpassIPC
import CHallpassSys
import HallpassSystem
public import SharedStore
public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

/// What filter-data counts besides the inspector and the socket.
public struct DataPathCounters: Sendable, Hashable {
    /// needRules questions sent to filter-control.
    public var questions: UInt64 = 0
    public var answers: UInt64 = 0
    /// Held flows that got `policy.askDefault` because no answer came in time.
    public var askTimeouts: UInt64 = 0
    /// Packets not held because `capacity` packets already waited.
    public var holdOverflows: UInt64 = 0
    public var ruleSwaps: UInt64 = 0
    public var ruleSwapsRefused: UInt64 = 0
    public var invalidControlMessages: UInt64 = 0
    /// DNS answers for blocked names pointed at the block page.
    public var dnsRewrites: UInt64 = 0
    /// DNS answers for blocked names that held no A/AAAA record to rewrite (passed as they were).
    public var dnsRewritesEmpty: UInt64 = 0
    /// Decisions reported to filter-control, and those dropped because the channel stayed full.
    public var reportsSent: UInt64 = 0
    public var reportsDropped: UInt64 = 0
    /// TCP SYNs the kernel rules queued as reopened (a new connection on a decided one's ports).
    public var reopenedConnections: UInt64 = 0
    /// Reads after a turn's verdicts that found more packets, so that its
    /// decided flows stayed for another read (`forgetDecidedFlows`).
    public var lateReads: UInt64 = 0

    public init() {}
}

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
/// Generic over the queue rather than holding an existential: filter-data
/// (FilterDataMain) specialises it for FilterDataKernel's NetfilterQueueSocket,
/// so the per-packet calls stay direct.
public final class DataPath<Queue: PacketQueue> {
    public let queue: Queue
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
    public private(set) var counters = DataPathCounters()
    private var roundTrips = RoundTripLog(capacity: 1024)
    private var lastSweep: UInt64 = 0
    /// Reports not sent yet, as their lines; bounded by `maximumPendingReports`.
    private var pendingReports = FlowReportLines()
    /// When the oldest waiting report was made (monotonic ns); nil when none waits.
    private var reportsWaitingSince: UInt64?
    /// TCP flows decided since their entries were last forgotten (see `forgetDecidedFlows`).
    private var decided: [FlowKey] = []

    public init(
        queue: Queue, inspector: FlowInspector<RuleStore>, control: DataEnd? = nil,
        marks: FlowMarks = FlowMarks(), heldPacketCapacity: Int = 1024
    ) {
        self.queue = queue
        self.inspector = inspector
        self.control = control
        self.marks = marks
        self.held = HeldPackets(capacity: heldPacketCapacity)
    }

    /// Runs until SIGTERM or SIGINT (or the end of filter-control), then
    /// gives every held packet the default, sends the verdicts in hand and returns.
    public func run() throws(QueueSocketError) -> DataPathStop {
        var stop = DataPathStop.signal
        var descriptors = [pollfd(fd: queue.descriptor, events: Int16(POLLIN), revents: 0)]
        if let control { descriptors.append(pollfd(fd: control.descriptor.rawValue, events: Int16(POLLIN), revents: 0)) }
        while hp_stop_requested() == 0 {
            var timeout: Int32 = 250
            // The earliest of: a held flow's time running out, the waiting reports' delay.
            var next = held.nextDeadline
            if let since = reportsWaitingSince { next = min(next ?? .max, since &+ DataPath.reportDelay) }
            if let deadline = next {
                let now = DataPath.monotonicNanoseconds()
                timeout = deadline <= now ? 0 : Int32(min(250, (deadline - now) / 1_000_000 + 1))
            }
            // Decided flows are forgotten in the turn that decides them, unless packets kept
            // coming after the verdicts went: then the next turn comes within a millisecond.
            if !decided.isEmpty { timeout = min(timeout, 1) }
            for index in descriptors.indices { descriptors[index].revents = 0 }
            // nil: a signal interrupted the wait (SIGTERM: the loop's condition ends it).
            let ready: Int?
            do {
                ready = try Poll.wait(&descriptors, timeoutMilliseconds: timeout)
            } catch {
                throw QueueSocketError(operation: "poll", errno: error.rawValue)
            }
            // An interrupted poll read nothing: not a sign that the queue is empty.
            var drained = ready != nil
            let anyReady = (ready ?? 0) > 0
            if anyReady, descriptors[0].revents != 0 {
                drained = try readQueue() < DataPath.readLimit
            }
            if anyReady, descriptors.count > 1, descriptors[1].revents != 0 {
                if !serveControl() {
                    stop = .controlClosed
                    break
                }
            }
            let now = DataPath.monotonicNanoseconds()
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
        }
        // Nothing stays held when filter-data stops: the default for every waiting flow.
        settleExpired(now: .max)
        try queue.flushVerdicts()
        sendReports(now: .max)
        return stop
    }

    // MARK: Packets

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
            // A query whose answer is to be changed goes on with the mark that brings the answer back.
            if let action = DNSAnswerAction(for: inspection, engines: inspector.engines) {
                verdict = .repeatWithMark(marks.dnsAnswer)
                expectAnswer(to: bytes, inspection, action: action, now: now)
            }
            queue.setVerdict(verdict, for: packet.id)
            concluded(inspection)
            return
        }
        let uid = inspection.facts.uid
        if inspection.kind == .dns, let id = PacketBytes.dnsMessageID(bytes) { heldDNSIDs[packet.id] = id }
        guard let control else {
            // Nobody to ask: the default, at once.
            settle(key, packets: [packet.id], with: askDefault(uid: uid), uid: uid, now: now)
            return
        }
        let timeout = (inspector.engines.engine(for: uid) ?? inspector.engine).policy.askTimeoutMilliseconds
        let deadline = now &+ UInt64(timeout) &* 1_000_000
        switch held.hold(packet: packet.id, flow: key, question: question, uid: uid, now: now, deadline: deadline) {
        case .full:
            counters.holdOverflows += 1
            settle(key, packets: [packet.id] + held.release(key), with: askDefault(uid: uid), uid: uid, now: now)
        case .held(newQuestion: false):
            break
        case .held(newQuestion: true):
            let message: DataEvent
            switch question {
            case .host(let host):
                message = .ask(
                    NeedRulesQuestion(
                        host: host, kind: inspection.kind.rawValue, destination: key.destination.description, port: key.destinationPort, uid: uid))
            case .user(let uid):
                message = .askUser(uid)
            }
            do {
                try control.send(message)
                counters.questions += 1
            } catch {
                // filter-control cannot take the question now: do not keep the flow waiting for nothing.
                settleWaiting(for: question, with: askDefault(uid: uid), now: now)
            }
        }
    }

    /// Packets handled per read of the queue, at most: a read that handles
    /// fewer has emptied it.
    static var readLimit: Int { 64 }

    /// Reads and handles up to `readLimit` queued packets without waiting; returns how many.
    private func readQueue() throws(QueueSocketError) -> Int {
        try queue.receiveReady(limit: DataPath.readLimit) { packet, bytes in
            handle(packet, bytes, now: DataPath.monotonicNanoseconds())
        }
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
            if late < DataPath.readLimit, sent > 0 {
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
    private func concluded(_ inspection: Inspection) {
        report(inspection)
        noteDecided(inspection)
    }

    /// Notes a TCP flow's first decision, for `forgetDecidedFlows`.
    private func noteDecided(_ inspection: Inspection) {
        guard inspection.finality == .firstDecision, let key = inspection.flow, key.protocolNumber == 6 else { return }
        // Bounded: under a flood the time-based expiry still removes what this list misses.
        if decided.count < 8192 { decided.append(key) }
    }

    /// `policy.askDefault` of `uid`'s policy (no answer in time, too many waiting, or nobody to ask).
    private func askDefault(uid: UInt32?) -> Decision {
        (inspector.engines.engine(for: uid) ?? inspector.engine).askDefault(Reason(source: .askTimeout))
    }

    // MARK: Reports

    /// Keeps a flow's first decision and a blocked DNS query for filter-control
    /// (the audit log; connections to judge again when the policy changes).
    private func report(_ inspection: Inspection) {
        guard control != nil, let key = inspection.flow else { return }
        switch (inspection.finality, inspection.verdict) {
        case (.firstDecision, _):
            break
        case (.packetDecision, .drop) where inspection.direction == .clientToServer:
            break
        default:
            return
        }
        guard pendingReports.count < DataPath.maximumPendingReports else {
            counters.reportsDropped += 1
            return
        }
        let facts = inspection.facts
        if pendingReports.isEmpty { reportsWaitingSince = DataPath.monotonicNanoseconds() }
        // Written as the line it travels in: no FlowReport, no String of the name.
        pendingReports.appendLine { bytes in
            FlowReport.appendLine(
                to: &bytes, flow: key, uid: facts.uid, kind: inspection.kind.rawValue,
                host: facts.host?.bytes ?? inspection.findings.name.map { Array($0.utf8) },
                path: inspection.kind == .http ? facts.path : nil, verdict: inspection.verdict, reason: inspection.decision.reason)
        }
    }

    /// Reports waiting for room in the channel, at most (a full channel drops, and counts, the rest).
    static var maximumPendingReports: Int { 4096 }

    /// How long a report may wait for others (ns): reports go in full messages
    /// rather than one per packet, so that filter-control wakes once for many
    /// (at a few connections a second, each report used to cost both processes
    /// a wakeup). The audit log and the connection records are that much later.
    static var reportDelay: UInt64 { 50_000_000 }
    /// Reports that go at once, without waiting for `reportDelay`: at
    /// thousands of connections a second filter-control then wakes some
    /// tens of times a second, not once per few milliseconds (each wakeup
    /// costs both processes a context switch and the caches the other one
    /// warmed). 256 lines are three or four messages (a line is 80 to 150
    /// bytes, a message at most `controlMessageMaximumSize`), a small part
    /// of the channel's send buffer, which questions to filter-control share.
    static var reportBatch: Int { 2 * FlowReportLines.maximumPerMessage }

    /// Sends the waiting reports once there are `reportBatch` of them or the
    /// oldest has waited `reportDelay`, without ever waiting on the channel:
    /// what it has no room for stays for the next batch. A message carries
    /// as many lines as fit in it.
    private func sendReports(now: UInt64) {
        guard let control, !pendingReports.isEmpty else { return }
        guard pendingReports.count >= DataPath.reportBatch || now &- (reportsWaitingSince ?? now) >= DataPath.reportDelay || now == .max else { return }
        // Room for the lines in a message after its name and line feed.
        let room = controlMessageMaximumSize - 7
        var sent = 0
        while sent < pendingReports.count {
            var end = sent
            while end < pendingReports.count, end - sent < FlowReportLines.maximumPerMessage,
                pendingReports.byteCount(sent..<(end + 1)) <= room
            {
                end += 1
            }
            // A line is far shorter than a message (its fields are cut to 256 bytes): at least one fits.
            do {
                try control.send(.reports(pendingReports.lines(sent..<max(end, sent + 1))))
            } catch {
                break
            }
            sent = max(end, sent + 1)
        }
        counters.reportsSent += UInt64(sent)
        if sent == pendingReports.count {
            pendingReports.removeAll(keepingCapacity: true)
        } else {
            pendingReports = pendingReports.lines(sent..<pendingReports.count)
        }
        // What stays waits for room in the channel: tried again after another delay, not at every turn.
        reportsWaitingSince = pendingReports.isEmpty ? nil : DataPath.monotonicNanoseconds()
    }

    /// Keeps the judgement of a query whose answer is to be changed.
    private func expectAnswer(to packet: Span<UInt8>, _ inspection: Inspection, action: DNSAnswerAction, now: UInt64) {
        guard let key = inspection.flow, let name = inspection.facts.host, let id = PacketBytes.dnsMessageID(packet) else { return }
        answerPlans.expect(.init(flow: key, id: id), name: name, action: action, now: now)
    }

    /// The verdict for a DNS answer: changed as its query's judgement asked
    /// (the addresses of a blocked name become the block page's), else as it is.
    private func answer(_ packet: Span<UInt8>, now: UInt64) -> KernelVerdict {
        guard let response = DNSResponsePacket(packet, port: inspector.settings.dnsPort), let query = response.ip.flowKey?.reversed,
            let action = answerPlans.take(.init(flow: query, id: response.header.id), name: response.question, now: now)
        else { return .accept }
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

    private func verdict(for inspection: Inspection) -> KernelVerdict {
        KernelVerdict(for: inspection, marks: marks, rewriteDNS: inspector.engine.policy.dnsRewrite != nil)
    }

    /// Decides a held flow with `decision` and gives its packets their verdicts.
    private func settle(_ key: FlowKey, packets: [UInt32], with decision: Decision, uid: UInt32?, now: UInt64) {
        if let inspection = inspector.settle(flow: key, with: decision, uid: uid, now: now) {
            concluded(inspection)
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
                let action = DNSAnswerAction(for: inspection, engines: inspector.engines)
            {
                answerPlans.expect(.init(flow: key, id: id), name: name, action: action, now: now)
                queue.setVerdict(.repeatWithMark(marks.dnsAnswer), for: packet)
            } else {
                queue.setVerdict(verdict, for: packet)
            }
        }
    }

    /// Asks the engine again about a held flow (it knows more now: an answer
    /// or new rules). A flow still unknown keeps waiting, with its packets
    /// and its deadline.
    private func retry(_ key: FlowKey, now: UInt64) {
        let uid = held.uid(of: key)
        guard let inspection = inspector.resolve(flow: key, uid: uid, now: now) else {
            let fallback = askDefault(uid: uid).verdict == .allow ? KernelVerdict.accept : .drop
            give(fallback, to: held.release(key), of: key, inspection: nil, now: now)
            return
        }
        guard inspection.verdict != .needRules else {
            // It waits for something else now (a user placed, the name still unknown): ask about that.
            if let question = HeldQuestion(for: inspection), held.waiting(for: question) == nil, let control {
                let message: DataEvent
                switch question {
                case .user(let uid): message = .askUser(uid)
                case .host(let host):
                    message = .ask(
                        NeedRulesQuestion(host: host, kind: inspection.kind.rawValue, destination: key.destination.description, port: key.destinationPort, uid: uid))
                }
                let packets = held.release(key)
                let deadline = now &+ UInt64((inspector.engines.engine(for: uid) ?? inspector.engine).policy.askTimeoutMilliseconds) &* 1_000_000
                for id in packets { _ = held.hold(packet: id, flow: key, question: question, uid: uid, now: now, deadline: deadline) }
                if (try? control.send(message)) != nil { counters.questions += 1 }
            }
            return
        }
        concluded(inspection)
        give(verdict(for: inspection), to: held.release(key), of: key, inspection: inspection, now: now)
    }

    private func settleWaiting(for question: HeldQuestion, with decision: Decision?, now: UInt64) {
        guard let waiting = held.waiting(for: question) else { return }
        for key in waiting.flows {
            if let decision {
                let uid = held.uid(of: key)
                settle(key, packets: held.release(key), with: decision, uid: uid, now: now)
            } else {
                retry(key, now: now)
            }
        }
    }

    private func settleExpired(now: UInt64) {
        for key in held.expired(now: now) {
            counters.askTimeouts += 1
            let uid = held.uid(of: key)
            settle(key, packets: held.release(key), with: askDefault(uid: uid), uid: uid, now: now)
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
            apply(message, now: DataPath.monotonicNanoseconds())
        }
    }

    private func apply(_ message: ControlCommand, now: UInt64) {
        switch message {
        case .answer(let host, let categories, let timeToLive):
            counters.answers += 1
            inspector.recordAnswer(
                LookupAnswers.Answer(categories: categories, expires: now &+ UInt64(timeToLive) &* 1_000_000_000), for: host)
            if let waiting = held.waiting(for: .host(host)) { roundTrips.record(now &- waiting.asked) }
            settleWaiting(for: .host(host), with: nil, now: now)
        case .noAnswer(let host):
            counters.answers += 1
            guard let waiting = held.waiting(for: .host(host)) else { return }
            roundTrips.record(now &- waiting.asked)
            for key in waiting.flows {
                let uid = held.uid(of: key)
                settle(key, packets: held.release(key), with: askDefault(uid: uid), uid: uid, now: now)
            }
        case .userPlacement(let uid, let audience):
            counters.answers += 1
            inspector.place(uid: uid, in: audience)
            if let waiting = held.waiting(for: .user(uid)) { roundTrips.record(now &- waiting.asked) }
            settleWaiting(for: .user(uid), with: nil, now: now)
        case .useRules(let storePath, let policyPath):
            swapRules(store: storePath, policy: policyPath, now: now)
        case .usePolicy(let policyPath):
            swapRules(store: nil, policy: policyPath, now: now)
        case .ping(let number):
            try? control?.send(.pong(number, counters: report()))
        }
    }

    /// Maps and checks the new store and reads the policy first; only then
    /// swaps (between two batches), so every packet is judged by the old
    /// rules or by the new ones, whole. The old store is unmapped when the
    /// last reference to it goes, right after the swap.
    /// With no `store`, only the policy set is read again (the store in force stays mapped).
    private func swapRules(store storePath: String?, policy policyPath: String, now: UInt64) {
        let engines: PolicyEngines<RuleStore>
        do {
            if let storePath {
                engines = try PolicyEngines.load(store: storePath, policy: policyPath, answers: inspector.engines.answers)
            } else {
                engines = PolicyEngines(rules: inspector.engines.rules, set: try PolicySet.load(policyPath), answers: inspector.engines.answers)
            }
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
        var report = FilterDataCounters()
        report.rulesVersion = inspector.engine.rules.version
        report.packets = inspection.packets
        report.flows = inspection.flowsCreated
        report.reopenedConnections = counters.reopenedConnections
        report.lateReads = counters.lateReads
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
        report.questions = counters.questions
        report.answers = counters.answers
        report.askTimeouts = counters.askTimeouts
        report.holdOverflows = counters.holdOverflows
        report.ruleSwaps = counters.ruleSwaps
        report.ruleSwapsRefused = counters.ruleSwapsRefused
        report.invalidControlMessages = counters.invalidControlMessages
        report.dnsRewrites = counters.dnsRewrites
        report.dnsRewritesEmpty = counters.dnsRewritesEmpty
        report.reportsSent = counters.reportsSent
        report.reportsDropped = counters.reportsDropped
        report.verdictsSent = queue.verdictsSent
        report.netlinkErrors = queue.netlinkErrors
        report.receiveOverruns = queue.receiveOverruns
        report.roundTrips = UInt64(percentiles.count)
        report.roundTripP50Micros = percentiles.p50 / 1000
        report.roundTripP99Micros = percentiles.p99 / 1000
        return report
    }

    public static func monotonicNanoseconds() -> UInt64 {
        MonotonicClock.nanoseconds()
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
