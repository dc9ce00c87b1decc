// DataPath without the kernel: a packet queue and a clock of the tests' own,
// and filter-control's end of a real control channel (a socket pair, no root).
import Foundation
@testable import FilterData
import HallpassIPC
import SharedStore
import Testing
import VerdictCore

/// A queue the test fills with packets; it keeps the verdicts DataPath sends.
final class FakePacketQueue: PacketQueue {
    let descriptor: Int32 = -1
    private(set) var counters = QueueSocketCounters()
    private var waiting: [(packet: QueuedPacket, bytes: [UInt8])] = []
    private var queued: [(id: UInt32, verdict: KernelVerdict)] = []
    /// Verdicts flushed to the "kernel", in the order they went.
    private(set) var sent: [(id: UInt32, verdict: KernelVerdict)] = []
    private var nextID: UInt32 = 1

    /// Queues a packet as the kernel would (from the output hook unless told); returns its id.
    @discardableResult
    func enqueue(_ bytes: [UInt8], uid: UInt32? = 1000, mark: UInt32 = 0, hook: UInt8 = QueuedPacket.outputHook) -> UInt32 {
        let id = nextID
        nextID += 1
        waiting.append((QueuedPacket(id: id, uid: uid, gid: uid, mark: mark, hook: hook), bytes))
        return id
    }

    var isEmpty: Bool { waiting.isEmpty }

    func receiveReady(limit: Int, _ body: (QueuedPacket, Span<UInt8>) -> Void) throws(QueueSocketError) -> Int {
        let count = min(limit, waiting.count)
        let batch = waiting.prefix(count)
        waiting.removeFirst(count)
        for (packet, bytes) in batch {
            counters.packetsReceived += 1
            body(packet, bytes.span)
        }
        return count
    }

    func setVerdict(_ verdict: KernelVerdict, for packetID: UInt32) {
        queued.append((packetID, verdict))
        counters.verdictsSent += 1
    }

    func flushVerdicts() throws(QueueSocketError) {
        sent.append(contentsOf: queued)
        queued.removeAll()
    }

    /// How many verdicts have been flushed.
    var sentCount: Int { sent.count }

    /// Kernel set requests, in order, each with the number of verdicts flushed before it.
    private(set) var setRequests: [(request: [UInt8], afterVerdicts: Int)] = []

    func sendSetRequest(_ request: [UInt8]) {
        setRequests.append((request, sent.count))
    }

    /// The verdict sent for a packet; nil while it has none (held, or not flushed yet).
    func verdict(for id: UInt32) -> KernelVerdict? {
        sent.last { $0.id == id }?.verdict
    }
}

/// A clock that moves only when the test says.
final class TestClock: NanosecondClock {
    var now: UInt64 = 1_000 * 1_000_000_000
    func nanoseconds() -> UInt64 { now }
    func advance(milliseconds: UInt64) { now += milliseconds * 1_000_000 }
}

/// A DataPath on a fake queue and a test clock, with filter-control's end of its channel.
struct DataPathHarness {
    let queue = FakePacketQueue()
    let clock = TestClock()
    let control: ControlEnd
    let path: DataPath<FakePacketQueue, TestClock>

    init(engines: PolicyEngines<RuleStore>, heldPacketCapacity: Int = 1024) throws {
        let pair = try ControlChannelPair.make()
        control = pair.control
        path = DataPath(
            queue: queue, clock: clock, inspector: FlowInspector(engines: engines), control: pair.data, heldPacketCapacity: heldPacketCapacity)
    }

    /// One policy for everyone over `store`.
    init(store: RuleStore = blockedStore, policy: Policy, heldPacketCapacity: Int = 1024) throws {
        try self.init(engines: PolicyEngines(rules: store, set: PolicySet(single: policy)), heldPacketCapacity: heldPacketCapacity)
    }

    /// A turn as `run` makes it when the queue and the channel are both ready.
    func turn() throws {
        let stop = try path.turn(queueReady: true, controlReady: true)
        #expect(stop == nil)
    }

    /// Tells filter-data something, then lets it read the channel.
    func send(_ command: ControlCommand) throws {
        try control.send(command)
        try turn()
    }

    /// Everything filter-data sent filter-control so far.
    func events() throws -> [DataEvent] {
        var events: [DataEvent] = []
        while let event = try control.receive(invalid: { Issue.record("filter-data sent no message of its direction: \($0)") }) {
            events.append(event)
        }
        return events
    }

    /// The first packet of a TLS connection from `client` to `name`, after its SYN (which passes).
    func connect(_ client: TCPClient, to name: String, uid: UInt32? = 1000) throws -> UInt32 {
        let syn = queue.enqueue(client.syn, uid: uid)
        let hello = queue.enqueue(client.data(at: 0, clientHelloRecords(name)), uid: uid)
        try turn()
        #expect(queue.verdict(for: syn) == .accept, "a SYN passes while its flow is inspected")
        return hello
    }
}

/// A folder of its own for the files a test writes, removed by `remove()`.
struct ScratchFolder {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "hallpass-datapath-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// Writes a file and returns its path.
    func write(_ name: String, _ bytes: [UInt8]) throws -> String {
        let file = path + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        return file
    }

    /// A rule store of these `(pattern, category)` pairs, written as `name`.
    func store(_ name: String, version: UInt64, _ entries: [(String, String)]) throws -> String {
        var builder = RuleStoreBuilder()
        for (pattern, category) in entries {
            builder.add(try RulePattern(pattern), category: try builder.category(named: category))
        }
        return try write(name, try builder.build(version: version).bytes)
    }

    func policy(_ name: String, _ set: PolicySet) throws -> String {
        try write(name, Array(PolicySet.render(set).utf8))
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}
