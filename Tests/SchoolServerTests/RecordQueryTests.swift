import Foundation
@testable import SchoolServer
import Testing

/// The records query on both engines: each filter, combinations, paging,
/// and the indexes that serve it. Every result is checked against the same
/// filter applied to the records in memory.
@Suite struct RecordQueryTests {
    static let now = StorageTests.now
    static let base = now * 1000

    /// Three machines in two rooms and 240 records of four users, two groups,
    /// both actions and three categories (or none), over four days, with many
    /// records sharing a time across machines (the order's tie-breakers).
    struct Fleet {
        var machines: [(id: String, room: String)] = []
        var records: [StoredRecord] = []

        func room(of machine: String) -> String { machines.first { $0.id == machine }?.room ?? "" }
    }

    static func makeFleet(_ storage: SQLStorage) async throws -> Fleet {
        var fleet = Fleet()
        for (index, room) in ["lab2", "lab2", "lab3"].enumerated() {
            let secret = try await StorageTests.makeToken(storage, room: room)
            let id = Secrets.newMachineID()
            _ = try await storage.enrol(
                NewMachine(id: id, publicKey: Secrets.newSecret(), hostname: "pc\(index)", version: "1.0"), tokenHash: Secrets.hash(secret),
                now: now)
            fleet.machines.append((id, room))
        }
        let users = ["alice", "bob", "carol", "=cmd"]
        let categories: [String?] = ["gambling", "games", nil]
        for (machineIndex, machine) in fleet.machines.enumerated() {
            var batch: [StoredRecord] = []
            for sequence in Int64(1)...80 {
                let i = Int(sequence) + machineIndex
                // Every third record shares its time with the other machines' at the same sequence.
                let time = base + (sequence / 3) * 21_600_000 + (sequence % 3 == 0 ? 0 : Int64(machineIndex))
                batch.append(
                    StoredRecord(
                        machine: machine.id, timeMilliseconds: time,
                        record: MachineRecord(
                            sequence: sequence, time: RecordTime.format(milliseconds: time), uid: Int64(1000 + i % 4),
                            user: users[i % 4], group: i % 2 == 0 ? "students" : "staff", kind: "tls", host: "site\(i % 5).example",
                            action: i % 3 == 0 ? "allow" : "block", category: categories[i % 3], rulesVersion: 42)))
            }
            _ = try await storage.storeRecords(machine: machine.id, records: batch, dropped: 0, now: now)
            fleet.records += batch
        }
        return fleet
    }

    /// The query's answer, worked out in memory.
    static func expected(_ fleet: Fleet, _ query: RecordQuery) -> [StoredRecord] {
        fleet.records.filter { stored in
            let record = stored.record
            if let since = query.since, stored.timeMilliseconds < since { return false }
            if let until = query.until, stored.timeMilliseconds >= until { return false }
            if let user = query.user, record.user != user { return false }
            if let machine = query.machine, stored.machine != machine { return false }
            if let room = query.room, fleet.room(of: stored.machine) != room { return false }
            if let group = query.group, record.group != group { return false }
            if let action = query.action, record.action != action { return false }
            if let category = query.category, record.category != category { return false }
            return true
        }.sorted { ($0.timeMilliseconds, $0.machine, $0.record.sequence) < ($1.timeMilliseconds, $1.machine, $1.record.sequence) }
    }

    /// Every page of `query`, following `next` until the last page.
    static func allPages(_ storage: SQLStorage, _ query: RecordQuery) async throws -> (records: [QueriedRecord], pages: Int) {
        var query = query
        var records: [QueriedRecord] = []
        var pages = 0
        while true {
            let page = try await storage.queryRecords(query)
            pages += 1
            records += page.records
            #expect(page.records.count <= query.limit)
            guard let next = page.next else { break }
            #expect(page.records.count == query.limit)
            query.after = next
            if pages > 1000 { Issue.record("paging does not end"); break }
        }
        return (records, pages)
    }

    @Test(arguments: Engine.allCases)
    func eachFilterAndTheirCombinationsMatchTheRecordsInMemory(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let fleet = try await Self.makeFleet(storage)
            let machine = fleet.machines[1].id
            let day = RecordTime.millisecondsPerDay
            let queries: [RecordQuery] = [
                RecordQuery(limit: 1000),
                RecordQuery(since: Self.base + day, limit: 1000),
                RecordQuery(until: Self.base + day, limit: 1000),
                RecordQuery(since: Self.base + day, until: Self.base + 2 * day, limit: 1000),
                RecordQuery(user: "alice", limit: 1000),
                RecordQuery(machine: machine, limit: 1000),
                RecordQuery(room: "lab2", limit: 1000),
                RecordQuery(room: "lab3", limit: 1000),
                RecordQuery(group: "staff", limit: 1000),
                RecordQuery(action: "allow", limit: 1000),
                RecordQuery(category: "games", limit: 1000),
                RecordQuery(since: Self.base + day / 2, until: Self.base + 3 * day, user: "bob", limit: 1000),
                RecordQuery(since: Self.base + day, machine: machine, action: "block", limit: 1000),
                RecordQuery(user: "carol", room: "lab2", group: "students", category: "gambling", limit: 1000),
                RecordQuery(
                    since: Self.base, until: Self.base + 4 * day, user: "alice", machine: fleet.machines[0].id, room: "lab2",
                    group: "students", action: "allow", category: "gambling", limit: 1000),
                // Nothing matches: a user with no records, a machine in another room, an empty range.
                RecordQuery(user: "mallory", limit: 1000),
                RecordQuery(machine: fleet.machines[2].id, room: "lab2", limit: 1000),
                RecordQuery(since: Self.base + day, until: Self.base + day, limit: 1000),
                // A value that would change the statement if it were pasted into it.
                RecordQuery(user: "alice' OR '1'='1", limit: 1000),
            ]
            for query in queries {
                let expected = Self.expected(fleet, query)
                let page = try await storage.queryRecords(query)
                #expect(page.records.map(\.stored) == expected, "\(query)")
                #expect(page.next == nil)
            }
            #expect(Self.expected(fleet, queries[0]).count == 240)
            #expect(Self.expected(fleet, queries[14]).count > 0)
            // Each record comes with its machine's room and host name.
            let page = try await storage.queryRecords(RecordQuery(machine: fleet.machines[2].id, limit: 1))
            #expect(page.records.first?.room == "lab3")
            #expect(page.records.first?.hostname == "pc2")
        }
    }

    @Test(arguments: Engine.allCases)
    func pagingReturnsEveryRecordOnceInOrder(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let fleet = try await Self.makeFleet(storage)
            for (query, limit) in [(RecordQuery(), 7), (RecordQuery(), 100), (RecordQuery(user: "alice"), 4), (RecordQuery(room: "lab2", action: "block"), 9)] {
                var paged = query
                paged.limit = limit
                let (records, pages) = try await Self.allPages(storage, paged)
                let expected = Self.expected(fleet, query)
                #expect(records.map(\.stored) == expected)
                #expect(Set(records.map { "\($0.stored.machine)/\($0.stored.record.sequence)" }).count == records.count)
                // Fetching one more than the page tells the last page: a full last page has no next.
                #expect(pages == max(1, (expected.count + limit - 1) / limit))
                #expect(pages > 1)
            }
            // Records stored while a client pages, after its cursor, still come.
            var query = RecordQuery(limit: 100)
            let first = try await storage.queryRecords(query)
            let late = StoredRecord(
                machine: fleet.machines[0].id, timeMilliseconds: Self.base + 100 * RecordTime.millisecondsPerDay,
                record: MachineRecord(sequence: 81, time: RecordTime.format(milliseconds: Self.base + 100 * RecordTime.millisecondsPerDay), action: "block"))
            _ = try await storage.storeRecords(machine: late.machine, records: [late], dropped: 0, now: Self.now)
            query.after = first.next
            let (rest, _) = try await Self.allPages(storage, query)
            #expect(first.records.count + rest.count == 241)
            #expect(rest.last?.stored == late)
        }
    }

    @Test(arguments: Engine.allCases)
    func cursorTokensRoundTripAndGarbageIsRefused(engine: Engine) async throws {
        let cursor = RecordCursor(time: 1_764_320_400_250, machine: "m-abcdefghijklmnopqrst", sequence: 42)
        #expect(RecordCursor(token: cursor.token) == cursor)
        #expect(cursor.token.hasPrefix("r1."))
        for bad in [
            "", "r1.", "r2." + String(cursor.token.dropFirst(3)), "r1.!!!!", "r1." + Secrets.base64URL(Array("1.m-x.2".utf8)),
            "r1." + Secrets.base64URL(Array("1.m-abcdefghijklmnopqrst.0".utf8)),
            "r1." + Secrets.base64URL(Array("-1.m-abcdefghijklmnopqrst.3".utf8)),
            "r1." + Secrets.base64URL(Array("1.m-abcdefghijklmnopqrst.3.4".utf8)),
            "r1." + Secrets.base64URL(Array("99999999999999999999.m-abcdefghijklmnopqrst.3".utf8)),
            String(repeating: "A", count: 200),
        ] {
            #expect(RecordCursor(token: bad) == nil, "\(bad)")
        }
    }

    /// How the engines run the two filters a school asks most (a user and a
    /// date range, a machine and a date range), on enough rows for the
    /// planner to choose: from the index whose key ends in the query's
    /// order, with no sort of the matching records.
    @Test(arguments: Engine.allCases)
    func theUserAndMachineFiltersAreServedByTheirIndexes(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            var machines: [String] = []
            for index in 0..<20 {
                machines.append(try await StorageTests.enrol(storage, hostname: "pc\(index)"))
            }
            for (index, machine) in machines.enumerated() {
                let records = (Int64(1)...1000).map { sequence in
                    let time = Self.base + sequence * 60_000
                    return StoredRecord(
                        machine: machine, timeMilliseconds: time,
                        record: MachineRecord(
                            sequence: sequence, time: RecordTime.format(milliseconds: time), user: "user\((index * 7 + Int(sequence)) % 10)",
                            action: "block"))
                }
                _ = try await storage.storeRecords(machine: machine, records: records, dropped: 0, now: Self.now)
            }
            try await storage.engine.run("ANALYZE")
            let since = Self.base + 3_600_000
            let until = Self.base + 36_000_000
            // About 1,000 records of the user and 540 of the machine in the range: more than
            // a page, as a school's user or machine over a week is (PostgreSQL rightly
            // sorts a few dozen matches rather than read an index in order).
            let byUser = try await storage.explainRecordsQuery(RecordQuery(since: since, until: until, user: "user7"))
            let byMachine = try await storage.explainRecordsQuery(RecordQuery(since: since, until: until, machine: machines[3]))
            let byUserAfter = try await storage.explainRecordsQuery(
                RecordQuery(since: since, user: "user7", after: RecordCursor(time: since + 60_000, machine: machines[3], sequence: 9)))
            for (plan, index) in [(byUser, "records_user_time_key"), (byMachine, "records_machine_time_key"), (byUserAfter, "records_user_time_key")] {
                #expect(plan.contains(index), "\(plan)")
                // SQLite says USE TEMP B-TREE FOR ORDER BY, PostgreSQL a Sort node, when it sorts.
                #expect(!plan.contains("TEMP B-TREE") && !plan.contains("Sort"), "\(plan)")
            }
        }
    }
}
