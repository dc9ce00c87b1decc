import FilterControl
import Foundation
import Logging
import Synchronization
import Testing

/// A school server in memory for the reporter: it keeps each sequence once
/// (as the contract says the real one does), answers `storedThrough` as the
/// highest sequence of an accepted batch, and can be down or refuse.
final class FakeSchoolServer: SchoolTransport {
    enum Mode: Sendable { case up, down, refusing, storingOnlyTheFirst }

    struct State {
        var mode = Mode.up
        var stored: Set<UInt64> = []
        /// Every sequence received, in order, resent ones again.
        var received: [UInt64] = []
        var dropped: [UInt64] = []
        var storedThrough: UInt64 = 0
        /// The check-ins' bodies.
        var checkins: [[UInt8]] = []
    }

    let state = Mutex(State())

    func post(_ endpoint: String, body: [UInt8]) async throws(SchoolError) -> (status: Int, body: [UInt8]) {
        let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        return try state.withLock { state throws(SchoolError) in
            switch state.mode {
            case .down: throw .unreachable(server: "fake", reason: "connection refused")
            case .refusing: return (401, Array(#"{"error":"signature-invalid","message":"clock"}"#.utf8))
            case .up, .storingOnlyTheFirst: break
            }
            if endpoint == "/api/v1/machine/checkin" {
                state.checkins.append(body)
                return (200, Array(#"{"publishedVersion":43}"#.utf8))
            }
            let records = (object["records"] as? [[String: Any]]) ?? []
            state.dropped.append((object["dropped"] as? NSNumber)?.uint64Value ?? 0)
            for (index, record) in records.enumerated() {
                let sequence = (record["sequence"] as? NSNumber)?.uint64Value ?? 0
                state.received.append(sequence)
                if state.mode == .storingOnlyTheFirst, index > 0 { continue }
                state.stored.insert(sequence)
                state.storedThrough = max(state.storedThrough, sequence)
            }
            return (200, Array(#"{"storedThrough":\#(state.storedThrough)}"#.utf8))
        }
    }

    func set(_ mode: Mode) { state.withLock { $0.mode = mode } }
}

@Suite struct SchoolReporterTests {
    let folder: String
    let logger = Logger(label: "test")

    init() throws { folder = try temporaryFolder() }

    func reporter(
        _ server: FakeSchoolServer, outbox: RecordOutbox, checkin: CheckinReport? = nil,
        fetchRules: (@Sendable (UInt64) async -> Void)? = nil
    ) -> SchoolReporter {
        let report =
            checkin
            ?? CheckinReport(
                rulesVersion: 42, rulesSince: Date(timeIntervalSince1970: 1_764_331_200), filterData: .running, filterDataRestarts: 3,
                failMode: "open", queueDrops: 0, recordsWaiting: 12, recordsDropped: 0, users: ["alice"])
        return SchoolReporter(
            transport: server, outbox: outbox, server: "https://school.example/", checkin: { report }, interval: .milliseconds(50),
            gather: .milliseconds(10), backoff: .init(initial: .milliseconds(10), maximum: .milliseconds(50)), logger: logger,
            fetchRules: fetchRules)
    }

    func outbox(_ settings: RecordOutbox.Settings = .init()) throws -> RecordOutbox {
        try RecordOutbox(folder: folder + "/outbox", machine: "m-abcdefghij234567abcd", settings: settings)
    }

    @Test func recordsArriveInOrderAcrossAServerDownAndARestartOnceEach() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let server = FakeSchoolServer()
        var acknowledgedBeforeRestart: UInt64 = 0
        do {
            let first = try outbox()
            let running = Task { await reporter(server, outbox: first).run() }
            await first.append((0..<30).map { _ in sampleRecord() })
            #expect(await eventually(within: 30) { server.state.withLock { $0.stored.count } == 30 })
            // The server goes down for a while; records keep coming and wait.
            server.set(.down)
            for _ in 0..<20 { await first.append([sampleRecord()]) }
            try await Task.sleep(for: .milliseconds(200))
            #expect(first.status.waiting == 20)
            running.cancel()
            await running.value
            acknowledgedBeforeRestart = first.status.storedThrough
        }
        // filter-control starts again with the server still down, then it comes back.
        let second = try outbox()
        #expect(second.status.waiting == 20)
        let running = Task { await reporter(server, outbox: second).run() }
        await second.append((0..<10).map { _ in sampleRecord() })
        try await Task.sleep(for: .milliseconds(100))
        server.set(.up)
        #expect(await eventually(within: 30) { second.status.waiting == 0 })
        running.cancel()
        await running.value
        let state = server.state.withLock { (stored: $0.stored, received: $0.received) }
        #expect(state.stored == Set(1...60), "nothing lost")
        #expect(state.received.filter { $0 <= acknowledgedBeforeRestart }.count == Int(acknowledgedBeforeRestart), "nothing stored was sent twice")
        #expect(state.received == state.received.sorted(), "in order")
    }

    @Test func aServerThatStoresPartOfABatchGetsTheRestAgain() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let server = FakeSchoolServer()
        server.set(.storingOnlyTheFirst)
        let box = try outbox()
        await box.append((0..<5).map { _ in sampleRecord() })
        let running = Task { await reporter(server, outbox: box).run() }
        #expect(await eventually(within: 30) { box.status.waiting == 0 })
        running.cancel()
        await running.value
        // Each post stored its first record only; the cursor followed storedThrough one by one.
        let received = server.state.withLock { $0.received }
        #expect(Array(received.prefix(5)) == [1, 2, 3, 4, 5] && Array(received.dropFirst(5).prefix(4)) == [2, 3, 4, 5])
        #expect(server.state.withLock { $0.stored } == Set(1...5))
    }

    @Test func dropsAreReportedInTheNextPost() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let server = FakeSchoolServer()
        let box = try outbox(.init(maxBytes: 64 << 10, maxAge: 86_400))
        for _ in 0..<100 { box.append((0..<10).map { _ in sampleRecord() }, now: Date()) }
        let dropped = box.status.droppedTotal
        #expect(dropped > 0)
        let running = Task { await reporter(server, outbox: box).run() }
        #expect(await eventually(within: 30) { box.status.waiting == 0 })
        running.cancel()
        await running.value
        let reported = server.state.withLock { $0.dropped }
        #expect(reported.first == dropped && reported.dropFirst().allSatisfy { $0 == 0 }, "reported once, in the first accepted post")
        #expect(box.status.droppedUnreported == 0 && box.status.droppedTotal == dropped)
    }

    @Test func aRefusalKeepsTheRecordsAndSaysWhy() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let server = FakeSchoolServer()
        server.set(.refusing)
        let box = try outbox()
        await box.append([sampleRecord()])
        let reporter = reporter(server, outbox: box)
        let running = Task { await reporter.run() }
        #expect(await eventually(within: 30) { reporter.status.recordsError?.contains("school.signature-invalid") == true })
        #expect(box.status.waiting == 1)
        server.set(.up)
        #expect(await eventually(within: 30) { box.status.waiting == 0 && reporter.status.recordsError == nil })
        running.cancel()
        await running.value
    }

    @Test func checkInsCarryTheContractsFields() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let server = FakeSchoolServer()
        let reporter = reporter(server, outbox: try outbox())
        let running = Task { await reporter.run() }
        #expect(await eventually(within: 30) { server.state.withLock { $0.checkins.count } >= 2 }, "every interval")
        running.cancel()
        await running.value
        let body = try #require(server.state.withLock { $0.checkins.first })
        let checkin = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(checkin["version"] as? String == HallpassVersion.current && checkin["rulesVersion"] as? Int == 42)
        #expect(checkin["rulesSince"] as? String == "2025-11-28T12:00:00.000Z")
        #expect(checkin["filterData"] as? String == "running" && checkin["filterDataRestarts"] as? Int == 3)
        #expect(checkin["failMode"] as? String == "open" && checkin["queueDrops"] as? Int == 0)
        #expect(checkin["recordsWaiting"] as? Int == 12 && checkin["recordsDropped"] as? Int == 0)
        #expect(checkin["users"] as? [String] == ["alice"])
        #expect(reporter.status.publishedVersion == 43 && reporter.status.checkinError == nil)
    }

    /// A check-in answer naming a newer publication than the rules in force
    /// fetches it at once; one naming the version in force fetches nothing.
    @Test func aNewerPublicationIsFetchedAtOnce() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let server = FakeSchoolServer()
        let fetched = Fetches()
        let behind = reporter(server, outbox: try outbox()) { published in fetched.versions.withLock { $0.append(published) } }
        let running = Task { await behind.run() }
        #expect(await eventually(within: 30) { !fetched.versions.withLock { $0 }.isEmpty }, "the server publishes 43, the machine has 42")
        running.cancel()
        await running.value
        #expect(fetched.versions.withLock { $0 }.allSatisfy { $0 == 43 })

        let current = CheckinReport(
            rulesVersion: 43, rulesSince: nil, filterData: .running, filterDataRestarts: 0, failMode: "open", queueDrops: 0,
            recordsWaiting: 0, recordsDropped: 0, users: [])
        let other = FakeSchoolServer()
        let asked = Fetches()
        let second = try RecordOutbox(folder: folder + "/outbox2", machine: "m-abcdefghij234567abcd", settings: .init())
        let upToDate = reporter(other, outbox: second, checkin: current) { published in asked.versions.withLock { $0.append(published) } }
        let again = Task { await upToDate.run() }
        #expect(await eventually(within: 30) { other.state.withLock { $0.checkins.count } >= 3 })
        again.cancel()
        await again.value
        #expect(asked.versions.withLock { $0 }.isEmpty, "the rules in force are the published ones")
        #expect(upToDate.status.publishedVersion == 43)
    }
}

/// The versions a reporter asked to fetch.
final class Fetches: Sendable {
    let versions = Mutex<[UInt64]>([])
}
