import ArgumentParser
import FilterControl
import Foundation
import VerdictCore

/// The options every command talking to filter-control takes.
struct DaemonOptions: ParsableArguments {
    @Option(name: .long, help: "The admin socket (default: admin.socket of --config, or /run/hallpass/control.sock).")
    var socket: String?

    @Option(name: .long, help: "A hallpass.yaml naming the admin socket.")
    var config: String?

    /// Sends `request`, prints the answer and ends with its exit status.
    func run(_ request: AdminRequest) throws {
        let reply = try AdminCommand.reply(request, socket: AdminCommand.socketPath(socket, config: config))
        FileHandle.standardOutput.write(Data(reply.output.utf8))
        if reply.exitCode != 0 { throw ExitCode(reply.exitCode) }
    }
}

/// `--for 45m`: seconds.
func durationSeconds(_ text: String?) throws -> Int? {
    guard let text else { return nil }
    guard let seconds = parseDuration(text) else { throw ValidationError("--for takes a duration like 45m, 2h or 1d") }
    return Int(seconds)
}

// MARK: - exam

struct ExamCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exam",
        abstract: "Start, stop or show an exam: its groups reach only the exam's list (docs/school-policy.md).",
        subcommands: [Start.self, Stop.self, Status.self])

    struct Start: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Start an exam now; open connections off the exam's list are cut.",
            discussion: "It survives a restart of hallpass and ends on its own at its time (--for), or with 'filterctl exam stop'.")

        @Option(name: .customLong("for"), help: "How long: e.g. 90m, 2h (default: until 'filterctl exam stop').")
        var duration: String?

        @Option(name: .long, help: "A group that sits the exam; repeat for several (default: the exam's groups).")
        var group: [String] = []

        @OptionGroup var daemon: DaemonOptions

        func run() throws {
            try daemon.run(AdminRequest(command: .examStart, seconds: try durationSeconds(duration), groups: group.isEmpty ? nil : group))
        }
    }

    struct Stop: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "End the exam started by hand.")
        @OptionGroup var daemon: DaemonOptions
        func run() throws { try daemon.run(AdminRequest(command: .examStop)) }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Which groups are in an exam, since when and until when.")
        @OptionGroup var daemon: DaemonOptions
        func run() throws { try daemon.run(AdminRequest(command: .examStatus)) }
    }
}

// MARK: - allow, block, overrides

/// `filterctl allow` and `filterctl block`: a teacher's override.
struct OverrideOptions: ParsableArguments {
    @Argument(help: "A host name (with its subdomains), =exact.name, *.subdomains, a URL, an address or a network.")
    var target: String

    @Option(name: .customLong("for"), help: "How long: e.g. 45m, 2h (default: until 'filterctl overrides remove').")
    var duration: String?

    @Option(name: .long, help: "Only for this group; repeat for several (default: everyone).")
    var group: [String] = []

    @OptionGroup var daemon: DaemonOptions

    func run(_ command: AdminRequest.Command) throws {
        try daemon.run(AdminRequest(command: command, targets: [target], seconds: try durationSeconds(duration), groups: group.isEmpty ? nil : group))
    }
}

struct AllowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "allow", abstract: "Allow a site now, for everyone or a group, for a while (as the school's overrides: permits).")
    @OptionGroup var options: OverrideOptions
    func run() throws { try options.run(.allow) }
}

struct BlockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "block", abstract: "Block a site now, for everyone or a group, for a while; open connections to it are cut.")
    @OptionGroup var options: OverrideOptions
    func run() throws { try options.run(.block) }
}

struct OverridesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "overrides", abstract: "List the overrides in force, or remove one.", subcommands: [List.self, Remove.self],
        defaultSubcommand: List.self)

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The overrides in force, with their ids.")
        @Flag(name: .long, help: "One JSON object per line.")
        var json = false
        @OptionGroup var daemon: DaemonOptions
        func run() throws { try daemon.run(AdminRequest(command: .overrides, json: json)) }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove an override now.")
        @Argument(help: "The override's id (see 'filterctl overrides').")
        var id: String
        @OptionGroup var daemon: DaemonOptions
        func run() throws { try daemon.run(AdminRequest(command: .removeOverride, id: id)) }
    }
}

// MARK: - policy

struct PolicyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "policy", abstract: "Check a school policy file, or show the policy someone gets now.", subcommands: [Check.self, Show.self])

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Validate a school policy file before publishing it.",
            discussion: "Every key is checked; an error names the key and the line. Exit status 78 when it is invalid, 66 when it cannot be read.")

        @Argument(help: "The policy file (YAML).")
        var file: String

        func run() throws {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw fail("cannot read \(file)", status: ExitStatus.noInput)
            }
            do {
                let school = try SchoolPolicy(yaml: text)
                print("\(file): ok")
                print(PolicySummary.describe(school))
            } catch {
                throw fail("\(file): \(error)", status: ExitStatus.configError)
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The policy in force for a user (or for people in no group), now: group, schedules, exam, every key.")

        @Option(name: .long, help: "A uid.")
        var uid: UInt32?

        @Option(name: .long, help: "A user name (looked up by filter-control, so LDAP users count).")
        var user: String?

        @OptionGroup var daemon: DaemonOptions

        func run() throws { try daemon.run(AdminRequest(command: .policyShow, uid: uid, user: user)) }
    }
}
