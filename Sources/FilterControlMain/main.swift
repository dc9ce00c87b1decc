// filter-control: the control process (see DESIGN.md). This version runs in
// the foreground with rules on disk: it writes the policy for filter-data,
// installs the kernel rules, runs filter-data (restarting it with backoff if
// it dies) and on SIGTERM or SIGINT stops it and removes the kernel rules.
// Fetching signed bundles, the admin socket and the block page come later.
import ArgumentParser
import Dispatch
import FilterControl
import Foundation
import SharedStore
import VerdictCore

@main
struct FilterControlCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "filter-control",
        abstract: "Run hallpass in the foreground: kernel rules plus a supervised filter-data.")

    @Option(name: .long, help: "The configuration file.")
    var config: String = Configuration.defaultPath

    @Option(name: .long, help: "The rule store filter-data maps.")
    var store: String

    @Option(name: .customLong("runtime-dir"), help: "Where the policy file for filter-data is written.")
    var runtimeDirectory: String = "/run/hallpass"

    @Option(name: .customLong("data-binary"), help: "The filter-data executable (default: next to this one).")
    var dataBinary: String?

    func run() throws {
        guard let text = try? String(contentsOfFile: config, encoding: .utf8) else {
            throw fail("cannot read the configuration \(config)", status: 66)
        }
        let configuration: Configuration
        do {
            configuration = try Configuration(yaml: text)
        } catch {
            throw fail("\(config): \(error)", status: 78)
        }
        do {
            _ = try RuleStore(path: store, verification: .full)
        } catch {
            throw fail("\(error) [\(error.code)]", status: 65)
        }
        let policyPath = runtimeDirectory + "/policy"
        do {
            try FileManager.default.createDirectory(atPath: runtimeDirectory, withIntermediateDirectories: true)
            try PolicyText.render(configuration.policy).write(toFile: policyPath, atomically: true, encoding: .utf8)
        } catch {
            throw fail("cannot write \(policyPath): \(error.localizedDescription)", status: 73)
        }
        let binary = dataBinary ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("filter-data").path
        let failOpen = configuration.queue.failMode == .open
        let arguments = [
            "--queue", String(configuration.queue.number), failOpen ? "--fail-open" : "--fail-closed",
            "--peek-bytes", String(configuration.queue.peekBytes),
        ]

        let rules = KernelRules(queue: configuration.queue.number, failOpen: failOpen)
        do {
            try rules.install()
        } catch {
            KernelRules.remove()
            throw fail("cannot install the kernel rules: \(error)", status: 71)
        }
        say("kernel rules installed (queue \(configuration.queue.number), fail \(configuration.queue.failMode.rawValue))")

        let answerer = NeedRulesAnswerer(lookup: Self.lookup(for: configuration))
        let supervisor = DataSupervisor(
            launch: .init(executable: binary, arguments: arguments), store: store, policy: policyPath, answerer: answerer,
            log: { say($0) })
        let stop = DispatchSemaphore(value: 0)
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGTERM, SIGINT, SIGHUP] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            if signalNumber == SIGHUP {
                source.setEventHandler { reload(supervisor: supervisor) }
            } else {
                source.setEventHandler { stop.signal() }
            }
            source.resume()
            sources.append(source)
        }
        supervisor.start()
        stop.wait()
        say("stopping")
        supervisor.stop()
        KernelRules.remove()
        say("kernel rules removed")
        _ = sources
    }

    /// The lookup service next to the bundle (`<rules.source>lookup/`), for `policy.unknown: ask`.
    static func lookup(for configuration: Configuration) -> any HostLookup {
        guard let source = configuration.rules.source else { return NoLookup() }
        if source.hasPrefix("file://") {
            let folder = String(source.dropFirst("file://".count))
            return FolderLookup(folder: (folder.hasSuffix("/") ? folder : folder + "/") + "lookup")
        }
        // https:// lookups arrive with the rule download (issue 4); until then, no answer.
        return NoLookup()
    }

    /// SIGHUP: read the configuration's policy and the store again, and hand them to filter-data.
    func reload(supervisor: DataSupervisor) {
        let policyPath = runtimeDirectory + "/policy"
        do {
            let text = try String(contentsOfFile: config, encoding: .utf8)
            let configuration = try Configuration(yaml: text)
            _ = try RuleStore(path: store, verification: .full)
            try PolicyText.render(configuration.policy).write(toFile: policyPath, atomically: true, encoding: .utf8)
        } catch {
            say("reload refused, the current rules stay in force: \(error)")
            return
        }
        say("reloading: handing \(store) and the policy to filter-data")
        supervisor.useRules(store: store, policy: policyPath)
    }
}

func say(_ message: String) {
    FileHandle.standardError.write(Data(("filter-control: " + message + "\n").utf8))
}

func fail(_ message: String, status: Int32) -> ExitCode {
    say(message)
    return ExitCode(status)
}

