import HallpassWire
public import HallpassIPC
public import VerdictCore

/// What filter-data asks filter-control about before it can decide a flow.
public enum HeldQuestion: Sendable, Hashable {
    /// A name no rule knows (needRules).
    case host(HostName)
    /// A local user filter-control has not placed in a group yet.
    case user(UInt32)

    /// What a flow the engine answered `needRules` for waits for: its user's
    /// group, else its name; nil when it has neither to ask about.
    public init?(for inspection: Inspection) {
        if inspection.decision.reason.source == .unknownUser, let uid = inspection.facts.uid {
            self = .user(uid)
        } else if let host = inspection.facts.host {
            self = .host(host)
        } else {
            return nil
        }
    }
}

/// The packets filter-data holds back (no verdict yet) while their flows
/// wait for filter-control's answer (needRules, or which group a user is
/// in), grouped by flow and by the question asked. Bounded: the kernel counts held packets against the
/// queue's length, so at `capacity` a new packet is refused and its flow
/// gets the default at once. Pure: time is passed in.
public struct HeldPackets: Sendable {
    public struct Flow: Sendable, Hashable {
        public var question: HeldQuestion
        /// The socket's user, to decide the flow with that user's policy once the answer is in.
        public var uid: UInt32?
        public var packets: [UInt32]
        /// When the flow stops waiting and gets `policy.askDefault`.
        public var deadline: UInt64
    }

    public enum HoldResult: Sendable, Hashable {
        /// Held; `newQuestion` when no flow was waiting for this answer yet (ask filter-control).
        case held(newQuestion: Bool)
        /// Not held: `capacity` packets are already waiting.
        case full
    }

    public let capacity: Int
    public private(set) var packetCount = 0
    private var flows: [FlowKey: Flow] = [:]
    /// The flows waiting for each name, and when the question was asked.
    private var questions: [HeldQuestion: (asked: UInt64, flows: Set<FlowKey>)] = [:]

    public init(capacity: Int = 1024) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    public var flowCount: Int { flows.count }
    public var isEmpty: Bool { flows.isEmpty }

    /// Holds `packet` of `flow` (of `uid`), which waits for the answer to `question`.
    /// The deadline is set by the flow's first held packet.
    public mutating func hold(packet: UInt32, flow key: FlowKey, question: HeldQuestion, uid: UInt32?, now: UInt64, deadline: UInt64) -> HoldResult {
        guard packetCount < capacity else { return .full }
        packetCount += 1
        if flows[key] != nil {
            flows[key]!.packets.append(packet)
            return .held(newQuestion: false)
        }
        flows[key] = Flow(question: question, uid: uid, packets: [packet], deadline: deadline)
        if questions[question] != nil {
            questions[question]!.flows.insert(key)
            return .held(newQuestion: false)
        }
        questions[question] = (now, [key])
        return .held(newQuestion: true)
    }

    /// Whether packets of this flow are held.
    public func contains(_ key: FlowKey) -> Bool { flows[key] != nil }

    /// Stops holding the flow; returns its packets (in arrival order).
    public mutating func release(_ key: FlowKey) -> [UInt32] {
        guard let flow = flows.removeValue(forKey: key) else { return [] }
        packetCount -= flow.packets.count
        if var waiting = questions[flow.question] {
            waiting.flows.remove(key)
            questions[flow.question] = waiting.flows.isEmpty ? nil : waiting
        }
        return flow.packets
    }

    /// The flows waiting for the answer to `question`, and when it was asked (nil: nobody waits).
    public func waiting(for question: HeldQuestion) -> (asked: UInt64, flows: [FlowKey])? {
        guard let waiting = questions[question] else { return nil }
        return (waiting.asked, Array(waiting.flows))
    }

    /// The user of a held flow (nil when it is not held or has none).
    public func uid(of key: FlowKey) -> UInt32? { flows[key]?.uid }

    /// What a held flow waits for (nil when it is not held).
    public func question(of key: FlowKey) -> HeldQuestion? { flows[key]?.question }

    /// Every flow held, for a rules change (each may now be decided).
    public var allFlows: [FlowKey] { Array(flows.keys) }

    /// Flows whose deadline is at or before `now`.
    public func expired(now: UInt64) -> [FlowKey] {
        flows.compactMap { $0.value.deadline <= now ? $0.key : nil }
    }

    /// The earliest deadline, nil when nothing is held.
    public var nextDeadline: UInt64? { flows.values.lazy.map(\.deadline).min() }
}
