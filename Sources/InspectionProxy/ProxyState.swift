// What the proxy's event loop and its control thread share: the engines
// (each audience's inspection plan), who is in which group, the questions
// waiting for filter-control, the interception CA and what it takes to
// terminate TLS, the pages it answers with, and the counters.
public import BlockPage
import FilterData
public import HallpassIPC
public import NIOCore
public import NIOSSL
public import SharedStore
import Synchronization
public import VerdictCore

/// The proxy's counters, written from the event loop, read by the control thread.
public final class ProxyCounters: Sendable {
    public struct Values: Sendable, Hashable {
        public var accepted: UInt64 = 0
        public var active = 0
        public var spliced: UInt64 = 0
        public var refused: [RefusalReason: UInt64] = [:]
        /// Connections to the original destination that failed (refused, unreachable, timed out).
        public var upstreamFailures: UInt64 = 0
        public var idleClosed: UInt64 = 0
        /// Connections terminated for inspection, and their requests forwarded and blocked.
        public var inspected: UInt64 = 0
        public var requestsAllowed: UInt64 = 0
        public var requestsBlocked: UInt64 = 0
        /// Requests blocked because the server's certificate did not verify.
        public var certificateFailures: UInt64 = 0
        /// Records filter-control could not take (its channel full).
        public var reportsDropped: UInt64 = 0
    }

    private let values = Mutex(Values())

    public init() {}

    public var now: Values { values.withLock { $0 } }

    func update(_ change: (inout Values) -> Void) {
        values.withLock { change(&$0) }
    }

    public func refuse(_ reason: RefusalReason) {
        update { $0.refused[reason, default: 0] += 1 }
    }

    /// `name=value ...`, for the proxy's log line.
    public var summary: String {
        let values = now
        var fields = ["accepted=\(values.accepted)", "active=\(values.active)", "spliced=\(values.spliced)"]
        fields += RefusalReason.allCases.map { "refused.\($0.rawValue)=\(values.refused[$0] ?? 0)" }
        fields += ["upstreamFailures=\(values.upstreamFailures)", "idleClosed=\(values.idleClosed)"]
        fields += [
            "inspected=\(values.inspected)", "requestsAllowed=\(values.requestsAllowed)", "requestsBlocked=\(values.requestsBlocked)",
            "certificateFailures=\(values.certificateFailures)", "reportsDropped=\(values.reportsDropped)",
        ]
        return fields.joined(separator: " ")
    }
}

public final class ProxyState: Sendable {
    private let engines: Mutex<PolicyEngines<RuleStore>>
    /// Connections waiting to learn their user's group, by uid.
    private let waiting = Mutex<[UInt32: [EventLoopPromise<Void>]]>([:])
    /// The channel to filter-control; nil when run by hand.
    public let control: DataEnd?
    public let counters = ProxyCounters()
    /// What terminating takes, from the CA filter-control handed over; nil until it has.
    private let interceptionNow = Mutex<Interception?>(nil)
    /// The certificates servers are checked against (the system's trust store, read at start).
    public let trustRoots: [NIOSSLCertificate]
    /// The block page and error pages the proxy answers with, in the school's name.
    public let pages: ProxyPages
    /// What servers showed the certificate checks before splices.
    public let certificateChecks: CertificateChecks

    public init(
        engines: PolicyEngines<RuleStore>, control: DataEnd?, trustRoots: [NIOSSLCertificate] = [], pages: ProxyPages = .builtIn,
        certificateChecks: CertificateChecks = CertificateChecks()
    ) {
        self.engines = Mutex(engines)
        self.control = control
        self.trustRoots = trustRoots
        self.pages = pages
        self.certificateChecks = certificateChecks
    }

    /// What terminating an inspected connection takes now; nil: inspected names are refused.
    public var interception: Interception? { interceptionNow.withLock { $0 } }

    /// Uses the CA handed over from now on (connections terminated before keep theirs).
    public func use(_ interception: Interception) {
        interceptionNow.withLock { $0 = interception }
    }

    /// Sends a decision's record to filter-control (nothing without a channel); a full channel drops it, counted.
    public func report(_ report: FlowReport) {
        guard let control else { return }
        if (try? control.send(.reports(FlowReportLines(CollectionOfOne(report))))) == nil {
            counters.update { $0.reportsDropped += 1 }
        }
    }

    public var rulesVersion: UInt64 { engines.withLock { $0.rules.version } }

    /// The engines now (a `rules` or `policy` message replaces them whole).
    public var current: PolicyEngines<RuleStore> { engines.withLock { $0 } }

    /// New engines from filter-control; the users placed so far stay placed.
    public func replace(_ new: PolicyEngines<RuleStore>) {
        engines.withLock { $0 = new }
        wakeEveryone()
    }

    /// The plan for a connection of `uid` (nil uid: no local socket found, a
    /// system flow, as filter-data judges one); nil when filter-control must say
    /// which group the user is in first.
    public func plan(for uid: UInt32?) -> InspectionPlan? {
        engines.withLock { $0.inspectionPlan(for: uid) }
    }

    /// Whether some audience's plan inspects `name` (a handshake's server name):
    /// the only names the proxy makes leaves for.
    public func someoneInspects(_ name: String) -> Bool {
        engines.withLock { engines in engines.inspectionPlans.values.contains { $0.choice(serverName: name.utf8).isInspect } }
    }

    /// filter-control placed `uid`: the connections waiting for it go on.
    public func place(uid: UInt32, in audience: Audience) {
        engines.withLock { $0.place(uid: uid, in: audience) }
        let promises = waiting.withLock { $0.removeValue(forKey: uid) } ?? []
        for promise in promises { promise.succeed() }
    }

    /// Waits for filter-control to place `uid` (asked once for every connection
    /// that waits), at most `timeout`; fails at once without a control channel.
    public func waitForPlacement(of uid: UInt32, on loop: any EventLoop, timeout: TimeAmount) -> EventLoopFuture<Void> {
        guard let control else { return loop.makeFailedFuture(PlacementTimeout()) }
        let promise = loop.makePromise(of: Void.self)
        let first = waiting.withLock { waiting in
            let first = waiting[uid] == nil
            waiting[uid, default: []].append(promise)
            return first
        }
        if first, (try? control.send(.askUser(uid))) == nil { promise.fail(PlacementTimeout()) }
        loop.scheduleTask(in: timeout) { [self] in
            promise.fail(PlacementTimeout())
            // No answer: the uid is asked about again by the next connection that needs it.
            waiting.withLock { waiting in
                waiting[uid]?.removeAll { $0.futureResult === promise.futureResult }
                if waiting[uid]?.isEmpty == true { waiting[uid] = nil }
            }
        }
        return promise.futureResult
    }

    /// Every waiting connection tries again (new engines may place its user).
    private func wakeEveryone() {
        let all = waiting.withLock { waiting in
            defer { waiting = [:] }
            return waiting.values.flatMap { $0 }
        }
        for promise in all { promise.succeed() }
    }

    struct PlacementTimeout: Error {}
}

/// The pages the proxy answers inspected requests with: the block page's
/// renderer, with the school's settings (filter-control passes them on the
/// command line); the request-access link leads to the block page's own
/// address, which offers the form there.
public struct ProxyPages: Sendable {
    public let renderer: BlockPageRenderer

    public init(renderer: BlockPageRenderer) {
        self.renderer = renderer
    }

    /// The built-in pages in English, without a request link, as "hallpass".
    public static var builtIn: ProxyPages {
        // The built-in settings always load: the built-in strings define every key, in English.
        ProxyPages(renderer: try! BlockPageRenderer(settings: BlockPageSettings(organization: "hallpass")))
    }
}
