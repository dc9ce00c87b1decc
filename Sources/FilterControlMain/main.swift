// filter-control: the control process (see DESIGN.md). It runs in the
// foreground (systemd runs it as a simple service): it installs the kernel
// rules, runs filter-data under supervision, answers its needRules
// questions, serves the admin socket for filterctl, reloads on SIGHUP or
// `filterctl reload`, and on SIGTERM or SIGINT stops filter-data and
// removes the kernel rules.
import ArgumentParser
import Dispatch
import FilterControl
import Foundation

@main
struct FilterControlCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "filter-control",
        abstract: "Run hallpass: kernel rules, a supervised filter-data, the admin socket.")

    @Option(name: .long, help: "The configuration file.")
    var config: String = Configuration.defaultPath

    @Option(name: .long, help: "A rule store to use instead of the installed rules (then nothing is downloaded).")
    var store: String?

    @Option(name: .customLong("runtime-dir"), help: "Where the policy file for filter-data is written.")
    var runtimeDirectory: String = "/run/hallpass"

    @Option(name: .customLong("data-binary"), help: "The filter-data executable (default: next to this one).")
    var dataBinary: String?

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

    func run() throws {
        if removeRules { return try FilterControlCommand.removeKernelRules() }
        let binary = dataBinary ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("filter-data").path
        let daemon: Daemon
        do {
            daemon = try Daemon(
                options: .init(configPath: config, store: store, runtimeDirectory: runtimeDirectory, dataBinary: binary),
                log: { say($0) })
            try daemon.start()
        } catch {
            say(error.message)
            throw ExitCode(error.status)
        }

        let stop = DispatchSemaphore(value: 0)
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGTERM, SIGINT, SIGHUP] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            if signalNumber == SIGHUP {
                source.setEventHandler { daemon.reload() }
            } else {
                source.setEventHandler { stop.signal() }
            }
            source.resume()
            sources.append(source)
        }
        stop.wait()
        say("stopping")
        daemon.stop()
        _ = sources
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
