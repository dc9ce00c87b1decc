import ArgumentParser
import Foundation
import HallpassConfig
import Logging
import Metrics
import Prometheus
import SchoolServer

/// hallpass-server: the school's server that lab machines enrol with and
/// report to (docs/server.md). Each subcommand is a thin wrapper over
/// SchoolServer, which the tests call directly.
@main
struct HallpassServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hallpass-server",
        abstract: "The school's server for hallpass lab machines.",
        subcommands: [Serve.self, Init.self, Token.self, APIToken.self, Machine.self, User.self, Policy.self, Publish.self, Fingerprint.self, LiveKeyCommand.self],
        defaultSubcommand: Serve.self)
}

struct ConfigOption: ParsableArguments {
    @Option(name: .long, help: "The configuration file.")
    var config: String = ServerConfiguration.defaultPath

    func load() throws -> ServerConfiguration {
        do {
            return try ServerConfiguration.load(path: config, required: config != ServerConfiguration.defaultPath)
        } catch {
            throw ValidationError(error.description)
        }
    }
}

func makeLogger(_ label: String = "hallpass-server") -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
    return logger
}

func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

/// Who ran a command, as a policy version or a publication records it: `cli:<login>`.
func cliAuthor() -> String {
    let environment = ProcessInfo.processInfo.environment
    return "cli:" + (environment["SUDO_USER"] ?? environment["USER"] ?? String(getuid()))
}

/// Who ran a command, for the record of who made a token.
func operatorName() -> String {
    ProcessInfo.processInfo.environment["SUDO_USER"] ?? ProcessInfo.processInfo.environment["USER"] ?? "root"
}

/// The operator as the audit trail and the tables' `created_by` name them: `cli:LOGIN`.
func operatorAuthor() -> String {
    Principal(kind: .command(operatorName()), role: .admin, scope: .school).author
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve machines and the API (the default).")
    @OptionGroup var options: ConfigOption

    func run() async throws {
        let configuration = try options.load()
        LoggingSystem.bootstrap(StreamLogHandler.standardError)
        let logger = makeLogger()
        let metrics = ServerMetrics()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics.registry))
        let certificate =
            configuration.listen.plainHTTP
            ? nil : try ServerCertificate(certificatePath: configuration.tls.certificate, keyPath: configuration.tls.key)
        let storage = try await SQLStorage.open(configuration.database, logger: logger)
        if let certificate { logger.info("fingerprint \(certificate.fingerprint)") }
        logger.info(
            "hallpass-server on \(configuration.listen.plainHTTP ? "http" : "https")://\(configuration.listen.address):\(configuration.listen.port), database \(configuration.database)")
        let app = try buildApplication(
            configuration: configuration,
            parts: ServerParts(storage: storage, certificate: certificate, metrics: metrics, logger: logger))
        try await app.runService()
    }
}

struct Init: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make the database and, when none is configured, a self-signed TLS certificate; print the fingerprint.")
    @OptionGroup var options: ConfigOption
    @Option(name: .customLong("name"), help: "A host name or IPv4 address machines reach the server by (repeatable; for the certificate).")
    var names: [String] = []

    func run() async throws {
        let configuration = try options.load()
        let hostName = ProcessInfo.processInfo.hostName
        let report = try await ServerAdministration.initialize(
            configuration: configuration, names: names.isEmpty ? [hostName] : names, logger: makeLogger())
        if report.madeCertificate { print("made a self-signed certificate: \(configuration.tls.certificate)") }
        if let key = report.madeSigningKey {
            print("made the bundle signing key \(configuration.signingKeyPath ?? "-"); machines trust \(key)")
        }
        if !report.appliedMigrations.isEmpty {
            print("database \(report.database): schema steps \(report.appliedMigrations.map(String.init).joined(separator: ", ")) applied")
        } else {
            print("database \(report.database): schema up to date")
        }
        if report.madeLiveKey { print("made the live key \(LiveKey.path(configuration: configuration))") }
        print("live key \(report.liveKey): the school's policy names it so that machines accept room rules:")
        print("  live:\n    keys: [ \"\(report.liveKey)\" ]")
        print("fingerprint \(report.fingerprint)")
    }
}

struct LiveKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "live-key",
        abstract: "Print the live key (ed25519:BASE64) that signs machines' live state; the policy's live.keys names it.")
    @OptionGroup var options: ConfigOption

    func run() async throws {
        print(try ServerAdministration.liveKey(configuration: try options.load()))
    }
}

struct Fingerprint: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the server's fingerprint (SHA-256 of its key), which tokens carry.")
    @OptionGroup var options: ConfigOption

    func run() async throws {
        print(try ServerAdministration.fingerprint(configuration: try options.load()))
    }
}

struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Enrolment tokens.", subcommands: [Create.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a new enrolment token for a room.")
        @OptionGroup var options: ConfigOption
        @Option(help: "The room the machines enrolled with it belong to.") var room: String
        @Option(help: "How many machines may enrol with it.") var uses: Int = 1
        @Option(help: "How long it is valid: 30m, 12h, 7d.") var expires: String = "7d"

        func run() async throws {
            let configuration = try options.load()
            guard let seconds = DurationText.seconds(expires) else {
                throw ValidationError("--expires: expected a duration like 30m, 12h or 7d")
            }
            let fingerprint = try ServerAdministration.fingerprint(configuration: configuration)
            let token = try await withServerStorage(configuration.database, logger: makeLogger()) { storage in
                try await ServerAdministration.createEnrolmentToken(
                    storage: storage, fingerprint: fingerprint, room: room, uses: uses, expiresIn: seconds,
                    createdBy: operatorAuthor(), now: now())
            }
            print(token)
        }
    }
}

struct APIToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "api-token", abstract: "API tokens for the school's tools.", subcommands: [Create.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a new API token (shown once; only its hash is kept).")
        @OptionGroup var options: ConfigOption
        @Option(
            help: """
                admin (everything), safeguarding (records, machines, the policy to read), teacher (records and machines of \
                its rooms and groups), auditor (reads everything) or metrics (/metrics only, for Prometheus).
                """)
        var role: String
        @Option(name: .customLong("room"), help: "A room the token sees (repeatable; a teacher's token needs a room or a group).")
        var rooms: [String] = []
        @Option(name: .customLong("group"), help: "A group the token sees (repeatable).") var groups: [String] = []

        func run() async throws {
            let configuration = try options.load()
            guard let role = Role(rawValue: role) else {
                throw ValidationError("--role: expected one of \(Role.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let scope = Scope(rooms: rooms, groups: groups)
            if let refusal = ServerAdministration.apiTokenRefusal(role: role, scope: scope) { throw ValidationError(refusal) }
            let made = try await withServerStorage(configuration.database, logger: makeLogger()) { storage in
                try await ServerAdministration.createAPIToken(storage: storage, role: role, scope: scope, createdBy: operatorAuthor(), now: now())
            }
            print(made.token)
        }
    }
}

struct Machine: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Enrolled machines.", subcommands: [List.self, Revoke.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the machines and their states.")
        @OptionGroup var options: ConfigOption

        func run() async throws {
            let configuration = try options.load()
            let table = try await withServerStorage(configuration.database, logger: makeLogger()) { storage in
                try await ServerAdministration.machineTable(storage: storage, staleAfter: configuration.machines.staleAfter, now: now())
            }
            print(table)
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Shut a machine out: its next request is refused.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The machine's id (m-...).") var id: String

        func run() async throws {
            let configuration = try options.load()
            let found = try await withServerStorage(configuration.database, logger: makeLogger()) { storage in
                try await ServerAdministration.revokeMachine(storage: storage, id: id, author: operatorAuthor(), now: now())
            }
            guard found else { throw ValidationError("no machine \(id) (hallpass-server machine list shows them)") }
            print("revoked \(id)")
        }
    }
}
