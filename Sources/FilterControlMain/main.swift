// filter-control: the control process (see DESIGN.md). It runs in the
// foreground (systemd runs it as a notify service: READY=1 once it filters): it installs the kernel
// rules, runs filter-data under supervision, answers its needRules
// questions, serves the admin socket for filterctl, reloads on SIGHUP or
// `filterctl reload`, and on SIGTERM or SIGINT stops filter-data and
// removes the kernel rules.
import ArgumentParser
import FilterControl
import Foundation
import Logging

@main
struct FilterControlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "filter-control",
        abstract: "Run hallpass: kernel rules, a supervised filter-data, the admin socket.",
        discussion: """
            filter-control runs in the foreground as root (systemd runs it as hallpass.service). In \
            order, it reads the configuration, opens the installed rules (downloading and installing \
            the first bundle from rules.source when none are installed), looks up the SafeSearch \
            enforcement hosts the policy needs (3 s at most; one that cannot be resolved gets the \
            addresses its provider publishes, or its engine stays blocked), writes the policy for \
            filter-data to the runtime folder, installs its kernel rules (chains HALLPASS_OUT and \
            HALLPASS_IN, for iptables and ip6tables; those of an earlier run are replaced), starts \
            filter-data and restarts it when it dies or stops answering, and serves the admin socket \
            that filterctl talks to, the block page and filter-data's questions about unknown names. \
            Once filter-data filters with its first policy it logs a "ready" line and, under \
            systemd (Type=notify), sends READY=1 to $NOTIFY_SOCKET.

            SIGHUP, or 'filterctl reload', fetches new rules and reads the policy again. SIGTERM or \
            SIGINT stops filter-data (held packets get their default), removes the kernel rules and \
            exits 0.

            Exit status when it cannot start: 65 the rules cannot be used; 66 the configuration cannot \
            be read, or no rules are installed and rules.source is not set; 71 the kernel rules or \
            the admin socket cannot be set up (also --remove-rules, when a chain is left); 73 the \
            runtime folder cannot be written; 75 the first download of rules was refused; 78 the \
            configuration is invalid. The reason is always printed.

            See hallpass.yaml(5) for the configuration, filterctl(8) and filter-data(8).
            """)

    @Option(name: .long, help: "The configuration file.")
    var config: String = Configuration.defaultPath

    @Option(name: .long, help: "A rule store to use instead of the installed rules (then nothing is downloaded).")
    var store: String?

    @Option(name: .customLong("runtime-dir"), help: "Where the policy file for filter-data is written.")
    var runtimeDirectory: String = "/run/hallpass"

    @Option(name: .customLong("data-binary"), help: "The filter-data executable (default: next to this one).")
    var dataBinary: String?

    @Option(name: .customLong("proxy-binary"), help: "The hallpass-proxy executable, the inspection proxy (default: next to this one).")
    var proxyBinary: String?

    @Flag(
        name: .customLong("remove-rules"),
        help: ArgumentHelp(
            "Remove hallpass's kernel rules and exit.",
            discussion: """
                The unit's ExecStopPost: systemd runs it after every end of filter-control, also after \
                a SIGKILL or a crash, so that no chain of hallpass stays in the kernel. Removing what \
                is not there is not an error.
                """))
    var removeRules = false

    func run() async throws {
        if removeRules { return try FilterControlCommand.removeKernelRules() }
        let folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let binary = dataBinary ?? folder.appendingPathComponent("filter-data").path
        HallpassLogging.bootstrap(identifier: "filter-control")
        let logger = Logger(label: "hallpass.filter-control")
        // Read and taken out of the environment before filter-data is started, so it does not inherit it.
        let notifier = SystemdNotifier.fromEnvironment()
        var options = Control.Options(configPath: config, store: store, runtimeDirectory: runtimeDirectory, dataBinary: binary)
        options.proxyBinary = proxyBinary ?? folder.appendingPathComponent("hallpass-proxy").path
        let application: FilterControlApplication
        do {
            application = try await FilterControlApplication.build(
                configuration: try FilterControlApplication.readConfiguration(config), options: options, logger: logger, notifier: notifier)
        } catch {
            logger.error("\(error.message)")
            throw ExitCode(error.status)
        }
        let status = await application.run()
        if status != 0 { throw ExitCode(status) }
    }
}

extension FilterControlCommand {
    /// `--remove-rules`: exits 0 when no chain of hallpass is left, 71 when one is.
    static func removeKernelRules() throws {
        let families = KernelRules.Family.allCases
        let found = families.filter { KernelRules.isInstalled($0) }
        KernelRules.remove()
        let left = families.filter { KernelRules.isInstalled($0) }
        guard left.isEmpty else {
            say("cannot remove the kernel rules (\(left.map(\.rawValue).joined(separator: " and ")) OUTPUT still jumps to \(KernelRules.chain)); see 'iptables -S OUTPUT' and 'ip6tables -S OUTPUT'")
            throw ExitCode(71)
        }
        say(found.isEmpty ? "no kernel rules to remove" : "kernel rules removed")
    }
}

func say(_ message: String) {
    FileHandle.standardError.write(Data(("filter-control: " + message + "\n").utf8))
}
