import ArgumentParser
import BundleBuilder
import FilterControl
import Foundation
import SharedStore
import SystemPackage
import VerdictCore

/// Exit codes of filterctl (sysexits.h values where one fits).
enum ExitStatus {
    /// Done; for `check`, every target was read (whatever the verdicts).
    static let success: Int32 = 0
    /// `check`: at least one target could not be read (its line says `error`).
    static let someTargetsInvalid: Int32 = 1
    /// `config ready`: neither rules.source nor installed rules.
    static let notConfigured: Int32 = 1
    /// Wrong arguments (swift-argument-parser's usage error code).
    static let usage: Int32 = 64
    /// A store, bundle or list is invalid, or a bundle is refused.
    static let dataError: Int32 = 65
    /// An input file or folder does not exist or cannot be read.
    static let noInput: Int32 = 66
    /// An output file cannot be written.
    static let cannotCreate: Int32 = 73
    /// Reading or writing failed midway.
    static let ioError: Int32 = 74
    /// filter-control is not running or does not answer.
    static let unavailable: Int32 = 69
    /// Not allowed to use the admin socket.
    static let noPermission: Int32 = 77
    /// The configuration file is invalid.
    static let configError: Int32 = 78
}

/// Prints `message` to standard error and exits with `status`.
func fail(_ message: String, status: Int32) -> ExitCode {
    FileHandle.standardError.write(Data(("filterctl: " + message + "\n").utf8))
    return ExitCode(status)
}

@main
struct Filterctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "filterctl",
        abstract: "Administer hallpass, the on-host content filter.",
        discussion: """
            Offline commands (no daemon needed): compile, check --store/--bundle, replay, bundle, config.
            Commands for the running filter-control (its admin socket): status, reload, check without --store.
            The audit records (log.file): log, top. The school's server: enroll.

            Exit status: 0 success; 1 check: some targets could not be read, config ready: not configured yet; 64 usage error;
            65 invalid or refused store, bundle, list or capture; 66 input missing or unreadable;
            69 filter-control is not running or cannot be reached; 73 cannot write output;
            74 I/O error; 77 not allowed to use the admin socket; 78 invalid configuration.
            """,
        subcommands: [
            Compile.self, Check.self, Replay.self, Status.self, Reload.self, RequestsCommand.self, CACommand.self, BundleCommand.self,
            ConfigCommand.self, PolicyCommand.self, ExamCommand.self, AllowCommand.self, BlockCommand.self, OverridesCommand.self,
            LogCommand.self, TopCommand.self, BrowserPoliciesCommand.self, EnrollCommand.self, Live.self,
        ]
    )
}

// MARK: - compile

struct Compile: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Compile rule lists into a rule store.",
        discussion: """
            SOURCE is [CATEGORY=]PATH: a UT1-style folder (one subfolder per category holding
            'domains' and/or 'urls'), a folder holding 'domains'/'urls' itself, or a list file
            (hosts file, plain domains, AdBlock ||domain^ lines); a file's category defaults to
            its name without the extension. In lists, 'example.com' matches the name and its
            subdomains, '=example.com' only the name, '*.example.com' only subdomains.
            The store also carries hallpass's own lists of DNS-over-HTTPS resolvers (doh) and
            ECH public names (ech-front), from ../share/hallpass/bypass beside the program
            (/usr/share/hallpass/bypass from the package), unless --no-builtin-protections.
            """
    )

    @Option(name: .long, help: "The store file to write.")
    var out: String

    @Option(name: .long, help: "The rules version recorded in the store.")
    var version: UInt64 = 1

    @Flag(name: .long, help: "Do not list skipped lines.")
    var quiet = false

    @OptionGroup var protections: ProtectionOptions

    @Argument(help: "[CATEGORY=]PATH of a list file or folder.")
    var sources: [String]

    func run() throws {
        let lists = try protections.lists()
        let result: RuleCompiler.Result
        do {
            result = try RuleCompiler().compile(sources.map(RuleCompiler.SourceSpec.init), version: version, protections: lists)
        } catch let error as RuleCompiler.CompileError {
            throw fail(error.message, status: error.message.contains("no such file") || error.message.contains("cannot read") ? ExitStatus.noInput : ExitStatus.dataError)
        }
        do {
            try Data(result.bytes).write(to: URL(fileURLWithPath: out), options: .atomic)
        } catch {
            throw fail("cannot write \(out): \(error.localizedDescription)", status: ExitStatus.cannotCreate)
        }
        printSummary(result, quiet: quiet, to: out)
    }
}

func printSummary(_ result: RuleCompiler.Result, quiet: Bool, to path: String) {
    let summary = result.summary
    var lines: [String] = []
    lines.append("wrote \(path): \(summary.bytes) bytes, \(summary.categories) categories")
    lines.append(
        "  \(summary.distinctNames) names with domain rules, \(summary.urlRules) URL rules, \(summary.networkRules) address rules")
    if summary.distinctNames > 0 {
        let perName = Double(summary.bytes) / Double(summary.distinctNames)
        lines.append("  \(String(format: "%.1f", perName)) bytes per name")
    }
    for (category, count) in result.rulesPerCategory {
        lines.append("  \(category): \(count) rules")
    }
    if let (lists, counts) = result.protections {
        let each = counts.map { "\($0.category) \($0.rules) rules" }.joined(separator: ", ")
        lines.append("  with hallpass's own protections (\(lists.folder)): \(each)")
    } else {
        lines.append("  without hallpass's own protections (--no-builtin-protections): DoH resolvers and ECH public names only as the sources list them")
    }
    let report = result.report
    if report.skippedLines > 0 {
        lines.append("skipped \(report.skippedLines) lines that are not rules\(quiet ? "" : ":")")
        if !quiet {
            for sample in report.skippedSamples { lines.append("  \(sample)") }
            if report.skippedLines > report.skippedSamples.count {
                lines.append("  ... and \(report.skippedLines - report.skippedSamples.count) more")
            }
        }
    }
    FileHandle.standardError.write(Data((lines.joined(separator: "\n") + "\n").utf8))
}

// MARK: - check

struct Check: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show what hallpass decides for URLs or host names.",
        discussion: """
            One line per target: ACTION<TAB>TARGET<TAB>REASON, ACTION being allow, block or ask.
            With --json, one object per line with target, action, category, rule, source, reason.
            TARGET '-' reads targets from standard input, one per line.
            Without --config every category in the rules is blocked and unknown names are allowed.
            For https:// targets only the name counts, as the filter never sees an HTTPS path.
            Without --store or --bundle, the running filter-control answers with the rules and
            policy in force (--socket, or admin.socket of --config, or /run/hallpass/control.sock).
            """
    )

    @OptionGroup var rules: RulesOptions

    @Flag(name: .long, help: "Print JSON lines.")
    var json = false

    @Argument(help: "URLs or host names; '-' reads them from standard input.")
    var targets: [String]

    func validate() throws {
        guard !targets.isEmpty else { throw ValidationError("name at least one target, or '-' to read them from standard input") }
    }

    @Option(name: .long, help: "The admin socket of the running filter-control.")
    var socket: String?

    @Option(name: .long, help: "As this uid would get it (its group, through the running filter-control).")
    var uid: UInt32?

    @Option(name: .long, help: "As this user would get it (the name is looked up by filter-control).")
    var user: String?

    @Option(name: .long, help: "At this time on the school's clock, e.g. 2026-11-25T10:15 (default: now).")
    var at: String?

    @Option(name: .long, help: "With --bundle: as a person of this group of the bundle's policy would get it.")
    var group: String?

    func run() throws {
        guard rules.isOffline else {
            var list: [String] = []
            for target in targets {
                if target == "-" {
                    while list.count < 100_000, let line = readLine() { list.append(line) }
                } else {
                    list.append(target)
                }
            }
            let reply = try AdminCommand.reply(
                AdminRequest(command: .check, targets: list, json: json, uid: uid, user: user, at: at),
                socket: AdminCommand.socketPath(socket, config: rules.config))
            FileHandle.standardOutput.write(Data(reply.output.utf8))
            if reply.exitCode != 0 { throw ExitCode(ExitStatus.someTargetsInvalid) }
            return
        }
        guard uid == nil, user == nil else {
            throw ValidationError("--uid and --user ask the running filter-control (which knows the users): leave out --store and --bundle")
        }
        var runner = CheckRunner(engine: try rules.loadEngine(group: group, at: at), format: json ? .json : .text)
        for target in targets {
            if target == "-" {
                if case .failure(let error) = Result(catching: { () throws(CheckIOError) in
                    try runner.run(input: .standardInput, output: .standardOutput)
                }) {
                    throw fail(error.message, status: ExitStatus.ioError)
                }
            } else {
                var line: [UInt8] = []
                runner.appendLine(for: Substring(target), to: &line)
                FileHandle.standardOutput.write(Data(line))
            }
        }
        if runner.invalidTargets > 0 { throw ExitCode(ExitStatus.someTargetsInvalid) }
    }
}

// MARK: - config

struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Print the example configuration, check a configuration file, or say whether hallpass can start.",
        subcommands: [Example.self, Validate.self, Ready.self]
    )

    struct Example: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a commented example hallpass.yaml.")
        func run() { print(Configuration.example, terminator: "") }
    }

    struct Validate: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "check", abstract: "Check a hallpass.yaml and report the first problem.",
            discussion: """
                A file that reads is also checked against this machine: each block page port a local \
                user could take (at or above net.ipv4.ip_unprivileged_port_start) is an error with its \
                key and line. filter-control starts with such a file all the same, says so in its log, \
                and does not listen on such a blockPage.port (the page is served on httpPort instead).
                Exit status: 0 ok; 66 the file cannot be read; 78 an error.
                """)

        @Argument(help: "The configuration file.")
        var file: String = Configuration.defaultPath

        func run() throws {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw fail("cannot read \(file)", status: ExitStatus.noInput)
            }
            let configuration: Configuration
            do {
                configuration = try Configuration(yaml: text)
            } catch {
                throw fail("\(file): \(error)", status: ExitStatus.configError)
            }
            let problems = configuration.unprivilegedPortProblems(unprivilegedPortStart: Configuration.unprivilegedPortStart())
            for problem in problems {
                FileHandle.standardError.write(Data("filterctl: \(file): \(problem)\n".utf8))
            }
            if !problems.isEmpty { throw ExitCode(ExitStatus.configError) }
            print("\(file): ok")
        }
    }

    struct Ready: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say whether filter-control has rules to start with.",
            discussion: """
                Ready when rules.source is set or rules are installed in rules.directory. The systemd unit \
                runs this as its ExecCondition: a package installs hallpass enabled, and until the school's \
                rule source is configured systemd skips starting it (not a failure, no restarts). A \
                configuration with errors counts as ready, so that filter-control starts and says what is wrong.
                Exit status: 0 ready; 1 not configured yet; 66 the file cannot be read.
                """)

        @Argument(help: "The configuration file.")
        var file: String = Configuration.defaultPath

        func run() throws {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw fail("cannot read \(file)", status: ExitStatus.noInput)
            }
            guard let configuration = try? Configuration(yaml: text) else {
                print("\(file) has errors ('filterctl config check' shows them); filter-control will report them")
                return
            }
            if let source = configuration.rules.source {
                print("ready: rules come from \(source)")
            } else if let installed = RuleUpdater.installed(directory: configuration.rules.directory) {
                print("ready: rules version \(installed.version) is installed in \(configuration.rules.directory)")
            } else {
                throw fail(
                    "hallpass is not configured yet: \(file) sets no rules.source and no rules are installed in "
                        + "\(configuration.rules.directory). Set rules.source and rules.trustedKeys, then 'systemctl start hallpass'.",
                    status: ExitStatus.notConfigured)
            }
        }
    }
}
