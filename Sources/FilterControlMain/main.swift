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

    func run() throws {
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

func say(_ message: String) {
    FileHandle.standardError.write(Data(("filter-control: " + message + "\n").utf8))
}
