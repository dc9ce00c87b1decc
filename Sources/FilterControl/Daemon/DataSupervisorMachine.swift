/// What filter-data's supervisor decides, as a value: it takes what happened
/// (filter-data started, said hello, answered, exited; a timer fired; new
/// rules to hand over; a stop) and returns what to do (spawn, send, signal,
/// arm or cancel a timer, answer a waiting caller, log, finish). It does no
/// input or output and reads no clock: every event comes with the time, on a
/// monotonic clock of the caller's choice (`DataSupervisor` runs it on
/// SuspendingClock; the tests on a clock they move by hand).
///
/// The life of one filter-data: `spawn` -> `spawned` -> (hello, answers,
/// health checks) -> `exited` -> a restart after a delay that doubles while
/// it keeps dying (50 ms to 10 s; a run of 30 s starts it again at 50 ms).
/// A stop ends the channel and sends SIGTERM, SIGKILL after 3 s, and gives
/// up 2 s later; in a restart delay it stops at once, with no spawn after it.
/// A stop never waits for an answer: every caller still waiting is answered
/// when it begins.
///
/// Rules reach filter-data in the order they were handed over, and it
/// answers them in that order (`loaded` or `refused`), so the n-th answer is
/// the n-th hand-over's. Handed over while no filter-data runs, they are the
/// files of the next start, whose hello answers them.
struct DataSupervisorMachine<Instant: InstantProtocol>: Sendable where Instant.Duration == Duration {
    /// The store and policy set a start of filter-data reads.
    struct Files: Hashable, Sendable {
        var store: String
        var policy: String
    }

    /// New rules for filter-data.
    enum HandOver: Hashable, Sendable {
        /// A new store and policy set.
        case rules(Files)
        /// A new policy set; the store in force stays.
        case policy(String)
    }

    /// What the supervisor tells filter-data (the service writes it as a control message).
    enum Command: Hashable, Sendable {
        case useRules(store: String, policy: String)
        case usePolicy(String)
        case ping(UInt64)
    }

    enum Timer: Hashable, Sendable, CaseIterable {
        /// Wait before the next start.
        case restart
        /// The once-a-second ping, and the check that filter-data answered lately.
        case healthCheck
        /// A stopping filter-data that has not ended: SIGKILL, then give up.
        case stopEscalation
    }

    enum Signal: Hashable, Sendable {
        case terminate
        case kill
    }

    /// Names a caller waiting for an answer (a hand-over's or a counter refresh's).
    typealias Ticket = UInt64

    enum Event: Sendable {
        /// Begin: start filter-data.
        case start
        /// The spawn asked for succeeded (reported before any other event).
        case spawned(pid: Int32)
        /// The spawn asked for failed.
        case spawnFailed(String)
        /// filter-data `pid` ended with `status` (the code, or 128 + the signal).
        case exited(pid: Int32, status: Int32)
        /// filter-data runs, sandboxed, with these rules.
        case hello(pid: Int32, rulesVersion: UInt64)
        case rulesLoaded(version: UInt64)
        case rulesRefused(String)
        /// The answer to ping `number`; `rulesVersion` among its counters.
        case pong(UInt64, rulesVersion: UInt64?)
        /// Any other message from filter-data: it is alive.
        case heard
        /// A command could not be sent (filter-data is not reading its channel).
        case notSent(Command)
        case timerFired(Timer)
        /// New rules; `ticket` is answered with what filter-data made of them.
        case handOver(HandOver, ticket: Ticket?)
        /// The files later starts use, sent to nobody.
        case useAtNextStart(Files)
        /// Ask the running filter-data for its counters now; `ticket` is answered
        /// true once it did, false when none runs or it stops.
        case refreshCounters(ticket: Ticket)
        /// The caller with `ticket` no longer waits (it gave up).
        case forget(Ticket)
        case stop
    }

    enum Action: Hashable, Sendable {
        case spawn(Files)
        case send(Command)
        /// Shut down this side's writing end of the channel: filter-data reads
        /// the end, gives its held packets their default and exits (no privilege needed).
        case endChannel
        case signal(pid: Int32, Signal)
        case arm(Timer, at: Instant)
        case cancel(Timer)
        case answerHandOver(Ticket, DataSupervisor.RulesAnswer)
        case answerRefresh(Ticket, Bool)
        case log(String)
        /// filter-data is gone (or given up on) after a stop: the supervisor ends.
        case finish
    }

    struct Settings: Sendable {
        /// The process's name in the log (`filter-data`, `hallpass-proxy`).
        var name = "filter-data"
        var healthInterval: Duration = .seconds(1)
        /// No answer for this long: filter-data is killed and started again.
        var unresponsiveAfter: Duration = .seconds(5)
        /// A run this long resets the restart delay to its first step.
        var stableAfter: Duration = .seconds(30)
        var firstRestartDelay: Duration = .milliseconds(50)
        var longestRestartDelay: Duration = .seconds(10)
        /// From SIGTERM (and the end of the channel) to SIGKILL.
        var stopGrace: Duration = .seconds(3)
        /// From SIGKILL to giving up on a filter-data the signals do not reach
        /// (refused without CAP_KILL): the kernel rules must still be removed.
        var killGrace: Duration = .seconds(2)
    }

    enum Phase: Hashable, Sendable {
        case notStarted
        /// A spawn was asked for; its result is the next event.
        case spawning
        case running
        case waitingToRestart
        /// SIGTERM sent and the channel ended; waiting for the exit.
        case stopping
        /// SIGKILL sent too.
        case killing
        case finished
    }

    /// The pings of `refreshCounters` are numbered from here up; the health
    /// check's own count from 1 never gets there.
    static var firstRefreshPing: UInt64 { 1 << 62 }

    let settings: Settings
    private(set) var phase = Phase.notStarted
    /// What the next start of filter-data reads.
    private(set) var nextStart: Files
    // What `filterctl status` shows.
    private(set) var pid: Int32?
    private(set) var restarts = 0
    private(set) var lastExit: String?
    private(set) var rulesVersion: UInt64?
    private(set) var lastRulesRefusal: String?

    /// The running filter-data.
    private struct Run {
        var pid: Int32
        var startedAt: Instant
        var lastHeard: Instant
    }
    private var run: Run?
    /// A stop came while spawning: it is carried out once the spawn's result is in.
    private var stopAfterSpawn = false
    private var failuresInARow = 0
    private var pings: UInt64 = 0
    private var refreshPings: UInt64 = 0
    /// Each armed timer's deadline: a timer that fires for a deadline no longer armed is ignored.
    private var deadlines: [Timer: Instant] = [:]

    private struct Handed {
        var ticket: Ticket?
        var command: Command
        /// What the hand-over made `nextStart`, and what it was before (put back on a refusal).
        var files: Files
        var previous: Files
    }
    /// Sent to the running filter-data, oldest first: its answers come in this order.
    private var sent: [Handed] = []
    /// Commands for a filter-data being spawned, sent once it is.
    private var unsent: [Command] = []
    /// Handed over while none ran: the next start's hello answers them.
    private var awaitingStart: [Handed] = []
    private var refreshes: [(number: UInt64, ticket: Ticket)] = []

    init(files: Files, settings: Settings = Settings()) {
        self.nextStart = files
        self.settings = settings
    }

    /// The delay before a start after `failures` failed ones in a row:
    /// 50 ms, doubling, at most 10 s (back at once after a crash, no busy loop when it cannot start).
    func restartDelay(afterFailures failures: Int) -> Duration {
        min(settings.longestRestartDelay, settings.firstRestartDelay * (1 << min(failures, 16)))
    }

    mutating func handle(_ event: Event, now: Instant) -> [Action] {
        switch event {
        case .start:
            guard phase == .notStarted else { return [] }
            phase = .spawning
            return [.spawn(nextStart)]

        case .spawned(let pid):
            guard phase == .spawning else { return [] }
            self.pid = pid
            run = Run(pid: pid, startedAt: now, lastHeard: now)
            phase = .running
            var actions: [Action] = [.log("\(settings.name) started (pid \(pid))")]
            if stopAfterSpawn { return actions + beginStop(now: now) }
            actions += unsent.map { .send($0) }
            unsent = []
            // The first ping waits in the channel until filter-data reads it, after its hello.
            pings += 1
            actions.append(.send(.ping(pings)))
            actions.append(arm(.healthCheck, at: now.advanced(by: settings.healthInterval)))
            return actions

        case .spawnFailed(let reason):
            guard phase == .spawning else { return [] }
            unsent = []
            awaitingStart = sent + awaitingStart
            sent = []
            if stopAfterSpawn { return [.log(reason)] + finish() }
            return [.log(reason)] + scheduleRestart(now: now)

        case .exited(let pid, let status):
            guard let run, run.pid == pid else { return [] }
            self.run = nil
            self.pid = nil
            let description = Self.describe(status)
            lastExit = description
            switch phase {
            case .stopping, .killing:
                return [.log("\(settings.name) stopped (\(description))")] + finish()
            default:
                if run.startedAt.duration(to: now) >= settings.stableAfter { failuresInARow = 0 }
                // What the dead process was sent is in the files of the next start.
                awaitingStart = sent + awaitingStart
                sent = []
                var actions: [Action] = [cancel(.healthCheck), .log("\(settings.name) exited (\(description)); restarting")]
                actions += refreshes.map { .answerRefresh($0.ticket, false) }
                refreshes = []
                return actions + scheduleRestart(now: now)
            }

        case .hello(let pid, let version):
            guard heard(now: now) else { return [] }
            rulesVersion = version
            let answered = awaitingStart.compactMap { $0.ticket.map { Action.answerHandOver($0, .loaded(version: version)) } }
            awaitingStart = []
            // "is filtering" is filter-data's alone (the tests and people wait for that line).
            let state = settings.name == "filter-data" ? "is filtering" : "runs"
            return [.log("\(settings.name) \(pid) \(state) with rules version \(version)")] + answered

        case .rulesLoaded(let version):
            guard heard(now: now) else { return [] }
            rulesVersion = version
            lastRulesRefusal = nil
            var actions: [Action] = [.log("\(settings.name) now uses rules version \(version)")]
            if !sent.isEmpty, let ticket = sent.removeFirst().ticket { actions.append(.answerHandOver(ticket, .loaded(version: version))) }
            return actions

        case .rulesRefused(let reason):
            guard heard(now: now) else { return [] }
            lastRulesRefusal = reason
            var actions: [Action] = [.log("\(settings.name) refused the new rules: \(reason); the old rules stay in force")]
            if !sent.isEmpty {
                let refused = sent.removeFirst()
                // Refused files are not kept: later starts use what filter-data had.
                if nextStart == refused.files { nextStart = refused.previous }
                if let ticket = refused.ticket { actions.append(.answerHandOver(ticket, .refused(reason))) }
            }
            return actions

        case .pong(let number, let version):
            guard heard(now: now) else { return [] }
            if let version { rulesVersion = version }
            // filter-data answers in order: this pong answers every refresh ping up to it.
            let answered = refreshes.filter { $0.number <= number }
            refreshes.removeAll { $0.number <= number }
            return answered.map { .answerRefresh($0.ticket, true) }

        case .heard:
            _ = heard(now: now)
            return []

        case .notSent(let command):
            // Not in filter-data's hands, so no answer will come for it; the files stay
            // the next start's, whose hello answers (the health check replaces a
            // filter-data that no longer reads).
            if let index = sent.lastIndex(where: { $0.command == command }) { awaitingStart.append(sent.remove(at: index)) }
            return []

        case .timerFired(let timer):
            guard let deadline = deadlines[timer], now >= deadline else { return [] }
            deadlines[timer] = nil
            return fired(timer, deadline: deadline, now: now)

        case .handOver(let handOver, let ticket):
            let previous = nextStart
            var files = nextStart
            let command: Command
            switch handOver {
            case .rules(let new):
                files = new
                command = .useRules(store: new.store, policy: new.policy)
            case .policy(let policy):
                files.policy = policy
                command = .usePolicy(policy)
            }
            let handed = Handed(ticket: ticket, command: command, files: files, previous: previous)
            switch phase {
            case .running:
                nextStart = files
                sent.append(handed)
                return [.send(command)]
            case .spawning:
                nextStart = files
                sent.append(handed)
                unsent.append(command)
                return []
            case .notStarted, .waitingToRestart:
                nextStart = files
                awaitingStart.append(handed)
                return []
            case .stopping, .killing, .finished:
                return ticket.map { [.answerHandOver($0, .pending)] } ?? []
            }

        case .useAtNextStart(let files):
            nextStart = files
            return []

        case .refreshCounters(let ticket):
            guard phase == .running else { return [.answerRefresh(ticket, false)] }
            refreshPings += 1
            let number = Self.firstRefreshPing + refreshPings
            refreshes.append((number, ticket))
            return [.send(.ping(number))]

        case .forget(let ticket):
            for index in sent.indices where sent[index].ticket == ticket { sent[index].ticket = nil }
            awaitingStart.removeAll { $0.ticket == ticket }
            refreshes.removeAll { $0.ticket == ticket }
            return []

        case .stop:
            switch phase {
            case .notStarted:
                return finish()
            case .spawning:
                stopAfterSpawn = true
                return answerEveryone()
            case .running:
                return beginStop(now: now)
            case .waitingToRestart:
                // No start after a stop; nothing to wait for.
                return finish()
            case .stopping, .killing, .finished:
                return []
            }
        }
    }

    /// Notes that the running filter-data was heard from; false when none runs.
    private mutating func heard(now: Instant) -> Bool {
        guard run != nil else { return false }
        run?.lastHeard = now
        return true
    }

    private mutating func fired(_ timer: Timer, deadline: Instant, now: Instant) -> [Action] {
        switch (timer, phase) {
        case (.restart, .waitingToRestart):
            phase = .spawning
            return [.spawn(nextStart)]
        case (.healthCheck, .running):
            guard let run else { return [] }
            // The next check keeps the cadence, unless this one came late.
            let next = max(deadline.advanced(by: settings.healthInterval), now.advanced(by: .milliseconds(100)))
            if run.lastHeard.duration(to: now) >= settings.unresponsiveAfter {
                // Once per silence: the exit that follows starts a new filter-data.
                self.run?.lastHeard = now
                return [
                    .log("\(settings.name) \(run.pid) has not answered for \(settings.unresponsiveAfter.components.seconds) seconds; killing it"),
                    .signal(pid: run.pid, .kill), arm(.healthCheck, at: next),
                ]
            }
            pings += 1
            return [.send(.ping(pings)), arm(.healthCheck, at: next)]
        case (.stopEscalation, .stopping):
            guard let run else { return finish() }
            phase = .killing
            return [.signal(pid: run.pid, .kill), arm(.stopEscalation, at: now.advanced(by: settings.killGrace))]
        case (.stopEscalation, .killing):
            let pid = run.map { "\(settings.name) \($0.pid)" } ?? settings.name
            return [.log("\(pid) did not stop; going on without it")] + finish()
        default:
            return []
        }
    }

    /// Asks the running filter-data to stop in two ways, so that either is
    /// enough: the end of the channel (filter-data runs as its own user, and
    /// signalling it takes CAP_KILL) and SIGTERM (which also reaches it
    /// before it reads the channel, while it loads its rules).
    private mutating func beginStop(now: Instant) -> [Action] {
        guard let run else { return finish() }
        phase = .stopping
        unsent = []
        var actions = answerEveryone()
        if deadlines[.healthCheck] != nil { actions.append(cancel(.healthCheck)) }
        return actions + [.endChannel, .signal(pid: run.pid, .terminate), arm(.stopEscalation, at: now.advanced(by: settings.stopGrace))]
    }

    /// Every waiting caller gets its answer now: nothing will be answered after a stop.
    private mutating func answerEveryone() -> [Action] {
        var actions: [Action] = []
        for handed in sent + awaitingStart { if let ticket = handed.ticket { actions.append(.answerHandOver(ticket, .pending)) } }
        for index in sent.indices { sent[index].ticket = nil }
        awaitingStart = []
        actions += refreshes.map { .answerRefresh($0.ticket, false) }
        refreshes = []
        return actions
    }

    private mutating func finish() -> [Action] {
        let answers = answerEveryone()
        let armed = Timer.allCases.filter { deadlines[$0] != nil }.map { cancel($0) }
        phase = .finished
        return answers + armed + [.finish]
    }

    private mutating func scheduleRestart(now: Instant) -> [Action] {
        restarts += 1
        let delay = restartDelay(afterFailures: failuresInARow)
        failuresInARow += 1
        phase = .waitingToRestart
        return [arm(.restart, at: now.advanced(by: delay))]
    }

    private mutating func arm(_ timer: Timer, at deadline: Instant) -> Action {
        deadlines[timer] = deadline
        return .arm(timer, at: deadline)
    }

    private mutating func cancel(_ timer: Timer) -> Action {
        deadlines[timer] = nil
        return .cancel(timer)
    }

    static func describe(_ status: Int32) -> String {
        status > 128 ? "killed by signal \(status - 128)" : "exit status \(status)"
    }
}
