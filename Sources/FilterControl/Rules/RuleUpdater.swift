import NIOPosix
import HallpassSystem
public import SharedStore

/// The result of one update, as `filterctl status` and the daemon's log report it.
public enum UpdateOutcome: Sendable, Hashable, CustomStringConvertible {
    /// A newer bundle was verified and is now `current`; `previous` is what it replaced.
    case installed(version: UInt64, previous: UInt64?)
    /// The source offers the version that is installed (or answered 304 Not Modified).
    case alreadyCurrent(version: UInt64)
    /// Nothing was installed; the rules in force stay. `code` is a ``RuleUpdateError`` code.
    case refused(code: String, message: String)

    public var description: String {
        switch self {
        case .installed(let version, let previous):
            "installed version \(version)" + (previous.map { " (replacing \($0))" } ?? "")
        case .alreadyCurrent(let version):
            "version \(version) is current"
        case .refused(let code, let message):
            "refused (\(code)): \(message)"
        }
    }

    init(_ error: RuleUpdateError) {
        self = .refused(code: error.code, message: error.description)
    }
}

/// The rules in force: `rules.directory/current` and the version it points to.
public struct InstalledRules: Sendable, Hashable {
    public var version: UInt64
    /// `rules.directory/current/rules.hpstore`: the path filter-data opens (through the link).
    public var storePath: String
    /// `rules.directory/versions/<version>/rules.hpstore`: the same file, not through the link.
    public var versionStorePath: String
    /// `rules.directory/versions/<version>`: the bundle's files (the school's policy among them, if it has one).
    public var versionDirectory: String
}

/// Fetches, verifies and installs signed rule bundles; the one entry point
/// the daemon and `filterctl reload` use.
///
/// ```swift
/// let updater = RuleUpdater(settings: RuleUpdater.Settings(configuration))
/// switch await updater.update() {
/// case .installed: // tell filter-data "rulesChanged"
/// case .alreadyCurrent, .refused: break // the rules in force stay; the state file has the details
/// }
/// ```
///
/// Updates run one at a time: a call to ``update(now:)`` while another runs
/// waits for it and returns its outcome. Every outcome is recorded in
/// `rules.directory/state` (``RuleState``).
public actor RuleUpdater {
    public struct Settings: Sendable {
        public var directory: String
        /// `rules.source`; nil: ``update(now:)`` refuses with `fetch.no-source`.
        public var source: String?
        public var trustedKeys: [BundlePublicKey]
        public var caFile: String?
        /// `sha256/BASE64` SPKI pins.
        public var pins: [String]
        /// The school's server's key (`rules.serverKey`): the one certificate key accepted, instead of `caFile` and `pins`.
        public var serverKey: ServerFingerprint?
        public var maxBundleBytes: UInt64
        /// How long to wait for a TCP connection.
        public var connectTimeout: Duration = .seconds(10)
        /// How long one request (TLS handshake, headers and body) may take in all.
        public var requestTimeout: Duration = .seconds(300)
        public var retry = RetryPolicy()
        /// Whether the system trust store counts (always, but for tests that must not depend on it).
        public var useSystemTrustRoots = true
        /// `SO_MARK` for download sockets (see ``HTTPSClient/socketMark``); the daemon sets its allow mark.
        public var socketMark: UInt32?

        public init(
            directory: String, source: String?, trustedKeys: [BundlePublicKey], caFile: String? = nil, pins: [String] = [],
            maxBundleBytes: UInt64 = 256 << 20
        ) {
            self.directory = directory
            self.source = source
            self.trustedKeys = trustedKeys
            self.caFile = caFile
            self.pins = pins
            self.maxBundleBytes = maxBundleBytes
        }

        /// The `rules` section of the configuration.
        public init(_ configuration: Configuration) {
            let rules = configuration.rules
            self.init(
                directory: rules.directory, source: rules.source, trustedKeys: rules.trustedKeys, caFile: rules.caFile,
                pins: rules.pins, maxBundleBytes: UInt64(rules.maxBundleBytes))
            serverKey = rules.serverKey
        }
    }

    public let settings: Settings
    private let installer: RuleInstaller
    private var running: Task<UpdateOutcome, Never>?

    public init(settings: Settings) {
        self.settings = settings
        self.installer = RuleInstaller(directory: settings.directory)
    }

    /// Checks `rules.source` and installs a newer bundle if it offers one.
    /// `now` (Unix seconds) is the time for the bundle's validity period and the state file.
    public func update(now: Int64 = BundleVerifier.currentTime()) async -> UpdateOutcome {
        if let running { return await running.value }
        let settings = self.settings
        return await serialized {
            let transport: any BundleTransport
            do throws(RuleUpdateError) {
                transport = try RuleUpdater.transport(for: settings)
            } catch {
                return await self.record(.init(error), source: settings.source, now: now)
            }
            return await self.perform(transport, now: now)
        }
    }

    /// Installs the bundle in a local folder (a first install, or an offline
    /// one), with every check of ``update(now:)``: signature, expiry, hashes,
    /// sizes, and a version newer than the installed one. `directory` is a
    /// path or a `file:///` URL.
    public func install(fromDirectory directory: String, now: Int64 = BundleVerifier.currentTime()) async -> UpdateOutcome {
        while let running { _ = await running.value }
        var path = directory
        if directory.lowercased().hasPrefix("file:") {
            guard case .directory(let parsed)? = try? BundleSource(parsing: directory) else {
                return record(
                    .init(.invalidSetting(key: "bundle folder", reason: "'\(directory.prefix(80))' is not a file:///absolute/path/ URL")),
                    source: directory, now: now)
            }
            path = parsed
        }
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        let transport = DirectoryTransport(directory: path)
        return await serialized { await self.perform(transport, now: now) }
    }

    /// The rules in force, or nil when none are installed.
    public nonisolated func installed() -> InstalledRules? {
        RuleUpdater.installed(directory: settings.directory)
    }

    /// The rules in force in `directory`, or nil when none are installed.
    public static func installed(directory: String) -> InstalledRules? {
        let installer = RuleInstaller(directory: directory)
        guard let version = installer.currentVersion() else { return nil }
        return InstalledRules(
            version: version,
            storePath: installer.currentLink + "/" + BundleManifest.storeFileName,
            versionStorePath: installer.versionDirectory(version) + "/" + BundleManifest.storeFileName,
            versionDirectory: installer.versionDirectory(version))
    }

    /// The recorded state (installed version, last attempt and result).
    public nonisolated func state() -> RuleState {
        RuleState.load(directory: settings.directory)
    }

    // MARK: - One update

    private func serialized(_ body: @escaping @Sendable () async -> UpdateOutcome) async -> UpdateOutcome {
        let task = Task { await body() }
        running = task
        let outcome = await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
        running = nil
        return outcome
    }

    static func transport(for settings: Settings) throws(RuleUpdateError) -> any BundleTransport {
        guard let text = settings.source else { throw .noSource }
        let source: BundleSource
        do {
            source = try BundleSource(parsing: text)
        } catch {
            if error.isPlainHTTP { throw .plainHTTP(source: text) }
            throw .invalidSetting(key: "rules.source", reason: error.description)
        }
        switch source {
        case .directory(let path):
            return DirectoryTransport(directory: path)
        case .https(let host, let port, let path):
            let trust: HTTPSClient.Trust
            if let serverKey = settings.serverKey {
                // The school's server: its certificate is often self-signed (hallpass-server init),
                // so the key the enrolment token pinned is the whole check, as for check-ins.
                trust = .pinnedKey(serverKey.bytes)
            } else {
                trust = .chain(try ServerTrust(caFile: settings.caFile, pins: settings.pins, useSystemRoots: settings.useSystemTrustRoots))
            }
            let client = try HTTPSClient(
                trusting: trust, connectTimeout: settings.connectTimeout, requestTimeout: settings.requestTimeout,
                socketMark: settings.socketMark, group: MultiThreadedEventLoopGroup.singleton)
            return HTTPSTransport(client: client, host: host, port: port, path: path, retry: settings.retry, source: source.description)
        }
    }

    private func perform(_ transport: any BundleTransport, now: Int64) async -> UpdateOutcome {
        var state = RuleState.load(directory: settings.directory)
        let outcome: UpdateOutcome
        do {
            outcome = try await attempt(transport, state: &state, now: now)
        } catch .pinMismatch(let server, let seen) where settings.serverKey != nil {
            outcome = UpdateOutcome(.serverKeyMismatch(server: server, expected: settings.serverKey!.description, seen: seen.first ?? "?"))
        } catch {
            outcome = UpdateOutcome(error)
        }
        return record(outcome, into: state, source: transport.source, now: now)
    }

    /// Writes the outcome into the state file (best effort: a state file that
    /// cannot be written must not turn an installed bundle into a refusal).
    private func record(_ outcome: UpdateOutcome, into loaded: RuleState? = nil, source: String?, now: Int64) -> UpdateOutcome {
        var state = loaded ?? RuleState.load(directory: settings.directory)
        state.lastAttemptAt = now
        switch outcome {
        case .installed(let version, _):
            state.lastResult = .installed
            state.lastCode = nil
            state.lastMessage = "installed version \(version) from \(source ?? "?")"
        case .alreadyCurrent(let version):
            state.lastResult = .alreadyCurrent
            state.lastCode = nil
            state.lastMessage = "version \(version) is current"
        case .refused(let code, let message):
            state.lastResult = .refused
            state.lastCode = code
            state.lastMessage = message
        }
        if FileSystem.isDirectory(settings.directory) {
            try? state.save(directory: settings.directory)
        }
        return outcome
    }

    private func attempt(_ transport: any BundleTransport, state: inout RuleState, now: Int64) async throws(RuleUpdateError)
        -> UpdateOutcome
    {
        guard !settings.trustedKeys.isEmpty else { throw .bundle(.noTrustedKeys) }
        try installer.prepare()
        guard let lock = try installer.lock() else { throw .busy(path: settings.directory) }
        defer { lock.release() }
        installer.removeStaging()

        let current = installer.currentVersion()
        let floor = max(state.installedVersion ?? 0, current ?? 0)
        let staging = try installer.makeStaging()
        defer { FileSystem.removeTree(staging) }

        let verifier = BundleVerifier(signatures: .trusted(settings.trustedKeys), checkExpiry: true, now: now)
        let fetcher = BundleFetcher(transport: transport, verifier: verifier, maxBundleBytes: settings.maxBundleBytes)
        let etag = current != nil && state.etagSource == transport.source ? state.etag : nil
        state.lastDownloadBytes = 0

        switch try await fetcher.fetchManifest(into: staging, etag: etag) {
        case .notModified:
            // Only asked with an ETag, which is only kept while a version is current.
            guard let current else { throw .badResponse(file: BundleManifest.fileName, reason: "304 Not Modified to a plain GET") }
            state.lastSuccessAt = now
            return .alreadyCurrent(version: current)

        case .verified(let manifest, let newTag, let manifestBytes):
            state.lastDownloadBytes = manifestBytes
            if manifest.version <= floor {
                guard manifest.version == current, manifest.version == floor else {
                    throw .rollback(offered: manifest.version, installed: floor)
                }
                state.etag = newTag
                state.etagSource = newTag == nil ? nil : transport.source
                state.lastSuccessAt = now
                return .alreadyCurrent(version: manifest.version)
            }
            let report = try await fetcher.fetchFiles(of: manifest, into: staging, installed: installer.installedFiles())
            state.lastDownloadBytes = manifestBytes + report.downloadedBytes
            state.lastFiles = report.summary
            do {
                _ = try verifier.verify(directory: staging)
            } catch {
                throw .bundle(error)
            }
            do {
                _ = try RuleStore(path: staging + "/" + BundleManifest.storeFileName, verification: .full)
            } catch {
                throw .store(error)
            }
            // A policy this machine cannot read would leave it with none: refused like a bad store.
            do {
                _ = try PolicyInForce.bundlePolicy(inFolder: staging)
            } catch {
                throw .policy(error)
            }
            let previous = try installer.install(staging: staging, version: manifest.version)
            state.installedVersion = manifest.version
            state.installedAt = now
            state.installedFrom = transport.source
            state.previousVersion = previous
            state.etag = newTag
            state.etagSource = newTag == nil ? nil : transport.source
            state.lastSuccessAt = now
            return .installed(version: manifest.version, previous: previous)
        }
    }
}
