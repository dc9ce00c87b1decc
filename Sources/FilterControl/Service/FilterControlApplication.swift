import BlockPage
public import Foundation
import HallpassIPC
public import Logging
public import ServiceLifecycle
import SharedStore
import Synchronization
import VerdictCore

/// filter-control, made in two steps so that tests make exactly what runs:
///
/// - `build(configuration:options:logger:notifier:)` makes the object graph
///   from the configuration: it opens the rules (downloading the first
///   bundle when none is installed), reads the school's policy, and makes
///   the supervisor, the audit log, the notices, the metrics, the stores of
///   requests and overrides, and `Control` over them. It starts nothing: no
///   process, no kernel rule, no socket.
/// - `run()` sets up what must be in place before anything filters (the
///   SafeSearch addresses, the policy file, the kernel rules, the admin
///   socket, the block page), then runs the services as one group
///   (swift-service-lifecycle) until SIGTERM or SIGINT. They stop in the
///   reverse order of `services` (the admin socket first, filter-data last);
///   then the kernel rules go. SIGHUP reloads, like `filterctl reload`.
public struct FilterControlApplication: Sendable {
    /// How long the start waits for the SafeSearch enforcement hosts' addresses.
    static let safeSearchAtStart: Duration = .seconds(3)

    public let control: Control
    public let configuration: Configuration
    let options: Control.Options
    let logger: Logger
    /// systemd's `$NOTIFY_SOCKET`, told READY=1 once filter-data filters with its first policy.
    let notifier: SystemdNotifier?
    /// Records and check-ins to the school's server (`school:`); nil without one.
    public let reporter: SchoolReporter?
    /// The live state from the school's server (`school:`); nil without one.
    public let liveChannel: LiveChannel?
    /// The block page's access requests to the school's server; nil without one.
    public let forwarder: AccessRequestForwarder?

    /// Makes everything filter-control runs, and starts none of it.
    public static func build(
        configuration: Configuration, options: Control.Options, logger: Logger, notifier: SystemdNotifier? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) async throws(Control.StartError) -> FilterControlApplication {
        // A block page port a local user could take is said once and filtering goes on:
        // refusing to start would leave the machine without any filter.
        let unprivilegedPortStart = Configuration.unprivilegedPortStart()
        for problem in configuration.unprivilegedPortProblems(unprivilegedPortStart: unprivilegedPortStart) {
            logger.error("\(options.configPath): \(problem)")
        }
        // Access requests and the policy state (overrides, a manual exam) live
        // in rules.directory, also with --store, which installs nothing there.
        do {
            try FileManager.default.createDirectory(
                atPath: configuration.rules.directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            logger.warning(
                "cannot create rules.directory \(configuration.rules.directory): \(error.localizedDescription); access requests and overrides cannot be kept")
        }
        let requests = AccessRequestStore(path: configuration.rules.directory + "/requests.json") { logger.warning("\($0)") }
        let policyState = PolicyStateStore(path: configuration.rules.directory + "/" + PolicyStateStore.fileName) { logger.warning("\($0)") }
        let updater = options.store == nil ? RuleUpdater(settings: Control.updaterSettings(configuration)) : nil
        let rules = try await loadRules(configuration: configuration, options: options, updater: updater, logger: logger)

        let dataUser: DataUser
        switch DataUser.lookUp(configuration.queue.user) {
        case .found(let found): dataUser = found
        case .missing(let fallback, let warning):
            logger.error("\(warning)")
            dataUser = fallback
        case .privileged(let message): throw Control.StartError(message: message, status: 78)
        }
        let events = ControlEvents()
        let metrics = configuration.metrics == nil ? nil : HallpassMetrics()
        let supervisor = DataSupervisor(
            launch: .init(executable: options.dataBinary, arguments: dataArguments(configuration, user: dataUser)), store: rules.storePath,
            policy: options.runtimeDirectory + "/policy",
            answerer: NeedRulesAnswerer(
                lookup: Control.lookup(for: configuration, logger: logger),
                log: { [logger] line in logger.warning("\(line)") }),
            log: { [logger] line in logger.info("\(line)", metadata: ["hallpass.source": "filter-data"]) }, onEvent: events.deliver,
            onAnswered: { metrics?.answered(after: $0) })
        let interception = ProxyInterception()
        let proxySupervisor = try options.proxyBinary.map { binary throws(Control.StartError) in
            DataSupervisor(
                launch: .init(
                    executable: binary, arguments: try proxyArguments(configuration, unprivilegedPortStart: unprivilegedPortStart, logger: logger),
                    name: "hallpass-proxy", greeting: { [interception] in interception.greeting }),
                store: rules.storePath, policy: options.runtimeDirectory + "/policy",
                answerer: NeedRulesAnswerer(lookup: NoLookup(), log: { [logger] line in logger.warning("\(line)") }),
                log: { [logger] line in logger.info("\(line)", metadata: ["hallpass.source": "hallpass-proxy"]) },
                onEvent: { event in
                    // The proxy asks which group a user is in, as filter-data does, and reports its
                    // decisions on inspected requests (kept apart: they are no connections to judge again).
                    switch event {
                    case .askUser: events.deliver(event)
                    case .reports(let reports): events.deliverInspected(reports)
                    }
                })
        }
        let groupNames = GroupNames()
        let school = makeSchoolParts(configuration, logger: logger)
        let parts = Control.Parts(
            rules: rules, requests: requests, policyState: policyState, updater: updater, supervisor: supervisor, proxySupervisor: proxySupervisor,
            interception: interception, dataUser: dataUser,
            unprivilegedPortStart: unprivilegedPortStart,
            audit: try makeAuditLog(configuration, groupNames: groupNames, outbox: school?.outbox, logger: logger),
            notifier: makeNotifier(configuration, unprivilegedPortStart: unprivilegedPortStart, logger: logger), metrics: metrics,
            groupNames: groupNames, school: school)
        let control = Control(options: options, configuration: configuration, logger: logger, clock: clock, parts: parts)
        events.control = control
        let reporter = school.flatMap { makeReporter($0, configuration: configuration, control: control, logger: logger) }
        let liveChannel = school.flatMap { makeLiveChannel($0, configuration: configuration, control: control, logger: logger, clock: clock) }
        if let liveChannel { await control.useLiveChannel(liveChannel) }
        let forwarder = school.flatMap { makeForwarder($0, configuration: configuration, control: control, logger: logger) }
        for ignored in rules.policy.ignoredLocalKeys {
            logger.warning("\(ignored) in \(options.configPath) has no effect: the bundle brings the school's policy (docs/school-policy.md)")
        }
        return FilterControlApplication(
            control: control, configuration: configuration, options: options, logger: logger, notifier: notifier, reporter: reporter,
            liveChannel: liveChannel, forwarder: forwarder)
    }

    /// The identity and the outbox for `school:`; nil without it, or (logged
    /// as an error) when the machine has no usable identity: filtering goes
    /// on, and nothing is queued for a server that cannot be told who sends.
    static func makeSchoolParts(_ configuration: Configuration, logger: Logger) -> Control.SchoolParts? {
        guard let school = configuration.school else { return nil }
        let identity: MachineIdentity
        do {
            identity = try MachineIdentity.read(directory: configuration.rules.directory)
        } catch {
            logger.error("school: no records or check-ins: \(error) [\(error.code)]")
            return nil
        }
        if identity.server != school.server || identity.fingerprint != school.fingerprint {
            logger.warning(
                "school: the identity was made with \(identity.server) (fingerprint \(identity.fingerprint)); school: in the configuration says \(school.server) (\(school.fingerprint)), which is used")
        }
        do {
            let outbox = try RecordOutbox(
                folder: configuration.rules.directory + "/outbox", machine: identity.machine,
                settings: .init(maxBytes: school.queueMaxBytes, maxAge: TimeInterval(school.queueMaxAge)), log: { logger.notice("\($0)") })
            let live = LiveStateStore(path: configuration.rules.directory + "/" + LiveStateStore.fileName) { logger.warning("\($0)") }
            return Control.SchoolParts(identity: identity, outbox: outbox, live: live)
        } catch {
            logger.error("school: no records or check-ins: the outbox: \(error) [\(error.code)]")
            return nil
        }
    }

    /// The service that posts the outbox and the check-ins.
    static func makeReporter(_ parts: Control.SchoolParts, configuration: Configuration, control: Control, logger: Logger) -> SchoolReporter? {
        guard let school = configuration.school else { return nil }
        let connection: SchoolConnection
        do {
            // filter-control's own connection: the allow mark, never queued, also in closed mode.
            connection = try SchoolConnection(
                server: school.server, fingerprint: school.fingerprint,
                signer: RequestSigner(machine: parts.identity.machine, key: parts.identity.key), socketMark: FlowMarks().allow)
        } catch {
            logger.error("school: no records or check-ins: \(error) [\(error.code)]")
            return nil
        }
        // A publication newer than the rules in force is fetched at once (with a rules.source:
        // the school's server's /bundle/, or the folder the school publishes to as well).
        var fetchRules: (@Sendable (UInt64) async -> Void)? = nil
        if configuration.rules.source != nil {
            fetchRules = { [control] _ in
                _ = await control.refresh()
            }
        }
        return SchoolReporter(
            transport: connection, outbox: parts.outbox, server: school.server.description,
            checkin: { [control] in await control.checkinReport() }, logger: logger, fetchRules: fetchRules)
    }

    /// The live channel: its own connection (a request held up to `wait`
    /// seconds must not hold the records or check-ins up), signed, with the
    /// allow mark, a timeout above the wait, and room for a 1 MiB state.
    static func makeLiveChannel(
        _ parts: Control.SchoolParts, configuration: Configuration, control: Control, logger: Logger, clock: @escaping @Sendable () -> Date
    ) -> LiveChannel? {
        guard let school = configuration.school else { return nil }
        let wait = 25
        let connection: SchoolConnection
        do {
            connection = try SchoolConnection(
                server: school.server, fingerprint: school.fingerprint,
                signer: RequestSigner(machine: parts.identity.machine, key: parts.identity.key), requestTimeout: .seconds(wait + 15),
                socketMark: FlowMarks().allow, answerLimit: LiveState.maximumEnvelopeBytes + 4096)
        } catch {
            logger.error("school: no live channel: \(error) [\(error.code)]")
            return nil
        }
        return LiveChannel(
            transport: connection, store: parts.live, machine: parts.identity.machine, wait: wait,
            context: { [control] in await control.liveContext() }, applied: { [control] in await control.liveStateApplied() },
            report: { [control] reports in await control.reportLiveRefusals(reports) },
            filteringTest: { [control] request in await control.filteringTestAnswer(request) }, clock: clock, logger: logger)
    }

    /// The service that sends the block page's access requests to the school's server.
    static func makeForwarder(_ parts: Control.SchoolParts, configuration: Configuration, control: Control, logger: Logger)
        -> AccessRequestForwarder?
    {
        guard let school = configuration.school else { return nil }
        let connection: SchoolConnection
        do {
            connection = try SchoolConnection(
                server: school.server, fingerprint: school.fingerprint,
                signer: RequestSigner(machine: parts.identity.machine, key: parts.identity.key), socketMark: FlowMarks().allow)
        } catch {
            logger.error("school: access requests stay on this machine: \(error) [\(error.code)]")
            return nil
        }
        // The school names people as the records do (log.users): the name, a pseudonym, or no one.
        let audit = control.audit
        let users = configuration.log.users
        return AccessRequestForwarder(
            transport: connection, store: control.requests,
            personName: { name in audit?.personName(name) ?? (users == .name ? name : nil) }, logger: logger)
    }

    /// The store and policy to start with: `--store`, or the installed
    /// bundle (fetching the first one when none is installed).
    static func loadRules(
        configuration: Configuration, options: Control.Options, updater: RuleUpdater?, logger: Logger
    ) async throws(Control.StartError) -> Control.LoadedRules {
        var storePath: String
        var bundleFolder: String? = nil
        if let store = options.store {
            storePath = store
        } else if let updater {
            if updater.installed() == nil {
                guard let source = configuration.rules.source else {
                    throw Control.StartError(
                        message: "no rules are installed in \(configuration.rules.directory) and rules.source is not set: set it, or give --store FILE",
                        status: 66)
                }
                logger.info("no rules installed yet; fetching them", metadata: ["hallpass.rules.source": "\(source)"])
                let outcome = await updater.update()
                if case .refused(let code, let message) = outcome {
                    throw Control.StartError(message: "no rules installed yet, and the first download was refused: \(message) [\(code)]", status: 75)
                }
                logger.info("rules \(outcome)")
            }
            guard let installed = updater.installed() else {
                throw Control.StartError(message: "no rules installed in \(configuration.rules.directory)", status: 66)
            }
            storePath = installed.versionStorePath
            bundleFolder = installed.versionDirectory
        } else {
            throw Control.StartError(message: "no rules: give --store FILE or set rules.source", status: 66)
        }
        let store: RuleStore
        do {
            store = try RuleStore(path: storePath, verification: .full)
        } catch {
            throw Control.StartError(message: "\(storePath): \(error) [\(error.code)]", status: 65)
        }
        let policy: PolicyInForce
        do {
            policy = PolicyInForce(bundlePolicy: try bundleFolder.flatMap(PolicyInForce.bundlePolicy(inFolder:)), configuration: configuration)
        } catch {
            throw Control.StartError(message: "the school's policy in \(bundleFolder ?? "the bundle"): \(error)", status: 65)
        }
        return Control.LoadedRules(storePath: storePath, bundleFolder: bundleFolder, store: store, policy: policy)
    }

    /// filter-data's command line.
    static func dataArguments(_ configuration: Configuration, user: DataUser) -> [String] {
        [
            "--queue", String(configuration.queue.number), configuration.queue.failMode == .open ? "--fail-open" : "--fail-closed",
            "--peek-bytes", String(configuration.queue.peekBytes),
        ] + user.arguments
    }

    /// hallpass-proxy's command line (`proxy:`): its port, bounds and user, the
    /// trust store it checks servers against, and the block page's settings,
    /// for the page it answers blocked requests with. Its request-access link
    /// is the school's; with the built-in form, the block page's own address,
    /// where the form is (the proxy records no requests).
    static func proxyArguments(_ configuration: Configuration, unprivilegedPortStart: Int = 1024, logger: Logger) throws(Control.StartError)
        -> [String]
    {
        let proxy = configuration.proxy
        let user: DataUser
        switch DataUser.lookUp(proxy.user) {
        case .found(let found): user = found
        case .missing(let fallback, _):
            let warning =
                "proxy.user: this machine has no user \(proxy.user); hallpass-proxy runs as nobody (uid 65534), which other services share:"
                + " 'systemd-sysusers' makes it again (proxy.user: nobody runs as nobody without this line)"
            logger.error("\(warning)")
            user = fallback
        case .privileged:
            throw Control.StartError(message: "proxy.user: \(proxy.user) is root's or has root's group; hallpass-proxy never runs as root", status: 78)
        }
        let page = configuration.blockPage
        var arguments = ["--port", String(proxy.port), "--connections", String(proxy.connections), "--idle-timeout", String(proxy.idleTimeout)]
        arguments += ["--trust-file", proxy.trustFile, "--organization", page.organization, "--language", page.language]
        if let templates = page.templates { arguments += ["--templates", templates] }
        if let access = page.requestAccess {
            let url = access.url == "builtin" ? page.pageURL(unprivilegedPortStart: unprivilegedPortStart) + "?url={url}" : access.url
            arguments += ["--request-text", access.text, "--request-url", url]
        }
        return arguments + user.arguments
    }

    /// The audit log (`log:`), nil when every output is off.
    static func makeAuditLog(
        _ configuration: Configuration, groupNames: GroupNames, outbox: RecordOutbox? = nil, logger: Logger
    ) throws(Control.StartError) -> AuditLog? {
        guard configuration.log.file != nil || configuration.log.journald || configuration.log.syslog != nil || outbox != nil else { return nil }
        do {
            return try AuditLog(
                settings: configuration.log, rulesDirectory: configuration.rules.directory, logger: logger,
                lookup: { [users = configuration.log.users] uid in
                    // The person's name through NSS. The group is the school's policy group filter-control
                    // placed them in; without one, their primary group, with `users: name` only: a Debian
                    // account's primary group is usually named after the person.
                    let names = await AuditLog.systemLookup()(uid)
                    let placed = uid.flatMap { uid in groupNames.names.withLock { $0[uid] } }
                    return (names.user, placed ?? (users == .name ? names.group : nil))
                },
                // The collector's connection is filter-control's own: never queued (see SyslogForwarder).
                socketMark: FlowMarks().allow, outbox: outbox)
        } catch {
            throw Control.StartError(message: "log: \(error.message)", status: 78)
        }
    }

    /// The desktop notices (`notify:`), nil when switched off.
    static func makeNotifier(_ configuration: Configuration, unprivilegedPortStart: Int, logger: Logger) -> DesktopNotifier? {
        guard configuration.notify.enabled else { return nil }
        let page = configuration.blockPage
        let caServes = configuration.policy.dnsRewrite != nil && (try? LocalCertificateAuthority(folder: page.ca)) != nil
        return DesktopNotifier(
            rule: NoticeRule(interval: TimeInterval(configuration.notify.interval), noticeForDNS: !caServes),
            text: NoticeText(
                organization: page.organization, requestAccessURL: page.requestAccess?.url,
                blockPageURL: page.pageURL(unprivilegedPortStart: unprivilegedPortStart)),
            logger: logger)
    }

    /// The services of one run, in the order they start (and the reverse of
    /// the order they stop). The audit log and the notices stop last: after
    /// filter-data, whose last reports (sent as it stops) they still take.
    public func services(admin: any Service, metrics: (any Service)?) -> [any Service] {
        var services: [any Service] = [
            DataSupervisorService(control: control, logger: logger),
            ProxySupervisorService(control: control),
            ReadinessService(control: control, notifier: notifier, logger: logger),
            PolicyClockService(control: control),
            SafeSearchService(control: control, logger: logger),
            RuleRefreshService(
                control: control, interval: .seconds(configuration.rules.refresh),
                enabled: options.store == nil && configuration.rules.source != nil),
            SignalService(control: control, logger: logger),
            admin,
        ]
        if let reporter {
            services.insert(SchoolReportingService(reporter: reporter), at: services.count - 1)
        }
        if let liveChannel {
            services.insert(LiveChannelService(channel: liveChannel), at: services.count - 1)
        }
        if let forwarder {
            services.insert(AccessRequestForwardingService(forwarder: forwarder), at: services.count - 1)
        }
        if let metrics { services.append(metrics) }
        if let audit = control.audit { services.insert(DrainingService { await audit.run() } finish: { audit.finish() }, at: 0) }
        if let notices = control.notifier { services.insert(DrainingService { await notices.run() } finish: { notices.finish() }, at: 0) }
        return services
    }

    /// Runs filter-control to its end; returns the exit status.
    public func run() async -> Int32 {
        do {
            // Before the first policy is written and before the kernel rules queue anything.
            await control.resolveSafeSearchAtStart(within: Self.safeSearchAtStart)
            try await control.prepare()
        } catch {
            logger.error("\(error.message)")
            return error.status
        }
        let rules = KernelRules(
            queue: configuration.queue.number, failOpen: configuration.queue.failMode == .open, proxyPort: configuration.proxy.port)
        if KernelRules.Family.allCases.contains(where: { KernelRules.isInstalled($0) }) {
            // An earlier filter-control ended without removing them (killed outside
            // systemd, whose ExecStopPost would have): install rewrites the chains
            // in one step and adds no second jump.
            logger.notice("kernel rules of an earlier run found; replacing them")
        }
        do {
            for problem in try rules.install() { logger.warning("\(problem)") }
        } catch {
            KernelRules.remove()
            logger.error("cannot install the kernel rules: \(error)")
            return 71
        }
        logger.info(
            "kernel rules installed",
            metadata: ["hallpass.queue": "\(configuration.queue.number)", "hallpass.failMode": "\(configuration.queue.failMode.rawValue)"])
        defer {
            KernelRules.remove()
            logger.info("kernel rules removed")
        }
        let admin: AdminService
        do {
            admin = try await AdminService(path: configuration.admin.socket, group: configuration.admin.group, logger: logger) {
                [control] request, peer in
                await control.answer(request, peer: peer)
            }
        } catch {
            logger.error("cannot open the admin socket: \(error)")
            return 71
        }
        do {
            try await control.startBlockPage()
        } catch {
            logger.error("\(error.message)")
            return error.status
        }
        var metrics: MetricsService? = nil
        if let endpoint = configuration.metrics {
            do {
                metrics = try await MetricsService(address: endpoint.address, port: Int(endpoint.port), logger: logger) { [control] in
                    await control.metricsExposition()
                }
            } catch {
                logger.error("cannot serve the metrics on \(endpoint.address):\(endpoint.port): \(error)")
                return 71
            }
        }
        let group = ServiceGroup(
            configuration: .init(
                services: services(admin: admin, metrics: metrics).map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch {
            logger.error("stopped on an error: \(error)")
        }
        logger.info("stopping")
        await control.stopBlockPage()
        await control.saveConnections()
        return 0
    }

    /// The configuration file at `path`, read and checked (at most 1 MiB).
    public static func readConfiguration(_ path: String) throws(Control.StartError) -> Configuration {
        try Control.readConfiguration(path)
    }
}

/// The policy group of each placed user, for the audit log's `group`: written
/// by Control as it places users, read by the audit log off the actor.
final class GroupNames: Sendable {
    let names = Mutex<[UInt32: String]>([:])
}
