import Foundation
import SchoolServer
import Testing

/// The storage suite: the same tests on SQLite and on PostgreSQL.
@Suite struct StorageTests {
    static let now: Int64 = 1_764_320_400  // 2025-11-28T09:00:00Z

    /// A token for `room` with `uses`, valid an hour; returns its secret.
    static func makeToken(_ storage: SQLStorage, room: String = "lab2", uses: Int = 1, expiresAt: Int64 = now + 3600) async throws -> String {
        let secret = Secrets.newSecret()
        try await storage.createEnrolmentToken(
            StoredEnrolmentToken(hash: Secrets.hash(secret), room: room, usesLeft: uses, expiresAt: expiresAt, createdBy: "test", createdAt: now))
        return secret
    }

    /// An enrolled machine's id.
    static func enrol(_ storage: SQLStorage, hostname: String = "lab2-pc07") async throws -> String {
        let secret = try await makeToken(storage)
        let id = Secrets.newMachineID()
        _ = try await storage.enrol(
            NewMachine(id: id, publicKey: Secrets.newSecret(), hostname: hostname, version: "1.0"), tokenHash: Secrets.hash(secret), now: now)
        return id
    }

    static func records(_ machine: String, _ sequences: ClosedRange<Int64>, at time: Int64 = now * 1000) -> [StoredRecord] {
        sequences.map {
            StoredRecord(
                machine: machine, timeMilliseconds: time + $0,
                record: MachineRecord(
                    sequence: $0, time: RecordTime.format(milliseconds: time + $0), uid: 1001, user: "alice", group: "students",
                    kind: "tls", host: "casino.example", destination: "192.0.2.7", port: 443, action: "block", category: "gambling",
                    rule: "casino.example", reason: "category", rulesVersion: 42))
        }
    }

    @Test(arguments: Engine.allCases)
    func migrationsAreAppliedOnceAndRecorded(engine: Engine) async throws {
        try await withTestDatabase(engine) { location async throws in
            try await withServerStorage(location, logger: testLogger, migrate: false) { storage async throws in
                #expect(try await storage.migrate() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
                #expect(try await storage.migrate() == [])
                #expect(try await storage.appliedMigrations() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
            }
            // A second opening (a restart) finds the schema in place.
            try await withServerStorage(location, logger: testLogger, migrate: false) { storage async throws in
                #expect(try await storage.migrate() == [])
            }
        }
    }

    @Test(arguments: Engine.allCases)
    func aRecordPostedTwiceIsStoredOnce(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await Self.enrol(storage)
            let first = try await storage.storeRecords(machine: machine, records: Self.records(machine, 1...5), dropped: 0, now: Self.now)
            #expect(first == StoreOutcome(storedThrough: 5, inserted: 5))
            // The machine did not see the answer and sends 3...5 again with 6...8.
            let second = try await storage.storeRecords(machine: machine, records: Self.records(machine, 3...8), dropped: 2, now: Self.now)
            #expect(second == StoreOutcome(storedThrough: 8, inserted: 3))
            // An old batch again: nothing new, and stored-through does not go back.
            let third = try await storage.storeRecords(machine: machine, records: Self.records(machine, 1...2), dropped: 0, now: Self.now)
            #expect(third == StoreOutcome(storedThrough: 8, inserted: 0))
            let stored = try await storage.records(machine: machine)
            #expect(stored.map(\.record.sequence) == Array(1...8))
            #expect(stored.first?.record == Self.records(machine, 1...1).first?.record)
            #expect(try await storage.recordCount() == 8)
            #expect(try await storage.machine(id: machine)?.recordsDropped == 2)
        }
    }

    @Test(arguments: Engine.allCases)
    func recordsOfTwoMachinesWithTheSameSequenceAreBothKept(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let one = try await Self.enrol(storage, hostname: "pc1")
            let two = try await Self.enrol(storage, hostname: "pc2")
            _ = try await storage.storeRecords(machine: one, records: Self.records(one, 1...3), dropped: 0, now: Self.now)
            _ = try await storage.storeRecords(machine: two, records: Self.records(two, 1...3), dropped: 0, now: Self.now)
            #expect(try await storage.recordCount() == 6)
        }
    }

    @Test(arguments: Engine.allCases)
    func aFailedPostStoresNothing(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            // No such machine: the transaction rolls back whatever it inserted.
            await #expect(throws: (any Error).self) {
                try await storage.storeRecords(machine: "m-aaaaaaaaaaaaaaaaaaaa", records: Self.records("m-aaaaaaaaaaaaaaaaaaaa", 1...3), dropped: 0, now: Self.now)
            }
            #expect(try await storage.recordCount() == 0)
        }
    }

    @Test(arguments: Engine.allCases)
    func tokenUsesAreTakenAtomically(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let secret = try await Self.makeToken(storage, uses: 5)
            let hash = Secrets.hash(secret)
            // Twenty machines enrol at once with a token of five uses.
            let outcomes = await withTaskGroup(of: Result<String, TokenRefusal>?.self) { group in
                for index in 0..<20 {
                    group.addTask {
                        do {
                            let machine = NewMachine(id: Secrets.newMachineID(), publicKey: Secrets.newSecret(), hostname: "pc\(index)", version: "1.0")
                            return .success(try await storage.enrol(machine, tokenHash: hash, now: Self.now))
                        } catch let refusal as TokenRefusal {
                            return .failure(refusal)
                        } catch {
                            Issue.record("enrolment failed: \(error)")
                            return nil
                        }
                    }
                }
                var all: [Result<String, TokenRefusal>?] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            let enrolled = outcomes.filter { if case .success("lab2") = $0 { true } else { false } }
            let usedUp = outcomes.filter { if case .failure(.usedUp) = $0 { true } else { false } }
            #expect(enrolled.count == 5)
            #expect(usedUp.count == 15)
            #expect(try await storage.machines().count == 5)
            #expect(try await storage.enrolmentToken(hash: hash)?.usesLeft == 0)
        }
    }

    @Test(arguments: Engine.allCases)
    func refusedTokensChangeNothing(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let expired = try await Self.makeToken(storage, uses: 3, expiresAt: Self.now - 1)
            let machine = NewMachine(id: Secrets.newMachineID(), publicKey: Secrets.newSecret(), hostname: "pc", version: "1.0")
            await #expect(throws: TokenRefusal.expired) {
                try await storage.enrol(machine, tokenHash: Secrets.hash(expired), now: Self.now)
            }
            await #expect(throws: TokenRefusal.unknown) {
                try await storage.enrol(machine, tokenHash: Secrets.hash(Secrets.newSecret()), now: Self.now)
            }
            let once = try await Self.makeToken(storage, uses: 1)
            #expect(try await storage.enrol(machine, tokenHash: Secrets.hash(once), now: Self.now) == "lab2")
            let other = NewMachine(id: Secrets.newMachineID(), publicKey: Secrets.newSecret(), hostname: "pc2", version: "1.0")
            await #expect(throws: TokenRefusal.usedUp) {
                try await storage.enrol(other, tokenHash: Secrets.hash(once), now: Self.now)
            }
            #expect(try await storage.enrolmentToken(hash: Secrets.hash(expired))?.usesLeft == 3)
            #expect(try await storage.machines().map(\.id) == [machine.id])
        }
    }

    @Test(arguments: Engine.allCases)
    func retentionRemovesWholeOldDaysOnly(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await Self.enrol(storage)
            let day = RecordTime.millisecondsPerDay
            let today = RecordTime.startOfDay(Self.now * 1000)
            // Kept with 2 days: today, and the two whole days before it.
            let cutoff = Retention.cutoff(now: Self.now, days: 2)
            #expect(cutoff == today - 2 * day)
            let times: [Int64] = [
                cutoff - 10 * day,  // removed
                cutoff - day,  // removed
                cutoff - 1,  // the last millisecond of a removed day: removed
                cutoff,  // the first millisecond kept
                cutoff + day + 5,  // kept
                Self.now * 1000,  // kept
            ]
            var stored: [StoredRecord] = []
            for (index, time) in times.enumerated() {
                stored += Self.records(machine, Int64(index + 1)...Int64(index + 1), at: time - Int64(index + 1))
            }
            _ = try await storage.storeRecords(machine: machine, records: stored, dropped: 0, now: Self.now)
            #expect(try await Retention.apply(storage: storage, retentionDays: 2, now: Self.now) == 3)
            #expect(try await storage.records(machine: machine).map(\.timeMilliseconds) == Array(times[3...]))
            #expect(try await Retention.apply(storage: storage, retentionDays: 2, now: Self.now) == 0)
        }
    }

    @Test(arguments: Engine.allCases)
    func machinesCheckInsAndRevocation(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let id = try await Self.enrol(storage)
            var machine = try #require(try await storage.machine(id: id))
            #expect(machine.room == "lab2")
            #expect(machine.lastCheckIn == nil)
            #expect(machine.revokedAt == nil)
            let checkIn = CheckIn(
                version: "1.2", rulesVersion: 42, rulesSince: "2025-11-28T08:00:00Z", filterData: .running, filterDataRestarts: 1,
                failMode: .open, queueDrops: 3, recordsWaiting: 12, recordsDropped: 0, users: ["alice", "bob"])
            try await storage.recordCheckIn(machine: id, checkIn, now: Self.now)
            var later = checkIn
            later.queueDrops = 7
            try await storage.recordCheckIn(machine: id, later, now: Self.now + 60)
            machine = try #require(try await storage.machine(id: id))
            #expect(machine.lastCheckIn == later)
            #expect(machine.checkInAt == Self.now + 60)
            #expect(machine.previousQueueDrops == 3)
            #expect(try await storage.revokeMachine(id: id, now: Self.now + 100))
            #expect(try await storage.revokeMachine(id: "m-bbbbbbbbbbbbbbbbbbbb", now: Self.now) == false)
            #expect(try await storage.machine(id: id)?.revokedAt == Self.now + 100)
        }
    }

    @Test(arguments: Engine.allCases)
    func apiTokensAndPublishedVersion(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let made = Secrets.newAPIToken()
            try await storage.createAPIToken(StoredAPIToken(id: made.id, role: .auditor, createdBy: "test", createdAt: Self.now), hash: Secrets.hash(made.token))
            #expect(try await storage.apiToken(hash: Secrets.hash(made.token))?.role == .auditor)
            #expect(try await storage.apiToken(hash: Secrets.hash(made.token + "x")) == nil)
            #expect(try await storage.publishedVersion() == 0)
            try await storage.setPublishedVersion(43)
            try await storage.setPublishedVersion(44)
            #expect(try await storage.publishedVersion() == 44)
        }
    }
}
