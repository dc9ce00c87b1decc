import Testing

@testable import FilterControl

/// The supervisor's decisions on a clock the tests move by hand: starts,
/// health checks answered and not, restarts and their delays, rules handed
/// over (also while filter-data is down), and a stop in every state, which
/// answers every waiting caller at once and waits for nothing it does not need.
struct DataSupervisorMachineTests {
    typealias Machine = DataSupervisorMachine<TestInstant>

    static let files = Machine.Files(store: "/rules/1.hpstore", policy: "/run/policy")
    static let newFiles = Machine.Files(store: "/rules/2.hpstore", policy: "/run/policy.next")

    /// A filter-data that started (pid 100) and said hello with rules version 1, at 0 s.
    func filtering() -> ManualSupervisor {
        var supervisor = ManualSupervisor()
        supervisor.handle(.start)
        supervisor.handle(.spawned(pid: 100))
        supervisor.handle(.hello(pid: 100, rulesVersion: 1))
        return supervisor
    }

    @Test func startSpawnsWithTheFilesAndChecksHealthOnceASecond() {
        var supervisor = ManualSupervisor()
        #expect(supervisor.handle(.start) == [.spawn(Self.files)])
        #expect(supervisor.machine.phase == .spawning)
        #expect(supervisor.handle(.spawned(pid: 100)) == [.log("filter-data started (pid 100)"), .send(.ping(1)), .arm(.healthCheck, at: .seconds(1))])
        #expect(supervisor.machine.pid == 100)
        #expect(supervisor.machine.rulesVersion == nil)
        #expect(supervisor.handle(.hello(pid: 100, rulesVersion: 7)) == [.log("filter-data 100 is filtering with rules version 7")])
        #expect(supervisor.machine.rulesVersion == 7)
        #expect(supervisor.advance(by: .seconds(1)) == [.send(.ping(2)), .arm(.healthCheck, at: .seconds(2))])
        // A second start is no second process.
        #expect(supervisor.handle(.start) == [])
    }

    @Test func anAnsweringFilterDataIsNeverKilled() {
        var supervisor = filtering()
        for second in 1...60 {
            let actions = supervisor.advance(by: .seconds(1))
            #expect(actions == [.send(.ping(UInt64(second) + 1)), .arm(.healthCheck, at: .seconds(second + 1))])
            supervisor.handle(.pong(UInt64(second) + 1, rulesVersion: 1))
        }
        // Any message counts as an answer, not only pongs.
        for _ in 1...10 {
            #expect(!supervisor.advance(by: .seconds(1)).contains(.signal(pid: 100, .kill)))
            supervisor.handle(.heard)
        }
        #expect(supervisor.machine.phase == .running)
    }

    @Test func aSilentFilterDataIsKilledAfterFiveSecondsAndStartedAgain() {
        var supervisor = filtering()
        for second in 1...4 {
            #expect(!supervisor.advance(by: .seconds(1)).contains { if case .signal = $0 { true } else { false } }, "at \(second) s")
        }
        #expect(
            supervisor.advance(by: .seconds(1)) == [
                .log("filter-data 100 has not answered for 5 seconds; killing it"), .signal(pid: 100, .kill), .arm(.healthCheck, at: .seconds(6)),
            ])
        // Once per silence: the next second does not kill again.
        #expect(supervisor.advance(by: .seconds(1)) == [.send(.ping(6)), .arm(.healthCheck, at: .seconds(7))])
        #expect(
            supervisor.handle(.exited(pid: 100, status: 128 + 9)) == [
                .cancel(.healthCheck), .log("filter-data exited (killed by signal 9); restarting"), .arm(.restart, at: .milliseconds(6050)),
            ])
        #expect(supervisor.machine.lastExit == "killed by signal 9")
        #expect(supervisor.machine.pid == nil)
        #expect(supervisor.advance(by: .milliseconds(50)) == [.spawn(Self.files)])
    }

    @Test func aFilterDataThatKeepsDyingIsStartedAfterDoublingDelaysUpToTenSeconds() {
        var supervisor = ManualSupervisor()
        supervisor.handle(.start)
        var delays: [Duration] = []
        for run in 0..<12 {
            let pid = Int32(100 + run)
            supervisor.handle(.spawned(pid: pid))
            let actions = supervisor.handle(.exited(pid: pid, status: 1))
            guard case .arm(.restart, let deadline) = actions.last else {
                Issue.record("no restart after exit \(run): \(actions)")
                return
            }
            delays.append(supervisor.now.duration(to: deadline))
            #expect(supervisor.advance(to: deadline) == [.spawn(Self.files)])
        }
        #expect(delays == [50, 100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000, 10_000].map { .milliseconds($0) })
        #expect(supervisor.machine.restarts == 12)

        // A run of 30 s starts the delays again at 50 ms.
        supervisor.handle(.spawned(pid: 200))
        supervisor.handle(.hello(pid: 200, rulesVersion: 1))
        for second in 1...30 {
            supervisor.advance(by: .seconds(1))
            supervisor.handle(.pong(UInt64(second) + 1, rulesVersion: 1))
        }
        let actions = supervisor.handle(.exited(pid: 200, status: 128 + 11))
        #expect(actions.last == .arm(.restart, at: supervisor.now.advanced(by: .milliseconds(50))))
    }

    @Test func aSpawnThatFailsIsTriedAgainAfterADelay() {
        var supervisor = ManualSupervisor()
        supervisor.handle(.start)
        #expect(
            supervisor.handle(.spawnFailed("cannot start /usr/sbin/filter-data: No such file or directory")) == [
                .log("cannot start /usr/sbin/filter-data: No such file or directory"), .arm(.restart, at: .milliseconds(50)),
            ])
        #expect(supervisor.machine.restarts == 1)
        #expect(supervisor.advance(by: .milliseconds(50)) == [.spawn(Self.files)])
    }

    // MARK: Rules

    @Test func rulesGoToTheRunningFilterDataAndItsAnswersComeInOrder() {
        var supervisor = filtering()
        #expect(supervisor.handle(.handOver(.rules(Self.newFiles), ticket: 1)) == [.send(.useRules(store: Self.newFiles.store, policy: Self.newFiles.policy))])
        #expect(supervisor.machine.nextStart == Self.newFiles)
        #expect(supervisor.handle(.rulesLoaded(version: 2)) == [.log("filter-data now uses rules version 2"), .answerHandOver(1, .loaded(version: 2))])
        #expect(supervisor.machine.rulesVersion == 2)

        // Refused: the answer says why, and the next start keeps the files filter-data had.
        #expect(supervisor.handle(.handOver(.policy("/run/policy.bad"), ticket: 2)) == [.send(.usePolicy("/run/policy.bad"))])
        #expect(supervisor.machine.nextStart.policy == "/run/policy.bad")
        #expect(
            supervisor.handle(.rulesRefused("policy set: line 3 [policy.syntax]")) == [
                .log("filter-data refused the new rules: policy set: line 3 [policy.syntax]; the old rules stay in force"),
                .answerHandOver(2, .refused("policy set: line 3 [policy.syntax]")),
            ])
        #expect(supervisor.machine.nextStart == Self.newFiles)
        #expect(supervisor.machine.lastRulesRefusal == "policy set: line 3 [policy.syntax]")

        // Two in a row: the first answer is the first hand-over's.
        supervisor.handle(.handOver(.policy("/run/policy.a"), ticket: 3))
        supervisor.handle(.handOver(.policy("/run/policy.b"), ticket: 4))
        #expect(supervisor.handle(.rulesLoaded(version: 2)).last == .answerHandOver(3, .loaded(version: 2)))
        #expect(supervisor.handle(.rulesLoaded(version: 2)).last == .answerHandOver(4, .loaded(version: 2)))
        #expect(supervisor.machine.nextStart.policy == "/run/policy.b")

        // Files for later starts only: nothing is sent.
        #expect(supervisor.handle(.useAtNextStart(Self.files)) == [])
        #expect(supervisor.machine.nextStart == Self.files)
    }

    @Test func rulesHandedOverWhileFilterDataIsDownAreTheNextStartsAndItsHelloAnswers() {
        var supervisor = filtering()
        supervisor.handle(.exited(pid: 100, status: 128 + 11))
        #expect(supervisor.machine.phase == .waitingToRestart)
        // Nothing to send to, no waiting for an answer that cannot come.
        #expect(supervisor.handle(.handOver(.rules(Self.newFiles), ticket: 1)) == [])
        #expect(supervisor.advance(by: .milliseconds(50)) == [.spawn(Self.newFiles)])
        supervisor.handle(.spawned(pid: 101))
        #expect(
            supervisor.handle(.hello(pid: 101, rulesVersion: 2)) == [
                .log("filter-data 101 is filtering with rules version 2"), .answerHandOver(1, .loaded(version: 2)),
            ])

        // Handed over before the first start: the first start reads them.
        var early = ManualSupervisor()
        #expect(early.handle(.handOver(.policy("/run/policy.next"), ticket: 5)) == [])
        #expect(early.handle(.start) == [.spawn(.init(store: Self.files.store, policy: "/run/policy.next"))])
        early.handle(.spawned(pid: 100))
        #expect(early.handle(.hello(pid: 100, rulesVersion: 1)).last == .answerHandOver(5, .loaded(version: 1)))
    }

    @Test func rulesSentToAFilterDataThatDiesBeforeItAnswersAreAnsweredByTheNextStart() {
        var supervisor = filtering()
        supervisor.handle(.handOver(.rules(Self.newFiles), ticket: 1))
        #expect(!supervisor.handle(.exited(pid: 100, status: 128 + 6)).contains { if case .answerHandOver = $0 { true } else { false } })
        #expect(supervisor.advance(by: .milliseconds(50)) == [.spawn(Self.newFiles)])
        supervisor.handle(.spawned(pid: 101))
        #expect(supervisor.handle(.hello(pid: 101, rulesVersion: 2)).last == .answerHandOver(1, .loaded(version: 2)))

        // Nor is a command that could not be sent waited for: the next start answers it too.
        supervisor.handle(.handOver(.policy("/run/policy.c"), ticket: 2))
        supervisor.handle(.notSent(.usePolicy("/run/policy.c")))
        supervisor.handle(.handOver(.policy("/run/policy.d"), ticket: 3))
        #expect(supervisor.handle(.rulesLoaded(version: 2)).last == .answerHandOver(3, .loaded(version: 2)))
        supervisor.handle(.exited(pid: 101, status: 1))
        supervisor.advance(by: .milliseconds(100))
        supervisor.handle(.spawned(pid: 102))
        #expect(supervisor.handle(.hello(pid: 102, rulesVersion: 2)).last == .answerHandOver(2, .loaded(version: 2)))
    }

    @Test func aCallerThatGaveUpIsNotAnsweredButItsAnswerStillCounts() {
        var supervisor = filtering()
        supervisor.handle(.handOver(.policy("/run/policy.a"), ticket: 1))
        supervisor.handle(.handOver(.policy("/run/policy.b"), ticket: 2))
        supervisor.handle(.forget(1))
        #expect(supervisor.handle(.rulesLoaded(version: 1)) == [.log("filter-data now uses rules version 1")])
        #expect(supervisor.handle(.rulesLoaded(version: 1)).last == .answerHandOver(2, .loaded(version: 1)))
    }

    @Test func countersAreRefreshedByAPingOfTheirOwn() {
        var supervisor = filtering()
        let number = Machine.firstRefreshPing + 1
        #expect(supervisor.handle(.refreshCounters(ticket: 9)) == [.send(.ping(number))])
        // The health check's pong is not the answer; the refresh's is.
        #expect(supervisor.handle(.pong(1, rulesVersion: 1)) == [])
        #expect(supervisor.handle(.pong(number, rulesVersion: 3)) == [.answerRefresh(9, true)])
        #expect(supervisor.machine.rulesVersion == 3)
        // None runs: answered at once.
        supervisor.handle(.exited(pid: 100, status: 0))
        #expect(supervisor.handle(.refreshCounters(ticket: 10)) == [.answerRefresh(10, false)])
    }

    @Test func aTimerThatFiresAfterItWasCancelledOrMovedDoesNothing() {
        var supervisor = filtering()
        supervisor.handle(.exited(pid: 100, status: 1))
        // The health check was cancelled with the exit; its task may still have fired.
        #expect(supervisor.handle(.timerFired(.healthCheck)) == [])
        // The restart fires only at its deadline.
        #expect(supervisor.handle(.timerFired(.restart)) == [])
        #expect(supervisor.advance(by: .milliseconds(50)) == [.spawn(Self.files)])
    }

    // MARK: Stop, in every state

    @Test func aStopBeforeTheStartFinishesAtOnce() {
        var supervisor = ManualSupervisor()
        #expect(supervisor.handle(.stop) == [.finish])
        #expect(supervisor.handle(.start) == [])
    }

    @Test func aStopWhileSpawningStopsTheNewProcessOnceItIsThere() {
        var supervisor = ManualSupervisor()
        supervisor.handle(.start)
        supervisor.handle(.handOver(.policy("/run/policy.next"), ticket: 1))
        #expect(supervisor.handle(.stop) == [.answerHandOver(1, .pending)])
        // No ping, no health check, no rules: only the stop.
        #expect(
            supervisor.handle(.spawned(pid: 100)) == [
                .log("filter-data started (pid 100)"), .endChannel, .signal(pid: 100, .terminate), .arm(.stopEscalation, at: .seconds(3)),
            ])
        #expect(supervisor.handle(.exited(pid: 100, status: 128 + 15)) == [.log("filter-data stopped (killed by signal 15)"), .cancel(.stopEscalation), .finish])

        var failing = ManualSupervisor()
        failing.handle(.start)
        failing.handle(.stop)
        #expect(failing.handle(.spawnFailed("cannot start filter-data")) == [.log("cannot start filter-data"), .finish])
    }

    @Test func aStopRightAfterTheSpawnWaitsForNoHello() {
        var supervisor = ManualSupervisor()
        supervisor.handle(.start)
        supervisor.handle(.spawned(pid: 100))
        supervisor.advance(by: .milliseconds(250))
        #expect(
            supervisor.handle(.stop) == [
                .cancel(.healthCheck), .endChannel, .signal(pid: 100, .terminate), .arm(.stopEscalation, at: .milliseconds(3250)),
            ])
        #expect(supervisor.machine.phase == .stopping)
        // A hello still on its way changes nothing; the exit ends it.
        #expect(supervisor.handle(.hello(pid: 100, rulesVersion: 1)) == [.log("filter-data 100 is filtering with rules version 1")])
        #expect(
            supervisor.handle(.exited(pid: 100, status: 128 + 15)) == [.log("filter-data stopped (killed by signal 15)"), .cancel(.stopEscalation), .finish])
        #expect(supervisor.machine.phase == .finished)
        #expect(supervisor.advance(by: .seconds(60)) == [])
    }

    @Test func aStopDuringAHandOverAnswersItAtOnce() {
        var supervisor = filtering()
        supervisor.handle(.handOver(.rules(Self.newFiles), ticket: 1))
        supervisor.handle(.refreshCounters(ticket: 2))
        #expect(
            supervisor.handle(.stop) == [
                .answerHandOver(1, .pending), .answerRefresh(2, false), .cancel(.healthCheck), .endChannel, .signal(pid: 100, .terminate),
                .arm(.stopEscalation, at: .seconds(3)),
            ])
        // Its answer, when filter-data still sends it, answers nobody again.
        #expect(supervisor.handle(.rulesLoaded(version: 2)) == [.log("filter-data now uses rules version 2")])
        // Rules handed over during the stop are answered at once too.
        #expect(supervisor.handle(.handOver(.policy("/run/policy.next"), ticket: 3)) == [.answerHandOver(3, .pending)])
        #expect(supervisor.handle(.refreshCounters(ticket: 4)) == [.answerRefresh(4, false)])
        #expect(supervisor.handle(.exited(pid: 100, status: 0)) == [.log("filter-data stopped (exit status 0)"), .cancel(.stopEscalation), .finish])
    }

    @Test func aStopDuringTheRestartDelayFinishesAtOnceWithNoStartAfterIt() {
        var supervisor = filtering()
        supervisor.handle(.exited(pid: 100, status: 128 + 9))
        supervisor.handle(.handOver(.rules(Self.newFiles), ticket: 1))
        #expect(supervisor.handle(.stop) == [.answerHandOver(1, .pending), .cancel(.restart), .finish])
        #expect(supervisor.machine.phase == .finished)
        // The restart timer's task may have fired just before it was cancelled: still no spawn.
        #expect(supervisor.handle(.timerFired(.restart)) == [])
        #expect(supervisor.advance(by: .seconds(60)) == [])
        #expect(supervisor.handle(.stop) == [])

        // Also in the longest delay.
        var dying = ManualSupervisor()
        dying.handle(.start)
        for run in 0..<10 {
            dying.handle(.spawned(pid: Int32(100 + run)))
            dying.handle(.exited(pid: Int32(100 + run), status: 1))
            if run < 9 { dying.advance(by: .seconds(10)) }
        }
        dying.advance(by: .seconds(1))
        #expect(dying.handle(.stop) == [.cancel(.restart), .finish])
    }

    @Test func aFilterDataThatDoesNotStopIsKilledAndThenGivenUpOn() {
        var supervisor = filtering()
        supervisor.handle(.stop)
        #expect(supervisor.advance(by: .seconds(3)) == [.signal(pid: 100, .kill), .arm(.stopEscalation, at: .seconds(5))])
        #expect(supervisor.machine.phase == .killing)
        #expect(supervisor.advance(by: .seconds(2)) == [.log("filter-data 100 did not stop; going on without it"), .finish])
        #expect(supervisor.handle(.stop) == [])
    }
}

/// An instant of the tests' clock: a duration since its zero.
struct TestInstant: InstantProtocol, ExpressibleByIntegerLiteral, CustomStringConvertible {
    var offset: Duration

    init(_ offset: Duration) { self.offset = offset }
    init(integerLiteral seconds: Int) { offset = .seconds(seconds) }

    static func seconds(_ seconds: Int) -> TestInstant { TestInstant(.seconds(seconds)) }
    static func milliseconds(_ milliseconds: Int) -> TestInstant { TestInstant(.milliseconds(milliseconds)) }

    func advanced(by duration: Duration) -> TestInstant { TestInstant(offset + duration) }
    func duration(to other: TestInstant) -> Duration { other.offset - offset }
    static func < (left: TestInstant, right: TestInstant) -> Bool { left.offset < right.offset }
    var description: String { "\(offset)" }
}

/// The machine with a clock moved by hand: timers fire, in the order of
/// their deadlines, when the clock passes them, as `DataSupervisor`'s tasks do.
struct ManualSupervisor {
    typealias Machine = DataSupervisorMachine<TestInstant>

    var machine = Machine(files: DataSupervisorMachineTests.files)
    private(set) var now = TestInstant(.zero)
    private var armed: [Machine.Timer: TestInstant] = [:]

    @discardableResult
    mutating func handle(_ event: Machine.Event) -> [Machine.Action] {
        let actions = machine.handle(event, now: now)
        for action in actions {
            switch action {
            case .arm(let timer, let deadline): armed[timer] = deadline
            case .cancel(let timer): armed[timer] = nil
            default: break
            }
        }
        return actions
    }

    @discardableResult
    mutating func advance(by duration: Duration) -> [Machine.Action] {
        advance(to: now.advanced(by: duration))
    }

    @discardableResult
    mutating func advance(to end: TestInstant) -> [Machine.Action] {
        var actions: [Machine.Action] = []
        while let (timer, deadline) = armed.filter({ $0.value <= end }).min(by: { $0.value < $1.value }) {
            armed[timer] = nil
            now = deadline
            actions += handle(.timerFired(timer))
        }
        now = end
        return actions
    }
}
