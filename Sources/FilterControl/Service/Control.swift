public import BlockPage
public import FilterData
public import Foundation
public import Logging
import NIOConcurrencyHelpers
import NIOPosix
public import SharedStore
import Synchronization
public import VerdictCore

/// filter-control's state and everything that changes it: the rules and the
/// policy in force, who is in which group, the policy set filter-data
/// judges with, overrides and exams, access requests, and the connections
/// to judge again when the policy changes. The services (FilterControlServices)
/// drive it; the admin socket asks it; nothing else mutates it.
public actor Control {
    public struct Options: Sendable {
        public var configPath: String
        /// A store to use instead of the installed rules (no downloads then).
        public var store: String?
        public var runtimeDirectory: String
        public var dataBinary: String

        public init(configPath: String, store: String?, runtimeDirectory: String, dataBinary: String) {
            self.configPath = configPath
            self.store = store
            self.runtimeDirectory = runtimeDirectory
            self.dataBinary = dataBinary
        }
    }

    /// Why filter-control cannot start, and the exit status it ends with.
    public struct StartError: Error, CustomStringConvertible {
        public var message: String
        public var status: Int32
        public var description: String { message }
    }

    public let options: Options
    let logger: Logger
    private(set) var configuration: Configuration
    /// The store in force: `--store`, or the installed version's own path
    /// (`versions/N/rules.hpstore`, so a later switch of `current` cannot
    /// change what filter-data maps behind filter-control's back).
    private(set) var store: RuleStore
    private(set) var storePath: String
    private var storeOpenedAt = Date()
    /// The installed bundle's folder (the school's policy lives there); nil with `--store`.
    private var bundleFolder: String?
    private(set) var policy: PolicyInForce
    let clock: @Sendable () -> Date
    private var policyClock: PolicyClock
    let policyState: PolicyStateStore
    public let requests: AccessRequestStore
    /// Users filter-data asked about, placed through NSS (kept: a new policy set carries them).
    private var placements: [UInt32: (audience: Audience, user: LocalUser)] = [:]
    /// What filter-data judges with now, and what it was made of.
    private var policySet: PolicySet?
    private(set) var effective: [Audience: EffectivePolicy] = [:]
    private var lastReload: (at: Date, result: String, code: String)?
    /// Downloads and installs bundles; nil with `--store`.
    private(set) var updater: RuleUpdater?
    let supervisor: DataSupervisor
    private(set) var blockPage: BlockPageServer?
    /// What the block page reads from its event loops (no actor hop there).
    let pageView: Mutex<PageView>
    let connections = ConnectionRecords()
    let cutter = ConnectionCutter()
    private let users = UserDirectory()
    /// The audit log (`log:`) and desktop notices (`notify:`); nil when switched off.
    let audit: AuditLog?
    let notifier: DesktopNotifier?
    /// The Prometheus counters (`metrics:`); nil when there is no endpoint.
    let metrics: HallpassMetrics?
    /// The policy groups of placed users, for the audit log's `group` (read off the actor).
    let groupNames = NIOLockedValueBox<[UInt32: String]>([:])

    /// The engines of the policy set in force, for the block page's "why" and `filterctl check`.
    struct PageView: Sendable {
        var engines: PolicyEngines<RuleStore>
        /// The school's clock, for "an exam is in force until ...".
        var clock: PolicyClock
    }

    public var policyPath: String { options.runtimeDirectory + "/policy" }

    /// Reads the configuration and the rules (downloading the first bundle
    /// when none is installed); starts nothing yet.
    public init(options: Options, logger: Logger, clock: @escaping @Sendable () -> Date = { Date() }) async throws(StartError) {
        self.options = options
        self.logger = logger
        self.clock = clock
        let configuration = try Control.readConfiguration(options.configPath)
        self.configuration = configuration
        requests = AccessRequestStore(path: configuration.rules.directory + "/requests.json") { logger.warning("\($0)") }
        policyState = PolicyStateStore(path: configuration.rules.directory + "/" + PolicyStateStore.fileName) { logger.warning("\($0)") }
        var bundleFolder: String? = nil
        if let store = options.store {
            storePath = store
        } else {
            let updater = RuleUpdater(settings: Control.updaterSettings(configuration))
            self.updater = updater
            if updater.installed() == nil {
                guard let source = configuration.rules.source else {
                    throw StartError(
                        message: "no rules are installed in \(configuration.rules.directory) and rules.source is not set: set it, or give --store FILE",
                        status: 66)
                }
                logger.info("no rules installed yet; fetching them", metadata: ["hallpass.rules.source": "\(source)"])
                let outcome = await updater.update()
                if case .refused(let code, let message) = outcome {
                    throw StartError(message: "no rules installed yet, and the first download was refused: \(message) [\(code)]", status: 75)
                }
                logger.info("rules \(outcome)")
            }
            guard let installed = updater.installed() else {
                throw StartError(message: "no rules installed in \(configuration.rules.directory)", status: 66)
            }
            storePath = installed.versionStorePath
            bundleFolder = installed.versionDirectory
        }
        self.bundleFolder = bundleFolder
        do {
            store = try RuleStore(path: storePath, verification: .full)
        } catch {
            throw StartError(message: "\(storePath): \(error) [\(error.code)]", status: 65)
        }
        do {
            policy = PolicyInForce(bundlePolicy: try bundleFolder.flatMap(PolicyInForce.bundlePolicy(inFolder:)), configuration: configuration)
        } catch {
            throw StartError(message: "the school's policy in \(bundleFolder ?? "the bundle"): \(error)", status: 65)
        }
        policyClock = PolicyClock(zoneName: policy.school.timeZone)
        let arguments = [
            "--queue", String(configuration.queue.number), configuration.queue.failMode == .open ? "--fail-open" : "--fail-closed",
            "--peek-bytes", String(configuration.queue.peekBytes),
        ]
        let events = ControlEvents()
        supervisor = DataSupervisor(
            launch: .init(executable: options.dataBinary, arguments: arguments), store: storePath, policy: options.runtimeDirectory + "/policy",
            answerer: NeedRulesAnswerer(lookup: Control.lookup(for: configuration, logger: logger)),
            log: { [logger] line in logger.info("\(line)", metadata: ["hallpass.source": "filter-data"]) }, onEvent: events.deliver)
        let set = PolicySet(single: policy.base)
        pageView = Mutex(PageView(engines: PolicyEngines(rules: store, set: set), clock: policyClock))
        let groupNames = self.groupNames
        let hasOutput = configuration.log.file != nil || configuration.log.journald || configuration.log.syslog != nil
        do {
            audit =
                hasOutput
                ? try AuditLog(settings: configuration.log, rulesDirectory: configuration.rules.directory, logger: logger) { uid, gid in
                    // The person's name through NSS; the group is the school's policy group filter-control placed them in.
                    let names = await AuditLog.systemLookup()(uid, gid)
                    return (names.user, uid.flatMap { uid in groupNames.withLockedValue { $0[uid] } } ?? names.group)
                } : nil
        } catch {
            throw StartError(message: "log: \(error.message)", status: 78)
        }
        if configuration.notify.enabled {
            let page = configuration.blockPage
            let caServes = configuration.policy.dnsRewrite != nil && (try? LocalCertificateAuthority(folder: page.ca)) != nil
            notifier = DesktopNotifier(
                rule: NoticeRule(interval: TimeInterval(configuration.notify.interval), noticeForDNS: !caServes),
                text: NoticeText(
                    organization: page.organization, requestAccessURL: page.requestAccess?.url,
                    blockPageURL: "http://\(page.address):\(page.port)/"),
                logger: logger)
        } else {
            notifier = nil
        }
        let metrics = configuration.metrics == nil ? nil : HallpassMetrics()
        self.metrics = metrics
        if let metrics { supervisor.onAnswered = { metrics.answered(after: $0) } }
        events.control = self
        for ignored in policy.ignoredLocalKeys {
            logger.warning("\(ignored) in \(options.configPath) has no effect: the bundle brings the school's policy (docs/school-policy.md)")
        }
    }

    static func readConfiguration(_ path: String) throws(StartError) -> Configuration {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw StartError(message: "cannot read the configuration \(path)", status: 66)
        }
        do {
            return try Configuration(yaml: text)
        } catch {
            throw StartError(message: "\(path): \(error)", status: 78)
        }
    }

    /// The download settings of the `rules` section. filter-control's own
    /// connections carry the allow mark, so the kernel rules let them pass
    /// without queueing them (DESIGN.md: the control process's traffic is
    /// exempt); its name lookups still go through the filter like anyone's.
    static func updaterSettings(_ configuration: Configuration) -> RuleUpdater.Settings {
        var settings = RuleUpdater.Settings(configuration)
        settings.socketMark = FlowMarks().allow
        return settings
    }

    /// The lookup service next to the bundle (`<rules.source>lookup/`), for `policy.unknown: ask`.
    public static func lookup(for configuration: Configuration, logger: Logger) -> any HostLookup {
        guard let text = configuration.rules.source, let source = try? BundleSource(parsing: text) else { return NoLookup() }
        switch source {
        case .directory(let path):
            return FolderLookup(folder: (path.hasSuffix("/") ? path : path + "/") + "lookup")
        case .https(let host, let port, let path):
            do {
                return try HTTPSLookup(
                    host: host, port: port, path: path, caFile: configuration.rules.caFile, pins: configuration.rules.pins,
                    socketMark: FlowMarks().allow)
            } catch {
                logger.warning("no lookups: \(error)")
                return NoLookup()
            }
        }
    }

    // MARK: Start and stop

    /// Writes the policy set for filter-data (before it starts, which reads it).
    func prepare() throws(StartError) {
        do {
            try FileManager.default.createDirectory(atPath: options.runtimeDirectory, withIntermediateDirectories: true)
        } catch {
            throw StartError(message: "cannot create \(options.runtimeDirectory): \(error.localizedDescription)", status: 73)
        }
        let (set, _) = computePolicySet(now: clock())
        do {
            try writePolicySet(set)
        } catch {
            throw StartError(message: error.message, status: 73)
        }
        connections.load(from: options.runtimeDirectory + "/connections")
    }

    /// The block page, listening where people are sent (see `BlockPageSetup`).
    func startBlockPage() throws(StartError) {
        let server = try BlockPageSetup.start(configuration: configuration, control: self, logger: logger)
        blockPage = server
    }

    func stopBlockPage() {
        blockPage?.stop()
        blockPage = nil
    }

    /// On stop: the connection records are kept for the next start.
    func saveConnections() {
        connections.save(to: options.runtimeDirectory + "/connections")
    }

    // MARK: The policy set

    /// Every audience's policy at `now`, and the users placed so far.
    func computePolicySet(now: Date) -> (PolicySet, [Audience: EffectivePolicy]) {
        let seconds = Int64(now.timeIntervalSince1970)
        let state = policyState.current(now: seconds)
        let moment = PolicyMoment(time: policyClock.localTime(at: now), now: seconds, manualExam: state.exam, overrides: overridesInForce(state))
        var policies: [Audience: Policy] = [:]
        var effective: [Audience: EffectivePolicy] = [:]
        for audience in policy.school.audiences {
            let result = policy.effectivePolicy(for: audience, at: moment)
            policies[audience] = result.policy
            effective[audience] = result
        }
        let set = PolicySet(
            policies: policies, users: placements.mapValues(\.audience), askUsers: !policy.school.groups.isEmpty)
        return (set, effective)
    }

    /// Overrides in force: the admins' and the approved access requests'
    /// (an approval is an allow override for everyone, until its time).
    private func overridesInForce(_ state: PolicyState) -> [PolicyOverride] {
        let now = clock()
        let approvals = requests.list().filter { $0.allows(at: now) }.map { request in
            PolicyOverride(
                id: "request-" + request.id, action: .allow, target: request.host, group: nil,
                until: request.allowUntil.map { Int64($0.timeIntervalSince1970) }, createdAt: Int64((request.decidedAt ?? now).timeIntervalSince1970),
                by: "request \(request.id)")
        }
        return state.overrides + approvals
    }

    struct WriteFailure: Error {
        var message: String
    }

    private func writePolicySet(_ set: PolicySet) throws(WriteFailure) {
        do {
            try AtomicFile.write(Array(PolicySet.render(set).utf8), to: policyPath, mode: 0o644)
        } catch {
            throw WriteFailure(message: "cannot write \(policyPath): \(error)")
        }
    }

    /// Computes the policy set for now; when it differs from the one in
    /// force, hands it to filter-data and judges the open connections again.
    /// Returns what changed, for the log and the admin's answer.
    @discardableResult
    func applyPolicy(reason: String) async -> String? {
        let now = clock()
        let (set, effective) = computePolicySet(now: now)
        guard set != policySet else { return nil }
        let previous = self.effective
        do {
            try writePolicySet(set)
        } catch {
            logger.error("\(error.message); the policy in force stays")
            return nil
        }
        policySet = set
        self.effective = effective
        pageView.withLock { view in
            view.engines = PolicyEngines(rules: store, set: set, answers: view.engines.answers)
            view.clock = policyClock
        }
        let change = Control.describeChange(from: previous, to: effective)
        if !previous.isEmpty {
            logger.notice("policy in force changed (\(reason)): \(change)", metadata: ["hallpass.policy.change": "\(reason)"])
        }
        switch await supervisor.apply(store: nil, policy: policyPath, waitingAtMost: .seconds(2)) {
        case .refused(let why): logger.error("filter-data refused the new policy: \(why)")
        case .loaded, .pending: break
        }
        await judgeOpenConnections(set: set)
        return change
    }

    static func describeChange(from old: [Audience: EffectivePolicy], to new: [Audience: EffectivePolicy]) -> String {
        var parts: [String] = []
        for (audience, now) in new.sorted(by: { $0.key.description < $1.key.description }) {
            let before = old[audience]
            if before?.schedules != now.schedules {
                parts.append("\(audience): schedules " + (now.schedules.isEmpty ? "none" : now.schedules.joined(separator: ", ")))
            }
            if (before?.exam != nil) != (now.exam != nil) { parts.append("\(audience): exam \(now.exam == nil ? "over" : "started")") }
            if before?.overrides != now.overrides { parts.append("\(audience): \(now.overrides.count) override(s)") }
        }
        return parts.isEmpty ? "policy keys" : parts.joined(separator: "; ")
    }

    /// Cuts every recorded open connection the new policy blocks.
    func judgeOpenConnections(set: PolicySet) async {
        let engines = PolicyEngines(rules: store, set: set)
        let doomed = connections.blocked(by: engines)
        guard !doomed.isEmpty else { return }
        let cutter = self.cutter
        let outcomes = (try? await NIOThreadPool.singleton.runIfActive { doomed.map { ($0, cutter.cut($0.connection)) } }) ?? []
        for (record, outcome) in outcomes {
            connections.forget(record.flow)
            logger.notice(
                "cut an open connection the policy now blocks",
                metadata: [
                    "hallpass.connection": "\(record.connection)", "hallpass.host": "\(record.host ?? "-")",
                    "hallpass.uid": "\(record.uid.map(String.init) ?? "-")", "hallpass.cut.socket": "\(outcome.socketDestroyed)",
                    "hallpass.cut.marked": "\(outcome.marked)",
                ])
        }
    }

    // MARK: Events from filter-data

    /// filter-data asks which group `uid` is in: resolved through NSS, off the actor's executor.
    func place(uid: UInt32) async {
        if let known = placements[uid] {
            supervisor.send(.userPlacement(uid: uid, audience: known.audience))
            return
        }
        let users = self.users
        let user = (try? await NIOThreadPool.singleton.runIfActive { users.user(uid: uid) }) ?? LocalUser(uid: uid)
        let audience = policy.school.audience(of: user)
        if placements.count >= PolicySet.maximumUsers, let any = placements.keys.first { placements[any] = nil }
        placements[uid] = (audience, user)
        groupNames.withLockedValue { $0[uid] = audience.groupName ?? audience.description }
        logger.info(
            "placed a user", metadata: ["hallpass.uid": "\(uid)", "hallpass.user": "\(user.name ?? "-")", "hallpass.group": "\(audience)"])
        supervisor.send(.userPlacement(uid: uid, audience: audience))
    }

    /// Decisions filter-data reported: allowed connections are kept to be
    /// judged again; every report goes to the audit log (which keeps what
    /// `log.allowed` asks for); a blocked flow that got no block page is
    /// told to its person (a flow that reaches the block page goes to the
    /// block page's own address, which hallpass never judges).
    func record(_ reports: [FlowReport]) {
        let version = store.version
        for report in reports {
            connections.record(report)
            metrics?.record(report)
            guard audit != nil || notifier != nil else { continue }
            let decision = Control.decisionRecord(report, at: clock(), rulesVersion: version)
            audit?.record(decision)
            if decision.action == .block { notifier?.consider(decision) }
        }
    }

    static func decisionRecord(_ report: FlowReport, at time: Date, rulesVersion: UInt64) -> DecisionRecord {
        let kind = DecisionRecord.Kind(rawValue: report.kind) ?? .other
        var url: String? = nil
        if kind == .http, let host = report.host { url = "http://" + host + (report.path ?? "/") }
        return DecisionRecord(
            time: time, uid: report.uid, kind: kind, host: report.host, url: url, destination: report.flow.destination.description,
            port: report.flow.destinationPort, action: report.verdict == .allow ? .allow : .block, category: report.reason.category,
            rule: report.reason.rule, reason: report.reason.source.rawValue, rulesVersion: rulesVersion)
    }

    // MARK: Reload

    /// Fetches new rules now (with a `rules.source`; with `--store`, opens
    /// that file again), reads the configuration again, checks both and
    /// hands them to filter-data. Returns what `filterctl reload` prints.
    @discardableResult
    public func reload() async -> AdminReply {
        let reply: AdminReply
        do throws(StartError) {
            reply = try await reloadOrFail()
        } catch {
            reply = AdminReply(exitCode: error.status, output: "reload refused, the current rules stay in force: \(error.message)\n", code: "reload.refused")
            metrics?.rulesRefused(code: updater?.state().lastCode ?? "reload.refused")
        }
        lastReload = (clock(), reply.output.trimmingCharacters(in: .whitespacesAndNewlines), reply.code ?? "")
        if reply.exitCode == 0 {
            logger.notice("\(reply.output.trimmingCharacters(in: .whitespacesAndNewlines))")
        } else {
            logger.warning("\(reply.output.trimmingCharacters(in: .whitespacesAndNewlines))", metadata: ["hallpass.code": "\(reply.code ?? "")"])
        }
        return reply
    }

    private func reloadOrFail() async throws(StartError) -> AdminReply {
        let configuration = try Control.readConfiguration(options.configPath)
        var outcome: UpdateOutcome? = nil
        var path = storePath
        var folder = bundleFolder
        if options.store == nil {
            var updater = self.updater!
            if self.configuration.rules != configuration.rules {
                // rules.* changed in the file: fetch with the new settings.
                updater = RuleUpdater(settings: Control.updaterSettings(configuration))
                self.updater = updater
            }
            if configuration.rules.source != nil {
                let fetched = await updater.update()
                outcome = fetched
                if case .refused(let code, let message) = fetched {
                    throw StartError(message: "\(message) [\(code)]; rules version \(store.version) stays in force", status: 65)
                }
            }
            if let installed = updater.installed() {
                path = installed.versionStorePath
                folder = installed.versionDirectory
            }
        }
        let newStore: RuleStore
        do {
            newStore = try RuleStore(path: path, verification: .full)
        } catch {
            throw StartError(message: "\(path): \(error) [\(error.code)]", status: 65)
        }
        let newPolicy: PolicyInForce
        do {
            newPolicy = PolicyInForce(bundlePolicy: try folder.flatMap(PolicyInForce.bundlePolicy(inFolder:)), configuration: configuration)
        } catch {
            throw StartError(message: "the school's policy: \(error)", status: 65)
        }
        do {
            try blockPage?.use(BlockPageSetup.responder(configuration: configuration, control: self))
        } catch {
            throw StartError(message: "blockPage: \(error.message) [\(error.code)]", status: 78)
        }
        BlockPageSetup.reloadAuthority(configuration: configuration, server: blockPage, logger: logger)
        let previous = store.version
        self.configuration = configuration
        store = newStore
        storePath = path
        bundleFolder = folder
        storeOpenedAt = clock()
        policy = newPolicy
        policyClock = PolicyClock(zoneName: newPolicy.school.timeZone)
        for ignored in newPolicy.ignoredLocalKeys {
            logger.warning("\(ignored) in \(options.configPath) has no effect: the bundle brings the school's policy (docs/school-policy.md)")
        }
        // Users are placed again under the new groups.
        let users = self.users
        let known = placements.keys.map { $0 }
        let resolved = (try? await NIOThreadPool.singleton.runIfActive { known.map { users.user(uid: $0) } }) ?? []
        placements = Dictionary(uniqueKeysWithValues: resolved.map { ($0.uid, (newPolicy.school.audience(of: $0), $0)) })
        let (set, effective) = computePolicySet(now: clock())
        do {
            try writePolicySet(set)
        } catch {
            throw StartError(message: error.message, status: 73)
        }
        policySet = set
        self.effective = effective
        let clock = policyClock
        pageView.withLock { view in
            view.engines = PolicyEngines(rules: newStore, set: set)
            view.clock = clock
        }
        var text: String
        if newStore.version == previous {
            text = "rules version \(newStore.version) is current" + (outcome.map { " (\($0))" } ?? "") + "; policy read again"
        } else {
            text = "rules version \(newStore.version) now in force (was \(previous)); policy read again"
        }
        if newPolicy.fromBundle { text += " (the school's policy from the bundle)" }
        switch await supervisor.apply(store: path, policy: policyPath, waitingAtMost: .seconds(3)) {
        case .refused(let reason):
            // filter-data checked the files itself and kept its rules.
            throw StartError(message: "filter-data refused them: \(reason)", status: 65)
        case .pending:
            text += "; filter-data is restarting and starts with them"
        case .loaded:
            break
        }
        await judgeOpenConnections(set: set)
        return AdminReply(exitCode: 0, output: text + "\n", code: newStore.version == previous ? "reload.current" : "reload.installed")
    }

    // MARK: What the status shows

    public func status() async -> AdminStatus {
        let state = updater?.state()
        func date(_ seconds: Int64?) -> Date? { seconds.map { Date(timeIntervalSince1970: TimeInterval($0)) } }
        let data = supervisor.status
        var counters = data.counters
        for (name, value) in KernelRules.queueStatistics(queue: configuration.queue.number) { counters[name] = value }
        counters["connectionsRecorded"] = UInt64(connections.count)
        if let audit {
            let log = await audit.counters()
            counters["auditQueued"] = log.queued
            counters["auditWritten"] = log.written
            counters["auditDropped"] = log.droppedQueue + log.journalDropped + (log.syslog?.dropped ?? 0)
            counters["auditFileFailed"] = log.fileFailed
            if let syslog = log.syslog {
                counters["syslogSent"] = syslog.sent
                counters["syslogBuffered"] = UInt64(syslog.buffered)
                counters["syslogConnected"] = syslog.connected ? 1 : 0
            }
        }
        if let notifier {
            let notices = notifier.counters()
            counters["noticesSent"] = notices.sent
            counters["noticesRateLimited"] = notices.rateLimited
            counters["noticesFailed"] = notices.failed + notices.dropped
        }
        let seconds = Int64(clock().timeIntervalSince1970)
        let policyState = self.policyState.current(now: seconds)
        let policyStatus = AdminStatus.PolicyStatus(
            source: policy.fromBundle ? "bundle version \(store.version)" : options.configPath,
            groups: policy.school.groups.map(\.name),
            schedulesInForce: effective.sorted { $0.key.description < $1.key.description }.compactMap { audience, effective in
                effective.schedules.isEmpty ? nil : "\(audience): \(effective.schedules.joined(separator: ", "))"
            },
            exam: effective.values.compactMap(\.exam).first.map { exam in
                "in force (\(exam.startedBy))" + (exam.until.map { ", until \(policyClock.describe(Date(timeIntervalSince1970: TimeInterval($0))))" } ?? ", until stopped")
            } ?? "none",
            overrides: policyState.overrides.count, placedUsers: placements.count, ignoredLocalKeys: policy.ignoredLocalKeys,
            clock: policyClock.describe(clock()))
        return AdminStatus(
            rules: .init(
                version: data.rulesVersion ?? store.version, store: storePath, installedAt: date(state?.installedAt) ?? storeOpenedAt,
                source: configuration.rules.source,
                lastFetchAt: date(state?.lastAttemptAt) ?? lastReload?.at,
                lastFetchResult: state?.lastResult.map { result in
                    result.rawValue + (state?.lastMessage.map { ": " + $0 } ?? "")
                } ?? lastReload?.result,
                lastFetchCode: state?.lastCode ?? lastReload?.code),
            dataProcess: .init(
                pid: data.pid, startedAt: data.startedAt, restarts: data.restarts, lastExit: data.lastExit,
                lastRulesRefusal: data.lastRulesRefusal, countersAt: data.countersAt),
            queue: configuration.queue.number, failMode: configuration.queue.failMode.rawValue, counters: counters, now: clock(),
            policy: policyStatus)
    }
}

/// Carries filter-data's events (on the supervisor's thread) into the actor.
final class ControlEvents: @unchecked Sendable {
    // @unchecked Sendable: `control` is set once, right after init, before the supervisor starts.
    weak var control: Control?

    func deliver(_ event: DataEvent) {
        guard let control else { return }
        switch event {
        case .askUser(let uid): Task { await control.place(uid: uid) }
        case .reports(let reports): Task { await control.record(reports) }
        }
    }
}

extension Control {
    /// What Prometheus scrapes: the counters filter-data, the kernel and the
    /// audit log keep, brought up to date, and the rules' version and age.
    func metricsExposition() async -> [UInt8] {
        guard let metrics else { return [] }
        let status = await status()
        let counters = status.counters
        metrics.mirror("hallpass_dns_rewrites_total", total: counters["dnsRewrites"] ?? 0)
        metrics.mirror("hallpass_netlink_errors_total", total: counters["netlinkErrors"] ?? 0)
        metrics.mirror("hallpass_queue_drops_total", total: (counters["queueDropped"] ?? 0) + (counters["queueUserDropped"] ?? 0))
        metrics.mirror("hallpass_filter_data_restarts_total", total: UInt64(status.dataProcess.restarts))
        metrics.mirror("hallpass_audit_dropped_total", total: counters["auditDropped"] ?? 0)
        metrics.mirror("hallpass_reports_dropped_total", total: counters["reportsDropped"] ?? 0)
        let lastSuccess = updater?.state().lastSuccessAt.map { Date(timeIntervalSince1970: TimeInterval($0)) } ?? status.rules.installedAt
        metrics.rules(version: status.rules.version ?? store.version, lastSuccess: lastSuccess)
        return metrics.exposition()
    }
}
