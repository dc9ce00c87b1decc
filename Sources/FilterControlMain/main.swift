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
            "--store", store, "--policy", policyPath, "--queue", String(configuration.queue.number),
            failOpen ? "--fail-open" : "--fail-closed", "--peek-bytes", String(configuration.queue.peekBytes),
        ]

        let rules = KernelRules(queue: configuration.queue.number, failOpen: failOpen)
        do {
            try rules.install()
        } catch {
            KernelRules.remove()
            throw fail("cannot install the kernel rules: \(error)", status: 71)
        }
        say("kernel rules installed (queue \(configuration.queue.number), fail \(configuration.queue.failMode.rawValue))")

        let supervisor = Supervisor(binary: binary, arguments: arguments)
        let stop = DispatchSemaphore(value: 0)
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { stop.signal() }
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
}

func say(_ message: String) {
    FileHandle.standardError.write(Data(("filter-control: " + message + "\n").utf8))
}

func fail(_ message: String, status: Int32) -> ExitCode {
    say(message)
    return ExitCode(status)
}

/// Runs filter-data and restarts it with growing delays when it dies.
final class Supervisor: @unchecked Sendable {
    // @unchecked Sendable: every mutable property is touched only on `queue`.
    private let binary: String
    private let arguments: [String]
    private let queue = DispatchQueue(label: "hallpass.supervisor")
    private var process: Process?
    private var stopping = false
    private var restarts = 0

    init(binary: String, arguments: [String]) {
        self.binary = binary
        self.arguments = arguments
    }

    func start() {
        queue.async { self.launch() }
    }

    private func launch() {
        guard !stopping else { return }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.terminationHandler = { [weak self] finished in
            guard let self else { return }
            self.queue.async { self.ended(finished) }
        }
        do {
            try process.run()
            self.process = process
            say("filter-data started (pid \(process.processIdentifier))")
        } catch {
            say("cannot start \(binary): \(error.localizedDescription)")
            scheduleRestart()
        }
    }

    private func ended(_ finished: Process) {
        guard finished === process else { return }
        process = nil
        guard !stopping else { return }
        say("filter-data exited (status \(finished.terminationStatus)); restarting")
        scheduleRestart()
    }

    private func scheduleRestart() {
        restarts += 1
        let delay = min(10.0, 0.1 * pow(2.0, Double(min(restarts, 7))))
        queue.asyncAfter(deadline: .now() + delay) { self.launch() }
    }

    /// Asks filter-data to finish its batch and exit; kills it after 3 seconds.
    func stop() {
        let running: Process? = queue.sync {
            stopping = true
            return process
        }
        guard let running, running.isRunning else { return }
        running.terminate()
        let deadline = Date().addingTimeInterval(3)
        while running.isRunning, Date() < deadline { usleep(20_000) }
        if running.isRunning { kill(running.processIdentifier, SIGKILL) }
        running.waitUntilExit()
    }
}
