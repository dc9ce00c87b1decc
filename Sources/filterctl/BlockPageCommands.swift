import ArgumentParser
import BlockPage
import FilterControl
import Foundation

/// `filterctl requests`: the access requests students made on the block page.
struct RequestsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "requests",
        abstract: "List, approve and deny the access requests made on the block page.",
        discussion: """
            Students ask for access with the block page's form (blockPage.requestAccess.url: builtin).
            An approval adds the host (and the names below it) to the local allow list at once,
            for a while (--for) or until denied; requests are kept in rules.directory/requests.json
            and survive restarts.
            """,
        subcommands: [List.self, Approve.self, Deny.self])

    struct Connection: ParsableArguments {
        @Option(name: .long, help: "The admin socket (default: admin.socket of --config, or /run/hallpass/control.sock).")
        var socket: String?

        @Option(name: .long, help: "A hallpass.yaml naming the admin socket.")
        var config: String?

        func send(_ request: AdminRequest) throws {
            let reply = try AdminCommand.reply(request, socket: AdminCommand.socketPath(socket, config: config))
            FileHandle.standardOutput.write(Data(reply.output.utf8))
            if reply.exitCode != 0 { throw ExitCode(reply.exitCode) }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the requests waiting for a decision (--all: every request).")

        @Flag(name: .long, help: "Show approved and denied requests too.")
        var all = false

        @Flag(name: .long, help: "One JSON object per request.")
        var json = false

        @OptionGroup var connection: Connection

        func run() throws {
            try connection.send(AdminRequest(command: .requests, json: json, all: all))
        }
    }

    struct Approve: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Allow the request's host now (for a while with --for).")

        @Argument(help: "The request's id, from 'filterctl requests list'.")
        var id: String

        @Option(name: .customLong("for"), help: "How long the access lasts: e.g. 45m, 2h, 7d (default: until denied).")
        var duration: String?

        @OptionGroup var connection: Connection

        func validate() throws {
            if let duration, parseDuration(duration) == nil {
                throw ValidationError("--for takes a duration like 45m, 2h or 7d (at most 3650d)")
            }
        }

        func run() throws {
            try connection.send(AdminRequest(command: .approve, id: id, seconds: duration.flatMap(parseDuration).map { Int($0) }))
        }
    }

    struct Deny: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Refuse the request (or end an approval).")

        @Argument(help: "The request's id, from 'filterctl requests list'.")
        var id: String

        @OptionGroup var connection: Connection

        func run() throws {
            try connection.send(AdminRequest(command: .deny, id: id))
        }
    }
}

/// `filterctl ca`: the local CA that lets the block page answer HTTPS.
struct CACommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca",
        abstract: "Make and export the local CA the block page uses for HTTPS.",
        discussion: """
            Without it, an HTTPS visit to a blocked name is refused at once (the browser shows a
            connection error). With it, and its certificate installed in the browsers of the lab
            machines (docs/block-page.md), the block page shows for HTTPS too. The key stays in
            blockPage.ca (mode 0600) and is read by filter-control only.
            """,
        subcommands: [Init.self, Export.self])

    struct Folder: ParsableArguments {
        @Option(name: .long, help: "The configuration naming blockPage.ca and blockPage.organization (default /etc/hallpass/hallpass.yaml).")
        var config: String?

        func configuration() throws -> Configuration {
            let path = config ?? Configuration.defaultPath
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                if config == nil { return Configuration() }
                throw fail("cannot read \(path)", status: ExitStatus.noInput)
            }
            do {
                return try Configuration(yaml: text)
            } catch {
                throw fail("\(path): \(error)", status: ExitStatus.configError)
            }
        }
    }

    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create the local CA in blockPage.ca.")

        @Flag(name: .long, help: "Replace an existing CA (every machine must then trust the new certificate).")
        var force = false

        @OptionGroup var folder: Folder

        func run() throws {
            let configuration = try folder.configuration()
            do {
                let authority = try LocalCertificateAuthority.create(
                    folder: configuration.blockPage.ca, organization: configuration.blockPage.organization, replace: force)
                print("created the local CA in \(configuration.blockPage.ca) (SHA-256 \(authority.fingerprint))")
                print("next: 'filterctl ca export --out FILE', install FILE in the browsers, then 'filterctl reload' (filter-control uses it from then on, no restart)")
            } catch {
                throw fail(error.message, status: error.code == "ca.exists" ? ExitStatus.cannotCreate : ExitStatus.ioError)
            }
        }
    }

    struct Export: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print (or write) the CA certificate in PEM, for browsers and system stores.")

        @Option(name: .long, help: "Write the certificate here instead of printing it.")
        var out: String?

        @OptionGroup var folder: Folder

        func run() throws {
            let configuration = try folder.configuration()
            let authority: LocalCertificateAuthority
            do {
                authority = try LocalCertificateAuthority(folder: configuration.blockPage.ca)
            } catch {
                throw fail(error.message, status: ExitStatus.noInput)
            }
            guard let out else {
                print(authority.pem, terminator: "")
                return
            }
            do {
                try authority.pem.write(toFile: out, atomically: true, encoding: .utf8)
            } catch {
                throw fail("cannot write \(out): \(error.localizedDescription)", status: ExitStatus.cannotCreate)
            }
            print("wrote \(out) (SHA-256 \(authority.fingerprint))")
        }
    }
}
