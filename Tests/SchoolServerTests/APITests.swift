import Crypto
import Foundation
import Hummingbird
import Logging
import NIOHTTP1
import SchoolServer
import Synchronization
import Testing

/// A clock the tests move.
final class TestClock: Sendable {
    private let value: Mutex<Int64>
    init(_ start: Int64) { value = Mutex(start) }
    var now: Int64 { value.withLock { $0 } }
    func advance(_ seconds: Int64) { value.withLock { $0 += seconds } }
}

/// A machine of the tests: its key, and its id once enrolled.
struct TestMachine: Sendable {
    let key = Curve25519.Signing.PrivateKey()
    var id = ""
    var publicKey: String { Data(key.publicKey.rawRepresentation).base64EncodedString() }
}

/// A real hallpass-server on loopback over HTTPS (port 0), on a fresh
/// database of `engine`, built by `buildApplication` as `serve` builds it.
struct RunningServer: Sendable {
    let client: PinnedHTTPSClient
    let storage: SQLStorage
    let clock: TestClock
    let fingerprint: String

    func post(_ path: String, _ json: String, signedBy machine: TestMachine? = nil, date: Int64? = nil) async throws -> PinnedHTTPSClient.Answer {
        let body = Array(json.utf8)
        var headers: [(String, String)] = []
        if let machine {
            headers = try RequestSignature.headers(
                machine: machine.id, key: machine.key, method: "POST", path: path, body: body, now: date ?? clock.now)
        }
        return try await client.request(.POST, path, headers: headers, body: body)
    }

    /// Makes a token and enrols `machine` with it; returns the machine with its id.
    func enrol(_ machine: TestMachine, room: String = "lab2") async throws -> TestMachine {
        let token = try await ServerAdministration.createEnrolmentToken(
            storage: storage, fingerprint: fingerprint, room: room, uses: 1, expiresIn: 3600, createdBy: "test", now: clock.now)
        let answer = try await post("/api/v1/enrol", Self.enrolBody(token: token, machine: machine))
        #expect(answer.status == 201, "\(answer.text)")
        var enrolled = machine
        struct Enrolled: Decodable { let machine: String }
        enrolled.id = try JSONDecoder().decode(Enrolled.self, from: Data(answer.body)).machine
        return enrolled
    }

    static func enrolBody(token: String, machine: TestMachine, hostname: String = "lab2-pc07") -> String {
        let secret = token.split(separator: ".").last.map(String.init) ?? token
        return #"{"token":"\#(secret)","publicKey":"\#(machine.publicKey)","hostname":"\#(hostname)","version":"1.0"}"#
    }
}

actor PortBox {
    struct NeverListened: Error, CustomStringConvertible {
        var reason: String
        var description: String { "the server ended before it listened: \(reason)" }
    }

    private var port: Result<Int, NeverListened>?
    private var waiting: [CheckedContinuation<Int, any Error>] = []
    func set(_ value: Int) { settle(.success(value)) }
    /// The server's run ended (or failed) before it listened: whoever waits for the port is told, not left waiting.
    func ended(_ reason: String) { settle(.failure(NeverListened(reason: reason))) }
    private func settle(_ result: Result<Int, NeverListened>) {
        guard port == nil else { return }
        port = result
        for continuation in waiting { continuation.resume(with: result.mapError { $0 as any Error }) }
        waiting = []
    }
    /// Runs the server, telling whoever waits for the port when the run ends or fails before it listened.
    func running(_ run: @Sendable () async throws -> Void) async throws {
        do {
            try await run()
            ended("its run returned")
        } catch {
            ended("\(error)")
            throw error
        }
    }
    func wait() async throws -> Int {
        if let port { return try port.get() }
        return try await withCheckedThrowingContinuation { waiting.append($0) }
    }
}

func withRunningServer(
    _ engine: Engine, logger: Logger = testLogger, console: Bool = true, live: LiveChannel? = nil, alerts: AlertSignal = AlertSignal(),
    configure: (inout ServerConfiguration) -> Void = { _ in },
    addRoutes: @escaping @Sendable (Router<ServerRequestContext>, Sessions) -> Void = { _, _ in },
    moreRoutes: @escaping @Sendable (Router<ServerRequestContext>, Publisher, ServerConfiguration, SQLStorage, TestClock) throws -> Void = {
        _, _, _, _, _ in
    },
    delivery: (@Sendable (any ServerStorage) -> AlertDeliveryService)? = nil,
    digests: (@Sendable (any ServerStorage, TestClock) -> DigestService)? = nil,
    _ body: @Sendable (RunningServer) async throws -> Void
) async throws {
    try await withTestDatabase(engine) { location async throws in
        try await withRunningServer(
            at: location, logger: logger, console: console, live: live, alerts: alerts, configure: configure, addRoutes: addRoutes,
            moreRoutes: moreRoutes, delivery: delivery, digests: digests, body)
    }
}

/// The same, on a database of the caller's: two servers on one PostgreSQL.
/// The state folder is a temporary one unless `configure` names another.
func withRunningServer(
    at location: DatabaseLocation, logger: Logger = testLogger, console: Bool = true, live: LiveChannel? = nil,
    alerts: AlertSignal = AlertSignal(), configure: (inout ServerConfiguration) -> Void = { _ in },
    addRoutes: @escaping @Sendable (Router<ServerRequestContext>, Sessions) -> Void = { _, _ in },
    moreRoutes: @escaping @Sendable (Router<ServerRequestContext>, Publisher, ServerConfiguration, SQLStorage, TestClock) throws -> Void = {
        _, _, _, _, _ in
    },
    delivery: (@Sendable (any ServerStorage) -> AlertDeliveryService)? = nil,
    digests: (@Sendable (any ServerStorage, TestClock) -> DigestService)? = nil,
    _ body: @Sendable (RunningServer) async throws -> Void
) async throws {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-server-tls-\(UUID().uuidString.prefix(8))").path
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let certificate = try ServerCertificate.create(
        certificatePath: folder + "/certificate.pem", keyPath: folder + "/key.pem", names: ["127.0.0.1", "localhost"])
    var configuration = ServerConfiguration()
    configuration.listen.address = "127.0.0.1"
    configuration.listen.port = 0
    configuration.database = location
    // Never the system's /var/lib/hallpass-server (PostgreSQL's default state folder).
    configuration.stateDirectoryOverride = folder + "/state"
    configure(&configuration)
    let lines = RecordingLogHandler.Lines()
    let logger = RecordingLogHandler.recording(logger, into: lines)
    let storage = try await SQLStorage.open(location, logger: logger)
    let clock = TestClock(1_764_320_400)
    let ports = PortBox()
    let app = try buildApplication(
        configuration: configuration,
        parts: ServerParts(
            storage: storage, certificate: certificate, metrics: ServerMetrics(), logger: logger, clock: { clock.now },
            onListening: { await ports.set($0) },
            addRoutes: { [configuration] router, sessions, publisher in
                addRoutes(router, sessions)
                try moreRoutes(router, publisher, configuration, storage, clock)
            }, console: console, live: live, alerts: alerts, delivery: delivery?(storage), digests: digests?(storage, clock)))
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await ports.running { try await app.run() } }
        let port = try await ports.wait()
        let server = RunningServer(
            client: PinnedHTTPSClient(port: port, fingerprint: certificate.fingerprint), storage: storage, clock: clock,
            fingerprint: certificate.fingerprint)
        var failure: (any Error)?
        do {
            try await body(server)
        } catch {
            failure = error
        }
        let watchdog = StopWatchdog("the server on port \(port)", lines: lines)
        defer { watchdog.done() }
        group.cancelAll()
        // The server's run ends (its error, a cancellation, is not the test's).
        while let _ = await group.nextResult() {}
        if let failure { throw failure }
    }
}

@Suite struct APITests {
    @Test(arguments: Engine.allCases)
    func enrolmentWithGoodAndRefusedTokens(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let machine = try await server.enrol(TestMachine())
            #expect(Secrets.isMachineID(machine.id))
            let stored = try #require(try await server.storage.machine(id: machine.id))
            #expect(stored.room == "lab2")
            #expect(stored.hostname == "lab2-pc07")
            #expect(stored.publicKey == machine.publicKey)

            // Used up: a token of one use, used once.
            let once = try await ServerAdministration.createEnrolmentToken(
                storage: server.storage, fingerprint: server.fingerprint, room: "lab3", uses: 1, expiresIn: 3600, createdBy: "t",
                now: server.clock.now)
            #expect(once.hasPrefix("hp1.\(server.fingerprint)."))
            #expect(try await server.post("/api/v1/enrol", RunningServer.enrolBody(token: once, machine: TestMachine())).status == 201)
            let usedUp = try await server.post("/api/v1/enrol", RunningServer.enrolBody(token: once, machine: TestMachine()))
            #expect(usedUp.status == 410)
            #expect(usedUp.text.contains(#""error":"token-used-up""#))

            // Expired: valid an hour, two hours ago.
            let old = try await ServerAdministration.createEnrolmentToken(
                storage: server.storage, fingerprint: server.fingerprint, room: "lab3", uses: 5, expiresIn: 3600, createdBy: "t",
                now: server.clock.now - 7200)
            let expired = try await server.post("/api/v1/enrol", RunningServer.enrolBody(token: old, machine: TestMachine()))
            #expect(expired.status == 410)
            #expect(expired.text.contains(#""error":"token-expired""#))

            let unknown = try await server.post(
                "/api/v1/enrol", RunningServer.enrolBody(token: "hp1.x." + Secrets.newSecret(), machine: TestMachine()))
            #expect(unknown.status == 401)
            #expect(unknown.text.contains(#""error":"token-unknown""#))

            let badKey = try await server.post("/api/v1/enrol", #"{"token":"x","publicKey":"AAAA","hostname":"pc","version":"1"}"#)
            #expect(badKey.status == 400)
            #expect(badKey.text.contains(#""error":"bad-request""#))
            let notJSON = try await server.post("/api/v1/enrol", "{")
            #expect(notJSON.status == 400)
            #expect(try await server.storage.machines().count == 2)
        }
    }

    @Test(arguments: Engine.allCases)
    func signedRequestsAreCheckedAndARevokedMachineRefused(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let machine = try await server.enrol(TestMachine())
            let checkIn =
                #"{"version":"1.0","rulesVersion":42,"rulesSince":"2025-11-28T08:00:00Z","filterData":"running","filterDataRestarts":0,"failMode":"open","queueDrops":0,"recordsWaiting":0,"recordsDropped":0,"users":["alice"]}"#
            let good = try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine)
            #expect(good.status == 200, "\(good.text)")
            #expect(good.text == #"{"publishedVersion":0}"#)
            // A machine with no rules installed yet leaves rulesSince out (filter-control's CheckinReport does).
            let noRules = try await server.post(
                "/api/v1/machine/checkin", checkIn.replacingOccurrences(of: #""rulesSince":"2025-11-28T08:00:00Z","#, with: ""), signedBy: machine)
            #expect(noRules.status == 200, "\(noRules.text)")
            #expect(try await server.storage.machine(id: machine.id)?.lastCheckIn?.rulesSince == nil)

            // Not signed at all.
            #expect(try await server.post("/api/v1/machine/checkin", checkIn).status == 401)
            // Signed by another key under this machine's id.
            var impostor = TestMachine()
            impostor.id = machine.id
            let forged = try await server.post("/api/v1/machine/checkin", checkIn, signedBy: impostor)
            #expect(forged.status == 401)
            #expect(forged.text.contains(#""error":"signature-invalid""#))
            // A date more than 300 s away, either way.
            #expect(try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine, date: server.clock.now - 301).status == 401)
            #expect(try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine, date: server.clock.now + 301).status == 401)
            #expect(try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine, date: server.clock.now - 299).status == 200)
            // The body changed after signing.
            let body = Array(checkIn.utf8)
            let headers = try RequestSignature.headers(
                machine: machine.id, key: machine.key, method: "POST", path: "/api/v1/machine/checkin", body: body, now: server.clock.now)
            let tampered = try await server.client.request(
                .POST, "/api/v1/machine/checkin", headers: headers, body: Array(checkIn.replacingOccurrences(of: "42", with: "43").utf8))
            #expect(tampered.status == 401)
            // An unknown machine.
            var stranger = TestMachine()
            stranger.id = Secrets.newMachineID()
            #expect(try await server.post("/api/v1/machine/checkin", checkIn, signedBy: stranger).status == 401)

            // Revoked: the next request is refused.
            #expect(try await server.storage.revokeMachine(id: machine.id, now: server.clock.now))
            let revoked = try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine)
            #expect(revoked.status == 403)
            #expect(revoked.text.contains(#""error":"machine-revoked""#))
        }
    }

    static func recordsBody(_ sequences: ClosedRange<Int>, dropped: Int = 0) -> String {
        let records = sequences.map {
            #"{"sequence":\#($0),"time":"2025-11-28T08:00:0\#($0 % 10).250Z","uid":1001,"user":"alice","group":"students","kind":"tls","host":"casino.example","destination":"192.0.2.7","port":443,"action":"block","category":"gambling","rule":"casino.example","reason":"category","rulesVersion":42}"#
        }
        return #"{"records":[\#(records.joined(separator: ","))],"dropped":\#(dropped)}"#
    }

    @Test(arguments: Engine.allCases)
    func recordsPostedTwiceAreStoredOnce(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            let machine = try await server.enrol(TestMachine())
            let first = try await server.post("/api/v1/machine/records", Self.recordsBody(1...3), signedBy: machine)
            #expect(first.status == 200, "\(first.text)")
            #expect(first.text == #"{"storedThrough":3}"#)
            // The answer was lost: the machine sends 1...3 again, with 4...5.
            let again = try await server.post("/api/v1/machine/records", Self.recordsBody(1...5, dropped: 1), signedBy: machine)
            #expect(again.text == #"{"storedThrough":5}"#)
            let stored = try await server.storage.records(machine: machine.id)
            #expect(stored.map(\.record.sequence) == [1, 2, 3, 4, 5])
            #expect(stored[0].record.time == "2025-11-28T08:00:01.250Z")
            #expect(stored[0].record.user == "alice")
            #expect(try await server.storage.machine(id: machine.id)?.recordsDropped == 1)

            // Bounds: more than 1,000 records, more than 1 MiB, a time that is not one.
            let many = try await server.post("/api/v1/machine/records", Self.recordsBody(1...1001), signedBy: machine)
            #expect(many.status == 400)
            let huge = #"{"records":[],"dropped":0,"padding":""# + String(repeating: "x", count: 1 << 20) + #""}"#
            #expect(try await server.post("/api/v1/machine/records", huge, signedBy: machine).status == 413)
            let badTime = try await server.post(
                "/api/v1/machine/records", Self.recordsBody(6...6).replacingOccurrences(of: "2025-11-28T08", with: "yesterday"),
                signedBy: machine)
            #expect(badTime.status == 400)
            #expect(badTime.text.contains("records[0].time"))
            #expect(try await server.storage.recordCount() == 5)
        }
    }

    @Test(arguments: Engine.allCases)
    func machineStatesForTheAdmin(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            try await server.storage.setPublishedVersion(43)
            func checkIn(_ machine: TestMachine, rules: Int = 43, filterData: String = "running", drops: Int = 0) async throws {
                let json =
                    #"{"version":"1.0","rulesVersion":\#(rules),"rulesSince":"2025-11-28T08:00:00Z","filterData":"\#(filterData)","filterDataRestarts":0,"failMode":"open","queueDrops":\#(drops),"recordsWaiting":0,"recordsDropped":0,"users":[]}"#
                let answer = try await server.post("/api/v1/machine/checkin", json, signedBy: machine)
                #expect(answer.text == #"{"publishedVersion":43}"#)
            }
            let ok = try await server.enrol(TestMachine())
            let silent = try await server.enrol(TestMachine())
            let down = try await server.enrol(TestMachine())
            let dropping = try await server.enrol(TestMachine())
            let behind = try await server.enrol(TestMachine())
            let late = try await server.enrol(TestMachine())
            try await checkIn(late)
            server.clock.advance(240)
            try await checkIn(ok)
            try await checkIn(down, filterData: "restarting")
            try await checkIn(dropping, drops: 5)
            try await checkIn(dropping, drops: 9)
            try await checkIn(behind, rules: 42)
            server.clock.advance(61)  // `late` checked in 301 s ago: stale after 300 s.

            let admin = try await ServerAdministration.createAPIToken(storage: server.storage, role: .admin, createdBy: "t", now: 0)
            let answer = try await server.client.request(.GET, "/api/v1/machines", headers: [("Authorization", "Bearer \(admin.token)")])
            #expect(answer.status == 200, "\(answer.text)")
            struct Listing: Decodable {
                struct Machine: Decodable {
                    let id: String
                    let state: String
                }
                let publishedVersion: Int
                let machines: [Machine]
            }
            let listing = try JSONDecoder().decode(Listing.self, from: Data(answer.body))
            let states = Dictionary(uniqueKeysWithValues: listing.machines.map { ($0.id, $0.state) })
            #expect(listing.publishedVersion == 43)
            #expect(states[ok.id] == "ok")
            #expect(states[silent.id] == "stale")
            #expect(states[down.id] == "unfiltered")
            #expect(states[dropping.id] == "unfiltered")
            #expect(states[behind.id] == "behind")
            #expect(states[late.id] == "stale")

            // An auditor may read; no token or a wrong one may not.
            let auditor = try await ServerAdministration.createAPIToken(storage: server.storage, role: .auditor, createdBy: "t", now: 0)
            #expect(try await server.client.request(.GET, "/api/v1/machines", headers: [("Authorization", "Bearer \(auditor.token)")]).status == 200)
            #expect(try await server.client.request(.GET, "/api/v1/machines").status == 401)
            #expect(try await server.client.request(.GET, "/api/v1/machines", headers: [("Authorization", "Bearer \(admin.token)x")]).status == 401)
            // The counters of what happened above: for a token, a metrics one too, which reads nothing else.
            #expect(try await server.client.request(.GET, "/metrics").status == 401)
            let prometheus = try await ServerAdministration.createAPIToken(storage: server.storage, role: .metrics, createdBy: "t", now: 0)
            let bearer = [("Authorization", "Bearer \(prometheus.token)")]
            #expect(try await server.client.request(.GET, "/api/v1/machines", headers: bearer).status == 403)
            #expect(try await server.client.request(.GET, "/api/v1/records", headers: bearer).status == 403)
            #expect(try await server.client.request(.GET, "/health").status == 200)
            let metrics = try await server.client.request(.GET, "/metrics", headers: bearer)
            #expect(metrics.status == 200)
            #expect(metrics.text.contains("hallpass_server_enrolments_total 6"))
            #expect(metrics.text.contains("hallpass_server_checkins_total 6"))
        }
    }

    @Test(arguments: Engine.allCases)
    func aMethodAPathIsNotServedWithIsAnswered405WithAllow(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            for (method, path, allow) in [
                (HTTPMethod.PUT, "/api/v1/records", "GET"), (.DELETE, "/api/v1/machines", "GET"), (.GET, "/api/v1/enrol", "POST"),
                (.RAW(value: "QUERY"), "/metrics", "GET"), (.TRACE, "/api/v1/machine/checkin", "POST"),
            ] {
                let answer = try await server.client.request(method, path)
                #expect(answer.status == 405, "\(method) \(path)")
                #expect(answer.header("Allow") == allow, "\(method) \(path)")
                #expect(answer.text.contains(#""error":"method-not-allowed""#))
            }
            // A path the server does not serve at all is still 404.
            #expect(try await server.client.request(.GET, "/api/v1/nothing").status == 404)
            #expect(try await server.client.request(.PUT, "/api/v1/nothing").status == 404)
        }
    }
}
