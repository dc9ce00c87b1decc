import Crypto
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import VerdictCore

/// The routes machines use: enrolment (by token), then signed posts of
/// records and check-ins. Each route maps the request to one storage call.
struct MachineRoutes {
    let storage: any ServerStorage
    let metrics: ServerMetrics
    let clock: @Sendable () -> Int64
    let publisher: Publisher
    /// Enrolments by address, signed requests by machine (server.yaml `machines:`).
    let enrolments: RateLimiter
    let requests: RateLimiter
    let live: LiveChannel
    /// The published policy's safeguarding rules, which the new records are judged by.
    let safeguarding: PublishedSafeguarding
    /// Poked when records raised alerts (after their transaction commits).
    let alerts: AlertSignal
    /// The filtering test: the run a machine is sent with its live state, and its answers.
    let filteringTests: FilteringTestDesk

    struct EnrolRequest: Decodable {
        let token: String
        let publicKey: String
        let hostname: String
        let version: String
    }

    struct EnrolResponse: ResponseEncodable {
        let machine: String
        let room: String
        /// Where the machine takes its rules from, when the server publishes.
        let bundles: Bundles?
    }

    struct Bundles: Codable, Sendable {
        /// The folder of the current publication on this server.
        let path: String
        /// `ed25519:BASE64`: what the machine is to trust (school.bundleKeys).
        let trustedKeys: [String]
    }

    struct RecordsRequest: Decodable {
        let records: [MachineRecord]
        let dropped: Int64?
    }

    struct RecordsResponse: ResponseEncodable {
        let storedThrough: Int64
    }

    struct CheckInResponse: ResponseEncodable {
        let publishedVersion: Int64
    }

    func add(to router: Router<ServerRequestContext>) {
        router.post("/api/v1/enrol") { request, context in
            guard enrolments.allow(RateLimiter.key(context.remoteAddress), now: clock()) else {
                metrics.refused("rate-limited")
                throw APIError.rateLimited("more than \(enrolments.perMinute) enrolments a minute from this address")
            }
            return try await enrol(request, context)
        }
        let machine = router.group("/api/v1/machine")
            .add(middleware: MachineSignatureMiddleware(storage: storage, metrics: metrics, clock: clock, limiter: requests))
        machine.post("records") { request, context in
            try await records(request, context)
        }
        machine.post("checkin") { request, context in
            try await checkIn(request, context)
        }
        machine.post("live") { request, context in
            try await liveState(request, context)
        }
        machine.post("requests") { request, context in
            try await accessRequests(request, context)
        }
        machine.post("filtering-test") { request, context in
            try await filteringTestAnswer(request, context)
        }
    }

    func enrol(_ request: Request, _ context: ServerRequestContext) async throws -> EditedResponse<EnrolResponse> {
        let body = try await decode(EnrolRequest.self, request, context)
        guard let keyBytes = Data(base64Encoded: body.publicKey), keyBytes.count == 32,
            (try? Curve25519.Signing.PublicKey(rawRepresentation: keyBytes)) != nil
        else { throw APIError.badRequest("publicKey must be the base64 of a 32-byte Ed25519 public key") }
        guard (1...253).contains(body.hostname.utf8.count), body.hostname.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f })
        else { throw APIError.badRequest("hostname must be 1 to 253 printable ASCII characters") }
        guard (1...64).contains(body.version.utf8.count) else { throw APIError.badRequest("version must be 1 to 64 characters") }
        guard Secrets.isWellFormedSecret(body.token) else {
            metrics.refused(TokenRefusal.unknown.rawValue)
            throw Self.refusal(.unknown)
        }
        if try await storage.machine(publicKey: body.publicKey) != nil {
            throw APIError.badRequest("a machine with this public key is enrolled already; make a new key to enrol again")
        }
        let machine = NewMachine(id: Secrets.newMachineID(), publicKey: body.publicKey, hostname: body.hostname, version: body.version)
        let room: String
        do {
            room = try await storage.enrol(machine, tokenHash: Secrets.hash(body.token), now: clock())
        } catch let refusal as TokenRefusal {
            metrics.refused(refusal.rawValue)
            context.logger.warning("refused an enrolment: \(refusal.rawValue)", metadata: ["hallpass.hostname": "\(body.hostname)"])
            throw Self.refusal(refusal)
        }
        metrics.enrolments.increment()
        context.logger.notice(
            "enrolled a machine", metadata: ["hallpass.machine": "\(machine.id)", "hallpass.room": "\(room)", "hallpass.hostname": "\(body.hostname)"])
        let bundles = publisher.publishes ? Bundles(path: "/bundle/", trustedKeys: publisher.trustedKeys.map(\.description)) : nil
        return EditedResponse(status: .created, response: EnrolResponse(machine: machine.id, room: room, bundles: bundles))
    }

    static func refusal(_ refusal: TokenRefusal) -> APIError {
        switch refusal {
        case .unknown: APIError(.unauthorized, refusal.rawValue, "this enrolment token is not known to the server")
        case .usedUp: APIError(.gone, refusal.rawValue, "this enrolment token has no uses left; make a new one (hallpass-server token create)")
        case .expired: APIError(.gone, refusal.rawValue, "this enrolment token has expired; make a new one (hallpass-server token create)")
        }
    }

    func records(_ request: Request, _ context: ServerRequestContext) async throws -> RecordsResponse {
        guard let machine = context.machine else { throw APIError.signatureInvalid }
        let body = try await decode(RecordsRequest.self, request, context)
        guard body.records.count <= APILimits.maxRecords else {
            throw APIError.badRequest("at most \(APILimits.maxRecords) records in one post, got \(body.records.count)")
        }
        let dropped = body.dropped ?? 0
        guard dropped >= 0 else { throw APIError.badRequest("dropped must not be negative") }
        var stored: [StoredRecord] = []
        stored.reserveCapacity(body.records.count)
        for (index, record) in body.records.enumerated() {
            guard record.sequence >= 1 else { throw APIError.badRequest("records[\(index)].sequence must be 1 or more") }
            guard let time = RecordTime.milliseconds(record.time) else {
                throw APIError.badRequest("records[\(index)].time is not an RFC 3339 time: '\(record.time.prefix(40))'")
            }
            guard !record.action.isEmpty else { throw APIError.badRequest("records[\(index)].action is empty") }
            stored.append(StoredRecord(machine: machine.id, timeMilliseconds: time, record: record))
        }
        // The alerts are made in the records' transaction: stored with them or not at all, once.
        let rules = stored.isEmpty ? nil : try await safeguarding.current()
        let outcome = try await storage.storeRecords(machine: machine.id, records: stored, dropped: dropped, now: clock(), safeguarding: rules)
        metrics.recordsReceived.increment(by: Int64(stored.count))
        metrics.recordsStored.increment(by: outcome.inserted)
        if dropped > 0 { metrics.recordsDroppedByMachines.increment(by: dropped) }
        if outcome.suppressed > 0 { metrics.alertsSuppressed.increment(by: outcome.suppressed) }
        if !outcome.alerts.isEmpty {
            for alert in outcome.alerts {
                metrics.alerts(alert.severity).increment()
                // No host or URL at notice level: the alert's id finds them.
                context.logger.notice(
                    "a safeguarding alert",
                    metadata: ["hallpass.alert": "\(alert.id)", "hallpass.alert.rule": "\(alert.ruleID)", "hallpass.alert.severity": "\(alert.severity.rawValue)"])
            }
            alerts.poke()
        }
        return RecordsResponse(storedThrough: outcome.storedThrough)
    }

    func checkIn(_ request: Request, _ context: ServerRequestContext) async throws -> CheckInResponse {
        guard let machine = context.machine else { throw APIError.signatureInvalid }
        let body = try await decode(CheckIn.self, request, context)
        guard body.users.count <= 1000, body.version.utf8.count <= 64, (body.rulesSince?.utf8.count ?? 0) <= 64 else {
            throw APIError.badRequest("a check-in names at most 1,000 users, and its version and rulesSince are at most 64 characters")
        }
        try await storage.recordCheckIn(machine: machine.id, body, now: clock())
        metrics.checkIns.increment()
        return CheckInResponse(publishedVersion: try await storage.publishedVersion())
    }
}

// MARK: The live channel

extension MachineRoutes {
    struct LiveRequest: Decodable {
        /// The live sequence the machine holds (0 at first; any Int64 is read).
        let after: Int64
        /// How long to hold the request when nothing is newer, 0 to 30 seconds.
        let wait: Int
        /// The filtering test run the machine answered last ("" for none).
        /// A machine that sends it takes filtering tests: the live state
        /// carries the run it is to answer (`filteringTest`), at once when it
        /// is not this one. Machines that send nothing are never sent one.
        let tested: String?
    }

    /// The live state and, for a machine that takes them, the filtering test it is to answer.
    struct LiveAnswer: Encodable {
        let envelope: LiveChannel.Envelope
        let filteringTest: FilteringTest.Request?

        enum CodingKeys: String, CodingKey { case filteringTest }

        func encode(to encoder: any Encoder) throws {
            try envelope.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(filteringTest, forKey: .filteringTest)
        }
    }

    static let longestWait = 30

    /// The machine's signed live state at once when its view's sequence is
    /// not `after`; otherwise held until its room (or everyone's) changes, or
    /// `wait` passes (204), or the server shuts down (204).
    ///
    /// A machine that goes away while its request is held is not noticed
    /// until the wait ends: a held request costs a waiter in the hub (bounded)
    /// and a sleeping task, both gone within `longestWait`.
    func liveState(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        guard let machine = context.machine else { throw APIError.signatureInvalid }
        let body = try await decode(LiveRequest.self, request, context)
        // Any number: a machine that took a negative one from a taken-over server (machines
        // refuse them now, older ones did not) gets the current state, as for any number but the view's.
        guard (0...Self.longestWait).contains(body.wait) else { throw APIError.badRequest("wait must be from 0 to \(Self.longestWait) seconds") }
        let deadline = ContinuousClock.now.advanced(by: .seconds(body.wait))
        while true {
            let ticket = await live.hub.ticket()
            guard let view = try await storage.liveView(machine: machine.id, now: clock(), items: false) else {
                throw APIError.signatureInvalid
            }
            // A filtering test run it has not answered goes with the state, at once.
            var test: FilteringTest.Request? = nil
            if let tested = body.tested, let run = try await filteringTests.pending(machine: machine.id), run.id != tested {
                test = run.request
            }
            // Not only a newer one: a machine that holds a sequence this
            // server never gave (a restored database, or a state from a
            // taken-over server with a huge number) gets the current state
            // at once, and orders it by its issued time (docs/server.md).
            if view.sequence != body.after || test != nil {
                let now = clock()
                guard let full = try await storage.liveView(machine: machine.id, now: now, items: true) else { throw APIError.signatureInvalid }
                metrics.liveStates.increment()
                let requests = try await LiveAccessRequests.decisions(storage: storage, machine: machine.id, now: now)
                return try Self.json(LiveAnswer(envelope: live.envelope(full, requests: requests, now: now), filteringTest: test))
            }
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { return Response(status: .noContent) }
            switch await hold(room: view.room, after: ticket, for: remaining) {
            case .changed: continue
            case .notHeld, .closing: return Response(status: .noContent)
            }
        }
    }

    /// Waits for the hub, at most `duration`; a graceful shutdown closes the
    /// hub, which answers every held request at once.
    private func hold(room: String, after ticket: LiveHub.Ticket, for duration: Duration) async -> LiveHub.Wake {
        let hub = live.hub
        return await withGracefulShutdownHandler {
            await withTaskGroup(of: LiveHub.Wake.self) { group in
                group.addTask { await hub.wait(room: room, after: ticket) }
                group.addTask {
                    try? await Task.sleep(for: duration)
                    return .notHeld
                }
                let first = await group.next() ?? .notHeld
                group.cancelAll()
                return first
            }
        } onGracefulShutdown: {
            Task { await hub.close() }
        }
    }

    /// A machine's answer to a filtering test run (`FilteringTestDesk.answer`).
    func filteringTestAnswer(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        guard let machine = context.machine else { throw APIError.signatureInvalid }
        let body = try await decode(FilteringTest.Answer.self, request, context)
        let stored = try await filteringTests.answer(body, from: machine)
        if stored.failures > 0 {
            metrics.alerts(.danger).increment()
            context.logger.notice(
                "a machine let through names of the filtering test that its policy blocks",
                metadata: [
                    "hallpass.machine": "\(machine.id)", "hallpass.filtering-test": "\(stored.run)", "hallpass.alert": "\(stored.alertID ?? "-")",
                ])
        }
        return Response(status: .noContent)
    }

    static func json(_ value: some Encodable) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }
}

/// Decodes a JSON body; a body that does not decode is a `bad-request` that says why.
func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: ServerRequestContext) async throws -> T {
    do {
        return try await request.decode(as: type, context: context)
    } catch let error as HTTPError where error.status == .contentTooLarge {
        throw APIError.tooLarge
    } catch let error as DecodingError {
        throw APIError.badRequest("the JSON body does not fit: \(DecodingErrorText.describe(error))")
    } catch let error as HTTPError {
        throw APIError.badRequest(error.body ?? "the body is not JSON")
    }
}

enum DecodingErrorText {
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? "." + $0.stringValue }.joined()
            return keys.isEmpty ? "the body" : String(keys.drop(while: { $0 == "." }))
        }
        switch error {
        case .keyNotFound(let key, let context): return "\(path(context)): missing key \(key.stringValue)"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return "\(path(context)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}
