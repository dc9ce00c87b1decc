import Foundation
@testable import SchoolServer
import Testing

/// The accounts' storage (schema step 4) on both engines: people, sessions,
/// sign-in states, the audit trail, API token scopes, and the records
/// query's scope.
@Suite struct AccountStorageTests {
    static let now: Int64 = 1_764_320_400

    static func person(_ login: String, role: Role = .teacher, scope: Scope = Scope(rooms: ["lab2"])) -> StoredPerson {
        StoredPerson(
            login: login, displayName: "Person \(login)", role: role, scope: scope, method: .local, passwordHash: "$2b$12$x",
            createdBy: "cli:test", createdAt: now)
    }

    @Test(arguments: Engine.allCases)
    func peopleAreAddedChangedAndRemovedWithTheirSessions(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let teacher = Self.person("t.one@school", scope: Scope(rooms: ["lab2", "lab1"], groups: ["7a"]))
            #expect(try await storage.addPerson(teacher))
            #expect(try await !storage.addPerson(Self.person("t.one@school", role: .admin, scope: .school)))
            let stored = try #require(try await storage.person(login: "t.one@school"))
            #expect(stored == teacher)
            #expect(stored.scope.rooms == ["lab1", "lab2"])
            #expect(try await storage.person(login: "nobody") == nil)
            #expect(try await storage.addPerson(Self.person("admin", role: .admin, scope: .school)))
            #expect(try await storage.people().map(\.login) == ["admin", "t.one@school"])

            var changed = stored
            changed.role = .safeguarding
            changed.scope = .school
            changed.disabledAt = Self.now
            #expect(try await storage.updatePerson(changed))
            #expect(try await storage.person(login: "t.one@school") == changed)
            var ghost = changed
            ghost.login = "ghost"
            #expect(try await !storage.updatePerson(ghost))

            for index in 0..<2 {
                try await storage.addSession(
                    StoredSession(
                        hash: "h\(index)", login: "t.one@school", csrfToken: "c\(index)", createdAt: Self.now, lastSeen: Self.now,
                        expiresAt: Self.now + 3600, method: .local))
            }
            try await storage.addSession(
                StoredSession(hash: "a", login: "admin", csrfToken: "c", createdAt: Self.now, lastSeen: Self.now, expiresAt: Self.now + 3600, method: .local))
            #expect(try await storage.sessions(login: "t.one@school").count == 2)
            #expect(try await storage.removePerson(login: "t.one@school"))
            #expect(try await !storage.removePerson(login: "t.one@school"))
            #expect(try await storage.session(hash: "h0") == nil)
            #expect(try await storage.session(hash: "a") != nil)
        }
    }

    @Test(arguments: Engine.allCases)
    func failedSignInsLockAnAccountAndASuccessClearsThem(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            #expect(try await storage.addPerson(Self.person("alice")))
            // Four failures of five: counted, not locked.
            for _ in 1...4 { #expect(try await !storage.recordFailedSignIn(login: "alice", now: Self.now, lockAfter: 5, lockFor: 900)) }
            #expect(try await storage.person(login: "alice")?.failedAttempts == 4)
            // The fifth locks it for 900 s and starts the count again.
            #expect(try await storage.recordFailedSignIn(login: "alice", now: Self.now, lockAfter: 5, lockFor: 900))
            var alice = try #require(try await storage.person(login: "alice"))
            #expect(alice.lockedUntil == Self.now + 900)
            #expect(alice.failedAttempts == 0)
            // While locked, failures change nothing: the lock is not extended.
            #expect(try await !storage.recordFailedSignIn(login: "alice", now: Self.now + 100, lockAfter: 5, lockFor: 900))
            alice = try #require(try await storage.person(login: "alice"))
            #expect(alice.lockedUntil == Self.now + 900)
            #expect(alice.failedAttempts == 0)
            // After the lock, they count again; a success clears them.
            #expect(try await !storage.recordFailedSignIn(login: "alice", now: Self.now + 901, lockAfter: 5, lockFor: 900))
            #expect(try await storage.person(login: "alice")?.failedAttempts == 1)
            try await storage.recordSignIn(login: "alice", now: Self.now + 902)
            alice = try #require(try await storage.person(login: "alice"))
            #expect(alice.failedAttempts == 0)
            #expect(alice.lockedUntil == nil)
            #expect(alice.lastSignInAt == Self.now + 902)
            // An unknown login counts nothing and locks nothing.
            #expect(try await !storage.recordFailedSignIn(login: "nobody", now: Self.now, lockAfter: 1, lockFor: 900))
        }
    }

    @Test(arguments: Engine.allCases)
    func sessionsAreTouchedForwardAndRemoved(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            #expect(try await storage.addPerson(Self.person("alice")))
            #expect(try await storage.addPerson(Self.person("bob")))
            func session(_ hash: String, _ login: String, lastSeen: Int64 = Self.now, expiresAt: Int64 = Self.now + 3600) -> StoredSession {
                StoredSession(hash: hash, login: login, csrfToken: "csrf-" + hash, createdAt: Self.now, lastSeen: lastSeen, expiresAt: expiresAt, method: .local)
            }
            try await storage.addSession(session("one", "alice"))
            try await storage.addSession(session("two", "alice"))
            try await storage.addSession(session("three", "bob"))
            #expect(try await storage.session(hash: "one") == session("one", "alice"))
            try await storage.touchSession(hash: "one", now: Self.now + 120)
            try await storage.touchSession(hash: "one", now: Self.now + 60)
            #expect(try await storage.session(hash: "one")?.lastSeen == Self.now + 120)
            #expect(try await storage.removeSession(hash: "one"))
            #expect(try await !storage.removeSession(hash: "one"))
            #expect(try await storage.removeSessions(login: "alice") == 1)
            #expect(try await storage.session(hash: "three") != nil)

            // Ended: past its end, or idle since before the limit.
            try await storage.addSession(session("old", "bob", expiresAt: Self.now))
            try await storage.addSession(session("idle", "bob", lastSeen: Self.now - 4000))
            #expect(try await storage.removeEndedSessions(now: Self.now, idleBefore: Self.now - 1800) == 2)
            #expect(try await storage.sessions(login: "bob").map(\.hash) == ["three"])
        }
    }

    @Test(arguments: Engine.allCases)
    func aSignInStateIsTakenOnceAndAnOldOneNever(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let state = StoredSignInState(hash: "s1", verifier: "v", nonce: "n", returnPath: "/console/records", createdAt: Self.now)
            try await storage.addSignInState(state)
            try await storage.addSignInState(StoredSignInState(hash: "old", verifier: "v", nonce: "n", returnPath: "/console/", createdAt: Self.now - 700))
            #expect(try await storage.takeSignInState(hash: "s1", notBefore: Self.now - 600) == state)
            #expect(try await storage.takeSignInState(hash: "s1", notBefore: Self.now - 600) == nil)
            #expect(try await storage.takeSignInState(hash: "old", notBefore: Self.now - 600) == nil)
            // Taken at once by many: one gets it.
            try await storage.addSignInState(StoredSignInState(hash: "s2", verifier: "v", nonce: "n", returnPath: "/console/", createdAt: Self.now))
            let taken = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<8 { group.addTask { try await storage.takeSignInState(hash: "s2", notBefore: Self.now - 600) != nil } }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(taken == 1)
            // The OpenID client's store over the same table.
            let store = StoredSignInStates(storage: storage)
            let pending = PendingSignIn(stateHash: "s3", verifier: "v3", nonce: "n3", returnTo: "/console/audit", createdAt: Self.now)
            try await store.add(pending)
            #expect(try await store.take(stateHash: "s3", notBefore: Self.now - 600) == pending)
            #expect(try await store.take(stateHash: "s3", notBefore: Self.now - 600) == nil)
        }
    }

    @Test(arguments: Engine.allCases)
    func theAuditTrailIsNewestFirstFilteredAndPaged(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            for index in 0..<7 {
                try await storage.audit(
                    NewAuditEvent(
                        time: Self.now + Int64(index / 2), actor: index % 3 == 0 ? "person:alice" : "cli:root",
                        action: index % 2 == 0 ? "policy.set" : "sign-in", target: "t\(index)", reason: "r\(index)", detail: nil))
            }
            let all = try await storage.auditEvents(AuditQuery(limit: 100))
            #expect(all.events.map(\.event.target) == ["t6", "t5", "t4", "t3", "t2", "t1", "t0"])
            #expect(all.next == nil)
            #expect(all.events.first?.event.reason == "r6")
            #expect(all.events.allSatisfy { AuditEventID.isID($0.id) })

            // Pages of three, each after the last: every event once, in order.
            #expect(try await Self.pages(storage, size: 3) == ["t6", "t5", "t4", "t3", "t2", "t1", "t0"])

            #expect(try await storage.auditEvents(AuditQuery(actor: "person:alice")).events.map(\.event.target) == ["t6", "t3", "t0"])
            #expect(try await storage.auditEvents(AuditQuery(action: "sign-in")).events.map(\.event.target) == ["t5", "t3", "t1"])
            #expect(
                try await storage.auditEvents(AuditQuery(since: Self.now + 1, until: Self.now + 3)).events.map(\.event.target)
                    == ["t5", "t4", "t3", "t2"])
            #expect(AuditCursor(token: "a1.5.x") == nil)
        }
    }

    /// The targets of every event, read in pages of `size` through the cursor's token.
    static func pages(_ storage: SQLStorage, size: Int) async throws -> [String] {
        var seen: [String] = []
        var cursor: AuditCursor? = nil
        while true {
            let page = try await storage.auditEvents(AuditQuery(after: cursor, limit: size))
            seen += page.events.compactMap { $0.event.target }
            guard let next = page.next else { return seen }
            cursor = AuditCursor(token: next.token)
            guard cursor == next else { return [] }
        }
    }

    @Test(arguments: Engine.allCases)
    func anAPITokenKeepsItsScope(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let scope = Scope(rooms: ["lab2"], groups: ["7a", "7b"])
            try await storage.createAPIToken(StoredAPIToken(id: "abc", role: .teacher, scope: scope, createdBy: "cli:t", createdAt: Self.now), hash: "h1")
            try await storage.createAPIToken(StoredAPIToken(id: "def", role: .admin, createdBy: "cli:t", createdAt: Self.now), hash: "h2")
            #expect(try await storage.apiToken(hash: "h1")?.scope == scope)
            #expect(try await storage.apiToken(hash: "h2")?.scope == .school)
        }
    }

    @Test(arguments: Engine.allCases)
    func theRecordsQueryKeepsToItsScope(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            // lab2: alice of 7a; lab3: bob of 7b, and carol of 7a.
            let lab2 = try await StorageTests.enrol(storage, hostname: "pc2")
            let lab3Secret = try await StorageTests.makeToken(storage, room: "lab3")
            let lab3 = Secrets.newMachineID()
            _ = try await storage.enrol(
                NewMachine(id: lab3, publicKey: Secrets.newSecret(), hostname: "pc3", version: "1"), tokenHash: Secrets.hash(lab3Secret), now: Self.now)
            func record(_ machine: String, _ sequence: Int64, _ user: String, _ group: String) -> StoredRecord {
                StoredRecord(
                    machine: machine, timeMilliseconds: Self.now * 1000 + sequence,
                    record: MachineRecord(sequence: sequence, time: RecordTime.format(milliseconds: Self.now * 1000 + sequence), user: user, group: group, action: "block"))
            }
            _ = try await storage.storeRecords(machine: lab2, records: [record(lab2, 1, "alice", "7a")], dropped: 0, now: Self.now)
            _ = try await storage.storeRecords(
                machine: lab3, records: [record(lab3, 2, "bob", "7b"), record(lab3, 3, "carol", "7a")], dropped: 0, now: Self.now)
            func users(_ scope: Scope, user: String? = nil) async throws -> [String] {
                try await storage.queryRecords(RecordQuery(user: user, scope: scope)).records.compactMap(\.stored.record.user)
            }
            #expect(try await users(.school) == ["alice", "bob", "carol"])
            #expect(try await users(Scope(rooms: ["lab2"])) == ["alice"])
            #expect(try await users(Scope(rooms: ["lab3"])) == ["bob", "carol"])
            #expect(try await users(Scope(groups: ["7a"])) == ["alice", "carol"])
            #expect(try await users(Scope(rooms: ["lab2"], groups: ["7b"])) == ["alice", "bob"])
            #expect(try await users(Scope(rooms: ["lab9"])) == [])
            // The scope narrows the filters, never widens them.
            #expect(try await users(Scope(rooms: ["lab2"]), user: "bob") == [])
        }
    }

    @Test(arguments: Engine.allCases)
    func theCategoryFilterIsServedByItsIndex(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let plan = try await storage.explainRecordsQuery(RecordQuery(since: Self.now * 1000, category: "gambling"))
            // On an empty table PostgreSQL may plan a sequential scan; SQLite names the index it would use.
            if engine == .sqlite { #expect(plan.contains("records_category_time_key"), "\(plan)") }
        }
    }
}
