import CHallpassSys
public import SharedStore
public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

/// The packet marks that carry a flow's decision to the kernel rules, which
/// save them to the connection so later packets never reach user space.
public struct FlowMarks: Sendable, Hashable {
    public var allow: UInt32 = 0x0010_0000
    public var block: UInt32 = 0x0020_0000
    /// The bits hallpass owns in the packet and connection marks.
    public var mask: UInt32 = 0x0030_0000

    public init() {}
}

/// filter-data's packet path, top to bottom: receive a batch, inspect each
/// packet (parse, flow table, facts, decide), queue its verdict, send the
/// batch of verdicts in one write.
public final class DataPath {
    public let socket: NetfilterQueueSocket
    public private(set) var inspector: FlowInspector<RuleStore>
    public let marks: FlowMarks
    private var lastSweep: UInt64 = 0

    public init(socket: NetfilterQueueSocket, inspector: FlowInspector<RuleStore>, marks: FlowMarks = FlowMarks()) {
        self.socket = socket
        self.inspector = inspector
        self.marks = marks
    }

    /// What the kernel is told for one inspected packet.
    public static func kernelVerdict(for inspection: Inspection, marks: FlowMarks) -> KernelVerdict {
        switch inspection.finality {
        case .firstDecision, .repeatedDecision:
            switch inspection.verdict {
            case .allow: return .repeatWithMark(marks.allow)
            case .drop: return .repeatWithMark(marks.block)
            case .needRules, .needMoreData: return .accept
            }
        case .packetDecision:
            return inspection.verdict == .drop ? .drop : .accept
        case .undecided:
            // needMoreData: let this packet go, look at the next one. needRules
            // has no control channel to ask yet and is let through unmarked,
            // so the flow is asked about again with its next packet.
            return .accept
        case .untracked:
            return .accept
        }
    }

    /// Runs until SIGTERM or SIGINT, then sends the verdicts of the batch in hand and returns.
    public func run() throws(QueueSocketError) {
        while hp_stop_requested() == 0 {
            _ = try socket.receive(limit: 64, timeoutMilliseconds: 250) { packet in
                let now = DataPath.monotonicNanoseconds()
                let inspection = inspector.inspect(packet.payload, uid: packet.uid, gid: packet.gid, now: now)
                socket.setVerdict(DataPath.kernelVerdict(for: inspection, marks: marks), for: packet.id)
            }
            try socket.flushVerdicts()
            let now = DataPath.monotonicNanoseconds()
            if now &- lastSweep > 1_000_000_000 {
                _ = inspector.removeExpiredFlows(now: now, limit: 4096)
                lastSweep = now
            }
        }
        try socket.flushVerdicts()
    }

    public static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
