import Foundation
@testable import SchoolServer
import Testing

/// The console's queries on both engines: the dashboard's blocks of the
/// last hour in a scope, the user names behind pseudonyms, the pseudonym
/// key, the records query's scope and kind; and how each engine runs them.
@Suite struct ConsoleStorageTests {
    static let now = StorageTests.now
    static let base = now * 1000

    /// A machine enrolled in `room`.
    static func enrol(_ storage: SQLStorage, room: String, hostname: String) async throws -> String {
        let secret = try await StorageTests.makeToken(storage, room: room)
        let id = Secrets.newMachineID()
        _ = try await storage.enrol(
            NewMachine(id: id, publicKey: Secrets.newSecret(), hostname: hostname, version: "1.0"), tokenHash: Secrets.hash(secret), now: now)
        return id
    }

    static func record(
        _ machine: String, _ sequence: Int64, at time: Int64, user: String?, group: String?, action: String = "block",
        category: String? = "games", host: String? = "game.example", kind: String = "tls"
    ) -> StoredRecord {
        StoredRecord(
            machine: machine, timeMilliseconds: time,
            record: MachineRecord(
                sequence: sequence, time: RecordTime.format(milliseconds: time), user: user, group: group, kind: kind, host: host,
                action: action, category: category))
    }

    @Test(arguments: Engine.allCases)
    func theLastHoursBlocksAreCountedInScope(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let lab2 = try await Self.enrol(storage, room: "lab2", hostname: "lab2-pc1")
            let lab3 = try await Self.enrol(storage, room: "lab3", hostname: "lab3-pc1")
            let hour = Self.base - 3_600_000
            _ = try await storage.storeRecords(
                machine: lab2,
                records: [
                    Self.record(lab2, 1, at: hour - 1, user: "old", group: "year7"),  // before the window
                    Self.record(lab2, 2, at: hour, user: "a", group: "year7"),
                    Self.record(lab2, 3, at: hour + 10, user: "a", group: "year7", category: "gambling", host: "bet.example"),
                    Self.record(lab2, 4, at: hour + 20, user: "a", group: "year7", action: "allow"),
                    Self.record(lab2, 5, at: hour + 30, user: "a", group: "year7", category: nil, host: "deny.example"),
                    Self.record(lab2, 6, at: Self.base, user: "a", group: "year7"),  // the window's end is not in it
                ], dropped: 0, now: Self.now)
            _ = try await storage.storeRecords(
                machine: lab3,
                records: [
                    Self.record(lab3, 1, at: hour + 40, user: "b", group: "year8"),
                    Self.record(lab3, 2, at: hour + 50, user: "c", group: "year7"),
                ], dropped: 0, now: Self.now)

            func counts(_ scope: Scope) async throws -> [String: Int64] {
                var table: [String: Int64] = [:]
                for count in try await storage.blockCounts(since: hour, until: Self.base, scope: scope) {
                    table["\(count.category ?? "-")/\(count.host ?? "-")"] = count.count
                }
                return table
            }
            #expect(
                try await counts(.school) == ["games/game.example": 3, "gambling/bet.example": 1, "-/deny.example": 1])
            #expect(try await counts(Scope(rooms: ["lab2"])) == ["games/game.example": 1, "gambling/bet.example": 1, "-/deny.example": 1])
            #expect(try await counts(Scope(rooms: ["lab3"])) == ["games/game.example": 2])
            // A group's records in any room: lab2's three of year7 and lab3's one.
            #expect(
                try await counts(Scope(groups: ["year7"])) == ["games/game.example": 2, "gambling/bet.example": 1, "-/deny.example": 1])
            #expect(try await counts(Scope(rooms: ["lab3"], groups: ["nobody"])) == ["games/game.example": 2])
            #expect(try await counts(Scope(rooms: ["lab9"])) == [:])
        }
    }

    @Test(arguments: Engine.allCases)
    func theRecordsQueryKeepsToTheScopeAndFiltersByKind(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let lab2 = try await Self.enrol(storage, room: "lab2", hostname: "lab2-pc1")
            let lab3 = try await Self.enrol(storage, room: "lab3", hostname: "lab3-pc1")
            _ = try await storage.storeRecords(
                machine: lab2,
                records: [
                    Self.record(lab2, 1, at: Self.base + 1, user: "a", group: "year7", kind: "dns"),
                    Self.record(lab2, 2, at: Self.base + 2, user: "b", group: "year8"),
                ], dropped: 0, now: Self.now)
            _ = try await storage.storeRecords(
                machine: lab3,
                records: [
                    Self.record(lab3, 1, at: Self.base + 3, user: "c", group: "year7"),
                    Self.record(lab3, 2, at: Self.base + 4, user: "d", group: nil),
                ], dropped: 0, now: Self.now)
            func users(_ query: RecordQuery) async throws -> [String] {
                try await storage.queryRecords(query).records.compactMap(\.stored.record.user)
            }
            #expect(try await users(RecordQuery()) == ["a", "b", "c", "d"])
            #expect(try await users(RecordQuery(scope: Scope(rooms: ["lab2"]))) == ["a", "b"])
            #expect(try await users(RecordQuery(scope: Scope(groups: ["year7"]))) == ["a", "c"])
            #expect(try await users(RecordQuery(scope: Scope(rooms: ["lab3"], groups: ["year8"]))) == ["b", "c", "d"])
            #expect(try await users(RecordQuery(scope: Scope(rooms: ["lab9"]))) == [])
            // A filter never widens the scope.
            #expect(try await users(RecordQuery(room: "lab3", scope: Scope(rooms: ["lab2"]))) == [])
            #expect(try await users(RecordQuery(kind: "dns")) == ["a"])
            #expect(try await users(RecordQuery(kind: "tls", scope: Scope(groups: ["year7"]))) == ["c"])
            // Paging within the scope.
            let first = try await storage.queryRecords(RecordQuery(limit: 2, scope: Scope(rooms: ["lab3"], groups: ["year8"])))
            #expect(first.records.compactMap(\.stored.record.user) == ["b", "c"])
            let rest = try await users(RecordQuery(after: first.next, limit: 2, scope: Scope(rooms: ["lab3"], groups: ["year8"])))
            #expect(rest == ["d"])
        }
    }

    @Test(arguments: Engine.allCases)
    func userNamesAndThePseudonymKey(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            #expect(try await storage.recordUserNames(limit: 10) == [])
            let machine = try await Self.enrol(storage, room: "lab2", hostname: "pc")
            let names = ["zoe", "alice", "bob", "alice", "bob", "Émile", "o'brien"]
            let records = names.enumerated().map { Self.record(machine, Int64($0.offset + 1), at: Self.base + Int64($0.offset), user: $0.element, group: nil) }
                + [Self.record(machine, 100, at: Self.base + 100, user: nil, group: nil)]
            _ = try await storage.storeRecords(machine: machine, records: records, dropped: 0, now: Self.now)
            let found = try await storage.recordUserNames(limit: 100)
            #expect(Set(found) == ["alice", "bob", "o'brien", "zoe", "Émile"])
            #expect(found.count == 5)
            #expect(try await storage.recordUserNames(limit: 2).count == 2)

            let key = try await storage.pseudonymKey()
            #expect(key.count == 32)
            #expect(try await storage.pseudonymKey() == key)

            // The directory finds a name by its pseudonym, and says when it knows none.
            let directory = PseudonymDirectory(storage: storage)
            let pseudonyms = try await directory.current()
            #expect(pseudonyms.of("bob") == Pseudonyms(key: key).of("bob"))
            #expect(try await directory.resolve(pseudonyms.of("bob"), now: Self.now) == .user("bob"))
            #expect(try await directory.resolve("pupil-00000000", now: Self.now) == .unknown)
            // A new pupil's first records: found once the minute has passed.
            _ = try await storage.storeRecords(
                machine: machine, records: [Self.record(machine, 200, at: Self.base + 200, user: "newcomer", group: nil)], dropped: 0, now: Self.now)
            #expect(try await directory.resolve(pseudonyms.of("newcomer"), now: Self.now + 1) == .unknown)
            #expect(try await directory.resolve(pseudonyms.of("newcomer"), now: Self.now + 61) == .user("newcomer"))
        }
    }

    /// On enough rows for the planners to choose: the hour's blocks are read
    /// from a range of an index (never the whole table), the user
    /// names by seeks into the user index.
    @Test(arguments: Engine.allCases)
    func theDashboardsQueriesUseTheIndexes(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            var machines: [String] = []
            for index in 0..<20 {
                machines.append(try await Self.enrol(storage, room: "lab\(index % 4)", hostname: "pc\(index)"))
            }
            for (index, machine) in machines.enumerated() {
                // 1,000 records a machine, a minute apart: 20,000 over about 17 hours.
                let records = (Int64(1)...1000).map { sequence in
                    Self.record(
                        machine, sequence, at: Self.base + sequence * 60_000, user: "user\((index * 7 + Int(sequence)) % 300)",
                        group: "year\(sequence % 6 + 7)", action: sequence % 3 == 0 ? "block" : "allow",
                        category: "c\(sequence % 5)", host: "h\(sequence % 50).example")
                }
                _ = try await storage.storeRecords(machine: machine, records: records, dropped: 0, now: Self.now)
            }
            try await storage.engine.run("ANALYZE")
            let since = Self.base + 5 * 3_600_000
            for scope in [Scope.school, Scope(rooms: ["lab1"]), Scope(rooms: ["lab1", "lab2"], groups: ["year8"])] {
                let plan = try await storage.explainBlockCounts(since: since, until: since + 3_600_000, scope: scope)
                // A time range of an index: the time index, the machine index (a range per machine of a
                // few rooms) or the category index (a range per category).
                #expect(plan.contains("_time_key"), "\(scope): \(plan)")
                // SQLite says SCAN records, PostgreSQL Seq Scan on records, when it reads the whole table.
                #expect(!plan.contains("SCAN records") && !plan.contains("Seq Scan on records"), "\(scope): \(plan)")
            }
            let names = try await storage.explainRecordUserNames()
            #expect(names.contains("records_user_time_key"), "\(names)")
            #expect(!names.contains("SCAN records") && !names.contains("Seq Scan on records"), "\(names)")
            #expect(try await storage.recordUserNames(limit: 1000).count == 300)
        }
    }
}
