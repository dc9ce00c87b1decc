import Foundation
import HallpassIPC
import Synchronization
import Testing

@testable import FilterControl

/// The supervisor as a service, with real processes and no root: a stand-in
/// for filter-data (a Python script speaking the control channel on
/// descriptor 3) started, answered, killed when silent, restarted, and
/// stopped before the run, right after its start, during its restart delay
/// and with callers waiting for its answers.
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: standInPython), "no \(standInPython)"))
struct DataSupervisorTests {
    static let python = standInPython

    /// filter-data's side of the channel, as far as the supervisor needs it.
    /// `--mode normal` answers; `slow` sleeps before its hello (as one that
    /// maps a large store), reading nothing; `exit` exits 3 at once;
    /// `silent` says hello and then answers no ping. SIGTERM kills it.
    static let standIn = """
        import os, socket, sys, time
        counters = "\(counters)"
        arguments = sys.argv[1:]
        def option(name): return arguments[arguments.index(name) + 1]
        mode = option("--mode")
        print("stand-in %d: mode %s, store %s, policy %s" % (os.getpid(), mode, option("--store"), option("--policy")), flush=True)
        if mode == "exit": sys.exit(3)
        if mode == "slow": time.sleep(3600)
        channel = socket.socket(fileno=int(option("--control-fd")))
        channel.send(("hello\\n%d\\n1" % os.getpid()).encode())
        while True:
            message = channel.recv(8192)
            if not message:
                print("stand-in %d: the channel ended" % os.getpid(), flush=True)
                break
            fields = message.decode().split("\\n")
            if fields[0] == "ping" and mode != "silent":
                channel.send(("pong\\n%s\\n%s" % (fields[1], counters)).encode())
            elif fields[0] in ("rules", "policy"):
                print("stand-in %d: %s %s" % (os.getpid(), fields[0], " ".join(fields[1:])), flush=True)
                channel.send(b"loaded\\n1")
        """

    /// The counters of the stand-in's pongs, as filter-data writes them: every field, in the wire's order.
    static var counters: String {
        var counters = FilterDataCounters()
        counters.rulesVersion = 1
        counters.packets = 7
        return counters.fields.map { "\($0.name)=\($0.value)" }.joined(separator: "\\n")
    }

    /// A supervisor of the stand-in in `mode`, its log, and its folder.
    func supervisor(mode: String, settings: DataSupervisor.Machine.Settings = .init()) throws -> (DataSupervisor, Lines, String) {
        let folder = NSTemporaryDirectory() + "hallpass-supervisor-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try Self.standIn.write(toFile: folder + "/filter-data.py", atomically: true, encoding: .utf8)
        let lines = Lines()
        let supervisor = DataSupervisor(
            launch: .init(executable: Self.python, arguments: [folder + "/filter-data.py", "--mode", mode]),
            files: .init(store: folder + "/rules.hpstore", policy: folder + "/policy"), settings: settings,
            answerer: NeedRulesAnswerer(lookup: NoLookup()), log: { lines.append($0) })
        return (supervisor, lines, folder)
    }

    @Test func rulesHandedOverBeforeTheStartAreAnswered() async throws {
        let (supervisor, lines, folder) = try supervisor(mode: "normal")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // As when the policy clock's first hand-over comes before the spawn (they start
        // together): it used to be dropped by the spawn, and its caller waited its whole
        // time for an answer that never came, which also held up a stop right after the start.
        let answer = Task { await supervisor.apply(store: nil, policy: folder + "/policy.next", waitingAtMost: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(200))
        let run = Task { await supervisor.run() }
        #expect(await answer.value == .loaded(version: 1), "\(lines.text)")
        // The stand-in started with the files, or was sent them (its output may come after its answer).
        #expect(await lines.wait(for: "policy \(folder)/policy.next"), "\(lines.text)")
        #expect(await supervisor.filtering() == 1)
        #expect(await supervisor.refreshCounters(waitingAtMost: .seconds(30)))
        #expect(supervisor.status.counters?.packets == 7)
        supervisor.stop()
        await run.value
        // (On the end of the channel or on SIGTERM, whichever it saw first.)
        #expect(lines.text.contains("filter-data stopped ("), "\(lines.text)")
        #expect(supervisor.status.pid == nil)
    }

    @Test(.timeLimit(.minutes(1))) func aStopBeforeTheRunStartsNothing() async throws {
        let (supervisor, lines, folder) = try supervisor(mode: "normal")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // As when SIGTERM comes while the services start: the supervisor's turn to stop came first.
        supervisor.stop()
        await supervisor.run()
        #expect(lines.count(of: "filter-data started") == 0, "\(lines.text)")
        #expect(supervisor.status.pid == nil)
    }

    @Test(.timeLimit(.minutes(1))) func aStopBeforeTheHelloEndsFilterDataAndAnswersEveryCaller() async throws {
        let (supervisor, lines, folder) = try supervisor(mode: "slow")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let run = Task { await supervisor.run() }
        #expect(await lines.wait(for: "stand-in"), "\(lines.text)")
        let pid = supervisor.status.pid
        // Callers that would wait an hour for a filter-data that reads nothing yet:
        // the stop answers them (a hang here is the failure).
        let answer = Task { await supervisor.apply(store: folder + "/rules2.hpstore", policy: folder + "/policy.next", waitingAtMost: .seconds(3600)) }
        let filtering = Task { await supervisor.filtering() }
        supervisor.stop()
        await run.value
        #expect(await answer.value == .pending)
        #expect(await filtering.value == nil)
        #expect(lines.text.contains("filter-data stopped (killed by signal 15)"), "\(lines.text)")
        if let pid { #expect(kill(pid, 0) != 0, "the stand-in \(pid) still runs") }
        // After the end, every question is answered at once.
        #expect(await supervisor.apply(store: nil, policy: folder + "/policy", waitingAtMost: .seconds(3600)) == .pending)
        #expect(await supervisor.refreshCounters(waitingAtMost: .seconds(3600)) == false)
        #expect(!supervisor.send(.ping(1)))
    }

    @Test(.timeLimit(.minutes(1))) func aStopDuringTheRestartDelayStartsNoOtherFilterData() async throws {
        var settings = DataSupervisor.Machine.Settings()
        settings.firstRestartDelay = .milliseconds(200)
        let (supervisor, lines, folder) = try supervisor(mode: "exit", settings: settings)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let run = Task { await supervisor.run() }
        // The third exit: the next start is 800 ms away.
        #expect(await lines.wait(for: "filter-data exited (exit status 3); restarting", count: 3), "\(lines.text)")
        supervisor.stop()
        await run.value
        let started = lines.count(of: "filter-data started")
        #expect(started == 3, "\(lines.text)")
        #expect(lines.count(of: "filter-data exited") == 3)
        #expect(supervisor.status.restarts == 3)
        #expect(supervisor.status.lastExit == "exit status 3")
    }

    @Test(.timeLimit(.minutes(1))) func aSilentFilterDataIsKilledAndAnotherStarted() async throws {
        var settings = DataSupervisor.Machine.Settings()
        settings.healthInterval = .milliseconds(100)
        settings.unresponsiveAfter = .seconds(1)
        let (supervisor, lines, folder) = try supervisor(mode: "silent", settings: settings)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let run = Task { await supervisor.run() }
        #expect(await lines.wait(for: "filter-data started", count: 2), "\(lines.text)")
        supervisor.stop()
        await run.value
        let text = lines.text
        #expect(text.contains("has not answered for 1 seconds; killing it"), "\(text)")
        #expect(text.contains("filter-data exited (killed by signal 9); restarting"), "\(text)")
        #expect(supervisor.status.restarts >= 1)
    }
}

/// What runs the stand-in for filter-data (Debian's python3).
let standInPython = "/usr/bin/python3"

/// Log lines, collected from any thread.
final class Lines: Sendable {
    private let lines = Mutex<[String]>([])

    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var text: String { lines.withLock { $0.joined(separator: "\n") } }
    func count(of part: String) -> Int { lines.withLock { $0.filter { $0.contains(part) }.count } }

    /// Whether `count` lines containing `part` came within 30 s.
    func wait(for part: String, count: Int = 1) async -> Bool {
        for _ in 0..<1500 {
            if self.count(of: part) >= count { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}
