public import Foundation
import SharedStore
import VerdictCore

/// filter-control as a whole: configuration, kernel rules, the supervised
/// filter-data, needRules answers and the admin socket. `main` builds one,
/// starts it and stops it on SIGTERM.
public final class Daemon: @unchecked Sendable {
    // @unchecked Sendable: the mutable state is guarded by `lock`.

    public struct Options: Sendable {
        public var configPath: String
        public var store: String
        public var runtimeDirectory: String
        public var dataBinary: String

        public init(configPath: String, store: String, runtimeDirectory: String, dataBinary: String) {
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
    private var storeOpenedAt = Date()
    private var lastReload: (at: Date, result: String, code: String)?
    private var supervisor: DataSupervisor?
    private var admin: AdminServer?

    public var policyPath: String { options.runtimeDirectory + "/policy" }

    /// Reads the configuration and checks the store; starts nothing yet.
    public init(options: Options, log: @escaping @Sendable (String) -> Void) throws(StartError) {
        self.options = options
        self.log = log
        configuration = try Daemon.readConfiguration(options.configPath)
        do {
            engine = VerdictEngine(rules: try RuleStore(path: options.store, verification: .full), policy: configuration.policy)
        } catch {
            throw StartError(message: "\(error) [\(error.code)]", status: 65)
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

    /// Writes the policy, installs the kernel rules, starts filter-data and the admin socket.
    public func start() throws(StartError) {
        do {
            try FileManager.default.createDirectory(atPath: options.runtimeDirectory, withIntermediateDirectories: true)
            try PolicyText.render(configuration.policy).write(toFile: policyPath, atomically: true, encoding: .utf8)
        } catch {
            throw StartError(message: "cannot write \(policyPath): \(error.localizedDescription)", status: 73)
        }
        let failOpen = configuration.queue.failMode == .open
        let rules = KernelRules(queue: configuration.queue.number, failOpen: failOpen)
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
            launch: .init(executable: options.dataBinary, arguments: arguments), store: options.store, policy: policyPath,
            answerer: NeedRulesAnswerer(lookup: Daemon.lookup(for: configuration)), log: log)
        lock.withLock {
            self.supervisor = supervisor
            self.admin = admin
        }
        supervisor.start()
        admin.start()
        log("admin socket \(configuration.admin.socket)")
    }

    /// Stops filter-data (held packets get their default), closes the admin socket, removes the kernel rules.
    public func stop() {
        let (supervisor, admin) = lock.withLock { (self.supervisor, self.admin) }
        admin?.stop()
        supervisor?.stop()
        KernelRules.remove()
        log("kernel rules removed")
    }

    /// The lookup service next to the bundle (`<rules.source>lookup/`), for `policy.unknown: ask`.
    public static func lookup(for configuration: Configuration) -> any HostLookup {
        guard let source = configuration.rules.source else { return NoLookup() }
        if source.hasPrefix("file://") {
            let folder = String(source.dropFirst("file://".count))
            return FolderLookup(folder: (folder.hasSuffix("/") ? folder : folder + "/") + "lookup")
        }
        // https:// lookups come with the rule download.
        return NoLookup()
    }

    // MARK: Reload

    /// Reads the configuration's policy and the store again, checks them and
    /// hands them to filter-data. Returns what `filterctl reload` prints.
    @discardableResult
    public func reload() -> AdminReply {
        let reply: AdminReply
        do throws(StartError) {
            let configuration = try Daemon.readConfiguration(options.configPath)
            let store: RuleStore
            do {
                store = try RuleStore(path: options.store, verification: .full)
            } catch {
                throw StartError(message: "\(options.store): \(error) [\(error.code)]", status: 65)
            }
            do {
                try PolicyText.render(configuration.policy).write(toFile: policyPath, atomically: true, encoding: .utf8)
            } catch {
                throw StartError(message: "cannot write \(policyPath): \(error.localizedDescription)", status: 73)
            }
            let previous = lock.withLock { () -> UInt64 in
                let previous = engine.rules.version
                self.configuration = configuration
                engine = VerdictEngine(rules: store, policy: configuration.policy)
                storeOpenedAt = Date()
                return previous
            }
            lock.withLock { supervisor }?.useRules(store: options.store, policy: policyPath)
            let text = store.version == previous ? "rules version \(store.version) (already in force) and the policy handed to filter-data" : "rules version \(store.version) (was \(previous)) and the policy handed to filter-data"
            reply = AdminReply(exitCode: 0, output: text + "\n", code: store.version == previous ? "reload.current" : "reload.installed")
        } catch {
            reply = AdminReply(exitCode: error.status, output: "reload refused, the current rules stay in force: \(error.message)\n", code: "reload.refused")
        }
        lock.withLock { lastReload = (Date(), reply.output.trimmingCharacters(in: .whitespacesAndNewlines), reply.code ?? "") }
        log(reply.output.trimmingCharacters(in: .whitespacesAndNewlines))
        return reply
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
        }
    }

    public func status() -> AdminStatus {
        let (configuration, version, openedAt, lastReload, supervisor) = lock.withLock {
            (self.configuration, engine.rules.version, storeOpenedAt, self.lastReload, self.supervisor)
        }
        let data = supervisor?.status ?? DataSupervisor.Status()
        var counters = data.counters
        for (name, value) in KernelRules.queueStatistics(queue: configuration.queue.number) { counters[name] = value }
        return AdminStatus(
            rules: .init(
                version: data.rulesVersion ?? version, store: options.store, installedAt: openedAt, source: configuration.rules.source,
                lastFetchAt: lastReload?.at, lastFetchResult: lastReload?.result, lastFetchCode: lastReload?.code),
            dataProcess: .init(
                pid: data.pid, startedAt: data.startedAt, restarts: data.restarts, lastExit: data.lastExit,
                lastRulesRefusal: data.lastRulesRefusal, countersAt: data.countersAt),
            queue: configuration.queue.number, failMode: configuration.queue.failMode.rawValue, counters: counters, now: Date())
    }
}
