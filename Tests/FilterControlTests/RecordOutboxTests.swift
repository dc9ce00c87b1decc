import FilterControl
import Foundation
import HallpassSystem
import Logging
import Testing

/// The outbox of records for the school's server: numbering, the cursor,
/// restarts, a torn last line, and the size and age bounds with their drops.
@Suite struct RecordOutboxTests {
    /// The test's own folder, removed at its end; the outbox is made inside it.
    let root: String
    let folder: String
    let now = Date(timeIntervalSince1970: 1_764_331_200)

    init() throws {
        root = try temporaryFolder()
        folder = root + "/outbox"
    }

    func open(machine: String = "m-abcdefghij234567abcd", settings: RecordOutbox.Settings = .init(), now: Date? = nil) throws -> RecordOutbox {
        try RecordOutbox(folder: folder, machine: machine, settings: settings, now: now ?? self.now)
    }

    func lines(_ count: Int, user: String = "alice") -> [AuditLine] {
        (0..<count).map { _ in sampleRecord(user: user) }
    }

    /// The sequences of a batch's body, read as the server would.
    func sequences(_ batch: RecordOutbox.Batch?) throws -> [UInt64] {
        guard let batch else { return [] }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(batch.body)) as? [String: Any])
        let records = try #require(object["records"] as? [[String: Any]])
        return records.map { ($0["sequence"] as? NSNumber)?.uint64Value ?? 0 }
    }

    @Test func recordsAreNumberedInOrderAsTheServerTakesThem() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let outbox = try open()
        outbox.append(lines(5), now: now)
        let batch = try #require(outbox.batch())
        #expect(try sequences(batch) == [1, 2, 3, 4, 5])
        #expect(batch.first == 1 && batch.last == 5 && batch.count == 5 && batch.dropped == 0)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(batch.body)) as? [String: Any])
        let first = try #require((object["records"] as? [[String: Any]])?.first)
        #expect(first["machine"] == nil, "the signer is the machine")
        #expect(first["user"] as? String == "alice" && first["port"] as? Int == 443 && first["rulesVersion"] as? Int == 42)
        #expect(object["dropped"] as? Int == 0)
        #expect(try FileSystem.status(folder).permissions.rawValue & 0o777 == 0o700, "the records name people")
        #expect(outbox.status.waiting == 5)
    }

    @Test func theCursorMovesOnlyToStoredThrough() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let outbox = try open()
        outbox.append(lines(10), now: now)
        let batch = try #require(outbox.batch())
        #expect(outbox.acknowledge(batch, storedThrough: 4, now: now) == 4)
        #expect(try sequences(outbox.batch()) == Array(5...10), "what the server did not store is sent again")
        #expect(outbox.acknowledge(try #require(outbox.batch()), storedThrough: 2, now: now) == 0, "never back")
        #expect(outbox.status.storedThrough == 4)
        #expect(outbox.acknowledge(try #require(outbox.batch()), storedThrough: 99, now: now) == 6, "never past the batch")
        #expect(outbox.status.storedThrough == 10 && outbox.status.waiting == 0 && outbox.batch() == nil)
    }

    @Test func aRestartLosesNothingAndReusesNoNumber() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        do {
            let outbox = try open()
            outbox.append(lines(3), now: now)
            outbox.acknowledge(try #require(outbox.batch()), storedThrough: 2, now: now)
            outbox.append(lines(2), now: now)
        }
        let again = try open()
        #expect(try sequences(again.batch()) == [3, 4, 5], "the stored ones are not sent again, the rest is")
        again.append(lines(1), now: now)
        #expect(try sequences(again.batch()) == [3, 4, 5, 6])
        // Everything stored: the segments may go, the numbers go on.
        again.acknowledge(try #require(again.batch()), storedThrough: 6, now: now)
        let third = try open()
        third.append(lines(1), now: now)
        #expect(try sequences(third.batch()) == [7])
    }

    @Test func aTornLastLineIsCutOff() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        do {
            let outbox = try open()
            outbox.append(lines(3), now: now)
        }
        let segment = folder + "/00000000000000000001.jsonl"
        let handle = try #require(FileHandle(forWritingAtPath: segment))
        handle.seekToEndOfFile()
        handle.write(Data(#"{"sequence":4,"time":"2025-"#.utf8))
        try handle.close()
        let again = try open()
        #expect(try sequences(again.batch()) == [1, 2, 3])
        again.append(lines(1), now: now)
        #expect(try sequences(again.batch()) == [1, 2, 3, 4])
    }

    @Test func theSizeBoundDropsTheOldestAndCountsThem() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        // 64 KiB in segments of 16 KiB; each record is about 270 bytes.
        let outbox = try open(settings: .init(maxBytes: 64 << 10, maxAge: 86_400))
        for _ in 0..<100 { outbox.append(lines(10), now: now) }
        let status = outbox.status
        #expect(status.bytes <= 64 << 10)
        #expect(status.droppedTotal > 0 && status.droppedUnreported == status.droppedTotal)
        #expect(status.waiting + status.droppedTotal == 1000, "every record is either waiting or counted as dropped")
        let batch = try #require(outbox.batch())
        #expect(batch.first == status.droppedTotal + 1 && batch.dropped == status.droppedTotal, "the post reports the drops")
        outbox.acknowledge(batch, storedThrough: batch.last, now: now)
        #expect(outbox.status.droppedUnreported == 0 && outbox.status.droppedTotal == status.droppedTotal)
        // The count survives a restart.
        #expect(try open(settings: .init(maxBytes: 64 << 10, maxAge: 86_400)).status.droppedTotal == status.droppedTotal)
    }

    @Test func theAgeBoundDropsOldRecordsAndTheNumbersGoOn() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let settings = RecordOutbox.Settings(maxBytes: 1 << 20, maxAge: 86_400)
        let outbox = try open(settings: settings)
        outbox.append(lines(3), now: now)
        outbox.acknowledge(try #require(outbox.batch()), storedThrough: 1, now: now)
        // Two days on, with nothing appended meanwhile (the reporter calls maintain every minute).
        let later = now.addingTimeInterval(2 * 86_400)
        try FileManager.default.setAttributes([.modificationDate: now], ofItemAtPath: folder + "/00000000000000000001.jsonl")
        outbox.maintain(now: later)
        #expect(outbox.status.droppedTotal == 2 && outbox.status.waiting == 0 && outbox.batch() == nil)
        let again = try open(settings: settings, now: later)
        again.append(lines(1), now: later)
        let batch = try #require(again.batch())
        #expect(try sequences(batch) == [4] && batch.dropped == 2)
    }

    @Test func batchesKeepTheContractsBounds() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let outbox = try open()
        outbox.append(lines(1500), now: now)
        let first = try #require(outbox.batch())
        #expect(first.count == 1000 && first.first == 1 && first.last == 1000)
        #expect(first.body.count <= 1 << 20)
        outbox.acknowledge(first, storedThrough: 1000, now: now)
        #expect(try sequences(outbox.batch()) == Array(1001...1500))
        let small = try #require(outbox.batch(maxRecords: 1000, maxBytes: 2048))
        #expect(small.count < 10 && small.body.count <= 2048 && small.first == 1001)
    }

    @Test func anotherMachinesOutboxIsEmptied() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        do {
            let outbox = try open()
            outbox.append(lines(3), now: now)
        }
        let new = try open(machine: "m-zzzzzzzzzzzzzzzzzzzz")
        #expect(new.batch() == nil && new.status.nextSequence == 1, "a new identity starts at 1")
    }

    @Test func theAuditLogFillsTheOutbox() async throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        var settings = AuditSettings()
        settings.file = nil
        settings.journald = false
        let outbox = try open()
        let log = try AuditLog(
            settings: settings, rulesDirectory: folder, logger: Logger(label: "test"), lookup: { _ in ("alice", "students") }, outbox: outbox)
        let running = Task { await log.run() }
        log.record(blockedDecision)
        log.record(blockedDecision)
        log.finish()
        await running.value
        let batch = try #require(outbox.batch())
        #expect(try sequences(batch) == [1, 2])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(batch.body)) as? [String: Any])
        let first = try #require((object["records"] as? [[String: Any]])?.first)
        #expect(first["user"] as? String == "alice" && first["group"] as? String == "students" && first["action"] as? String == "block")
    }
}
