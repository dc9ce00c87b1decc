public import Foundation
public import Logging
public import NIOCore
public import NIOPosix
import Synchronization
public import VerdictCore

/// The live channel: one request held open to the school's server
/// (`POST /api/v1/machine/live` `{"after": SEQUENCE, "wait": 25}`), answered
/// at once with a newer live state, or with 204 after `wait` seconds of
/// nothing new; then the next one. A state is checked (`LiveState.verify`,
/// then `LiveBounds` per item), kept (`LiveStateStore`) and applied at once
/// (`applied`: filter-control recomputes the policy set, hands it to
/// filter-data and cuts the open connections it now blocks). Refusals are
/// logged and reported (`report`: a `live-refused` record through the
/// outbox), each once.
///
/// Nothing changes while the server cannot be reached: the items held stay
/// until their own `until` (the policy clock ends them), and the channel
/// tries again after `backoff` (1 s doubling to 30 s, ±20 %). A state that
/// is refused whole is not asked for again (`after` names it, and the
/// server holds the request until its sequence moves) until the policy
/// changes (`policyChanged`), so a server that keeps sending a state this
/// machine cannot accept is not asked in a tight loop; but one refused only
/// as older than the state held by its issued time is asked for again after
/// the backoff (clocks that differ: a later answer is accepted). A 204 that
/// comes early (the server's hub full, a shutdown) is followed by a pause of
/// about a second, not a request at once. States are ordered
/// by the time the server issued them, then by sequence (`LiveState.Order`),
/// and the server answers whenever its sequence is not `after`: a machine
/// that took a huge sequence from a taken-over server follows the real one
/// again with its next state.
///
/// **The filtering test**: with `filteringTest` set, each request names the
/// run answered last (`tested`), and an answer that carries a run not yet
/// answered (`filteringTest` beside the signed state) is judged at once
/// (`filteringTest`: as `filterctl check --user` judges, on the bundle in
/// force) and the results are posted (`POST /api/v1/machine/filtering-test`).
/// A run is answered once: after the server took the results or refused
/// them, or after three failed posts, it is not taken again. It asks
/// nothing of the machine but to judge names; it changes nothing in force.
public final class LiveChannel: Sendable {
    /// What the checks need from filter-control: the policy in force and a
    /// look-up of locked categories in the store in force.
    public struct Context: Sendable {
        public var policy: SchoolPolicy
        public var bounds: LiveBounds

        public init(policy: SchoolPolicy, lockedCategory: @escaping @Sendable (RulePattern) -> String?) {
            self.policy = policy
            self.bounds = LiveBounds(policy: policy, lockedCategory: lockedCategory)
        }
    }

    /// A refusal to report: of a whole state (`item` nil) or of one item.
    public struct RefusalReport: Sendable, Hashable {
        public var sequence: Int64?
        public var item: String?
        public var code: String
        public var message: String
        public var target: String?
        public var category: String?
    }

    /// What one answer of the server came to.
    public enum Outcome: Sendable, Hashable {
        /// A newer state is in force: its sequence, the items accepted and refused.
        case applied(sequence: Int64, accepted: Int, refused: Int)
        /// The state held already (the same sequence): nothing to do.
        case unchanged
        /// Nothing new within the wait (204).
        case nothingNew
        /// The state was refused whole.
        case refused(LiveState.Refusal)
        /// No answer, or one that is not a state: tried again after the backoff.
        case failed(String)
    }

    /// What `filterctl status` shows.
    public struct Status: Sendable, Hashable {
        /// The last request was answered (200 or 204).
        public var connected = false
        public var lastContactAt: Date?
        public var lastError: String?
        public var statesApplied: UInt64 = 0
        public var statesRefused: UInt64 = 0
        public var itemsRefused: UInt64 = 0
        public var lastRefusal: String?
    }

    public static let endpoint = "/api/v1/machine/live"
    public static let filteringTestEndpoint = "/api/v1/machine/filtering-test"

    private let transport: any SchoolTransport
    public let store: LiveStateStore
    private let machine: String
    private let wait: Int
    private let backoff: SchoolReporter.Backoff
    private let context: @Sendable () async -> Context
    private let applied: @Sendable () async -> Void
    private let report: @Sendable ([RefusalReport]) async -> Void
    private let filteringTest: (@Sendable (FilteringTest.Request) async -> FilteringTest.Answer)?
    private let clock: @Sendable () -> Date
    private let logger: Logger
    private let loop: any EventLoop
    /// `refused`: the sequence of the last state refused whole since the last one accepted.
    private let shared = Mutex<(status: Status, refused: Int64?, reported: Set<String>)>((Status(), nil, []))
    /// The filtering test run answered last, and the failed posts of the one under way.
    private let tests = Mutex<(tested: String, failures: Int)>(("", 0))

    /// - Parameters:
    ///   - wait: the seconds the server may hold a request (0 to 30); the transport's timeout must be longer.
    ///   - applied: called after a new state is kept: recompute and hand over the policy.
    ///   - report: called with refusals not reported before.
    ///   - filteringTest: judges a filtering test run; nil: the machine takes none.
    public init(
        transport: any SchoolTransport, store: LiveStateStore, machine: String, wait: Int = 25,
        backoff: SchoolReporter.Backoff = .init(initial: .seconds(1), maximum: .seconds(30)), context: @escaping @Sendable () async -> Context,
        applied: @escaping @Sendable () async -> Void, report: @escaping @Sendable ([RefusalReport]) async -> Void,
        filteringTest: (@Sendable (FilteringTest.Request) async -> FilteringTest.Answer)? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }, logger: Logger, loop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any()
    ) {
        self.transport = transport
        self.store = store
        self.machine = machine
        self.wait = max(0, min(30, wait))
        self.backoff = backoff
        self.context = context
        self.applied = applied
        self.report = report
        self.filteringTest = filteringTest
        self.clock = clock
        self.logger = logger
        self.loop = loop
    }

    public var status: Status { shared.withLock { $0.status } }

    /// The sequence the server is told this machine has seen last: the one
    /// held, or the one of a state refused whole after it.
    public var after: Int64 { shared.withLock { $0.refused } ?? store.sequence }

    /// The policy changed (a reload): a state refused whole may be accepted now, so it is asked for again.
    public func policyChanged() {
        shared.withLock { $0.refused = nil }
    }

    /// Polls until the calling task is cancelled.
    public func run() async {
        logger.info("school: live channel open", metadata: ["hallpass.school.live.sequence": "\(store.sequence)"])
        var failures = 0
        while !Task.isCancelled {
            let started = ContinuousClock.now
            let outcome = await poll()
            switch outcome {
            case .applied:
                failures = 0
            case .unchanged, .nothingNew:
                failures = 0
                if let pause = Self.pause(afterNothingNewIn: ContinuousClock.now - started, wait: wait) {
                    await Wakeup.sleep(pause, loop: loop)
                }
            case .refused:
                // The server answered; what it sent is not asked for again. A short pause all the same.
                failures += 1
                await Wakeup.sleep(backoff.delay(afterFailures: failures), loop: loop)
            case .failed:
                failures += 1
                await Wakeup.sleep(backoff.delay(afterFailures: failures), loop: loop)
            }
        }
    }

    /// The pause before the next request after an answer with nothing new that
    /// came `elapsed` after the request was sent: none when the server held it
    /// (half of `wait` or more); about a second (±20 %) when it answered early
    /// (its hub full, a shutdown, `wait` 0), so that the channel does not spend
    /// the machine's request budget (`machines.requestRate`, which records and
    /// check-ins share) on requests in a tight loop.
    static func pause(afterNothingNewIn elapsed: Duration, wait: Int) -> Duration? {
        guard wait == 0 || elapsed < .seconds(wait) / 2 else { return nil }
        return .seconds(1) * Double.random(in: 0.8...1.2)
    }

    /// One request: asks for a state newer than `after`, and takes what comes.
    public func poll() async -> Outcome {
        var text = "{\"after\":\(after),\"wait\":\(wait)"
        if filteringTest != nil {
            var tested: [UInt8] = []
            JSONText.appendString(tests.withLock { $0.tested }, to: &tested)
            text += ",\"tested\":" + String(decoding: tested, as: UTF8.self)
        }
        let body = Array((text + "}").utf8)
        let answer: (status: Int, body: [UInt8])
        do {
            answer = try await transport.post(Self.endpoint, body: body)
        } catch .cancelled {
            // filter-control is stopping: the held request ends with it, which is no failure to report.
            return .nothingNew
        } catch {
            return failed("\(error) [\(error.code)]")
        }
        switch answer.status {
        case 200:
            contacted()
            await takeFilteringTest(answer.body)
            return await receive(answer.body)
        case 204:
            contacted()
            return .nothingNew
        default:
            let error = SchoolConnection.refusal(status: answer.status, body: answer.body)
            return failed("\(error) [\(error.code)]")
        }
    }

    private func contacted() {
        let wasDown = shared.withLock { shared in
            defer {
                shared.status.connected = true
                shared.status.lastContactAt = clock()
                shared.status.lastError = nil
            }
            return shared.status.lastError != nil
        }
        if wasDown { logger.notice("school: the live channel reaches the server again") }
    }

    private func failed(_ error: String) -> Outcome {
        let first = shared.withLock { shared in
            defer {
                shared.status.connected = false
                shared.status.lastError = error
            }
            return shared.status.lastError == nil
        }
        if first {
            logger.warning(
                "school: the live channel cannot reach the server; the live items held stay until they end", metadata: ["hallpass.error": "\(error)"])
        }
        return .failed(error)
    }

    /// What beside the signed state a live answer may carry.
    private struct Extras: Decodable {
        let filteringTest: FilteringTest.Request?
    }

    /// Judges and answers the filtering test run a live answer carries, if
    /// it is one not answered yet (see the type's comment).
    func takeFilteringTest(_ bytes: [UInt8]) async {
        guard let filteringTest, let request = (try? JSONDecoder().decode(Extras.self, from: Data(bytes)))?.filteringTest,
            request.run != tests.withLock({ $0.tested })
        else { return }
        if let refusal = request.refusal {
            tests.withLock { $0 = (request.run, 0) }
            logger.warning("school: refused a filtering test run: \(refusal)", metadata: ["hallpass.school.filtering-test": "\(request.run.prefix(64))"])
            return
        }
        let answer = await filteringTest(request)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let body = try? encoder.encode(answer) else { return }
        var failure: String? = nil
        do {
            let posted = try await transport.post(Self.filteringTestEndpoint, body: Array(body))
            switch posted.status {
            case 200...299:
                tests.withLock { $0 = (request.run, 0) }
                let through = answer.results.filter { $0.action == "allow" }.count
                logger.notice(
                    "school: answered filtering test run \(request.run): \(answer.results.count) check(s), \(through) let through, on rules version \(answer.bundleVersion)",
                    metadata: ["hallpass.school.filtering-test": "\(request.run)"])
                return
            case 400...499:
                // Refused for good (answered already, ended, not its names): not sent again.
                tests.withLock { $0 = (request.run, 0) }
                let error = SchoolConnection.refusal(status: posted.status, body: posted.body)
                logger.warning("school: the server refused the answer to filtering test run \(request.run): \(error) [\(error.code)]")
                return
            default:
                let error = SchoolConnection.refusal(status: posted.status, body: posted.body)
                failure = "\(error) [\(error.code)]"
            }
        } catch {
            failure = "\(error) [\(error.code)]"
        }
        let givenUp = tests.withLock { tests -> Bool in
            tests.failures += 1
            guard tests.failures >= 3 else { return false }
            tests = (request.run, 0)
            return true
        }
        logger.warning(
            "school: cannot send the answer to filtering test run \(request.run)\(givenUp ? "; not trying again" : "; trying again with the next live answer")",
            metadata: ["hallpass.error": "\(failure ?? "-")"])
    }

    /// Checks, keeps and applies a state the server sent (the body of a 200).
    public func receive(_ bytes: [UInt8]) async -> Outcome {
        let context = await context()
        let now = Int64(clock().timeIntervalSince1970.rounded(.down))
        let held = store.order
        let state: LiveState
        switch LiveState.verify(bytes, policy: context.policy.live, machine: machine, held: held, now: now) {
        case .success(let verified):
            state = verified
        case .failure(let refusal):
            if refusal.code == "live.sequence", refusal.sequence == held.sequence { return .unchanged }
            // A state ordered before the one held by its issued time, with another sequence: the
            // server's clock is behind the one that issued the state held (another instance, or a
            // taken-over server that dated its state ahead). The server stamps every answer with
            // its time, so a later answer is accepted: asked again after the backoff, not held back.
            await refuse(refusal, bytes: bytes, holdBack: refusal.code != "live.sequence")
            return .refused(refusal)
        }
        let outcome = context.bounds.check(state, now: now)
        let envelope: LiveState.Envelope
        do {
            envelope = try JSONDecoder().decode(LiveState.Envelope.self, from: Data(bytes))
            try store.accept(envelope, verified: state, outcome: outcome)
        } catch {
            // Not kept, so not applied: what is held stays in force, and the state is asked for again.
            return failed("the live state \(state.sequence) cannot be kept: \(error)")
        }
        shared.withLock { shared in
            shared.status.statesApplied += 1
            shared.refused = nil
        }
        let refusedText = outcome.refused.isEmpty ? "" : ", \(outcome.refused.count) refused"
        logger.notice(
            "school: live state \(state.sequence) in force: \(outcome.accepted.count) item(s)\(refusedText)",
            metadata: ["hallpass.school.live.sequence": "\(state.sequence)", "hallpass.policy.change": "live"])
        await applied()
        let reports = outcome.refused.map {
            RefusalReport(sequence: state.sequence, item: $0.item, code: $0.code, message: $0.message, target: $0.target, category: $0.category)
        }
        await send(reports)
        return .applied(sequence: state.sequence, accepted: outcome.accepted.count, refused: outcome.refused.count)
    }

    /// A state refused whole: reported once (each item when the policy has no `live:`); with
    /// `holdBack`, not asked for again (`after` names it) until the policy changes.
    private func refuse(_ refusal: LiveState.Refusal, bytes: [UInt8], holdBack: Bool = true) async {
        shared.withLock { shared in
            shared.status.statesRefused += 1
            shared.status.lastRefusal = refusal.message
            if holdBack, let sequence = refusal.sequence { shared.refused = sequence }
        }
        var reports = [RefusalReport(sequence: refusal.sequence, item: nil, code: refusal.code, message: refusal.message)]
        if refusal.code == "live.no-policy", let items = LiveState.unverifiedItems(bytes) {
            // Nothing could be checked, so nothing applies: each item is reported, as the contract asks.
            shared.withLock { shared in
                if let sequence = items.sequence { shared.refused = sequence }
            }
            reports = items.ids.map {
                RefusalReport(sequence: items.sequence, item: $0, code: refusal.code, message: refusal.message)
            }
        }
        await send(reports)
    }

    /// Logs and reports the refusals not reported before (by item or state, and code).
    private func send(_ reports: [RefusalReport]) async {
        let fresh = shared.withLock { shared in
            reports.filter { report in
                let key = (report.item.map { "item " + $0 } ?? "state \(report.sequence ?? -1)") + " " + report.code
                // Bounded: a server that sends a new id every time cannot grow it without end.
                if shared.reported.count >= 10_000 { shared.reported.removeAll() }
                return shared.reported.insert(key).inserted
            }
        }
        guard !fresh.isEmpty else { return }
        shared.withLock { $0.status.itemsRefused += UInt64(fresh.filter { $0.item != nil }.count) }
        for report in fresh {
            logger.warning(
                "school: refused a live \(report.item == nil ? "state" : "item"): \(report.message)",
                metadata: [
                    "hallpass.code": "\(report.code)", "hallpass.school.live.item": "\(report.item ?? "-")",
                    "hallpass.school.live.sequence": "\(report.sequence.map(String.init) ?? "-")",
                ])
        }
        await report(fresh)
    }
}

extension LiveState {
    /// The sequence and item ids of a state whose signature could not be
    /// checked (the policy has no `live:`), only to report each item refused.
    static func unverifiedItems(_ bytes: [UInt8]) -> (sequence: Int64?, ids: [String])? {
        guard bytes.count <= maximumEnvelopeBytes, let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(bytes)),
            let payload = Data(base64Encoded: envelope.payload), case .success(let state) = decodePayload(payload)
        else { return nil }
        return (state.sequence, state.items.map(\.id))
    }
}
