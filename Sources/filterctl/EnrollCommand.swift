import ArgumentParser
import FilterControl
import Foundation

/// `filterctl enroll https://SERVER TOKEN`: enrols this machine with the school's server.
struct EnrollCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enroll",
        abstract: "Enrol this machine with the school's server (hallpass-server), once, as root.",
        discussion: """
            TOKEN is what 'hallpass-server token create' printed: hp1.FINGERPRINT.SECRET. The server's \
            certificate must carry the key whose SHA-256 is FINGERPRINT, or nothing is sent. The machine \
            makes its own Ed25519 key, sends the public half with the token's secret, and keeps what the \
            server answers: <rules.directory>/identity.key and <rules.directory>/identity (mode 0600), and \
            the school: section (server, fingerprint) of the configuration file. When the server publishes \
            bundles, the keys that sign them go there too (school.bundleKeys), and a machine without rules.source \
            takes its rules from the server. Records and check-ins start at the next start of hallpass \
            ('systemctl restart hallpass').
            Exit status: 0 enrolled; 64 a malformed server URL or token; 65 the server's key is not the \
            token's; 69 the server cannot be reached; 73 the identity or the configuration cannot be written; \
            77 the server refused (an unknown, used-up or expired token); 78 the configuration file is invalid.
            """)

    @Argument(help: "The school's server, https://HOST[:PORT]/.")
    var server: String

    @Argument(help: "The enrolment token (hp1.FINGERPRINT.SECRET).")
    var token: String

    @Option(name: .long, help: "The configuration file to read rules.directory from and write school: into.")
    var config: String = Configuration.defaultPath

    @Option(name: .long, help: "The name the server shows for this machine (default: the host name).")
    var hostname: String?

    @Flag(name: .long, help: "Enrol again when the machine already has an identity (a new key and machine id).")
    var force = false

    func run() async throws {
        let serverURL: SchoolServerURL
        do {
            serverURL = try SchoolServerURL(parsing: server)
        } catch {
            throw fail("\(error)", status: ExitStatus.usage)
        }
        let parsed: EnrolmentToken
        do {
            parsed = try EnrolmentToken(parsing: token)
        } catch {
            throw fail("\(error) [\(error.code)]", status: ExitStatus.usage)
        }
        var configuration = Configuration()
        if FileManager.default.fileExists(atPath: config) {
            guard let text = try? String(contentsOfFile: config, encoding: .utf8) else {
                throw fail("cannot read \(config)", status: ExitStatus.noInput)
            }
            do {
                configuration = try Configuration(yaml: text)
            } catch {
                throw fail("\(config): \(error)", status: ExitStatus.configError)
            }
        }
        let directory = configuration.rules.directory
        if !force, let existing = try? MachineIdentity.read(directory: directory) {
            throw fail(
                "this machine is already enrolled as \(existing.machine) with \(existing.server); give --force to enrol it again (a new key and machine id)",
                status: ExitStatus.usage)
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw fail("cannot make \(directory): \(error.localizedDescription)", status: ExitStatus.cannotCreate)
        }
        let outcome: Enrolment.Outcome
        do {
            let connection = try SchoolConnection(server: serverURL, fingerprint: parsed.fingerprint, signer: nil)
            outcome = try await Enrolment.enrol(
                server: serverURL, token: parsed, hostname: hostname ?? AuditLineMaker.hostName(), transport: connection)
            try outcome.identity.write(directory: directory)
            try Enrolment.writeConfiguration(path: config, server: serverURL, fingerprint: parsed.fingerprint, bundleKeys: outcome.bundleKeys)
        } catch {
            throw fail("\(error) [\(error.code)]", status: EnrollCommand.exitStatus(error))
        }
        print("enrolled as \(outcome.identity.machine)\(outcome.room.map { " in room \($0)" } ?? "") with \(serverURL)")
        print("identity: \(directory)/\(MachineIdentity.fileName), key: \(directory)/\(MachineIdentity.keyFileName); school: written to \(config)")
        if !outcome.bundleKeys.isEmpty {
            let keys = outcome.bundleKeys.map(\.keyID).joined(separator: ", ")
            if configuration.rules.source == nil || configuration.rules.serverKey != nil {
                print("rules: from \(serverURL)bundle/, signed by \(keys) (school.bundleKeys)")
            } else {
                print("rules: rules.source stays \(configuration.rules.source!); the server's bundles are signed by \(keys) (school.bundleKeys)")
            }
        }
        print("records and check-ins start when hallpass starts again: systemctl restart hallpass")
    }

    static func exitStatus(_ error: SchoolError) -> Int32 {
        switch error {
        case .malformedToken, .serverURL: ExitStatus.usage
        case .fingerprintMismatch, .badAnswer: ExitStatus.dataError
        case .unreachable, .timedOut, .tls, .cancelled: ExitStatus.unavailable
        case .refused: ExitStatus.noPermission
        case .identity, .io: ExitStatus.cannotCreate
        }
    }
}
