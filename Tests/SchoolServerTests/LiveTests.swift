import Crypto
import Foundation
import Logging
import NIOHTTP1
@testable import SchoolServer
import ServiceLifecycle
import SharedStore
import Testing

/// The live channel (docs/server.md, "The live channel"), on both engines:
/// the live key, the signed state, the long poll, room rules and their
/// bounds, and the wake-up across two server instances on one PostgreSQL.
// A hang (a server that never stops) fails the suite instead of holding CI for its 90 minutes.
@Suite(.timeLimit(.minutes(10))) struct LiveTests {
    /// A policy whose live: names `key`: 60 minutes at most, no pause, lab2 only, adult locked.
    static func policy(key: String) -> String {
        """
        locked: [adult]
        live:
          keys: ["\(key)"]
          actions: [allow, block, focus]
          longest: 1h
          rooms: [lab2]
        policy:
          block: [adult, gambling]
        """
    }

    static func poll(_ server: RunningServer, _ machine: TestMachine, after: Int64, wait: Int) async throws -> PinnedHTTPSClient.Answer {
        try await server.post("/api/v1/machine/live", #"{"after":\#(after),"wait":\#(wait)}"#, signedBy: machine)
    }

    /// The payload of a 200, its signature checked against `key` first.
    static func payload(_ answer: PinnedHTTPSClient.Answer, key: LiveKey) throws -> LiveChannel.Payload {
        #expect(answer.status == 200, "\(answer.text)")
        let envelope = try JSONDecoder().decode(LiveChannel.Envelope.self, from: Data(answer.body))
        #expect(envelope.key == key.publicText)
        let bytes = try #require(Data(base64Encoded: envelope.payload))
        let signature = try #require(Data(base64Encoded: envelope.signature))
        #expect(key.publicKey.key.isValidSignature(signature, for: bytes), "the state's signature does not check with the live key")
        return try JSONDecoder().decode(LiveChannel.Payload.self, from: bytes)
    }

    static func addRule(_ server: RunningServer, room: String, token: String, _ body: String) async throws -> PinnedHTTPSClient.Answer {
        try await server.client.request(
            .POST, "/api/v1/rooms/\(room)/rules", headers: [("Authorization", "Bearer \(token)")], body: Array(body.utf8))
    }

    /// Returns once `hub` holds `count` requests (a held poll has reached it).
    static func untilHeld(_ hub: LiveHub, _ count: Int = 1) async throws {
        for _ in 0..<2000 {
            if await hub.held >= count { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("no request was held")
    }

    /// A publishing server whose published policy's live: names its live key,
    /// with a machine in lab2, and API tokens: an admin, teachers of lab2 and lab3.
    struct Setup: Sendable {
        let publishing: PublishingServer
        let live: LiveChannel
        let machine: TestMachine
        let teacher2: String
        let teacher3: String
        var server: RunningServer { publishing.server }
    }

    static func withLiveServer(_ engine: Engine, _ body: @Sendable (Setup) async throws -> Void) async throws {
        let live = LiveChannel(key: LiveKey(signing: BundleSigningKey()), recheck: .seconds(3600))
        try await withPublishingServer(engine, live: live) { publishing async throws in
            try await publishing.putList("adult", ["adult.example"])
            try await publishing.putList("gambling", ["casino.example"])
            #expect(try await publishing.putPolicy(policy(key: live.key.publicText)).status == 201)
            _ = try await publishing.publish()
            let machine = try await publishing.server.enrol(TestMachine(), room: "lab2")
            let storage = publishing.storage
            let teacher2 = try await ServerAdministration.createAPIToken(
                storage: storage, role: .teacher, scope: Scope(rooms: ["lab2"]), createdBy: "t", now: 0)
            let teacher3 = try await ServerAdministration.createAPIToken(
                storage: storage, role: .teacher, scope: Scope(rooms: ["lab3"]), createdBy: "t", now: 0)
            try await body(Setup(publishing: publishing, live: live, machine: machine, teacher2: teacher2.token, teacher3: teacher3.token))
        }
    }

    // MARK: The live key

    @Test(arguments: Engine.allCases)
    func theLiveKeyIsMadeAtStartAndKeptAcrossRestarts(engine: Engine) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-live-key-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let box = ConfigurationBox()
        try await withTestDatabase(engine) { location async throws in
            try await withRunningServer(at: location, configure: { configuration in
                configuration.stateDirectoryOverride = folder
                box.set(configuration)
            }) { _ async throws in }
            let path = LiveKey.path(configuration: box.configuration)
            let first = try LiveKey.load(path: path).publicText
            let mode = try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
            #expect(mode == 0o600)
            // A restart reads it again; `live-key` prints it; init keeps it.
            try await withRunningServer(at: location, configure: { $0.stateDirectoryOverride = folder }) { _ async throws in }
            #expect(try LiveKey.load(path: path).publicText == first)
            #expect(try ServerAdministration.liveKey(configuration: box.configuration) == first)
            #expect(first.hasPrefix("ed25519:") && Data(base64Encoded: String(first.dropFirst(8)))?.count == 32)
            #expect(try LiveKey.loadOrMake(configuration: box.configuration) .made == false)
        }
    }

    @Test func publishingWarnsWhenThePolicysLiveKeysDoNotNameTheServersKey() throws {
        let key = LiveKey(signing: BundleSigningKey())
        let other = LiveKey(signing: BundleSigningKey())
        #expect(PolicyChecks.liveWarnings(policy: Self.policy(key: key.publicText), liveKey: key.publicText).isEmpty)
        let warnings = PolicyChecks.liveWarnings(policy: Self.policy(key: other.publicText), liveKey: key.publicText)
        #expect(warnings.count == 1 && warnings[0].contains(key.publicText))
        // No live: at all is the school's choice, not a mistake.
        #expect(PolicyChecks.liveWarnings(policy: "policy:\n  block: [adult]\n", liveKey: key.publicText).isEmpty)
        // The policy as machines read it, live: and locked: included.
        try PolicyChecks.policy(Self.policy(key: key.publicText))
        #expect(throws: PublishingError.self) { try PolicyChecks.policy("live:\n  keys: [\"ed25519:nope\"]\n") }
        #expect(throws: PublishingError.self) { try PolicyChecks.policy("live:\n  actions: [allow]\n") }
    }

    // MARK: Storage

    @Test(arguments: Engine.allCases)
    func everyLiveChangeTakesTheNextSequenceAndAMachinesViewKeepsItsOwn(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let now = StorageTests.now
            let machine = try await StorageTests.enrol(storage)
            #expect(try await storage.liveSequence() == 0)
            #expect(try await storage.liveView(machine: machine, now: now, items: true)?.sequence == 0)
            func item(_ scope: LiveScope, _ action: String = "block", until: Int64 = now + 600) -> NewLiveItem {
                NewLiveItem(scope: scope, action: action, targets: ["a.example"], from: now, until: until, byAuthor: "t", byName: "T", reason: "")
            }
            let lab2 = try await storage.addLiveItem(item(.room("lab2")), now: now)
            let lab3 = try await storage.addLiveItem(item(.room("lab3")), now: now)
            let everyone = try await storage.addLiveItem(item(LiveScope(kind: .everyone, value: "x"), "allow"), now: now)
            #expect([lab2.sequence, lab3.sequence, everyone.sequence] == [1, 2, 3])
            #expect(everyone.item.scope.value == "")
            // Its room's and everyone's, not lab3's.
            var view = try #require(try await storage.liveView(machine: machine, now: now, items: true))
            #expect(view.room == "lab2" && view.sequence == 3 && view.items.map(\.id) == [lab2.id, everyone.id])
            // Another room's change leaves the view's sequence where it was.
            _ = try await storage.addLiveItem(item(.room("lab3")), now: now)
            #expect(try await storage.liveView(machine: machine, now: now, items: false)?.sequence == 3)
            // Ending takes a number; the ended item is not sent, and not ended twice.
            let ended = try await storage.endLiveItems(scope: .room("lab2"), id: nil, by: "t", now: now + 1)
            #expect(ended.map(\.id) == [lab2.id] && ended[0].sequence == 5)
            #expect(try await storage.endLiveItems(scope: .room("lab2"), id: nil, by: "t", now: now + 2).isEmpty)
            view = try #require(try await storage.liveView(machine: machine, now: now + 2, items: true))
            #expect(view.sequence == 5 && view.items.map(\.id) == [everyone.id])
            #expect(try await storage.liveItem(id: lab2.id)?.endedBy == "t")
            // An item past its end is not sent; its number stays in the view.
            view = try #require(try await storage.liveView(machine: machine, now: now + 601, items: true))
            #expect(view.sequence == 5 && view.items.isEmpty)
            // A room change takes a number and the view follows the room.
            #expect(try await storage.setMachineRoom(id: machine, room: "lab3") == "lab2")
            view = try #require(try await storage.liveView(machine: machine, now: now, items: true))
            #expect(view.room == "lab3" && view.sequence == 6 && view.items.map(\.item.scope.value) == ["lab3", "", "lab3"])
            #expect(try await storage.setMachineRoom(id: "m-nothere", room: "lab3") == nil)
            #expect(try await storage.rooms().map(\.room) == ["lab3"])
        }
    }

    // MARK: The state and the long poll

    @Test(arguments: Engine.allCases)
    func theStateIsSignedAndTheLongPollAnswersHoldsAndWakes(engine: Engine) async throws {
        try await Self.withLiveServer(engine) { setup async throws in
            let server = setup.server
            // Nothing yet: held for its wait, then 204.
            #expect(try await Self.poll(server, setup.machine, after: 0, wait: 1).status == 204)

            let added = try await Self.addRule(
                server, room: "lab2", token: setup.teacher2,
                #"{"action":"allow","targets":["example.org"],"minutes":30,"reason":"the lesson's reading"}"#)
            #expect(added.status == 201, "\(added.text)")
            // Behind: answered at once, signed by the live key.
            let first = try Self.payload(try await Self.poll(server, setup.machine, after: 0, wait: 30), key: setup.live.key)
            #expect(first.format == 1 && first.machine == setup.machine.id && first.room == "lab2" && first.sequence >= 1)
            #expect(first.issued == server.clock.now && first.requests.isEmpty)
            #expect(first.items.count == 1)
            let item = try #require(first.items.first)
            #expect(item.action == "allow" && item.targets == ["example.org"] && item.scope == .init(kind: "room", value: "lab2"))
            #expect(item.until - item.from == 30 * 60 && item.reason == "the lesson's reading" && item.by.hasPrefix("API token "))
            // Up to date: held, then 204.
            #expect(try await Self.poll(server, setup.machine, after: first.sequence, wait: 1).status == 204)
            // Holding a number this server never gave (a taken-over server's, a restored database): the current state at once.
            let ahead = try Self.payload(try await Self.poll(server, setup.machine, after: first.sequence + 1_000_000, wait: 30), key: setup.live.key)
            #expect(ahead.sequence == first.sequence)
            // A negative one too (a taken-over server's): fails on the code before, which answered 400 to every poll.
            let negative = try Self.payload(try await Self.poll(server, setup.machine, after: -1, wait: 30), key: setup.live.key)
            #expect(negative.sequence == first.sequence)
            #expect(try Self.payload(try await Self.poll(server, setup.machine, after: Int64.min, wait: 30), key: setup.live.key).sequence == first.sequence)

            // Held, and woken by a rule added to its room.
            async let held = Self.poll(server, setup.machine, after: first.sequence, wait: 30)
            try await Self.untilHeld(setup.live.hub)
            let block = try await Self.addRule(server, room: "lab2", token: setup.teacher2, #"{"action":"block","targets":["games.example"],"minutes":10}"#)
            #expect(block.status == 201, "\(block.text)")
            let woken = try Self.payload(try await held, key: setup.live.key)
            #expect(woken.sequence > first.sequence)
            #expect(woken.items.map(\.action) == ["allow", "block"])

            // Ending one: the state without it, with a higher sequence.
            let id = item.id
            let ended = try await server.client.request(.DELETE, "/api/v1/rooms/lab2/rules/\(id)", headers: [("Authorization", "Bearer \(setup.teacher2)")])
            #expect(ended.status == 200, "\(ended.text)")
            let after = try Self.payload(try await Self.poll(server, setup.machine, after: woken.sequence, wait: 30), key: setup.live.key)
            #expect(after.sequence > woken.sequence && after.items.map(\.action) == ["block"])
            // An expired item is not sent.
            server.clock.advance(11 * 60)
            let rules = try await server.client.request(.GET, "/api/v1/rooms/lab2/rules", headers: [("Authorization", "Bearer \(setup.teacher2)")])
            #expect(rules.status == 200 && rules.text.contains(#""rules":[]"#), "\(rules.text)")

            // Every change is in the audit trail, with who.
            let events = try await server.storage.auditEvents(AuditQuery()).events.map(\.event).filter { $0.action.hasPrefix("room.rule") }
            #expect(events.map(\.action).sorted() == ["room.rule.add", "room.rule.add", "room.rule.end"])
            #expect(events.allSatisfy { $0.actor.hasPrefix("token:") && $0.target == "room lab2" })
            // A wait beyond 30 s is refused.
            #expect(try await Self.poll(server, setup.machine, after: 0, wait: 31).status == 400)
        }
    }

    @Test(arguments: Engine.allCases)
    func aMachineMovedToAnotherRoomGetsThatRoomsState(engine: Engine) async throws {
        try await Self.withLiveServer(engine) { setup async throws in
            let server = setup.server
            #expect(try await Self.addRule(server, room: "lab2", token: setup.teacher2, #"{"action":"focus","targets":["maths.example"],"minutes":20}"#).status == 201)
            let before = try Self.payload(try await Self.poll(server, setup.machine, after: 0, wait: 0), key: setup.live.key)
            #expect(before.items.map(\.action) == ["focus"])
            let admin = [("Authorization", "Bearer \(setup.publishing.admin)")]
            let moved = try await server.client.request(
                .PUT, "/api/v1/machines/\(setup.machine.id)/room", headers: admin, body: Array(#"{"room":"lab3","reason":"moved"}"#.utf8))
            #expect(moved.status == 200, "\(moved.text)")
            let after = try Self.payload(try await Self.poll(server, setup.machine, after: before.sequence, wait: 30), key: setup.live.key)
            #expect(after.room == "lab3" && after.items.isEmpty && after.sequence > before.sequence)
            // A teacher may not move machines.
            let refused = try await server.client.request(
                .PUT, "/api/v1/machines/\(setup.machine.id)/room", headers: [("Authorization", "Bearer \(setup.teacher2)")],
                body: Array(#"{"room":"lab2"}"#.utf8))
            #expect(refused.status == 403)
        }
    }

    // MARK: Who and what

    @Test(arguments: Engine.allCases)
    func aTeacherOutsideTheRoomsScopeIsRefused(engine: Engine) async throws {
        try await Self.withLiveServer(engine) { setup async throws in
            let server = setup.server
            let answer = try await Self.addRule(server, room: "lab2", token: setup.teacher3, #"{"action":"pause","minutes":5}"#)
            #expect(answer.status == 403)
            #expect(answer.text.contains("scope-forbidden"))
            let ending = try await server.client.request(.DELETE, "/api/v1/rooms/lab2/rules", headers: [("Authorization", "Bearer \(setup.teacher3)")])
            #expect(ending.status == 403)
            // The rooms a teacher sees are those of the scope.
            let rooms = try await server.client.request(.GET, "/api/v1/rooms", headers: [("Authorization", "Bearer \(setup.teacher3)")])
            #expect(rooms.status == 200 && !rooms.text.contains("lab2"), "\(rooms.text)")
            let mine = try await server.client.request(.GET, "/api/v1/rooms", headers: [("Authorization", "Bearer \(setup.teacher2)")])
            #expect(mine.text.contains(#""room":"lab2""#) && mine.text.contains(#""machines":1"#), "\(mine.text)")
            // An auditor never controls a room.
            let answer2 = try await Self.addRule(server, room: "lab2", token: setup.publishing.auditor, #"{"action":"block","targets":["a.example"],"minutes":5}"#)
            #expect(answer2.status == 403)
            #expect(try await server.storage.liveItems(scope: .room("lab2"), now: server.clock.now).isEmpty)
        }
    }

    @Test(arguments: Engine.allCases)
    func whatMachinesWouldRefuseIsRefused422(engine: Engine) async throws {
        try await Self.withLiveServer(engine) { setup async throws in
            let server = setup.server
            let admin = setup.publishing.admin
            for (room, body, says) in [
                ("lab2", #"{"action":"allow","targets":["example.org"],"minutes":61}"#, "at most 60 minutes"),
                ("lab2", #"{"action":"pause","minutes":5}"#, "live.actions"),
                ("lab3", #"{"action":"block","targets":["a.example"],"minutes":5}"#, "live.rooms"),
                ("lab2", #"{"action":"allow","targets":["www.adult.example","example.org"],"minutes":5}"#, "locked category"),
                ("lab2", #"{"action":"focus","targets":["adult.example"],"minutes":5}"#, "adult"),
                ("lab2", #"{"action":"allow","targets":["example.org"],"untilLessonEnds":true}"#, "no schedule"),
                // Fails on the code before: only a network's first address was looked up for locked categories.
                ("lab2", #"{"action":"focus","targets":["0.0.0.0/0"],"minutes":5}"#, #"wider than \/24"#),
                ("lab2", #"{"action":"allow","targets":["example.org","2001:db8::/32"],"minutes":5}"#, #"wider than \/48"#),
            ] {
                let answer = try await Self.addRule(server, room: room, token: admin, body)
                #expect(answer.status == 422, "\(body): \(answer.text)")
                #expect(answer.text.contains("live-refused") && answer.text.contains(says), "\(body): \(answer.text)")
            }
            // What is left of a refusal for a locked name is said.
            let locked = try await Self.addRule(server, room: "lab2", token: admin, #"{"action":"allow","targets":["www.adult.example","example.org"],"minutes":5}"#)
            #expect(locked.text.contains("example.org"))
            // Blocking a locked name is fine: it only closes.
            #expect(try await Self.addRule(server, room: "lab2", token: admin, #"{"action":"block","targets":["adult.example"],"minutes":5}"#).status == 201)
            // Malformed requests are 400.
            for body in [#"{"action":"allow","minutes":5}"#, #"{"action":"allow","targets":["a b"],"minutes":5}"#, #"{"action":"allow","targets":["a.example"]}"#, #"{"action":"exam","minutes":5}"#] {
                #expect(try await Self.addRule(server, room: "lab2", token: admin, body).status == 400, "\(body)")
            }
            // A target that would break a policy's lines is no site (fails on the code before: 201).
            for target in [#"example.com/x\r\nunknown allow"#, #"a.example/x\naudience person 4"#, "example.com/#", "example.com/a b"] {
                let answer = try await Self.addRule(server, room: "lab2", token: admin, #"{"action":"block","targets":[""# + target + #""],"minutes":5}"#)
                #expect(answer.status == 400 && answer.text.contains("is not a site"), "\(target): \(answer.text)")
            }
            #expect(try await server.storage.liveItems(scope: .room("lab2"), now: server.clock.now).count == 1)
        }
    }

    @Test(arguments: Engine.allCases)
    func untilTheLessonEndsTakesTheEndOfTheScheduleInForce(engine: Engine) async throws {
        let live = LiveChannel(key: LiveKey(signing: BundleSigningKey()), recheck: .seconds(3600))
        try await withPublishingServer(engine, live: live) { publishing async throws in
            try await publishing.putList("gambling", ["casino.example"])
            // The tests' clock: 2025-11-28 09:00:00 UTC, a Friday.
            let policy = """
                timezone: UTC
                schedules:
                  period1: { days: [fri], times: ["08:30-09:20"] }
                live:
                  keys: ["\(live.key.publicText)"]
                policy:
                  block: [gambling]
                """
            #expect(try await publishing.putPolicy(policy).status == 201)
            _ = try await publishing.publish()
            let answer = try await Self.addRule(
                publishing.server, room: "lab1", token: publishing.admin, #"{"action":"block","targets":["a.example"],"untilLessonEnds":true}"#)
            #expect(answer.status == 201, "\(answer.text)")
            let rule = try JSONDecoder().decode(RoomRoutes.RuleView.self, from: Data(answer.body))
            #expect(rule.until == 1_764_320_400 + 20 * 60)
        }
    }

    // MARK: Instances and shutdown

    @Test func aRuleAddedOnOneInstanceWakesAPollHeldOnAnother() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-live-two-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try await withTestDatabase(.postgres) { location async throws in
            let key = LiveKey(signing: BundleSigningKey())
            // No re-check within the test: only the notification can wake B.
            let liveA = LiveChannel(key: key, recheck: .seconds(3600))
            let liveB = LiveChannel(key: key, recheck: .seconds(3600))
            try await withRunningServer(at: location, live: liveA, configure: { configuration in
                configuration.stateDirectoryOverride = folder + "/a"
                _ = try? ServerAdministration.makeSigningKey(configuration: configuration)
            }) { a async throws in
                let admin = try await ServerAdministration.createAPIToken(storage: a.storage, role: .admin, createdBy: "t", now: 0)
                @Sendable func send(_ method: HTTPMethod, _ path: String, _ body: String) async throws -> PinnedHTTPSClient.Answer {
                    try await a.client.request(method, path, headers: [("Authorization", "Bearer \(admin.token)")], body: Array(body.utf8))
                }
                let policy = String(decoding: try JSONEncoder().encode(Self.policy(key: key.publicText)), as: UTF8.self)
                #expect(try await send(.PUT, "/api/v1/policy/lists/gambling?reason=r", "casino.example\n").status == 201)
                #expect(try await send(.PUT, "/api/v1/policy", #"{"policy":\#(policy),"reason":"r"}"#).status == 201)
                #expect(try await send(.POST, "/api/v1/policy/publish", #"{"reason":"r"}"#).status == 201)
                try await withRunningServer(at: location, live: liveB, configure: { $0.stateDirectoryOverride = folder + "/b" }) { b async throws in
                    await liveB.hub.untilListening()
                    let machine = try await b.enrol(TestMachine(), room: "lab2")
                    async let held = Self.poll(b, machine, after: 0, wait: 30)
                    try await Self.untilHeld(liveB.hub)
                    let added = try await send(.POST, "/api/v1/rooms/lab2/rules", #"{"action":"block","targets":["games.example"],"minutes":5}"#)
                    #expect(added.status == 201, "\(added.text)")
                    let state = try Self.payload(try await held, key: key)
                    #expect(state.items.map(\.action) == ["block"])
                }
            }
        }
    }

    @Test(arguments: Engine.allCases)
    func aHeldPollEndsWhenTheServerShutsDown(engine: Engine) async throws {
        try await withTestDatabase(engine) { location async throws in
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-live-stop-\(UUID().uuidString.prefix(8))").path
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let certificate = try ServerCertificate.create(
                certificatePath: folder + "/certificate.pem", keyPath: folder + "/key.pem", names: ["127.0.0.1"])
            var configuration = ServerConfiguration()
            configuration.listen.address = "127.0.0.1"
            configuration.listen.port = 0
            configuration.database = location
            configuration.stateDirectoryOverride = folder + "/state"
            let storage = try await SQLStorage.open(location, logger: testLogger)
            let clock = TestClock(1_764_320_400)
            let ports = PortBox()
            let live = LiveChannel(key: LiveKey(signing: BundleSigningKey()), recheck: .seconds(3600))
            let app = try buildApplication(
                configuration: configuration,
                parts: ServerParts(
                    storage: storage, certificate: certificate, metrics: ServerMetrics(), logger: testLogger, clock: { clock.now },
                    onListening: { await ports.set($0) }, live: live))
            let group = ServiceGroup(configuration: .init(services: [app], logger: testLogger))
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await ports.running { try await group.run() } }
                let port = try await ports.wait()
                let server = RunningServer(
                    client: PinnedHTTPSClient(port: port, fingerprint: certificate.fingerprint), storage: storage, clock: clock,
                    fingerprint: certificate.fingerprint)
                let machine = try await server.enrol(TestMachine())
                async let held = Self.poll(server, machine, after: 0, wait: 30)
                try await Self.untilHeld(live.hub)
                await group.triggerGracefulShutdown()
                // The held request is answered (204), or its connection closed; either way it ends.
                let answer = try? await held
                #expect(answer == nil || answer?.status == 204)
                _ = try await tasks.next()
                // Closed: a later wait is not held.
                #expect(await live.hub.wait(room: "lab2", after: live.hub.ticket()) == .closing)
            }
        }
    }
}
