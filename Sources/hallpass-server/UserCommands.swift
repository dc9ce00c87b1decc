import ArgumentParser
import Foundation
import SchoolServer

#if canImport(Glibc)
import Glibc
#endif

/// `hallpass-server user ...`: the console's accounts (docs/server.md,
/// "Accounts and sessions"). Every change is in the audit trail as `cli:LOGIN`.
struct User: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The console's accounts: people, their roles and scopes.",
        subcommands: [Add.self, List.self, SetAccount.self, Password.self, Remove.self, SignOut.self])

    struct ScopeOptions: ParsableArguments {
        @Option(name: .customLong("room"), help: "A room the person sees (repeatable; a teacher needs a room or a group).")
        var rooms: [String] = []
        @Option(name: .customLong("group"), help: "A group the person sees (repeatable).") var groups: [String] = []

        var scope: Scope { Scope(rooms: rooms, groups: groups) }
        var given: Bool { !rooms.isEmpty || !groups.isEmpty }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a local account; asks for its password twice (or reads one line from standard input with --password-stdin).")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The login: 1 to 64 of a-z, 0-9, '.', '_', '-', '@'.") var login: String
        @Option(help: "admin, safeguarding, teacher or auditor.") var role: String
        @OptionGroup var scope: ScopeOptions
        @Option(help: "The person's name as the console shows it (default: the login).") var name: String?
        @Option(help: "Where the person's alert emails go (a safeguarding lead's danger alerts).") var email: String?
        @Flag(name: .customLong("password-stdin"), help: "Read the password from the first line of standard input.") var passwordStdin = false

        func run() async throws {
            let configuration = try options.load()
            let role = try personRole(role)
            if let refusal = StoredPerson.refusal(role: role, scope: scope.scope) { throw ValidationError(refusal) }
            if let email, let refusal = ServerAdministration.emailRefusal(email) { throw ValidationError("--email: \(refusal)") }
            let password = try readPassword(fromStandardInput: passwordStdin)
            let person = try await withAccounts(configuration) { storage in
                try await ServerAdministration.addPerson(
                    storage: storage, login: login, displayName: name, role: role, scope: scope.scope, password: password, email: email,
                    author: operatorAuthor(), now: now())
            }
            print("added \(person.login): \(person.role.rawValue), \(ServerAdministration.scopeText(person.scope))")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the accounts: role, sign-in method, state, last sign-in, scope.")
        @OptionGroup var options: ConfigOption

        func run() async throws {
            let configuration = try options.load()
            print(try await withAccounts(configuration) { storage in try await ServerAdministration.peopleTable(storage: storage, now: now()) })
        }
    }

    struct SetAccount: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change an account's role, scope (--room and --group replace it; --whole-school clears it), name, email, or disable it.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The login.") var login: String
        @Option(help: "admin, safeguarding, teacher or auditor.") var role: String?
        @OptionGroup var scope: ScopeOptions
        @Flag(name: .customLong("whole-school"), help: "No scope: the whole school (not for a teacher).") var wholeSchool = false
        @Option(help: "The person's name as the console shows it.") var name: String?
        @Option(help: "Where the person's alert emails go.") var email: String?
        @Flag(name: .customLong("no-email"), help: "Remove the person's email address (no alert emails).") var noEmail = false
        @Flag(help: "Disable the account (its sessions end) or enable it again (which also lifts a lockout).") var state: AccountState?

        enum AccountState: String, EnumerableFlag {
            case disable, enable
        }

        func run() async throws {
            let configuration = try options.load()
            guard !(wholeSchool && scope.given) else { throw ValidationError("give --room/--group or --whole-school, not both") }
            guard !(noEmail && email != nil) else { throw ValidationError("give --email or --no-email, not both") }
            if let email, let refusal = ServerAdministration.emailRefusal(email) { throw ValidationError("--email: \(refusal)") }
            var change = ServerAdministration.PersonChange()
            if noEmail { change.email = .some(nil) } else if let email { change.email = email }
            change.role = try role.map(personRole)
            change.scope = wholeSchool ? .school : scope.given ? scope.scope : nil
            change.displayName = name
            change.disabled = state.map { $0 == .disable }
            let asked = change
            let person = try await withAccounts(configuration) { storage in
                try await ServerAdministration.changePerson(storage: storage, login: login, asked, author: operatorAuthor(), now: now())
            }
            let state = person.disabledAt == nil ? "" : ", disabled"
            print("\(person.login): \(person.role.rawValue), \(ServerAdministration.scopeText(person.scope))\(state)")
        }
    }

    struct Password: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a local account's password; its sessions end.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The login.") var login: String
        @Flag(name: .customLong("password-stdin"), help: "Read the password from the first line of standard input.") var passwordStdin = false

        func run() async throws {
            let configuration = try options.load()
            let password = try readPassword(fromStandardInput: passwordStdin)
            try await withAccounts(configuration) { storage in
                try await ServerAdministration.setPassword(storage: storage, login: login, password: password, author: operatorAuthor(), now: now())
            }
            print("set the password of \(login)")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove an account and its sessions.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The login.") var login: String

        func run() async throws {
            let configuration = try options.load()
            try await withAccounts(configuration) { storage in
                try await ServerAdministration.removePerson(storage: storage, login: login, author: operatorAuthor(), now: now())
            }
            print("removed \(login)")
        }
    }

    struct SignOut: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "sign-out", abstract: "End every session of an account.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The login.") var login: String

        func run() async throws {
            let configuration = try options.load()
            let ended = try await withAccounts(configuration) { storage in
                try await ServerAdministration.signOutPerson(storage: storage, login: login, author: operatorAuthor(), now: now())
            }
            print("ended \(ended) session\(ended == 1 ? "" : "s") of \(login)")
        }
    }
}

func personRole(_ text: String) throws -> Role {
    guard let role = Role(rawValue: text), Role.personRoles.contains(role) else {
        throw ValidationError("--role: expected one of \(Role.personRoles.map(\.rawValue).joined(separator: ", "))")
    }
    return role
}

/// Opens the storage for `body`; a refusal is printed as its message (and the command fails), not as a trace.
func withAccounts<T: Sendable>(_ configuration: ServerConfiguration, _ body: @Sendable (SQLStorage) async throws -> T) async throws -> T {
    do {
        return try await withServerStorage(configuration.database, logger: makeLogger(), body)
    } catch let error as ServerError {
        throw ValidationError("\(error.message) (\(error.code))")
    }
}

/// The password: the first line of standard input with `--password-stdin`
/// (for scripts), else asked twice on the terminal without echo.
func readPassword(fromStandardInput: Bool) throws -> String {
    if fromStandardInput {
        guard let line = readLine(strippingNewline: true) else { throw ValidationError("--password-stdin: standard input is empty") }
        return line
    }
    guard isatty(0) == 1 else { throw ValidationError("no terminal to ask the password on: give it on standard input with --password-stdin") }
    func ask(_ prompt: String) -> String? {
        FileHandle.standardError.write(Data(prompt.utf8))
        // stty, not termios: the terminal's echo off and on again without a pointer in this program.
        setEcho(false)
        defer {
            setEcho(true)
            FileHandle.standardError.write(Data("\n".utf8))
        }
        return readLine(strippingNewline: true)
    }
    guard let first = ask("Password: "), let second = ask("Again: ") else { throw ValidationError("no password given") }
    guard first == second else { throw ValidationError("the two passwords differ") }
    return first
}

private func setEcho(_ on: Bool) {
    let stty = Process()
    stty.executableURL = URL(fileURLWithPath: "/bin/stty")
    stty.arguments = [on ? "echo" : "-echo"]
    stty.standardInput = FileHandle.standardInput
    try? stty.run()
    stty.waitUntilExit()
}
