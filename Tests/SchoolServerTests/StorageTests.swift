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
                #expect(try await storage.migrate() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
                #expect(try await storage.migrate() == [])
                #expect(try await storage.appliedMigrations() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
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
            var periods = ServerConfiguration.Retention()
            periods.records = 2
            #expect(try await Retention.apply(storage: storage, periods: periods, now: Self.now).records == 3)
            #expect(try await storage.records(machine: machine).map(\.timeMilliseconds) == Array(times[3...]))
            #expect(try await Retention.apply(storage: storage, periods: periods, now: Self.now) == Retention.Removed())
        }
    }

    /// Each kind goes after its own days, the alerts with their deliveries and
    /// the digests with their emails; what is younger stays.
    @Test(arguments: Engine.allCases)
    func retentionRemovesEachKindPastItsOwnDays(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await Self.enrol(storage)
            let day: Int64 = 86_400
            var periods = ServerConfiguration.Retention()
            periods.records = 10
            periods.accessRequests = 20
            periods.alerts = 400
            periods.digests = 40
            periods.audit = 500
            // One of each kind just past its days (a whole UTC day and more), and one just within.
            for (offset, sequence) in [(-(10 + 2) * day, Int64(1)), (-(400 + 2) * day, 2), (-(400 - 2) * day, 3), (0, 4)] {
                let danger = AlertTests.record(machine, sequence, user: "pupil\(sequence)", offset: offset)
                _ = try await AlertTests.store(storage, machine, [danger], now: Self.now + offset)
            }
            let alerts = try await storage.alerts(AlertQuery()).alerts
            #expect(alerts.count == 4)
            for alert in alerts {
                _ = try await storage.addAlertDeliveries(
                    [NewAlertDelivery(alertID: alert.id, channel: .email, target: "dsl@school.example", message: "{}")], now: alert.createdAt)
            }
            for (index, offset) in [-(20 + 2) * day, -(20 - 2) * day].enumerated() {
                _ = try await storage.storeAccessRequests(
                    machine: machine, room: "lab2",
                    [NewAccessRequest(machineRequest: "0000000\(index)", user: "pupil", group: "7a", host: "a.example", url: "https://a.example/",
                        category: "games", reason: "homework", createdAt: Self.now + offset)],
                    now: Self.now + offset)
            }
            var periodStarts: [Int64] = []
            for (index, offset) in [-(40 + 2) * day, -(40 - 2) * day].enumerated() {
                let period = (Self.now + offset) * 1000..<(Self.now + offset + 7 * day) * 1000
                periodStarts.append(period.lowerBound)
                _ = try await storage.claimDigest(
                    NewDigestClaim(kind: .weekly, period: period, login: "dsl", address: "dsl@school.example", deliveryID: "dg-\(index)",
                        message: "To: dsl@school.example\n\npupil\n"), now: Self.now + offset)
            }
            for offset in [-(500 + 2) * day, -(500 - 2) * day] {
                try await storage.audit(NewAuditEvent(time: Self.now + offset, actor: "dsl", action: "person.view", target: "pupil"))
            }
            let scope = LiveScope(kind: .room, value: "lab2")
            var items: [String] = []
            for offset in [-(10 + 2) * day, -day] {
                items.append(try await storage.addLiveItem(
                    NewLiveItem(scope: scope, action: "allow", targets: ["a.example"], from: Self.now + offset, until: Self.now + offset + 600,
                        byAuthor: "t", byName: "T", reason: "pupil"), now: Self.now + offset).id)
            }

            let removed = try await Retention.apply(storage: storage, periods: periods, now: Self.now)
            #expect(removed.records == 3, "the records of pupils 1, 2 and 3")
            #expect(removed.kinds == [.alerts: 1, .accessRequests: 1, .digests: 1, .audit: 1, .liveItems: 1])
            // Alerts 3 and 4 stay, and their deliveries; record 2's alert and its delivery are gone.
            let kept = try await storage.alerts(AlertQuery()).alerts
            #expect(Set(kept.map(\.recordSequence)) == [1, 3, 4], "the alert of a record past the records' days is kept for the alerts' days")
            let gone = try #require(alerts.first { $0.recordSequence == 2 })
            #expect(try await storage.alertDeliveries(alertID: gone.id).isEmpty)
            for alert in kept { #expect(try await storage.alertDeliveries(alertID: alert.id).count == 1) }
            #expect(try await storage.accessRequests(AccessRequestQuery()).map(\.request.machineRequest) == ["00000001"])
            #expect(try await storage.digestClaims(kind: .weekly, periodStart: periodStarts[0]).isEmpty)
            #expect(try await storage.digestClaims(kind: .weekly, periodStart: periodStarts[1]).map(\.deliveryID) == ["dg-1"])
            #expect(try await storage.digestDeliveryCounts() == [.waiting: 1], "the kept digest's email, and not the other's")
            #expect(try await storage.auditEvents(AuditQuery()).events.map(\.event.time) == [Self.now - (500 - 2) * day])
            #expect(try await storage.liveItem(id: items[0]) == nil, "ended before the records' cutoff")
            #expect(try await storage.liveItem(id: items[1]) != nil)
            // A second pass finds nothing.
            #expect(try await Retention.apply(storage: storage, periods: periods, now: Self.now) == Retention.Removed())
        }
    }

    /// Retention in batches: more rows than a batch go in several statements, every one of them.
    @Test(arguments: Engine.allCases)
    func retentionRemovesALongBacklogInBatches(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let old = Self.now - 800 * 86_400
            for index in 0..<(Retention.batch * 2 + 5) {
                try await storage.audit(NewAuditEvent(time: old + Int64(index), actor: "dsl", action: "person.view", target: "pupil"))
            }
            try await storage.audit(NewAuditEvent(time: Self.now, actor: "dsl", action: "person.view", target: "pupil"))
            #expect(try await storage.removeOld(.audit, before: old + 10, limit: 4) == 4, "a batch is at most its limit, the oldest first")
            var periods = ServerConfiguration.Retention()
            (periods.alerts, periods.audit) = (365, 365)
            let removed = try await Retention.apply(storage: storage, periods: periods, now: Self.now)
            #expect(removed.kinds[.audit] == Int64(Retention.batch * 2 + 1))
            #expect(try await storage.auditEvents(AuditQuery()).events.map(\.event.time) == [Self.now])
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
