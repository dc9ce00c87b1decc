public import HallpassIPC
public import Foundation
import HallpassSystem
import Synchronization
import SystemPackage

/// Runs filter-data and keeps it running: spawns it with the child end of a
/// control socket pair on descriptor 3, answers its needRules questions,
/// checks its health once a second (ping, with its counters in the pong)
/// and restarts it with growing delays when it dies or stops answering.
/// New rules go to the running process (`useRules`) and are the ones the
/// next start uses.
///
/// What to do is decided by `DataSupervisorMachine`, a value that takes
/// events and returns actions; this service runs it in one task (`run`),
/// fed by one stream of events, and carries out its actions: spawning,
/// sending, signalling, arming timers. Nothing polls and nothing sleeps in
/// steps.
///
/// One thread, for the one blocking call that has no asynchronous form
/// here: poll(2) on the control channel and filter-data's output (the
/// channel is a SOCK_SEQPACKET pair, whose one-message-per-read framing an
/// event loop's coalesced writes would break), then waitpid(2), which
/// returns at once since both end only when filter-data has exited. The
/// same poll(2) waits for the timers' deadlines (health check, restart
/// delay, a stop's escalation, a caller's wait), as its timeout computed on
/// the monotonic clock. Not `Task.sleep`: on Linux it arms libdispatch's
/// CLOCK_MONOTONIC timerfd at an absolute time, which a real step of the
/// wall clock leaves alone but libfaketime (what ClockStepIntegrationTests
/// steps the wall clock with) moves by the step, so the test would see the
/// timers stall for as long as the step back; a relative timeout it leaves
/// alone. The thread hands what it sees to the machine as events.
///
/// What filter-data asks besides names (which group a user is in) and the
/// decisions it reports reach `onEvent`, on that thread, as they arrive (so
/// the reports it sends as it stops are in before the stop ends). The public
/// methods may be called from any thread or task.
public final class DataSupervisor: Sendable {
    public struct Launch: Sendable {
        public var executable: String
        /// Arguments besides --store, --policy and --control-fd.
        public var arguments: [String]
        /// The process's name in the log: `filter-data`, or `hallpass-proxy`, which
        /// speaks the same control channel and is run the same way.
        public var name: String
        /// What each start is told first, queued on the channel right after the
        /// spawn (hallpass-proxy's interception CA, which never goes on a command line).
        public var greeting: @Sendable () -> [ControlCommand]

        public init(
            executable: String, arguments: [String], name: String = "filter-data", greeting: @escaping @Sendable () -> [ControlCommand] = { [] }
        ) {
            self.executable = executable
            self.arguments = arguments
            self.name = name
            self.greeting = greeting
        }
    }

    /// What `filterctl status` shows about filter-data.
    public struct Status: Sendable {
        public var pid: Int32?
        public var startedAt: Date?
        public var restarts = 0
        public var lastExit: String?
        public var rulesVersion: UInt64?
        public var lastRulesRefusal: String?
        /// The counters of the latest pong (nil before the first).
        public var counters: FilterDataCounters?
        public var countersAt: Date?
    }

    /// What the running filter-data made of rules handed over (`apply`).
    public enum RulesAnswer: Sendable, Hashable {
        case loaded(version: UInt64)
        case refused(String)
        /// No answer in time (filter-data restarting, or stopping); later starts use them.
        case pending
    }

    public static let controlDescriptor: Int32 = 3

    /// The clock of every deadline and duration here (health check, restart
    /// delay, how long a run lasted, the waits of a stop and of an answer),
    /// never the wall clock: a step of the wall clock (NTP's first sync after
    /// a lab machine boots, an admin setting the time) must not make a
    /// healthy filter-data look silent and kill it, nor put off a restart.
    /// `startedAt` and `countersAt` stay wall-clock dates, for people to read.
    ///
    /// SuspendingClock, not ContinuousClock: on Linux it is CLOCK_MONOTONIC,
    /// which stops while the machine is suspended, where ContinuousClock
    /// (CLOCK_BOOTTIME) goes on. Both processes are frozen in a suspend, so
    /// on resume ContinuousClock would count the hours asleep as hours
    /// filter-data did not answer, and the first health check would kill a
    /// healthy filter-data; this clock counts only the time both ran.
    typealias Monotonic = SuspendingClock
    typealias Machine = DataSupervisorMachine<Monotonic.Instant>

    private let launch: Launch
    private let settings: Machine.Settings
    private let firstFiles: Machine.Files
    private let answerer: NeedRulesAnswerer
    private let log: @Sendable (String) -> Void
    private let onEvent: @Sendable (SupervisorEvent) -> Void
    /// How long filter-control took to answer a needRules question (for the metrics).
    private let onAnswered: @Sendable (Duration) -> Void
    private let events: AsyncStream<Machine.Event>
    private let input: AsyncStream<Machine.Event>.Continuation
    private let shared = Mutex(Shared())
    /// Wakes the thread from its poll(2) when what it waits for changed.
    private let wakeUp: WakeUpPipe?

    /// What the callers of the public methods, the machine's task and the thread share.
    private struct Shared {
        var status = Status()
        /// The channel to the running filter-data, for `send`.
        var channel: ControlEnd?
        /// The running filter-data, for the thread to read.
        var run: RunEnds?
        /// The moments the thread wakes up for: the machine's timers, and the
        /// callers' waits for an answer.
        var deadlines: [Deadline: Monotonic.Instant] = [:]
        var lastTicket: Machine.Ticket = 0
        /// Callers waiting for an answer.
        var waiting: [Machine.Ticket: CheckedContinuation<Reply, Never>] = [:]
        /// The callers of `filtering`, answered by the first hello.
        var filtering: Set<Machine.Ticket> = []
        /// The machine ended: every later question is answered at once, and the thread ends.
        var finished = false
    }

    private enum Deadline: Hashable {
        case timer(Machine.Timer)
        /// The end of a caller's wait.
        case ticket(Machine.Ticket)
    }

    private enum Reply: Sendable {
        case rules(RulesAnswer)
        case counters(fresh: Bool)
        case filtering(rulesVersion: UInt64)
        /// Not answered: the caller gave up (time, cancellation) or the supervisor ended.
        case none
    }

    public convenience init(
        launch: Launch, store: String, policy: String, answerer: NeedRulesAnswerer, log: @escaping @Sendable (String) -> Void,
        onEvent: @escaping @Sendable (SupervisorEvent) -> Void = { _ in }, onAnswered: @escaping @Sendable (Duration) -> Void = { _ in }
    ) {
        var settings = Machine.Settings()
        settings.name = launch.name
        self.init(
            launch: launch, files: .init(store: store, policy: policy), settings: settings, answerer: answerer, log: log, onEvent: onEvent,
            onAnswered: onAnswered)
    }

    init(
        launch: Launch, files: Machine.Files, settings: Machine.Settings, answerer: NeedRulesAnswerer, log: @escaping @Sendable (String) -> Void,
        onEvent: @escaping @Sendable (SupervisorEvent) -> Void = { _ in }, onAnswered: @escaping @Sendable (Duration) -> Void = { _ in }
    ) {
        self.launch = launch
        self.firstFiles = files
        self.settings = settings
        self.answerer = answerer
        self.log = log
        self.onEvent = onEvent
        self.onAnswered = onAnswered
        (events, input) = AsyncStream.makeStream(of: Machine.Event.self)
        do {
            wakeUp = try WakeUpPipe()
        } catch {
            // Out of descriptors: `run` says so and ends.
            wakeUp = nil
        }
    }

    public var status: Status { shared.withLock { $0.status } }

    /// Sends a message to the running filter-data now; false when none runs
    /// or it cannot take it (it asks again, or starts with the files).
    @discardableResult
    public func send(_ message: ControlCommand) -> Bool {
        guard let channel = shared.withLock({ $0.channel }) else { return false }
        return (try? channel.send(message)) != nil
    }

    // MARK: Running and stopping

    /// Starts filter-data and keeps it running until `stop()`, then stops it
    /// (held packets get their default) and returns once it has exited or
    /// was given up on. Call it once. Cancelling the calling task stops
    /// filter-data the same way.
    public func run() async {
        guard wakeUp != nil else {
            log("cannot start \(launch.name): no descriptor left for the supervisor's wake-up pipe")
            finish()
            return
        }
        let thread = Thread { [self] in watch() }
        thread.name = "hallpass.supervisor"
        thread.start()
        // After what came before the run: rules handed over already are the first start's
        // files, and a stop already asked for starts nothing.
        input.yield(.start)
        // The machine runs in a task of its own, which the caller's cancellation does not
        // reach: a cancelled caller turns into a stop, and still waits for filter-data's end.
        let machine = Task { await self.runMachine() }
        await withTaskCancellationHandler {
            await machine.value
        } onCancel: {
            self.stop()
        }
    }

    /// Asks filter-data to give its held packets their verdicts and exit
    /// (the end of the channel and SIGTERM; SIGKILL after 3 s); `run` returns
    /// once it has. Returns at once; every caller still waiting for an
    /// answer gets it now.
    public func stop() {
        input.yield(.stop)
    }

    // MARK: Rules

    /// Hands new rules to filter-data (`store` nil: the policy set only, the
    /// store in force stays mapped) and waits, at most `timeout`, for what it
    /// made of them. They are the files of every later start; refused, they
    /// are not (later starts use the files filter-data had). Handed over
    /// while filter-data restarts, the next start's hello answers. A
    /// cancelled caller, or a stop, gets `.pending` at once.
    public func apply(store: String?, policy: String, waitingAtMost timeout: Duration) async -> RulesAnswer {
        let handOver: Machine.HandOver = store.map { .rules(.init(store: $0, policy: policy)) } ?? .policy(policy)
        if case .rules(let answer) = await ask({ .handOver(handOver, ticket: $0) }, waitingAtMost: timeout) { return answer }
        return .pending
    }

    /// The files later starts of filter-data use, without sending anything
    /// to the running one (which already uses the same rules under another
    /// name, or will be told separately).
    public func useAtNextStart(store: String, policy: String) {
        input.yield(.useAtNextStart(.init(store: store, policy: policy)))
    }

    /// Asks the running filter-data for its counters now (a ping of its own)
    /// and waits, at most `timeout`, for the answer: true when `status`
    /// holds counters taken after this call began, false when none runs or
    /// it did not answer in time (`status` keeps the last ones, with their
    /// time). filter-data answers in order, so a later answer is enough too.
    public func refreshCounters(waitingAtMost timeout: Duration) async -> Bool {
        if case .counters(let fresh) = await ask({ .refreshCounters(ticket: $0) }, waitingAtMost: timeout) { return fresh }
        return false
    }

    /// Waits until a filter-data said it filters (its hello); its rules
    /// version, or nil when the supervisor ended first or the caller was cancelled.
    public func filtering() async -> UInt64? {
        if let version = shared.withLock({ $0.status.rulesVersion }) { return version }
        if case .filtering(let version) = await ask(nil, waitingAtMost: nil) { return version }
        return nil
    }

    /// Registers a waiting caller, tells the machine (`event`, with the
    /// caller's ticket) and waits for the reply, at most `timeout`.
    private func ask(_ event: ((Machine.Ticket) -> Machine.Event)?, waitingAtMost timeout: Duration?) async -> Reply {
        let ticket = shared.withLock { shared in
            shared.lastTicket += 1
            return shared.lastTicket
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Reply, Never>) in
                let open = shared.withLock { shared in
                    guard !shared.finished else { return false }
                    if event == nil, let version = shared.status.rulesVersion {
                        // A `filtering` caller that came just as the hello did.
                        continuation.resume(returning: .filtering(rulesVersion: version))
                        return true
                    }
                    shared.waiting[ticket] = continuation
                    if let timeout { shared.deadlines[.ticket(ticket)] = Monotonic.now.advanced(by: timeout) }
                    if event == nil { shared.filtering.insert(ticket) }
                    return true
                }
                guard open else {
                    continuation.resume(returning: .none)
                    return
                }
                if timeout != nil { wakeUp?.wake() }
                if let event { input.yield(event(ticket)) }
                // Cancelled before the continuation was registered: the handler found nothing to end.
                if Task.isCancelled { giveUp(ticket) }
            }
        } onCancel: {
            giveUp(ticket)
        }
    }

    private func reply(_ ticket: Machine.Ticket, _ reply: Reply) {
        let continuation = shared.withLock { shared in
            shared.filtering.remove(ticket)
            shared.deadlines[.ticket(ticket)] = nil
            return shared.waiting.removeValue(forKey: ticket)
        }
        continuation?.resume(returning: reply)
    }

    /// The caller stops waiting; the machine forgets it (filter-data's answer, when it comes, still counts).
    private func giveUp(_ ticket: Machine.Ticket) {
        reply(ticket, .none)
        input.yield(.forget(ticket))
    }

    // MARK: The machine's task

    /// What the machine's task holds of the running filter-data.
    private struct Running {
        var child: ChildProcess?
        var channel: ControlEnd?
    }

    private func runMachine() async {
        var machine = Machine(files: firstFiles, settings: settings)
        var running = Running()
        // Results of actions (a spawn's) go first, before anything else that happened.
        var next: [Machine.Event] = []
        var events = self.events.makeAsyncIterator()
        var finished = false
        while !finished {
            let event: Machine.Event
            if next.isEmpty {
                guard let received = await events.next() else { break }
                event = received
            } else {
                event = next.removeFirst()
            }
            let actions = machine.handle(event, now: Monotonic.now)
            if case .exited(let pid, _) = event, running.child?.pid == pid {
                running.child = nil
                running.channel = nil
                shared.withLock { $0.channel = nil }
            }
            for action in actions {
                if case .finish = action {
                    finished = true
                    break
                }
                if let result = perform(action, &running) { next.append(result) }
            }
            publish(machine)
        }
        finish()
    }

    /// The machine ended: the thread ends, and every caller still waiting is answered.
    private func finish() {
        let waiting = shared.withLock { shared in
            shared.finished = true
            shared.channel = nil
            shared.deadlines = [:]
            shared.filtering = []
            defer { shared.waiting = [:] }
            return shared.waiting.values
        }
        wakeUp?.wake()
        for continuation in waiting { continuation.resume(returning: .none) }
    }

    /// Carries out one action; the event it leads to at once, if any.
    private func perform(_ action: Machine.Action, _ running: inout Running) -> Machine.Event? {
        switch action {
        case .spawn(let files):
            return spawn(files, &running)
        case .send(let command):
            guard let channel = running.channel else { return nil }
            do {
                try channel.send(Self.message(command))
            } catch .closed {
                // filter-data is ending: its exit comes next.
            } catch {
                log("cannot send to \(launch.name): \(error)")
                return .notSent(command)
            }
        case .endChannel:
            // Only this side's writing end: filter-data sees the end of the channel and
            // stops, and what it sends as it stops (the reports it held back for batching,
            // those of held flows given their default) still comes in.
            if let channel = running.channel { try? channel.descriptor.shutdownWrites() }
        case .signal(let pid, let signal):
            guard let child = running.child, child.pid == pid else { return nil }
            if let refused = child.send(signal == .kill ? SIGKILL : SIGTERM) {
                log(signal == .kill ? "cannot kill \(launch.name) \(pid): \(refused)" : "cannot send SIGTERM to \(launch.name) \(pid): \(refused)")
            }
        case .arm(let timer, let deadline):
            shared.withLock { $0.deadlines[.timer(timer)] = deadline }
            wakeUp?.wake()
        case .cancel(let timer):
            // The thread may wake up for it still, and finds nothing due.
            shared.withLock { $0.deadlines[.timer(timer)] = nil }
        case .answerHandOver(let ticket, let answer):
            reply(ticket, .rules(answer))
        case .answerRefresh(let ticket, let fresh):
            reply(ticket, .counters(fresh: fresh))
        case .log(let line):
            log(line)
        case .finish:
            break
        }
        return nil
    }

    /// What `status` shows and `filtering` waits for, from the machine after each event.
    private func publish(_ machine: Machine) {
        let waiting: [CheckedContinuation<Reply, Never>] = shared.withLock { shared in
            shared.status.pid = machine.pid
            shared.status.restarts = machine.restarts
            shared.status.lastExit = machine.lastExit
            shared.status.rulesVersion = machine.rulesVersion
            shared.status.lastRulesRefusal = machine.lastRulesRefusal
            guard machine.rulesVersion != nil else { return [] }
            defer { shared.filtering = [] }
            return shared.filtering.compactMap { shared.waiting.removeValue(forKey: $0) }
        }
        guard let version = machine.rulesVersion else { return }
        for continuation in waiting { continuation.resume(returning: .filtering(rulesVersion: version)) }
    }

    static func message(_ command: Machine.Command) -> ControlCommand {
        switch command {
        case .useRules(let store, let policy): .useRules(store: store, policy: policy)
        case .usePolicy(let policy): .usePolicy(policy)
        case .ping(let number): .ping(number)
        }
    }

    private func spawn(_ files: Machine.Files, _ running: inout Running) -> Machine.Event {
        let pair: (control: ControlEnd, data: DataEnd)
        do {
            pair = try ControlChannelPair.make()
        } catch {
            return .spawnFailed("cannot make the control channel: \(error)")
        }
        let output: ChildOutput
        do {
            output = try ChildOutput()
        } catch {
            return .spawnFailed("cannot make \(launch.name)'s output pipe: \(error)")
        }
        let arguments = launch.arguments + ["--store", files.store, "--policy", files.policy, "--control-fd", String(Self.controlDescriptor)]
        let process: ChildProcess
        do {
            process = try ChildProcess(
                executable: launch.executable, arguments: arguments,
                descriptors: [(output.writeEnd.rawValue, 1), (output.writeEnd.rawValue, 2), (pair.data.descriptor.rawValue, Self.controlDescriptor)],
                // The Swift runtime's crash backtracer forks and execs a helper, which the
                // sandbox refuses: with it on, a crash would loop in its handler instead of
                // ending the process (filter-control restarts it at once).
                environment: ["SWIFT_BACKTRACE": "enable=no"],
                // Nothing of filter-control's environment: filter-data reads no variable, and
                // what the loader and libraries read (LD_PRELOAD, LD_LIBRARY_PATH, MALLOC_*)
                // must not put code or behaviour into the sandboxed process that nobody chose
                // for it (a preloaded library would also run its calls under the seccomp filter).
                inheritEnvironment: false)
        } catch {
            return .spawnFailed("\(error)")
        }
        // pair.data, the child's end, and this copy of the output's writing end close
        // here: filter-data holds the only copies, so its exit ends both.
        output.closeWriteEnd()
        // Waiting in the channel before the child reads anything (a datagram each; the socket holds them).
        for message in launch.greeting() {
            do {
                try pair.control.send(message)
            } catch {
                log("cannot send \(launch.name) its first messages: \(error)")
            }
        }
        running.child = process
        running.channel = pair.control
        let run = RunEnds(channel: pair.control, output: output, child: process)
        shared.withLock { shared in
            shared.channel = pair.control
            shared.run = run
            shared.status.startedAt = Date()
        }
        wakeUp?.wake()
        return .spawned(pid: process.pid)
    }

    // MARK: The thread

    /// Waits in poll(2) for filter-data's messages and output and for the
    /// next deadline, and hands on what came: messages (as events for the
    /// machine, or straight to `onEvent` and the needRules answerer), output
    /// lines (into the log), filter-data's exit once both its channel and its
    /// output have ended, and the deadlines that passed. Ends with the machine.
    private func watch() {
        guard let wakeUp else { return }
        var current: RunEnds? = nil
        var channelOpen = false
        var outputOpen = false
        var pollFailureLogged = false
        while true {
            let (run, next, finished) = shared.withLock { ($0.run, $0.deadlines.values.min(), $0.finished) }
            if finished { return }
            if run !== current {
                current = run
                channelOpen = run != nil
                outputOpen = run != nil
            }
            var ready = [pollfd(fd: wakeUp.descriptor.rawValue, events: Int16(POLLIN), revents: 0)]
            if let run, channelOpen { ready.append(pollfd(fd: run.channel.descriptor.rawValue, events: Int16(POLLIN), revents: 0)) }
            if let run, outputOpen { ready.append(pollfd(fd: run.output.descriptor.rawValue, events: Int16(POLLIN), revents: 0)) }
            // The blocking call this thread is for: until a message, a line, an end, a wake-up or the next deadline.
            do {
                // nil: a signal came (none is for this thread); the turn below finds nothing, and it waits again.
                _ = try Poll.wait(&ready, timeoutMilliseconds: next.map(Self.milliseconds(until:)) ?? -1)
            } catch {
                // Not seen in practice (poll's own failures: no memory, a bad descriptor).
                if !pollFailureLogged { log("the supervisor cannot wait for \(launch.name): \(error)") }
                pollFailureLogged = true
            }
            wakeUp.drain()
            if let run {
                if outputOpen, run.output.forwardLines(to: log) { outputOpen = false }
                if channelOpen, !receive(run.channel) { channelOpen = false }
                if !channelOpen, !outputOpen {
                    // Both ended, so filter-data has exited: waitpid(2) returns at once.
                    let status = run.child.wait()
                    run.output.forwardLines(to: log, untilEnd: true)
                    shared.withLock { if $0.run === run { $0.run = nil } }
                    current = nil
                    input.yield(.exited(pid: run.child.pid, status: status))
                }
            }
            let now = Monotonic.now
            let due: [Deadline] = shared.withLock { shared in
                let due = shared.deadlines.filter { $0.value <= now }.map(\.key)
                for deadline in due { shared.deadlines[deadline] = nil }
                return due
            }
            for deadline in due {
                switch deadline {
                case .timer(let timer): input.yield(.timerFired(timer))
                case .ticket(let ticket): giveUp(ticket)
                }
            }
        }
    }

    /// poll(2)'s timeout for `deadline`: the milliseconds until it, rounded up.
    static func milliseconds(until deadline: Monotonic.Instant) -> Int32 {
        let left = Monotonic.now.duration(to: deadline)
        guard left > .zero else { return 0 }
        let (seconds, attoseconds) = left.components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: milliseconds)
    }

    /// Takes every message waiting on the channel; false once it has ended.
    private func receive(_ channel: ControlEnd) -> Bool {
        // The reports of every message read now go on as one event per wakeup,
        // however many messages filter-data sent.
        var reports = FlowReportLines()
        defer { if !reports.isEmpty { onEvent(.reports(reports)) } }
        var heard = false
        defer { if heard { input.yield(.heard) } }
        while true {
            let message: DataEvent?
            do {
                message = try channel.receive { [log, launch] error in log("\(launch.name) sent a bad message: \(error)") }
            } catch {
                return false
            }
            guard let message else { return true }
            switch message {
            case .hello(let pid, let version):
                input.yield(.hello(pid: pid, rulesVersion: version))
            case .ask(let question):
                heard = true
                let asked = Monotonic.now
                answerer.answer(question) { [onAnswered] reply in
                    onAnswered(Monotonic.now - asked)
                    // A send from the lookup's thread is safe: one datagram, no shared buffer.
                    try? channel.send(reply)
                }
            case .rulesLoaded(let version):
                input.yield(.rulesLoaded(version: version))
            case .rulesRefused(let code, let reason):
                input.yield(.rulesRefused("\(reason) [\(code)]"))
            case .pong(let number, let counters):
                // In `status` before the machine hears of the pong, so a refresh it answers finds them.
                shared.withLock { shared in
                    shared.status.counters = counters
                    shared.status.countersAt = Date()
                }
                input.yield(.pong(number, rulesVersion: counters.rulesVersion))
            case .askUser(let uid):
                heard = true
                onEvent(.askUser(uid))
            case .reports(let batch):
                heard = true
                reports.append(contentsOf: batch)
                // A channel that never runs dry (a busy machine) still hands reports on.
                if reports.count >= 1024 {
                    onEvent(.reports(reports))
                    reports = FlowReportLines()
                }
            }
        }
    }
}

/// What the thread reads of one run of filter-data: the channel, the output pipe, the process.
private final class RunEnds: @unchecked Sendable {
    // @unchecked Sendable: made by the machine's task and handed to the thread,
    // which alone reads `output` and receives on `channel` from then on (a send may
    // come from any thread: one datagram, no shared buffer).
    let channel: ControlEnd
    let output: ChildOutput
    let child: ChildProcess

    init(channel: ControlEnd, output: ChildOutput, child: ChildProcess) {
        self.channel = channel
        self.output = output
        self.child = child
    }
}

/// What filter-data tells filter-control besides names, health and rules.
public enum SupervisorEvent: Sendable {
    /// A flow of this user waits: which group are they in?
    case askUser(UInt32)
    /// Decisions to record (first decisions of flows, blocked DNS queries), as their lines.
    case reports(FlowReportLines)
}
