// What DataPath needs of the kernel's packet queue and of the clock, and the
// values that cross between them. filter-data runs DataPath on the NFQUEUE
// socket (FilterDataKernel's NetfilterQueueSocket) and CLOCK_MONOTONIC; the
// unit tests run it on a queue and a clock of their own, without root.
// DataPath is generic over both rather than holding an existential, so the
// release build specialises it for the socket and the per-packet calls stay
// direct (-cross-module-optimization, Package.swift).
import HallpassWire
public import HallpassIPC
public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif
import HallpassSystem
import SystemPackage

/// A queue of packets the kernel holds until it is told what to do with
/// each: filter-data's NFQUEUE socket, or a test's stand-in.
public protocol PacketQueue: AnyObject {
    /// A descriptor that polls readable when packets wait (the netlink socket).
    var descriptor: Int32 { get }
    var counters: QueueSocketCounters { get }
    /// Reads up to `limit` waiting packets without waiting for more, calling
    /// `body` for each with its bytes (valid only during the call). Returns how many it read.
    func receiveReady(limit: Int, _ body: (QueuedPacket, Span<UInt8>) -> Void) throws(QueueSocketError) -> Int
    /// Queues a verdict for the packet; `flushVerdicts` sends what is queued.
    func setVerdict(_ verdict: KernelVerdict, for packetID: UInt32)
    func flushVerdicts() throws(QueueSocketError)
    /// Sends a request to the kernel's address sets (an ipset `add`, InspectionSets)
    /// at once, before the verdicts in hand: an address selected by a DNS
    /// answer is in its set before the answer reaches the program that asked.
    /// A refusal comes back later as a netlink error, counted like a verdict's.
    func sendSetRequest(_ request: [UInt8])
}

extension PacketQueue {
    /// A queue with no kernel behind it (a capture's replay) selects nothing.
    public func sendSetRequest(_ request: [UInt8]) {}
}

/// A monotonic clock in nanoseconds (DataPath's deadlines and ages).
public protocol NanosecondClock {
    func nanoseconds() -> UInt64
}

/// CLOCK_MONOTONIC (HallpassSystem's MonotonicClock): the clock filter-data runs on.
public struct MonotonicSystemClock: NanosecondClock, Sendable {
    public init() {}
    public func nanoseconds() -> UInt64 { MonotonicClock.nanoseconds() }
}

/// A verdict as the kernel takes it.
public enum KernelVerdict: Sendable, Hashable {
    /// Let the packet go on; the flow stays undecided (its next packet may come back).
    case accept
    /// Drop this packet only.
    case drop
    /// Send the packet through the hook again with this packet mark, so the
    /// kernel rules save it to the connection (the fast path) and then accept
    /// or reject it. See KernelRules.
    case repeatWithMark(UInt32)
    /// Let the packet go on with these bytes instead of its own (the whole IP
    /// packet; a rewritten DNS answer).
    case acceptRewritten([UInt8])

    /// What the kernel is told for one inspected packet. With `rewriteDNS`, a
    /// query for a blocked name goes on with the `dnsAnswer` mark: its answer
    /// comes back on the input hook and is pointed at the block page.
    public init(for inspection: Inspection, marks: FlowMarks, rewriteDNS: Bool = false) {
        switch inspection.finality {
        case .firstDecision, .repeatedDecision:
            switch inspection.verdict {
            case .allow: self = .repeatWithMark(marks.allow)
            case .drop: self = .repeatWithMark(marks.block)
            case .needRules, .needMoreData: self = .accept
            }
        case .packetDecision:
            if inspection.verdict != .drop {
                self = .accept
            } else if !rewriteDNS || inspection.kind != .dns {
                self = .drop
            } else {
                // Only a query on its way out comes back through the chain's rule
                // for judged queries (anything else with the mark would be queued
                // again); a local server's response to a blocked query passes.
                self = inspection.direction == .clientToServer ? .repeatWithMark(marks.dnsAnswer) : .accept
            }
        case .undecided:
            // needMoreData: let this packet go, look at the next one. (needRules
            // packets are held by DataPath, never given a verdict here.)
            self = .accept
        case .untracked:
            self = .accept
        }
    }
}

/// What the kernel said about one packet it handed over. The packet's bytes
/// come beside it, as a span valid only inside the `receiveReady` callback.
public struct QueuedPacket: Sendable, Hashable {
    public var id: UInt32
    public var uid: UInt32?
    public var gid: UInt32?
    public var mark: UInt32
    /// The netfilter hook the packet was queued from (NF_INET_LOCAL_IN 1 for
    /// the DNS answers of HALLPASS_IN, NF_INET_LOCAL_OUT 3 for the rest).
    public var hook: UInt8
    /// The packet was cut to the copy range (GSO packets can exceed it).
    public var truncated: Bool

    /// NF_INET_LOCAL_IN: only DNS answers come in on it (HALLPASS_IN).
    public static let inputHook: UInt8 = 1
    /// NF_INET_LOCAL_OUT: everything a local process sends.
    public static let outputHook: UInt8 = 3

    public init(id: UInt32, uid: UInt32? = nil, gid: UInt32? = nil, mark: UInt32 = 0, hook: UInt8 = outputHook, truncated: Bool = false) {
        self.id = id
        self.uid = uid
        self.gid = gid
        self.mark = mark
        self.hook = hook
        self.truncated = truncated
    }
}

public struct QueueSocketError: Error, CustomStringConvertible, Sendable {
    public var operation: String
    public var errno: Int32

    public init(operation: String, errno: Int32) {
        self.operation = operation
        self.errno = errno
    }

    public var description: String {
        let reason = Errno(rawValue: errno).description
        switch (operation, errno) {
        case ("bind", EPERM), ("open", EPERM), ("configure", EPERM):
            return "cannot \(operation) the NFQUEUE socket: \(reason) (filter-data needs CAP_NET_ADMIN)"
        case (let bind, EPERM) where bind.hasPrefix("bind queue"):
            return "the NFQUEUE \(bind.dropFirst("bind ".count)) is already bound by another process (another filter-data, or another program using NFQUEUE); stop it or choose another queue.number"
        case ("configure", EBUSY):
            return "the NFQUEUE queue is already bound by another process (\(reason)); choose another queue.number"
        default:
            return "NFQUEUE \(operation) failed: \(reason)"
        }
    }
}

/// Counters of the queue socket itself.
public struct QueueSocketCounters: Sendable, Hashable {
    public var packetsReceived: UInt64 = 0
    public var verdictsSent: UInt64 = 0
    /// Error replies from the kernel (verdict errors arrive this way, not as send failures).
    public var netlinkErrors: UInt64 = 0
    public var lastNetlinkError: Int32 = 0
    /// Malformed or unexpected netlink messages.
    public var malformedMessages: UInt64 = 0
    /// recv reported lost messages (ENOBUFS) despite NETLINK_NO_ENOBUFS.
    public var receiveOverruns: UInt64 = 0
    public var truncatedPackets: UInt64 = 0

    public init() {}
}
