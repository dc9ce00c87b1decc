import CHallpassSys
public import HallpassIPC
public import Foundation
import HallpassSystem
import SystemPackage

/// Runs filter-data and keeps it running: spawns it with the child end of a
/// control socket pair on descriptor 3, answers its needRules questions,
/// checks its health once a second (ping, with its counters in the pong)
/// and restarts it with growing delays when it dies or stops answering.
/// New rules go to the running process (`useRules`) and are the ones the
/// next start uses.
///
/// One thread runs the loop: it waits in poll(2) on the control channel and
/// filter-data's output (a SOCK_SEQPACKET pair, whose one-message-per-read
/// framing an event loop's coalesced writes would break), which is the one
/// blocking wait of filter-control that is not an event loop's. The public
/// methods may be called from any thread or task.
///
/// What filter-data asks besides names (which group a user is in) and the
/// decisions it reports reach `onEvent`, on the loop thread.
public final class DataSupervisor: @unchecked Sendable {
    // @unchecked Sendable: the mutable state is guarded by `lock`; the loop
    // thread alone touches `child` and `channel`.

    public struct Launch: Sendable {
        public var executable: String
        /// Arguments besides --store, --policy and --control-fd.
        public var arguments: [String]

        public init(executable: String, arguments: [String]) {
            self.executable = executable
            self.arguments = arguments
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
        /// How many `rules` messages filter-data answered (loaded or refused), to wait for the answer to one.
        public var rulesAnswers = 0
        /// The counters of the latest pong (nil before the first).
        public var counters: FilterDataCounters?
        public var countersAt: Date?
        /// The highest number of a ping `refreshCounters` sent that filter-data answered.
        var answeredRefresh: UInt64 = 0
    }

    public static let controlDescriptor: Int32 = 3
    /// No pong for this long: filter-data is killed and started again.
    public var unresponsiveAfter: Duration = .seconds(5)
    /// A run this long resets the restart delay to its first step.
    public var stableAfter: Duration = .seconds(30)

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

    private let launch: Launch
    private let answerer: NeedRulesAnswerer
    private let log: @Sendable (String) -> Void
    private let lock = NSLock()
    private var state = Status()
    private var rules: (store: String, policy: String)
    private var stopping = false
    /// What to hand the running filter-data next (nil: nothing new).
    private var pending: Pending?
    /// The channel to the running filter-data, for `send` from other threads.
    private var currentChannel: ControlEnd?
    private let onEvent: @Sendable (SupervisorEvent) -> Void
    /// How long filter-control took to answer a needRules question (for the metrics).
    public var onAnswered: @Sendable (Duration) -> Void = { _ in }

    private enum Pending {
        case rules(store: String, policy: String)
        /// The policy set only: the store in force stays mapped.
        case policy(String)
    }
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    // Loop thread only.
    private var child: ChildProcess?
    private var channel: ControlEnd?
    /// filter-data's standard output and error: a pipe whose lines go to `log`.
    private var output: ChildOutput?
    private var nextLaunch = Monotonic.now
    private var failuresInARow = 0
    private var pingNumber: UInt64 = 0
    /// While filter-data is being stopped: the end of the channel is expected,
    /// not a death to restart from (`channelEnded` says it came).
    private var draining = false
    private var channelEnded = false
    /// nil: no ping sent to this filter-data yet.
    private var lastPing: Monotonic.Instant?
    private var lastHeard = Monotonic.now
    /// When the running filter-data was started (`startedAt` on the wall clock, for `status`).
    private var startedRunning = Monotonic.now

    public init(
        launch: Launch, store: String, policy: String, answerer: NeedRulesAnswerer, log: @escaping @Sendable (String) -> Void,
        onEvent: @escaping @Sendable (SupervisorEvent) -> Void = { _ in }
    ) {
        self.launch = launch
        self.rules = (store, policy)
        self.answerer = answerer
        self.log = log
        self.onEvent = onEvent
    }

    /// Sends a message to the running filter-data now; false when none runs
    /// or it cannot take it (it asks again, or starts with the files).
    @discardableResult
    public func send(_ message: ControlCommand) -> Bool {
        guard let channel = lock.withLock({ currentChannel }) else { return false }
        return (try? channel.send(message)) != nil
    }

    public var status: Status { lock.withLock { state } }

    public func start() {
        let thread = Thread { [self] in
            loop()
            finished.signal()
        }
        thread.name = "hallpass.supervisor"
        self.thread = thread
        thread.start()
    }

    /// Asks filter-data to give its held packets their verdicts and exit
    /// (SIGTERM; SIGKILL after 3 seconds) and returns once it has.
    public func stop() {
        lock.withLock { stopping = true }
        finished.wait()
    }

    /// Makes these the rules: sent to the running filter-data now, used by every later start.
    public func useRules(store: String, policy: String) {
        lock.withLock {
            rules = (store, policy)
            pending = .rules(store: store, policy: policy)
        }
    }

    /// The policy set at `policy` was written again (same path or not): the
    /// running filter-data reads it, keeping its store.
    public func usePolicy(_ policy: String) {
        lock.withLock {
            rules.policy = policy
            if case .rules(let store, _) = pending {
                pending = .rules(store: store, policy: policy)
            } else {
                pending = .policy(policy)
            }
        }
    }

    /// `useRules` or `usePolicy` (no `store`), waiting without blocking a
    /// thread (at most `timeout`) for filter-data to say what it made of them.
    /// Refused files are not kept: a later start of filter-data uses the
    /// files it had before. Loaded or pending, they are what later starts use.
    public func apply(store: String?, policy: String, waitingAtMost timeout: Duration) async -> RulesAnswer {
        let (before, previous) = lock.withLock { (state.rulesAnswers, rules) }
        if let store { useRules(store: store, policy: policy) } else { usePolicy(policy) }
        let deadline = Monotonic.now + timeout
        while Monotonic.now < deadline {
            let answer: RulesAnswer? = lock.withLock {
                guard state.rulesAnswers > before else { return nil }
                if let refusal = state.lastRulesRefusal {
                    rules = previous
                    return .refused(refusal)
                }
                return .loaded(version: state.rulesVersion ?? 0)
            }
            if let answer { return answer }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return .pending
    }

    /// The files later starts of filter-data use, without sending anything
    /// to the running one (which already uses the same rules under another
    /// name, or will be told separately).
    public func useAtNextStart(store: String, policy: String) {
        lock.withLock { rules = (store, policy) }
    }

    /// The pings `refreshCounters` sends are numbered from here up; the health
    /// check's own count from 1 never gets there.
    static let firstRefreshPing: UInt64 = 1 << 62
    private var refreshPings: UInt64 = 0

    /// Asks the running filter-data for its counters now (a ping of its own)
    /// and waits, at most `timeout` and without blocking a thread, for the
    /// answer: true when `status` holds counters taken after this call began,
    /// false when none runs or it did not answer in time (`status` keeps the
    /// last ones, with their time). filter-data answers control messages in
    /// order, so the answer to this ping, or to a later one, is enough.
    public func refreshCounters(waitingAtMost timeout: Duration) async -> Bool {
        let number = lock.withLock {
            refreshPings += 1
            return Self.firstRefreshPing + refreshPings
        }
        guard send(.ping(number)) else { return false }
        let deadline = Monotonic.now + timeout
        while Monotonic.now < deadline {
            if lock.withLock({ state.answeredRefresh >= number }) { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return false
    }

    /// What the running filter-data made of the rules of the last `useRules`.
    public enum RulesAnswer: Sendable, Hashable {
        case loaded(version: UInt64)
        case refused(String)
        /// No answer in time (filter-data restarting); it will use them when it starts.
        case pending
    }

    /// Hands over new rules and waits (at most `timeout`) for filter-data to
    /// say it uses them, so `filterctl reload` reports what is in force.
    public func useRules(store: String, policy: String, waitingAtMost timeout: TimeInterval) -> RulesAnswer {
        let before = lock.withLock { state.rulesAnswers }
        useRules(store: store, policy: policy)
        let deadline = Monotonic.now + .seconds(timeout)
        while Monotonic.now < deadline {
            let answer: RulesAnswer? = lock.withLock {
                guard state.rulesAnswers > before else { return nil }
                if let refusal = state.lastRulesRefusal { return .refused(refusal) }
                return .loaded(version: state.rulesVersion ?? 0)
            }
            if let answer { return answer }
            usleep(5_000)
        }
        return .pending
    }

    // MARK: The loop

    private func loop() {
        while !lock.withLock({ stopping }) {
            if child == nil, Monotonic.now >= nextLaunch { start(rules: lock.withLock { rules }) }
            guard let channel else {
                usleep(20_000)
                continue
            }
            let next: Pending? = lock.withLock {
                defer { pending = nil }
                return pending
            }
            switch next {
            case .rules(let store, let policy): sendOnLoop(.useRules(store: store, policy: policy))
            case .policy(let policy): sendOnLoop(.usePolicy(policy))
            case nil: break
            }
            var ready = [pollfd(fd: channel.descriptor.rawValue, events: Int16(POLLIN), revents: 0)]
            if let output { ready.append(pollfd(fd: output.descriptor.rawValue, events: Int16(POLLIN), revents: 0)) }
            _ = try? Poll.wait(&ready, timeoutMilliseconds: 200)
            output?.forwardLines(to: log)
            readMessages(channel)
            checkHealth()
        }
        if let child {
            stop(child)
            output?.forwardLines(to: log, untilEnd: true)
        }
        lock.withLock { currentChannel = nil }
        channel = nil
        child = nil
        output = nil
    }

    /// Asks filter-data to stop in two ways, so that either is enough: the
    /// end of the control channel (it reads it, gives held packets their
    /// default and exits; this needs no privilege) and SIGTERM. SIGKILL
    /// after 3 seconds. filter-data runs as its own user, so the signals need
    /// CAP_KILL; when they are refused and filter-data does not go, this
    /// gives up after 2 more seconds rather than wait forever (the kernel
    /// rules must still be removed).
    private func stop(_ child: ChildProcess) {
        // Only this side's writing ends: filter-data sees the end of the channel
        // and stops, and what it sends as it stops (the reports it held back for
        // batching, those of held flows given their default) still comes in while
        // it is waited for.
        if let channel { try? channel.descriptor.shutdownWrites() }
        if let refused = child.send(SIGTERM) { log("cannot send SIGTERM to filter-data \(child.pid): \(refused)") }
        draining = true
        defer { draining = false }
        var status = waitReading(child, atMost: 3)
        if status == nil {
            if let refused = child.send(SIGKILL) { log("cannot kill filter-data \(child.pid): \(refused)") }
            status = waitReading(child, atMost: 2)
        }
        if let status {
            log("filter-data stopped (\(DataSupervisor.describe(status)))")
        } else {
            log("filter-data \(child.pid) did not stop; going on without it")
        }
    }

    /// Waits up to `seconds` for the child to end, taking the messages it
    /// still sends (until its end of the channel closes); its exit status, or
    /// nil when it is still running.
    private func waitReading(_ child: ChildProcess, atMost seconds: Double) -> Int32? {
        let deadline = Monotonic.now + .seconds(seconds)
        while Monotonic.now < deadline {
            if let channel, !channelEnded {
                _ = channel.wait(timeoutMilliseconds: 20)
                readMessages(channel)
            } else {
                usleep(10_000)
            }
            if !child.isRunning {
                // What it sent just before it ended is still in the socket.
                if let channel, !channelEnded { readMessages(channel) }
                return child.wait(atMost: 0)
            }
        }
        return nil
    }

    static func describe(_ status: Int32) -> String {
        status > 128 ? "killed by signal \(status - 128)" : "exit status \(status)"
    }

    private func start(rules: (store: String, policy: String)) {
        let pair: (control: ControlEnd, data: DataEnd)
        do {
            pair = try ControlChannelPair.make()
        } catch {
            log("cannot make the control channel: \(error)")
            scheduleRestart()
            return
        }
        let output: ChildOutput
        do {
            output = try ChildOutput()
        } catch {
            log("cannot make filter-data's output pipe: \(error)")
            scheduleRestart()
            return
        }
        let arguments = launch.arguments + ["--store", rules.store, "--policy", rules.policy, "--control-fd", String(Self.controlDescriptor)]
        do {
            let process = try ChildProcess(
                executable: launch.executable, arguments: arguments,
                descriptors: [(output.writeEnd.rawValue, 1), (output.writeEnd.rawValue, 2), (pair.1.descriptor.rawValue, Self.controlDescriptor)],
                // The Swift runtime's crash backtracer forks and execs a helper, which the
                // sandbox refuses: with it on, a crash would loop in its handler instead of
                // ending the process (filter-control restarts it at once).
                environment: ["SWIFT_BACKTRACE": "enable=no"],
                // Nothing of filter-control's environment: filter-data reads no variable, and
                // what the loader and libraries read (LD_PRELOAD, LD_LIBRARY_PATH, MALLOC_*)
                // must not put code or behaviour into the sandboxed process that nobody chose
                // for it (a preloaded library would also run its calls under the seccomp filter).
                inheritEnvironment: false)
            output.closeWriteEnd()
            child = process
            channel = pair.0
            channelEnded = false
            self.output = output
            lastHeard = Monotonic.now
            lastPing = nil
            startedRunning = Monotonic.now
            lock.withLock {
                state.pid = process.pid
                state.startedAt = Date()
                pending = nil
                currentChannel = pair.0
            }
            log("filter-data started (pid \(process.pid))")
        } catch {
            log("\(error)")
            scheduleRestart()
        }
        // pair.1, the child's end, closes here: filter-data holds the only copy,
        // so its exit is seen as the end of the channel.
    }

    private func readMessages(_ channel: ControlEnd) {
        // The reports of every message read now go on as one event per wakeup,
        // however many messages filter-data sent.
        var reports = FlowReportLines()
        defer { if !reports.isEmpty { onEvent(.reports(reports)) } }
        var heard = false
        defer { if heard { lastHeard = Monotonic.now } }
        while true {
            let message: DataEvent?
            do {
                message = try channel.receive { [log] error in log("filter-data sent a bad message: \(error)") }
            } catch {
                if draining {
                    channelEnded = true
                    return
                }
                ended()
                return
            }
            guard let message else { return }
            heard = true
            switch message {
            case .hello(let pid, let version):
                lock.withLock { state.rulesVersion = version }
                log("filter-data \(pid) is filtering with rules version \(version)")
            case .ask(let question):
                let asked = Monotonic.now
                let answered = onAnswered
                answerer.answer(question) { reply in
                    answered(Monotonic.now - asked)
                    // A send from the lookup's thread is safe: one datagram, no shared buffer.
                    try? channel.send(reply)
                }
            case .rulesLoaded(let version):
                lock.withLock {
                    state.rulesVersion = version
                    state.lastRulesRefusal = nil
                    state.rulesAnswers += 1
                }
                log("filter-data now uses rules version \(version)")
            case .rulesRefused(let code, let reason):
                lock.withLock {
                    state.lastRulesRefusal = "\(reason) [\(code)]"
                    state.rulesAnswers += 1
                }
                log("filter-data refused the new rules: \(reason) [\(code)]; the old rules stay in force")
            case .pong(let number, let counters):
                lock.withLock {
                    state.counters = counters
                    state.countersAt = Date()
                    if number >= Self.firstRefreshPing { state.answeredRefresh = max(state.answeredRefresh, number) }
                    state.rulesVersion = counters.rulesVersion
                }
            case .askUser(let uid):
                onEvent(.askUser(uid))
            case .reports(let batch):
                reports.append(contentsOf: batch)
                // A channel that never runs dry (a busy machine) still hands reports on.
                if reports.count >= 1024 {
                    onEvent(.reports(reports))
                    reports = FlowReportLines()
                }
            }
        }
    }

    private func checkHealth() {
        guard let child else { return }
        let now = Monotonic.now
        if lastPing.map({ now - $0 >= .seconds(1) }) ?? true {
            pingNumber += 1
            sendOnLoop(.ping(pingNumber))
            lastPing = now
        }
        if now - lastHeard > unresponsiveAfter {
            log("filter-data \(child.pid) has not answered for \(unresponsiveAfter.components.seconds) seconds; killing it")
            if let refused = child.send(SIGKILL) { log("cannot kill filter-data \(child.pid): \(refused)") }
            lastHeard = now
        }
        if !child.isRunning { ended() }
    }

    private func sendOnLoop(_ message: ControlCommand) {
        do {
            try channel?.send(message)
        } catch ControlChannelFailure.closed {
            ended()
        } catch {
            log("cannot send to filter-data: \(error)")
        }
    }

    /// filter-data is gone: reap it, and start it again after a delay.
    private func ended() {
        guard let child else { return }
        let status = child.wait()
        output?.forwardLines(to: log, untilEnd: true)
        output = nil
        let ranFor = Monotonic.now - startedRunning
        self.child = nil
        channel = nil
        let stopping = lock.withLock { () -> Bool in
            currentChannel = nil
            state.pid = nil
            state.lastExit = DataSupervisor.describe(status)
            return self.stopping
        }
        guard !stopping else { return }
        if ranFor >= stableAfter { failuresInARow = 0 }
        log("filter-data exited (\(lock.withLock { state.lastExit ?? "" })); restarting")
        scheduleRestart()
    }

    private func scheduleRestart() {
        lock.withLock { state.restarts += 1 }
        // 0.05 s, 0.1 s, 0.2 s ... 10 s: back at once after a crash, no busy loop when it cannot start.
        let delay = min(10.0, 0.05 * pow(2.0, Double(min(failuresInARow, 8))))
        failuresInARow += 1
        nextLaunch = Monotonic.now + .seconds(delay)
    }
}

/// What filter-data tells filter-control besides names, health and rules.
public enum SupervisorEvent: Sendable {
    /// A flow of this user waits: which group are they in?
    case askUser(UInt32)
    /// Decisions to record (first decisions of flows, blocked DNS queries), as their lines.
    case reports(FlowReportLines)
}
