public import Foundation
import NIOConcurrencyHelpers
import SharedStore
import VerdictCore
import FilterData
import BlockPage

/// filter-control as a whole: configuration, kernel rules, the supervised
/// filter-data, needRules answers and the admin socket. `main` builds one,
/// starts it and stops it on SIGTERM.
public final class Daemon: @unchecked Sendable {
    // @unchecked Sendable: the mutable state is guarded by `lock`.

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

    public struct StartError: Error, CustomStringConvertible {
        public var message: String
        /// The exit status `main` ends with.
        public var status: Int32
        public var description: String { message }
    }

    public let options: Options
    private let log: @Sendable (String) -> Void
    private let lock = NSLock()
    private var configuration: Configuration
    private var engine: VerdictEngine<RuleStore>
    /// The store in force: `--store`, or the installed version's own path
    /// (`versions/N/rules.hpstore`, so a later switch of `current` cannot
    /// change what filter-data maps behind filter-control's back).
    private var storePath: String
    private var storeOpenedAt = Date()
    private var lastReload: (at: Date, result: String, code: String)?
    private var supervisor: DataSupervisor?
    private var admin: AdminServer?
    /// Downloads and installs bundles; nil with `--store`.
    private var updater: RuleUpdater?
    private var refresh: Task<Void, Never>?
    /// One reload at a time (filterctl, SIGHUP and the refresh timer may meet).
    private let reloading = NSLock()
    /// Access requests from the block page; approvals are local allow entries.
    public let requests: AccessRequestStore
    private var approvedEntries: [RulePattern] = []
    private var blockPage: BlockPageServer?
    private var approvalTimer: (any DispatchSourceTimer)?

    public var policyPath: String { options.runtimeDirectory + "/policy" }

    /// Reads the configuration and checks the store; starts nothing yet.
    public init(options: Options, log: @escaping @Sendable (String) -> Void) throws(StartError) {
        self.options = options
        self.log = log
        configuration = try Daemon.readConfiguration(options.configPath)
        requests = AccessRequestStore(path: configuration.rules.directory + "/requests.json", log: log)
        if let store = options.store {
            storePath = store
        } else {
            let updater = RuleUpdater(settings: Daemon.updaterSettings(configuration))
            self.updater = updater
            if updater.installed() == nil {
                guard let source = configuration.rules.source else {
                    throw StartError(
                        message: "no rules are installed in \(configuration.rules.directory) and rules.source is not set: set it, or give --store FILE",
                        status: 66)
                }
                log("no rules installed yet; fetching them from \(source)")
                let outcome = Daemon.wait { await updater.update() }
                if case .refused(let code, let message) = outcome {
                    throw StartError(message: "no rules installed yet, and the first download was refused: \(message) [\(code)]", status: 75)
                }
                log("rules \(outcome)")
            }
            guard let installed = updater.installed() else {
                throw StartError(message: "no rules installed in \(configuration.rules.directory)", status: 66)
            }
            storePath = installed.versionStorePath
        }
        approvedEntries = requests.allowEntries()
        do {
            engine = VerdictEngine(
                rules: try RuleStore(path: storePath, verification: .full), policy: Daemon.policy(configuration, approvals: approvedEntries))
        } catch {
            throw StartError(message: "\(storePath): \(error) [\(error.code)]", status: 65)
        }
    }

    /// Runs async work to its end from a thread that may block (start-up, admin requests, signals).
    static func wait<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let result = NIOLockedValueBox<T?>(nil)
        Task {
            let value = await work()
            result.withLockedValue { $0 = value }
            done.signal()
        }
        done.wait()
        return result.withLockedValue { $0 }!
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

    /// Writes the policy, installs the kernel rules, starts filter-data and the admin socket.
    public func start() throws(StartError) {
        do {
            try FileManager.default.createDirectory(atPath: options.runtimeDirectory, withIntermediateDirectories: true)
            try PolicyText.render(engine.policy).write(toFile: policyPath, atomically: true, encoding: .utf8)
        } catch {
            throw StartError(message: "cannot write \(policyPath): \(error.localizedDescription)", status: 73)
        }
        let responder = try makeResponder(configuration)
        let failOpen = configuration.queue.failMode == .open
        let rules = KernelRules(queue: configuration.queue.number, failOpen: failOpen)
        if KernelRules.Family.allCases.contains(where: { KernelRules.isInstalled($0) }) {
            // An earlier filter-control ended without removing them (killed
            // outside systemd, whose ExecStopPost would have): install rewrites
            // the chains in one step and adds no second jump.
            log("kernel rules of an earlier run found; replacing them")
        }
        do {
            try rules.install()
        } catch {
            KernelRules.remove()
            throw StartError(message: "cannot install the kernel rules: \(error)", status: 71)
        }
        log("kernel rules installed (queue \(configuration.queue.number), fail \(configuration.queue.failMode.rawValue))")

        let admin: AdminServer
        do {
            admin = try AdminServer(path: configuration.admin.socket, group: configuration.admin.group) { [weak self] request in
                self?.answer(request) ?? Data()
            }
        } catch {
            KernelRules.remove()
            throw StartError(message: "cannot open the admin socket: \(error)", status: 71)
        }
        let arguments = [
            "--queue", String(configuration.queue.number), failOpen ? "--fail-open" : "--fail-closed",
            "--peek-bytes", String(configuration.queue.peekBytes),
        ]
        let supervisor = DataSupervisor(
            launch: .init(executable: options.dataBinary, arguments: arguments), store: storePath, policy: policyPath,
            answerer: NeedRulesAnswerer(lookup: Daemon.lookup(for: configuration, log: log)), log: log)
        lock.withLock {
            self.supervisor = supervisor
            self.admin = admin
        }
        supervisor.start()
        admin.start()
        log("admin socket \(configuration.admin.socket)")
        startBlockPage(responder)
        startApprovalTimer()
        if let updater, configuration.rules.source != nil {
            // The first check comes one interval (with jitter) after start; filterctl reload checks now.
            let scheduler = RuleRefreshScheduler(interval: .seconds(configuration.rules.refresh))
            refresh = Task { [self] in
                await scheduler.run(updater: updater, checkFirst: false) { outcome in
                    // reload() blocks while it fetches: keep it off the cooperative threads.
                    if case .installed = outcome {
                        DispatchQueue.global().async { self.reload() }
                    } else {
                        self.log("rule refresh: \(outcome)")
                    }
                }
            }
        }
    }

    /// Stops filter-data (held packets get their default), closes the admin socket, removes the kernel rules.
    public func stop() {
        let (supervisor, admin) = lock.withLock { (self.supervisor, self.admin) }
        refresh?.cancel()
        approvalTimer?.cancel()
        blockPage?.stop()
        admin?.stop()
        supervisor?.stop()
        KernelRules.remove()
        log("kernel rules removed")
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
    public static func lookup(for configuration: Configuration, log: (String) -> Void = { _ in }) -> any HostLookup {
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
                log("no lookups: \(error)")
                return NoLookup()
            }
        }
    }

    // MARK: Reload

    /// Fetches new rules now (with a `rules.source`; with `--store`, opens
    /// that file again), reads the configuration's policy again, checks both
    /// and hands them to filter-data. Returns what `filterctl reload` prints.
    @discardableResult
    public func reload() -> AdminReply {
        reloading.lock()
        defer { reloading.unlock() }
        let reply: AdminReply
        do throws(StartError) {
            let configuration = try Daemon.readConfiguration(options.configPath)
            var outcome: UpdateOutcome? = nil
            var path = lock.withLock { storePath }
            if options.store == nil {
                var updater = lock.withLock { self.updater }!
                if lock.withLock({ self.configuration.rules }) != configuration.rules {
                    // rules.* changed in the file: fetch with the new settings.
                    updater = RuleUpdater(settings: Daemon.updaterSettings(configuration))
                    lock.withLock { self.updater = updater }
                }
                if configuration.rules.source != nil {
                    let current = updater
                    let fetched = Daemon.wait { await current.update() }
                    outcome = fetched
                    if case .refused(let code, let message) = fetched {
                        let version = lock.withLock { engine.rules.version }
                        throw StartError(message: "\(message) [\(code)]; rules version \(version) stays in force", status: 65)
                    }
                }
                if let installed = updater.installed() { path = installed.versionStorePath }
            }
            let store: RuleStore
            do {
                store = try RuleStore(path: path, verification: .full)
            } catch {
                throw StartError(message: "\(path): \(error) [\(error.code)]", status: 65)
            }
            let responder = try makeResponder(configuration)
            let approvals = requests.allowEntries()
            let policy = Daemon.policy(configuration, approvals: approvals)
            do {
                try PolicyText.render(policy).write(toFile: policyPath, atomically: true, encoding: .utf8)
            } catch {
                throw StartError(message: "cannot write \(policyPath): \(error.localizedDescription)", status: 73)
            }
            let previous = lock.withLock { () -> UInt64 in
                let previous = engine.rules.version
                self.configuration = configuration
                approvedEntries = approvals
                engine = VerdictEngine(rules: store, policy: policy)
                storePath = path
                storeOpenedAt = Date()
                return previous
            }
            var text: String
            if store.version == previous {
                text = "rules version \(store.version) is current" + (outcome == nil ? "" : " (\(outcome!))") + "; policy read again"
            } else {
                text = "rules version \(store.version) now in force (was \(previous)); policy read again"
            }
            lock.withLock { blockPage }?.use(responder)
            reloadAuthority(configuration)
            switch lock.withLock({ supervisor })?.useRules(store: path, policy: policyPath, waitingAtMost: 3) {
            case .refused(let reason)?:
                // filter-data checked the files itself and kept its rules.
                throw StartError(message: "filter-data refused them: \(reason)", status: 65)
            case .pending?:
                text += "; filter-data is restarting and starts with them"
            case .loaded?, nil:
                break
            }
            reply = AdminReply(exitCode: 0, output: text + "\n", code: store.version == previous ? "reload.current" : "reload.installed")
        } catch {
            reply = AdminReply(exitCode: error.status, output: "reload refused, the current rules stay in force: \(error.message)\n", code: "reload.refused")
        }
        lock.withLock { lastReload = (Date(), reply.output.trimmingCharacters(in: .whitespacesAndNewlines), reply.code ?? "") }
        log(reply.output.trimmingCharacters(in: .whitespacesAndNewlines))
        return reply
    }

    // MARK: Block page and access requests

    /// The policy in force: the configuration's, with the approved access requests added to its allow list.
    static func policy(_ configuration: Configuration, approvals: [RulePattern]) -> Policy {
        var policy = configuration.policy
        policy.allow += approvals
        return policy
    }

    static func blockPageSettings(_ configuration: Configuration) -> BlockPageSettings {
        let access: RequestAccess? = configuration.blockPage.requestAccess.map {
            $0.url == "builtin" ? .builtIn(text: $0.text) : .link(text: $0.text, urlTemplate: $0.url)
        }
        return BlockPageSettings(
            organization: configuration.blockPage.organization, requestAccess: access, templateFolder: configuration.blockPage.templates,
            defaultLanguage: configuration.blockPage.language)
    }

    private func makeResponder(_ configuration: Configuration) throws(StartError) -> BlockPageResponder {
        let renderer: BlockPageRenderer
        do {
            renderer = try BlockPageRenderer(settings: Daemon.blockPageSettings(configuration))
        } catch {
            throw StartError(message: "blockPage: \(error) [\(error.code)]", status: 78)
        }
        let page = configuration.blockPage
        let own: Set<String> = [page.address, page.address6, "localhost"]
        return BlockPageResponder(renderer: renderer, backend: PageBackend(daemon: self), ownNames: own)
    }

    /// Listens where people are sent: the page's own port, and with DNS
    /// rewriting ports 80 and 443 of both block page addresses (443 only
    /// with the local CA; without it an HTTPS visit is refused at once, and
    /// 443 starts on the first `filterctl reload` that finds a CA).
    /// A listener that cannot bind is logged; filtering goes on without it.
    private func startBlockPage(_ responder: BlockPageResponder) {
        let page = configuration.blockPage
        var listeners = [BlockPageServer.Listener(address: page.address, port: Int(page.port), tls: false)]
        var authority: LocalCertificateAuthority? = nil
        if configuration.policy.dnsRewrite != nil {
            do {
                authority = try LocalCertificateAuthority(folder: page.ca)
            } catch {
                log("block page: no HTTPS until a reload finds the local CA (\(error.message))")
            }
            for address in [page.address, page.address6] {
                listeners.append(.init(address: address, port: Int(page.httpPort), tls: false))
                listeners.append(.init(address: address, port: Int(page.httpsPort), tls: true))
            }
        }
        let server = BlockPageServer(responder: responder) { [log] event in
            switch event {
            case .authorityReplaced(let fingerprint):
                log("block page: a new local CA in \(page.ca) (SHA-256 \(fingerprint)); HTTPS certificates come from it now")
            case .authorityUnusable(let error):
                log("block page: \(error.message); HTTPS keeps the CA it has")
            }
        }
        // Without a CA the HTTPS listeners wait; the line above said why.
        for problem in server.start(listeners, authority: authority) where problem.code != "ca.missing" {
            log("block page: \(problem.message)")
        }
        lock.withLock { blockPage = server }
        log("block page on " + (server.listening.isEmpty ? "nothing" : server.listening.joined(separator: ", ")))
    }

    /// On reload: the local CA in `blockPage.ca` for HTTPS (a new one
    /// replaces the one in use; a first one starts the HTTPS listeners).
    private func reloadAuthority(_ configuration: Configuration) {
        guard configuration.policy.dnsRewrite != nil, let server = lock.withLock({ blockPage }) else { return }
        let authority: LocalCertificateAuthority
        do {
            authority = try LocalCertificateAuthority(folder: configuration.blockPage.ca)
        } catch {
            if server.servesHTTPS { log("block page: \(error.message); HTTPS keeps the CA it has") }
            return
        }
        let change = server.useAuthority(authority)
        if change.replaced {
            log("block page: HTTPS certificates come from the local CA in \(configuration.blockPage.ca) now (SHA-256 \(authority.fingerprint))")
        }
        if !change.started.isEmpty { log("block page on " + change.started.joined(separator: ", ")) }
        for problem in change.problems { log("block page: \(problem.message)") }
    }

    /// Why the rules in force block `url` (for the page).
    func explain(host: String, url: String, user: String?) -> BlockedRequest {
        let engine = lock.withLock { self.engine }
        var blocked = BlockedRequest(host: host, url: url, user: user)
        let target = url.isEmpty ? host : url
        if let parsed = try? CheckTarget(utf8: Array(target.utf8)[...]) {
            let reason = engine.decide(parsed.facts).reason
            blocked.category = reason.category
            blocked.rule = reason.rule
            blocked.reason = reason.description
        }
        return blocked
    }

    func submitRequest(_ form: AccessRequestForm, user: String?) -> Result<String, BlockPageError> {
        do {
            let request = try requests.submit(host: form.host, url: form.url, category: form.category, reason: form.reason, user: user)
            log("access request \(request.id) for \(request.host) from \(user ?? "an unknown user")")
            return .success(request.id)
        } catch {
            log("access request refused: \(error.message)")
            return .failure(BlockPageError(code: error.code, message: error.message))
        }
    }

    func listRequests(all: Bool, json: Bool) -> AdminReply {
        let now = Date()
        let shown = requests.list().filter { all || $0.state == .pending }
        if json {
            let encoder = AdminCoding.encoder
            let lines = shown.compactMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) + "\n" }
            return AdminReply(exitCode: 0, output: lines.joined())
        }
        guard !shown.isEmpty else { return AdminReply(exitCode: 0, output: all ? "no access requests\n" : "no access requests waiting\n") }
        let formatter = ISO8601DateFormatter()
        var text = ""
        for request in shown {
            var state = request.state.rawValue
            if request.state == .approved, let until = request.allowUntil {
                state += until > now ? " until \(formatter.string(from: until))" : " (ran out \(formatter.string(from: until)))"
            }
            text += "\(request.id)  \(state)  \(request.host)  \(request.category ?? "-")  \(request.user ?? "-")  \(formatter.string(from: request.createdAt))\n"
            text += "          \(request.url)\n"
            if !request.reason.isEmpty { text += "          \"\(request.reason)\"\n" }
        }
        return AdminReply(exitCode: 0, output: text)
    }

    func decide(_ id: String, approve: Bool, seconds: Int?) -> AdminReply {
        let request: AccessRequest
        do {
            request = try requests.decide(id, approve: approve, for: seconds.map(TimeInterval.init))
        } catch {
            return AdminReply(exitCode: error.code == "requests.unknown" ? 66 : 74, output: "filterctl: \(error.message)\n", code: error.code)
        }
        let applied = applyApprovals()
        var text = "request \(request.id): \(request.host) \(approve ? "allowed" : "denied")"
        if approve, let until = request.allowUntil { text += " until \(ISO8601DateFormatter().string(from: until))" }
        text += applied ? "" : " (not yet in force: \(policyPath) could not be written)"
        log(text)
        return AdminReply(exitCode: applied ? 0 : 74, output: text + "\n", code: approve ? "requests.approved" : "requests.denied")
    }

    /// Puts the approvals in force (or takes out those that ran out): the
    /// policy file again, the engine, and filter-data (no restart).
    @discardableResult
    func applyApprovals() -> Bool {
        reloading.lock()
        defer { reloading.unlock() }
        let entries = requests.allowEntries()
        let (configuration, store, path) = lock.withLock { (self.configuration, engine.rules, storePath) }
        let policy = Daemon.policy(configuration, approvals: entries)
        do {
            try PolicyText.render(policy).write(toFile: policyPath, atomically: true, encoding: .utf8)
        } catch {
            return false
        }
        lock.withLock {
            approvedEntries = entries
            engine = VerdictEngine(rules: store, policy: policy)
        }
        _ = lock.withLock { supervisor }?.useRules(store: path, policy: policyPath, waitingAtMost: 3)
        return true
    }

    /// Approvals with `--for` run out on their own: checked every 10 s.
    private func startApprovalTimer() {
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        timer.schedule(deadline: .now() + 10, repeating: 10)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            let current = self.requests.allowEntries()
            if current != self.lock.withLock({ self.approvedEntries }) {
                self.log("an approval ran out; \(current.count) approved name(s) left")
                self.applyApprovals()
            }
        }
        timer.resume()
        lock.withLock { approvalTimer = timer }
    }

    // MARK: Admin requests

    func answer(_ request: AdminRequest) -> Data {
        let encoder = AdminCoding.encoder
        switch request.command {
        case .status:
            return (try? encoder.encode(status())) ?? Data()
        case .reload:
            return (try? encoder.encode(reload())) ?? Data()
        case .check:
            let engine = lock.withLock { self.engine }
            var runner = CheckRunner(engine: engine, format: request.json == true ? .json : .text)
            var output: [UInt8] = []
            for target in (request.targets ?? []).prefix(10_000) {
                runner.appendLine(for: Substring(target), to: &output)
            }
            let reply = AdminReply(exitCode: runner.invalidTargets > 0 ? 65 : 0, output: String(decoding: output, as: UTF8.self))
            return (try? encoder.encode(reply)) ?? Data()
        case .requests:
            return (try? encoder.encode(listRequests(all: request.all == true, json: request.json == true))) ?? Data()
        case .approve, .deny:
            let reply = decide(request.id ?? "", approve: request.command == .approve, seconds: request.seconds)
            return (try? encoder.encode(reply)) ?? Data()
        }
    }

    public func status() -> AdminStatus {
        let (configuration, version, openedAt, lastReload, supervisor, updater, storePath) = lock.withLock {
            (self.configuration, engine.rules.version, storeOpenedAt, self.lastReload, self.supervisor, self.updater, self.storePath)
        }
        let state = updater?.state()
        func date(_ seconds: Int64?) -> Date? { seconds.map { Date(timeIntervalSince1970: TimeInterval($0)) } }
        let data = supervisor?.status ?? DataSupervisor.Status()
        var counters = data.counters
        for (name, value) in KernelRules.queueStatistics(queue: configuration.queue.number) { counters[name] = value }
        return AdminStatus(
            rules: .init(
                version: data.rulesVersion ?? version, store: storePath, installedAt: date(state?.installedAt) ?? openedAt,
                source: configuration.rules.source,
                lastFetchAt: date(state?.lastAttemptAt) ?? lastReload?.at,
                lastFetchResult: state?.lastResult.map { result in
                    result.rawValue + (state?.lastMessage.map { ": " + $0 } ?? "")
                } ?? lastReload?.result,
                lastFetchCode: state?.lastCode ?? lastReload?.code),
            dataProcess: .init(
                pid: data.pid, startedAt: data.startedAt, restarts: data.restarts, lastExit: data.lastExit,
                lastRulesRefusal: data.lastRulesRefusal, countersAt: data.countersAt),
            queue: configuration.queue.number, failMode: configuration.queue.failMode.rawValue, counters: counters, now: Date())
    }
}

/// The block page's view of the daemon.
private struct PageBackend: BlockPageBackend {
    let daemon: Daemon

    func explain(host: String, url: String, user: String?) -> BlockedRequest {
        daemon.explain(host: host, url: url, user: user)
    }

    func submit(_ form: AccessRequestForm, user: String?) -> Result<String, BlockPageError> {
        daemon.submitRequest(form, user: user)
    }
}
