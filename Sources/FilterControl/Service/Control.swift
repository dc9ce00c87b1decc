import BlockPage
import HallpassIPC
import Foundation
import HallpassSystem
public import Logging
import NIOPosix
import SharedStore
import Synchronization
import VerdictCore

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
        /// The inspection proxy's executable (`hallpass-proxy`); nil: no proxy runs
        /// (the kernel still selects inspected addresses, whose TCP 443 then fails).
        public var proxyBinary: String?

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
    private(set) var store: RuleStore {
        didSet { rulesVersionForReports.store(store.version, ordering: .relaxed) }
    }
    /// The version of `store`, for the records of filter-data's reports, which
    /// are made on the supervisor's thread without a hop into the actor.
    nonisolated let rulesVersionForReports = Atomic<UInt64>(0)
    /// The policy's safeguarding rules, for the same reports: an allowed flow
    /// one of them looks at is recorded even with `log.allowed: none`. nil
    /// when no rule looks at allowed flows (most reports then cost nothing more).
    nonisolated let safeguardingForReports = Mutex<SafeguardingPolicy?>(nil)
    private(set) var storePath: String
    private var storeOpenedAt = Date()
    /// The installed bundle's folder (the school's policy lives there); nil with `--store`.
    private var bundleFolder: String?
    private(set) var policy: PolicyInForce {
        didSet { Self.setSafeguarding(policy, in: safeguardingForReports) }
    }
    let clock: @Sendable () -> Date
    private var policyClock: PolicyClock
    let policyState: PolicyStateStore
    public let requests: AccessRequestStore
    /// The block page form's CSRF tokens, with a secret made at this start (never written down).
    nonisolated let formTokens = RequestFormTokens.random()
    /// Users filter-data asked about, placed through NSS (kept: a new policy set carries them).
    private var placements: [UInt32: (audience: Audience, user: LocalUser)] = [:]
    /// What filter-data judges with now, and what it was made of.
    private var policySet: PolicySet?
    private(set) var effective: [Audience: EffectivePolicy] = [:]
    private var lastReload: (at: Date, result: String, code: String)?
    /// The last policy set filter-data refused (not offered again by the clock).
    private var refusedPolicySet: PolicySet?
    /// A hand-over to filter-data runs, and who waits for their turn.
    private var handingOver = false
    private var handOverWaiters: [CheckedContinuation<Void, Never>] = []
    /// Downloads and installs bundles; nil with `--store`.
    private(set) var updater: RuleUpdater?
    let supervisor: DataSupervisor
    /// The inspection proxy's supervisor (the same kind, running hallpass-proxy); nil without one.
    let proxySupervisor: DataSupervisor?
    /// The interception CA the proxy is handed (`proxy.ca`), made for the policy's inspected names.
    let interception: ProxyInterception
    /// The user filter-data runs as (`queue.user`, looked up once at start).
    let dataUser: DataUser
    /// This network namespace's `net.ipv4.ip_unprivileged_port_start`, read
    /// once at start: the block page's ports at or above it are logged, and
    /// `blockPage.port` among them is not listened on (`BlockPage.pagePort`).
    let unprivilegedPortStart: Int
    private(set) var blockPage: BlockPageServer?
    /// What the block page reads from its event loops (no actor hop there).
    let pageView: Mutex<PageView>
    let connections = ConnectionRecords()
    let cutter = ConnectionCutter()
    /// The SafeSearch enforcement hosts' addresses (looked up by `SafeSearchService`).
    let safeSearch = SafeSearchResolver(socketMark: FlowMarks().allow)
    private let users = UserDirectory()
    /// The audit log (`log:`) and desktop notices (`notify:`); nil when switched off.
    let audit: AuditLog?
    let notifier: DesktopNotifier?
    let school: SchoolParts?
    /// The Prometheus counters (`metrics:`); nil when there is no endpoint.
    let metrics: HallpassMetrics?
    /// The policy groups of placed users, for the audit log's `group` (read off the actor).
    let groupNames: GroupNames
    /// The live channel to the school's server, once `FilterControlApplication` made it.
    var liveChannel: LiveChannel?

    /// The engines of the policy set in force, for the block page's "why" and `filterctl check`.
    struct PageView: Sendable {
        var engines: PolicyEngines<RuleStore>
        /// The school's clock, for "an exam is in force until ...".
        var clock: PolicyClock
        /// The live items in force, for "set by ... until ...".
        var live: [LiveItem] = []
        /// The school's `locked:` in force: a name in one offers no access
        /// request (known from the start, before a policy set is handed over).
        var locked: Set<String> = []
    }

    public var policyPath: String { options.runtimeDirectory + "/policy" }

    /// What `FilterControlApplication.build` made for Control: the rules and
    /// policy it starts with, and the long-lived parts it works with.
    struct Parts: Sendable {
        var rules: LoadedRules
        var requests: AccessRequestStore
        var policyState: PolicyStateStore
        var updater: RuleUpdater?
        var supervisor: DataSupervisor
        var proxySupervisor: DataSupervisor? = nil
        var interception = ProxyInterception()
        var dataUser: DataUser
        var unprivilegedPortStart: Int
        var audit: AuditLog?
        var notifier: DesktopNotifier?
        var metrics: HallpassMetrics?
        var groupNames: GroupNames
        /// Who filter-control reports to (`school:`); nil without one.
        var school: SchoolParts? = nil
    }

    /// The school's server: the machine's identity, the outbox of its
    /// records, and the live state it holds (`live-state.json`).
    struct SchoolParts: Sendable {
        var identity: MachineIdentity
        var outbox: RecordOutbox
        var live: LiveStateStore
    }

    /// The rules and the policy filter-control starts with.
    struct LoadedRules: Sendable {
        /// `--store`, or the installed version's own store path.
        var storePath: String
        /// The installed bundle's folder; nil with `--store`.
        var bundleFolder: String?
        var store: RuleStore
        var policy: PolicyInForce
    }

    /// Takes what `FilterControlApplication.build` made; builds nothing.
    init(options: Options, configuration: Configuration, logger: Logger, clock: @escaping @Sendable () -> Date, parts: Parts) {
        self.options = options
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        storePath = parts.rules.storePath
        bundleFolder = parts.rules.bundleFolder
        store = parts.rules.store
        policy = parts.rules.policy
        policyClock = PolicyClock(zoneName: parts.rules.policy.school.timeZone)
        requests = parts.requests
        policyState = parts.policyState
        updater = parts.updater
        supervisor = parts.supervisor
        proxySupervisor = parts.proxySupervisor
        interception = parts.interception
        dataUser = parts.dataUser
        unprivilegedPortStart = parts.unprivilegedPortStart
        audit = parts.audit
        school = parts.school
        notifier = parts.notifier
        metrics = parts.metrics
        groupNames = parts.groupNames
        pageView = Mutex(
            PageView(
                engines: PolicyEngines(rules: parts.rules.store, set: PolicySet(single: parts.rules.policy.base)), clock: policyClock,
                locked: parts.rules.policy.school.locked))
        rulesVersionForReports.store(parts.rules.store.version, ordering: .relaxed)
        Self.setSafeguarding(parts.rules.policy, in: safeguardingForReports)
    }

    private static func setSafeguarding(_ policy: PolicyInForce, in box: borrowing Mutex<SafeguardingPolicy?>) {
        let safeguarding = policy.school.safeguarding
        box.withLock { $0 = safeguarding.allowedFlows.any ? safeguarding : nil }
    }

    /// The configuration file, at most this large.
    static let maximumConfigurationBytes: UInt64 = 1 << 20

    static func readConfiguration(_ path: String) throws(StartError) -> Configuration {
        // Every reload reads it again: BoundedFile, not Foundation (which leaks 4 KiB on each read of an empty file).
        let bytes: [UInt8]
        do {
            bytes = try BoundedFile.read(path, limit: maximumConfigurationBytes, followingLinks: true)
        } catch .tooLarge {
            throw StartError(message: "cannot read the configuration \(path): larger than \(maximumConfigurationBytes >> 20) MiB", status: 66)
        } catch {
            throw StartError(message: "cannot read the configuration \(path): \(error)", status: 66)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw StartError(message: "cannot read the configuration \(path): not UTF-8 text", status: 66)
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
                    serverKey: configuration.rules.serverKey, socketMark: FlowMarks().allow)
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
        recheckLiveState()
        let (set, _) = computePolicySet(now: clock())
        do {
            try writePolicySet(set)
        } catch {
            throw StartError(message: error.message, status: 73)
        }
        connections.load(from: options.runtimeDirectory + "/connections")
        // Before the proxy starts: its first start is told the CA.
        prepareInterception()
        if let problem = DataReadable.problem(path: storePath, uid: dataUser.uid, gid: dataUser.gid) {
            logger.warning("\(problem); filter-data starts with these rules (it opens them before its sandbox) but would refuse every reload")
        }
    }

    /// The block page, listening where people are sent (see `BlockPageSetup`).
    func startBlockPage() throws(StartError) {
        let server = try BlockPageSetup.start(
            configuration: configuration, unprivilegedPortStart: unprivilegedPortStart, control: self, logger: logger)
        blockPage = server
    }

    func stopBlockPage() {
        blockPage?.stop()
        blockPage = nil
    }

    /// Makes the interception CA ready for the policy in force (nothing when it
    /// inspects no name) and hands a changed one to the running proxy; its
    /// next starts get it in their greeting.
    func prepareInterception() {
        guard proxySupervisor != nil, let command = interception.prepare(configuration: configuration, school: policy.school, logger: logger) else {
            return
        }
        proxySupervisor?.send(command)
    }

    /// On stop: the connection records are kept for the next start.
    func saveConnections() {
        do {
            try connections.save(to: options.runtimeDirectory + "/connections")
        } catch {
            logger.warning("the connection records are not kept for the next start: \(error)")
        }
    }

    // MARK: The policy set

    /// Every audience's policy at `now`, and the users placed so far.
    func computePolicySet(now: Date) -> (PolicySet, [Audience: EffectivePolicy]) {
        computePolicySet(now: now, policy: policy, placements: placements, policyClock: policyClock)
    }

    /// The same for a policy not (yet) in force.
    ///
    /// A placed person named by a live item of their own (an access request
    /// approved for them alone) gets a policy of their own, `.person(uid)`:
    /// their group's, plus their items. Their records still name their group
    /// (`groupNames` keeps the placement's audience).
    ///
    /// `live`: the live items as checked against `policy` (a reload's, not yet
    /// in force); nil: those held.
    func computePolicySet(
        now: Date, policy: PolicyInForce, placements: [UInt32: (audience: Audience, user: LocalUser)], policyClock: PolicyClock,
        live liveChecked: [LiveItem]? = nil
    ) -> (PolicySet, [Audience: EffectivePolicy]) {
        let seconds = Int64(now.timeIntervalSince1970)
        let state = policyState.current(now: seconds)
        let live = (liveChecked ?? school?.live.items(inForceAt: seconds) ?? []).filter { $0.isInForce(now: seconds) }
        let moment = PolicyMoment(
            time: policyClock.localTime(at: now), now: seconds, manualExam: state.exam, overrides: overridesInForce(state), live: live)
        var policies: [Audience: Policy] = [:]
        var effective: [Audience: EffectivePolicy] = [:]
        for audience in policy.school.audiences {
            let result = policy.effectivePolicy(for: audience, at: moment)
            policies[audience] = result.policy
            effective[audience] = result
        }
        var users = placements.mapValues(\.audience)
        let persons = Set(live.compactMap(\.user))
        if !persons.isEmpty {
            for (uid, placed) in placements where placed.audience != .system {
                guard let name = placed.user.name, persons.contains(name), policy.school.liveUserItemsReach(group: placed.audience.groupName)
                else { continue }
                let result = policy.effectivePolicy(for: placed.audience, at: moment, person: name)
                policies[.person(uid)] = result.policy
                effective[.person(uid)] = result
                users[uid] = .person(uid)
            }
        }
        // A person's own live items need filter-data to ask about every user, groups or not.
        var set = PolicySet(policies: policies, users: users, askUsers: !policy.school.groups.isEmpty || !persons.isEmpty)
        set.safeSearchTargets = safeSearch.targets(for: set.safeSearchEngines, now: now)
        return (set, effective)
    }

    /// The engines whose SafeSearch some audience's policy enforces now.
    func safeSearchEngines() -> Set<SafeSearchEngine> {
        (policySet ?? computePolicySet(now: clock()).0).safeSearchEngines
    }

    /// Overrides in force: the admins' and the access requests approved
    /// here (`filterctl requests approve`: an allow override for everyone,
    /// until its time). Not those approved in the school's console: their
    /// live item opens the site, for the audience the teacher chose.
    private func overridesInForce(_ state: PolicyState) -> [PolicyOverride] {
        let now = clock()
        let approvals = requests.list().filter { $0.allows(at: now) && $0.decidedBySchool != true }.map { request in
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

    private func writePolicySet(_ set: PolicySet, to path: String? = nil) throws(WriteFailure) {
        let path = path ?? policyPath
        do {
            try AtomicFile.write(Array(PolicySet.render(set).utf8), to: path, mode: 0o644)
        } catch {
            throw WriteFailure(message: "cannot write \(path): \(error)")
        }
    }

    /// Where a policy set waits while filter-data decides whether to take it.
    var candidatePolicyPath: String { options.runtimeDirectory + "/policy.next" }

    /// Why filter-data did not take new files.
    enum HandOverFailure: Error {
        /// filter-data could not or would not read them; it keeps what it had.
        case refused(String)
        /// They could not even be written; filter-data was not asked.
        case notWritten(String)
    }

    /// Hands `set` (and `store`, when given) to filter-data. The set goes
    /// through a candidate file: only once filter-data took it (or is
    /// restarting, and starts with it) does it become the policy file that
    /// later starts read. Refused, nothing changes: filter-data and its
    /// later starts keep the files in force. One hand-over at a time.
    func handOver(store: String?, set: PolicySet, waitingAtMost timeout: Duration) async throws(HandOverFailure) -> DataSupervisor.RulesAnswer {
        await handOverTurn()
        defer { handOverDone() }
        if let store, let problem = DataReadable.problem(path: store, uid: dataUser.uid, gid: dataUser.gid) { throw .refused(problem) }
        if let problem = DataReadable.problem(path: candidatePolicyPath, uid: dataUser.uid, gid: dataUser.gid) { throw .refused(problem) }
        do {
            try writePolicySet(set, to: candidatePolicyPath)
        } catch {
            throw .notWritten(error.message)
        }
        let answer = await supervisor.apply(store: store, policy: candidatePolicyPath, waitingAtMost: timeout)
        if case .refused(let why) = answer { throw .refused(why) }
        // The proxy takes what filter-data took (the same files). Its refusal is
        // logged, not the hand-over's: it keeps the rules it had.
        if let proxySupervisor {
            let proxyAnswer = await proxySupervisor.apply(store: store, policy: candidatePolicyPath, waitingAtMost: .seconds(1))
            if case .refused(let why) = proxyAnswer { logger.error("hallpass-proxy refused the new rules, it keeps the old: \(why)") }
        }
        do {
            try writePolicySet(set)
            supervisor.useAtNextStart(store: store ?? storePath, policy: policyPath)
            proxySupervisor?.useAtNextStart(store: store ?? storePath, policy: policyPath)
        } catch {
            // filter-data has the set; a later start reads the candidate, which stays.
            logger.warning("\(error.message); filter-data's next start reads \(candidatePolicyPath)")
        }
        return answer
    }

    private func handOverTurn() async {
        guard handingOver else {
            handingOver = true
            return
        }
        await withCheckedContinuation { handOverWaiters.append($0) }
    }

    private func handOverDone() {
        if handOverWaiters.isEmpty {
            handingOver = false
        } else {
            handOverWaiters.removeFirst().resume()
        }
    }

    /// Computes the policy set for now; when it differs from the one in
    /// force, hands it to filter-data and judges the open connections again.
    /// Returns what changed, for the log and the admin's answer.
    /// A set filter-data refused is not offered again (the clock ticks every
    /// second); a different set, or a reload, is.
    @discardableResult
    func applyPolicy(reason: String, skipWhenBusy: Bool = false) async -> String? {
        // The clock's tick skips a turn while another hand-over runs; the next tick catches up.
        if skipWhenBusy && handingOver { return nil }
        let (set, effective) = computePolicySet(now: clock())
        guard set != policySet, set != refusedPolicySet else { return nil }
        do {
            _ = try await handOver(store: nil, set: set, waitingAtMost: .seconds(2))
        } catch {
            switch error {
            case .refused(let why):
                refusedPolicySet = set
                logger.error("filter-data refused the new policy, the one in force stays: \(why)")
            case .notWritten(let why):
                logger.error("\(why); the policy in force stays")
            }
            return nil
        }
        // What was handed over is in force now. Should anything have changed
        // while filter-data answered, the next tick hands that over too.
        let inForce = effective
        let previous = self.effective
        policySet = set
        refusedPolicySet = nil
        self.effective = inForce
        let live = school?.live.items(inForceAt: Int64(clock().timeIntervalSince1970)) ?? []
        pageView.withLock { view in
            view.engines = PolicyEngines(rules: store, set: set, answers: view.engines.answers)
            view.clock = policyClock
            view.live = live
        }
        let change = Control.describeChange(from: previous, to: inForce)
        if !previous.isEmpty {
            logger.notice("policy in force changed (\(reason)): \(change)", metadata: ["hallpass.policy.change": "\(reason)"])
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
            if (before?.live ?? []) != now.live { parts.append("\(audience): \(now.live.count) live item(s)") }
        }
        return parts.isEmpty ? "policy keys" : parts.joined(separator: "; ")
    }

    /// Cuts every recorded open connection the new policy blocks.
    func judgeOpenConnections(set: PolicySet) async {
        let engines = PolicyEngines(rules: store, set: set)
        let cutter = self.cutter
        let connections = self.connections
        // On NIO's thread pool: each cut is two netlink requests that wait for the kernel's answer
        // (hp_conntrack_set_mark, hp_socket_destroy), and the records, tens of thousands, are decoded and judged here.
        let outcomes =
            (try? await NIOThreadPool.singleton.runIfActive {
                connections.blocked(by: engines).map { ($0, cutter.cut($0.flow)) }
            }) ?? []
        for (record, outcome) in outcomes {
            connections.forget(record)
            logger.notice(
                "cut an open connection the policy now blocks",
                metadata: [
                    "hallpass.connection": "\(record.flow)", "hallpass.host": "\(record.host ?? "-")",
                    "hallpass.uid": "\(record.uid.map(String.init) ?? "-")", "hallpass.cut.socket": "\(outcome.socketDestroyed)",
                    "hallpass.cut.marked": "\(outcome.marked)",
                ])
        }
    }

    // MARK: Events from filter-data

    /// filter-data asks which group `uid` is in: resolved through NSS, off the actor's executor.
    func place(uid: UInt32) async {
        if let known = placements[uid] {
            let message = ControlCommand.userPlacement(uid: uid, audience: placement(of: uid) ?? known.audience)
            supervisor.send(message)
            proxySupervisor?.send(message)
            return
        }
        let users = self.users
        // getpwuid_r and getgrouplist block (NSS may ask a directory service): on NIO's thread pool.
        let user = (try? await NIOThreadPool.singleton.runIfActive { users.user(uid: uid) }) ?? LocalUser(uid: uid)
        let audience = policy.school.audience(of: user)
        if placements.count >= PolicySet.maximumUsers, let any = placements.keys.first { placements[any] = nil }
        placements[uid] = (audience, user)
        groupNames.names.withLock { $0[uid] = audience.groupName ?? audience.description }
        logger.info(
            "placed a user", metadata: ["hallpass.uid": "\(uid)", "hallpass.user": "\(user.name ?? "-")", "hallpass.group": "\(audience)"])
        // A person with live items of their own: their policy reaches filter-data first, with the set.
        if let name = user.name, audience != .system,
            school?.live.items(inForceAt: Int64(clock().timeIntervalSince1970)).contains(where: { $0.user == name }) == true
        {
            await applyPolicy(reason: "a person with live items of their own")
        }
        let message = ControlCommand.userPlacement(uid: uid, audience: placement(of: uid) ?? audience)
        supervisor.send(message)
        proxySupervisor?.send(message)
    }

    /// Where the set in force places `uid`, when it has a policy for it (a person's own).
    private func placement(of uid: UInt32) -> Audience? {
        guard let set = policySet, let audience = set.users[uid], set.policies[audience] != nil else { return nil }
        return audience
    }

    /// Decisions filter-data reported: allowed connections are kept to be
    /// judged again; every report goes to the audit log (which keeps what
    /// `log.allowed` asks for); a blocked flow that got no block page is
    /// told to its person (a flow that reaches the block page goes to the
    /// block page's own address, which hallpass never judges).
    ///
    /// Called on the supervisor's thread as the reports arrive (everything it
    /// touches is thread-safe), so that the reports filter-data sends as it
    /// stops are in the audit log's queue before the log finishes.
    nonisolated func record(_ reports: FlowReportLines) {
        connections.record(contentsOf: reports)
        metrics?.record(contentsOf: reports)
        writeRecords(reports, telling: notifier)
    }

    /// The reports' records: to the audit log, with the allowed flows that
    /// `log.allowed` does not ask for left out unless a safeguarding rule
    /// looks at them, and each blocked one to `notifier` when there is one.
    private nonisolated func writeRecords(_ reports: FlowReportLines, telling notifier: DesktopNotifier?) {
        guard audit != nil || notifier != nil else { return }
        // Most reports are of allowed flows, kept above as lines; a record is made only of what is written or told.
        let recordsAllowed = audit?.settings.allowed == .all
        // Read once a batch, not once a report; nil (no rule looks at allowed flows) costs each allowed report nothing more.
        let safeguarding = recordsAllowed || audit == nil ? nil : safeguardingForReports.withLock { $0 }
        let version = rulesVersionForReports.load(ordering: .relaxed)
        let now = clock()
        var skipped = 0
        for index in 0..<reports.count {
            var flagged = false
            if !recordsAllowed, let summary = reports.summary(index), summary.verdict == .allow {
                guard let safeguarding, Self.safeguardingRecords(summary, safeguarding, group: { uid in groupNames.names.withLock { $0[uid] } })
                else {
                    skipped += 1
                    continue
                }
                flagged = true
            }
            guard let report = reports.report(index) else { continue }
            let record = AuditRecord(report: report, time: now, rulesVersion: version)
            audit?.record(record, flagged: flagged)
            if record.action == .block { notifier?.consider(record) }
        }
        if skipped > 0 { audit?.skipAllowed(skipped) }
    }

    /// Whether the safeguarding rules want this allowed flow recorded
    /// (`SafeguardingPolicy.recordsAllowedFlow`), read from the report's line:
    /// its category first (a set lookup), then, only when some rule could
    /// still match, its name, URL (plain HTTP, and the requests the inspection
    /// proxy read) and the person's group.
    nonisolated static func safeguardingRecords(
        _ summary: FlowReport.Fields, _ safeguarding: SafeguardingPolicy, group: (UInt32) -> String?
    ) -> Bool {
        let needs = safeguarding.allowedFlows
        // '-' is a field's none, as FlowReport writes it.
        func isNone(_ number: Int) -> Bool { summary[number].elementsEqual("-".utf8) }
        func text(_ number: Int) -> String? { isNone(number) ? nil : String(decoding: summary[number], as: UTF8.self) }
        let category = text(10)
        if let category, needs.categories.contains(category) { return true }
        // A URL only for plain HTTP and the requests the inspection proxy read, as the audit line's `url`.
        let scheme: String? =
            summary.kind.elementsEqual("http".utf8) ? "http" : summary.kind.elementsEqual(AuditRecord.Kind.https.rawValue.utf8) ? "https" : nil
        guard needs.withoutURL || scheme != nil else { return false }
        let host = text(7)
        let url = scheme.flatMap { scheme in host.map { scheme + "://" + $0 + (text(12) ?? "/") } }
        guard needs.withoutURL || url != nil else { return false }
        let uid = isNone(5) ? nil : parseDecimal(summary[5], as: UInt32.self)
        // The proxy's own reading of the search terms when it captured them, else the URL's.
        let searchTerm = summary.hasSearchTerm ? text(13) : url.flatMap(SearchTerms.extract(url:))
        let facts = SafeguardingFacts(
            group: uid.flatMap(group), blocked: false, host: host, url: url, category: category, reasonSource: summary.reasonSource?.rawValue,
            searchTerm: searchTerm)
        return safeguarding.recordsAllowedFlow(facts)
    }

    /// Decisions the proxy reported on inspected requests: to the audit log as
    /// filter-data's are (`log.allowed`, and the safeguarding rules that look
    /// at allowed flows, with the request's URL and search term). Not to the
    /// connection records, which judge connections again by name (an allowed
    /// video on a blocked YouTube would be cut), nor to the metrics, whose
    /// flows they are not (the proxy's counters are in its log line). A
    /// blocked request got the block page, so no desktop notice is needed.
    nonisolated func recordInspected(_ reports: FlowReportLines) {
        writeRecords(reports, telling: nil)
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

    /// Fetches (unless `--store`), checks everything, hands the new rules
    /// and policy set to filter-data, and only once it took them (or is
    /// restarting and starts with them) makes them filter-control's too.
    /// Any refusal leaves everything as it was: filter-control, filter-data
    /// and the files its later starts read.
    private func reloadOrFail() async throws(StartError) -> AdminReply {
        let configuration = try Control.readConfiguration(options.configPath)
        var outcome: UpdateOutcome? = nil
        var path = storePath
        var folder = bundleFolder
        var updater = self.updater
        if options.store == nil, var current = updater {
            if self.configuration.rules != configuration.rules {
                // rules.* changed in the file: fetch with the new settings.
                current = RuleUpdater(settings: Control.updaterSettings(configuration))
                updater = current
            }
            if configuration.rules.source != nil {
                let fetched = await current.update()
                outcome = fetched
                if case .refused(let code, let message) = fetched {
                    throw StartError(message: "\(message) [\(code)]; rules version \(store.version) stays in force", status: 65)
                }
            }
            if let installed = current.installed() {
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
        let responder: BlockPageResponder?
        do {
            responder = blockPage == nil ? nil : try BlockPageSetup.responder(configuration: configuration, control: self)
        } catch {
            throw StartError(message: "blockPage: \(error.message) [\(error.code)]", status: 78)
        }
        // Users are placed again under the new groups.
        let users = self.users
        let known = placements.keys.map { $0 }
        // getpwuid_r and getgrouplist block (NSS may ask a directory service): on NIO's thread pool.
        let resolved = (try? await NIOThreadPool.singleton.runIfActive { known.map { users.user(uid: $0) } }) ?? []
        let newPlacements = Dictionary(uniqueKeysWithValues: resolved.map { ($0.uid, (newPolicy.school.audience(of: $0), $0)) })
        let newClock = PolicyClock(zoneName: newPolicy.school.timeZone)
        // The live items held, checked against the new policy's bounds and the new store before
        // the set is built: filter-data never gets items checked under the policy going out.
        let now = clock()
        let liveChecked = school.map { school in
            school.live.evaluate(
                policy: newPolicy.school, bounds: Control.liveContext(policy: newPolicy.school, store: newStore).bounds,
                machine: school.identity.machine, now: Int64(now.timeIntervalSince1970)
            ).held.items
        }
        let (set, effective) = computePolicySet(
            now: now, policy: newPolicy, placements: newPlacements.mapValues { (audience: $0.0, user: $0.1) }, policyClock: newClock,
            live: liveChecked)

        let answer: DataSupervisor.RulesAnswer
        do {
            answer = try await handOver(store: path, set: set, waitingAtMost: .seconds(3))
        } catch {
            switch error {
            case .refused(let reason): throw StartError(message: "filter-data refused them: \(reason)", status: 65)
            case .notWritten(let reason): throw StartError(message: reason, status: 73)
            }
        }

        // filter-data has them: they are in force.
        let previous = store.version
        self.configuration = configuration
        self.updater = updater
        store = newStore
        storePath = path
        bundleFolder = folder
        storeOpenedAt = clock()
        policy = newPolicy
        policyClock = newClock
        placements = newPlacements.mapValues { (audience: $0.0, user: $0.1) }
        groupNames.names.withLock { names in
            for (uid, placed) in newPlacements { names[uid] = placed.0.groupName ?? placed.0.description }
        }
        policySet = set
        refusedPolicySet = nil
        self.effective = effective
        // The live items held, checked as the set was (logged when the state no longer verifies).
        recheckLiveState()
        liveChannel?.policyChanged()
        let live = school?.live.items(inForceAt: Int64(clock().timeIntervalSince1970)) ?? []
        pageView.withLock { view in
            view.engines = PolicyEngines(rules: newStore, set: set)
            view.clock = newClock
            view.locked = newPolicy.school.locked
            view.live = live
        }
        if let responder { blockPage?.use(responder) }
        // The policy may inspect a name the CA does not cover yet.
        prepareInterception()
        BlockPageSetup.reloadAuthority(configuration: configuration, server: blockPage, logger: logger)
        for ignored in newPolicy.ignoredLocalKeys {
            logger.warning("\(ignored) in \(options.configPath) has no effect: the bundle brings the school's policy (docs/school-policy.md)")
        }
        var text: String
        if newStore.version == previous {
            text = "rules version \(newStore.version) is current" + (outcome.map { " (\($0))" } ?? "") + "; policy read again"
        } else {
            text = "rules version \(newStore.version) now in force (was \(previous)); policy read again"
        }
        if newPolicy.fromBundle { text += " (the school's policy from the bundle)" }
        if case .pending = answer { text += "; filter-data is restarting and starts with them" }
        await judgeOpenConnections(set: set)
        return AdminReply(exitCode: 0, output: text + "\n", code: newStore.version == previous ? "reload.current" : "reload.installed")
    }

    // MARK: What the status shows

    /// Unix seconds on the school's clock (`Wed 2026-11-25 10:15 Europe/London`).
    func onSchoolClock(_ seconds: Int64) -> String {
        policyClock.describe(Date(timeIntervalSince1970: TimeInterval(seconds)))
    }

    public func status() async -> AdminStatus {
        let state = updater?.state()
        func date(_ seconds: Int64?) -> Date? { seconds.map { Date(timeIntervalSince1970: TimeInterval($0)) } }
        let data = supervisor.status
        // The status reply is read by name (filterctl, scripts); filter-data's part comes typed.
        var counters = Dictionary(uniqueKeysWithValues: (data.counters?.fields ?? []).map { ($0.name, $0.value) })
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
        if let outbox = school?.outbox {
            let outboxStatus = outbox.status
            counters["schoolRecordsWaiting"] = outboxStatus.waiting
            counters["schoolRecordsStored"] = outboxStatus.stored
            counters["schoolRecordsDropped"] = outboxStatus.droppedTotal
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
            policy: policyStatus, live: liveStatus())
    }
}

/// Carries filter-data's events (on the supervisor's thread) into the actor.
final class ControlEvents: @unchecked Sendable {
    // @unchecked Sendable: `control` is set once, right after init, before the supervisor starts.
    weak var control: Control?

    func deliver(_ event: SupervisorEvent) {
        guard let control else { return }
        switch event {
        case .askUser(let uid): Task { await control.place(uid: uid) }
        case .reports(let reports): control.record(reports)
        }
    }

    /// The proxy's reports: decisions on inspected requests.
    func deliverInspected(_ reports: FlowReportLines) {
        control?.recordInspected(reports)
    }
}

extension Control {
    /// What Prometheus scrapes: the counters filter-data, the kernel and the
    /// audit log keep, brought up to date, and the rules' version and age.
    func metricsExposition() async -> [UInt8] {
        guard let metrics else { return [] }
        let status = await status()
        let counters = status.counters
        let data = supervisor.status.counters ?? FilterDataCounters()
        metrics.mirror("hallpass_dns_rewrites_total", total: data.dnsRewrites)
        metrics.mirror("hallpass_netlink_errors_total", total: data.netlinkErrors)
        metrics.mirror("hallpass_queue_drops_total", total: (counters["queueDropped"] ?? 0) + (counters["queueUserDropped"] ?? 0))
        metrics.mirror("hallpass_filter_data_restarts_total", total: UInt64(status.dataProcess.restarts))
        metrics.mirror("hallpass_audit_dropped_total", total: counters["auditDropped"] ?? 0)
        metrics.mirror("hallpass_reports_dropped_total", total: data.reportsDropped)
        if let outbox = school?.outbox {
            let outboxStatus = outbox.status
            metrics.gauge("hallpass_school_records_waiting", value: Double(outboxStatus.waiting))
            metrics.mirror("hallpass_school_records_sent_total", total: outboxStatus.stored)
            metrics.mirror("hallpass_school_records_dropped_total", total: outboxStatus.droppedTotal)
        }
        let lastSuccess = updater?.state().lastSuccessAt.map { Date(timeIntervalSince1970: TimeInterval($0)) } ?? status.rules.installedAt
        metrics.rules(version: status.rules.version ?? store.version, lastSuccess: lastSuccess)
        return metrics.exposition()
    }
}

extension Control {
    /// This minute's check-in for the school's server.
    func checkinReport(users: [String] = LoggedInUsers.names()) async -> CheckinReport {
        let status = await status()
        let data = status.dataProcess
        let outbox = school?.outbox.status
        let filterData: CheckinReport.FilterData = data.pid != nil ? .running : data.startedAt == nil && data.restarts == 0 ? .down : .restarting
        return CheckinReport(
            rulesVersion: status.rules.version ?? 0, rulesSince: status.rules.installedAt, filterData: filterData,
            filterDataRestarts: data.restarts, failMode: status.failMode,
            queueDrops: (status.counters["queueDropped"] ?? 0) + (status.counters["queueUserDropped"] ?? 0),
            recordsWaiting: outbox?.waiting ?? 0, recordsDropped: outbox?.droppedTotal ?? 0,
            users: users.compactMap { audit?.personName($0) ?? (configuration.log.users == .name ? $0 : nil) })
    }
}
