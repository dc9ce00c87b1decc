import CHallpassSys
public import Foundation
import SharedStore

/// A child process started with posix_spawn and reaped by its pid.
///
/// unsafe in this file: the posix_spawn file actions and attributes and the
/// signal sets are locals passed by address and destroyed before return;
/// argv and the environment hold strdup'ed copies freed by a defer after
/// posix_spawn returned;
/// the pipe calls write into local arrays of two descriptors; reads and
/// writes touch an array's storage inside its closure, within its count.
///
/// filter-control runs filter-data for as long as it lives and short
/// commands (iptables-restore) next to it; each is waited for by its own
/// pid, so no reaping of one can steal another's exit status (Foundation's
/// Process reaps through a shared SIGCHLD handler and has been seen to miss
/// an exit while another child was running).
public final class ChildProcess: @unchecked Sendable {
    // @unchecked Sendable: `exitStatus` is guarded by `lock`.
    public let pid: Int32
    private let lock = NSLock()
    private var status: Int32?

    public struct LaunchError: Error, CustomStringConvertible {
        public var executable: String
        public var errno: Int32
        public var description: String { "cannot start \(executable): \(systemErrorText(errno))" }
    }

    /// Starts `executable` (looked up in PATH when it names no folder) with
    /// `arguments`. `descriptors` maps a descriptor of this process to the
    /// number the child sees it under (dup2, which clears close-on-exec on
    /// the copy); standard input is /dev/null unless mapped. Standard output
    /// and error are appended to `outputPath` when given, else inherited
    /// unless mapped. Every other descriptor of this process is closed in
    /// the child. The child gets this process's environment with
    /// `environment` set on top, or with `inheritEnvironment` false
    /// `environment` alone.
    public init(
        executable: String, arguments: [String], descriptors: [(from: Int32, to: Int32)] = [], outputPath: String? = nil,
        environment extra: [String: String] = [:], inheritEnvironment: Bool = true
    ) throws(LaunchError) {
        var actions = unsafe posix_spawn_file_actions_t()
        unsafe posix_spawn_file_actions_init(&actions)
        defer { unsafe posix_spawn_file_actions_destroy(&actions) }
        if !descriptors.contains(where: { $0.to == 0 }) {
            unsafe posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let outputPath {
            unsafe posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            unsafe posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }
        for mapping in descriptors {
            unsafe posix_spawn_file_actions_adddup2(&actions, mapping.from, mapping.to)
        }
        // The child holds what it is given and nothing else: filter-control's
        // own descriptors (the block page's listening sockets from NIO, the
        // admin socket, rule downloads in flight) are not all close-on-exec,
        // and filter-data must never inherit a network socket. Gaps below the
        // highest mapped descriptor are closed one by one, the rest at once.
        let given = Set([0, 1, 2] + descriptors.map(\.to))
        let highest = given.max()!
        for gap in 3..<max(3, highest) where !given.contains(gap) {
            unsafe posix_spawn_file_actions_addclose(&actions, gap)
        }
        unsafe hp_spawn_add_close_from(&actions, highest + 1)
        var attributes = posix_spawnattr_t()
        unsafe posix_spawnattr_init(&attributes)
        defer { unsafe posix_spawnattr_destroy(&attributes) }
        // The child starts with default signal handling and nothing blocked:
        // filter-control ignores SIGTERM and SIGINT in favour of dispatch
        // sources, and a test runner's threads block most signals.
        var defaults = sigset_t()
        unsafe sigemptyset(&defaults)
        for signal in [SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD] { unsafe sigaddset(&defaults, signal) }
        var empty = sigset_t()
        unsafe sigemptyset(&empty)
        unsafe posix_spawnattr_setsigdefault(&attributes, &defaults)
        unsafe posix_spawnattr_setsigmask(&attributes, &empty)
        unsafe posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var argv: [UnsafeMutablePointer<CChar>?] = unsafe ([executable] + arguments).map { unsafe strdup($0) } + [nil]
        defer { unsafe argv.forEach { unsafe free($0) } }
        var child: pid_t = 0
        // This process's environment (or none), with `extra` set on top.
        var environment: [UnsafeMutablePointer<CChar>?] = unsafe []
        // unsafe: `environ` is the NULL-terminated array libc keeps; each entry is copied with
        // strdup before the next one is read, and the copies are freed by the defer below.
        var cursor = unsafe environ
        while inheritEnvironment, let entry = unsafe cursor.pointee {
            let text = unsafe String(cString: entry)
            if let name = text.split(separator: "=", maxSplits: 1).first, extra[String(name)] == nil { unsafe environment.append(strdup(entry)) }
            unsafe cursor += 1
        }
        unsafe environment += extra.map { unsafe strdup("\($0.key)=\($0.value)") } + [nil]
        defer { unsafe environment.forEach { unsafe free($0) } }
        let result =
            unsafe executable.contains("/")
            ? posix_spawn(&child, executable, &actions, &attributes, &argv, &environment)
            : posix_spawnp(&child, executable, &actions, &attributes, &argv, &environment)
        guard result == 0 else { throw LaunchError(executable: executable, errno: result) }
        pid = child
    }

    /// The exit status once reaped: the code, or 128 + the signal that ended it.
    public var exitStatus: Int32? {
        lock.withLock { status }
    }

    /// Reaps the child if it has ended; true while it runs.
    public var isRunning: Bool {
        reap(blocking: false) == nil
    }

    /// Waits for the child to end; returns its exit status.
    @discardableResult
    public func wait() -> Int32 {
        reap(blocking: true)!
    }

    private func reap(blocking: Bool) -> Int32? {
        lock.withLock {
            if let status { return status }
            var raw: Int32 = 0
            while true {
                let result = unsafe waitpid(pid, &raw, blocking ? 0 : WNOHANG)
                if result == pid {
                    status = (raw & 0x7F) == 0 ? (raw >> 8) & 0xFF : 128 + (raw & 0x7F)
                    return status
                }
                if result < 0, errno == EINTR { continue }
                if result < 0 {
                    // ECHILD: somebody else reaped it; it is gone either way.
                    status = 255
                    return status
                }
                return nil
            }
        }
    }

    /// Sends `signal` unless the child has ended; returns why the kernel
    /// refused it, or nil. Root may signal a process that runs as another
    /// user (filter-data drops to its own, `queue.user`) only with CAP_KILL.
    public func send(_ signal: Int32) -> String? {
        guard isRunning, kill(pid, signal) != 0 else { return nil }
        let code = errno
        if code == ESRCH { return nil }
        return systemErrorText(code) + (code == EPERM ? " (signalling another user's process needs CAP_KILL)" : "")
    }

    /// Waits at most `seconds` for the child to end; its exit status, or nil while it runs.
    public func wait(atMost seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while isRunning {
            if Date() >= deadline { return nil }
            usleep(10_000)
        }
        return exitStatus
    }

    /// SIGTERM, then SIGKILL after `grace` seconds; returns the exit status,
    /// or nil when the child is still there `grace` seconds after the
    /// SIGKILL (the signals were refused): a stop never waits forever.
    @discardableResult
    public func stop(grace: Double = 5) -> Int32? {
        _ = send(SIGTERM)
        if let status = wait(atMost: grace) { return status }
        _ = send(SIGKILL)
        return wait(atMost: grace)
    }

    /// `arguments[0]` with the rest, output appended to `logPath` (test servers, shells).
    public convenience init(_ arguments: [String], logPath: String) throws(LaunchError) {
        try self.init(executable: arguments[0], arguments: Array(arguments.dropFirst()), outputPath: logPath)
    }

    /// Runs a short command to its end: `input` on its standard input, its
    /// standard output and error together as the result.
    public static func run(_ executable: String, _ arguments: [String], input: String? = nil) throws -> (status: Int32, output: String) {
        var inputPipe: [Int32] = [-1, -1]
        var outputPipe: [Int32] = [-1, -1]
        guard unsafe hp_pipe_cloexec(&inputPipe) == 0 else { throw LaunchError(executable: executable, errno: errno) }
        guard unsafe hp_pipe_cloexec(&outputPipe) == 0 else {
            close(inputPipe[0])
            close(inputPipe[1])
            throw LaunchError(executable: executable, errno: errno)
        }
        let child: ChildProcess
        do {
            child = try ChildProcess(
                executable: executable, arguments: arguments, descriptors: [(inputPipe[0], 0), (outputPipe[1], 1), (outputPipe[1], 2)])
        } catch {
            for descriptor in inputPipe + outputPipe { close(descriptor) }
            throw error
        }
        close(inputPipe[0])
        close(outputPipe[1])
        // The commands run here read all their input before they write much,
        // so writing first and reading after cannot deadlock on these sizes.
        if let input {
            var bytes = Array(input.utf8)[...]
            while !bytes.isEmpty {
                let written = unsafe bytes.withUnsafeBytes { unsafe write(inputPipe[1], $0.baseAddress, $0.count) }
                if written < 0 {
                    if errno == EINTR { continue }
                    break
                }
                bytes = bytes.dropFirst(written)
            }
        }
        close(inputPipe[1])
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = unsafe buffer.withUnsafeMutableBytes { unsafe read(outputPipe[0], $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            if output.count < 1 << 20 { output.append(contentsOf: buffer[0..<count]) }
        }
        close(outputPipe[0])
        return (child.wait(), String(decoding: output, as: UTF8.self))
    }
}

/// The read end of a pipe that a child writes its standard output and error
/// to, split into lines for filter-control's log. Non-blocking: the
/// supervisor polls it with the control channel.
final class ChildOutput {
    let descriptor: Int32
    private(set) var writeEnd: Int32
    private var partial: [UInt8] = []
    /// A line longer than this is cut (filter-data's lines are short).
    static let longestLine = 4096

    init() throws(ChildProcess.LaunchError) {
        var ends: [Int32] = [-1, -1]
        // unsafe: the C shim writes the two descriptors into the two-element array.
        guard unsafe hp_pipe_cloexec(&ends) == 0 else { throw ChildProcess.LaunchError(executable: "pipe", errno: errno) }
        descriptor = ends[0]
        writeEnd = ends[1]
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
    }

    deinit {
        close(descriptor)
        closeWriteEnd()
    }

    /// Once the child has its copy: the child's exit then ends the pipe.
    func closeWriteEnd() {
        if writeEnd >= 0 { close(writeEnd) }
        writeEnd = -1
    }

    /// Lines logged in the current second (counted from `madeAt` on the monotonic clock), and lines dropped beyond the limit.
    private let madeAt = SuspendingClock.now
    private var second: Int = 0
    private var linesThisSecond = 0
    private var dropped = 0
    /// At most this many lines a second reach the log (a child gone wrong must not flood the journal).
    static let linesPerSecond = 50

    private func emit(_ line: String, to log: (String) -> Void) {
        let now = Int((SuspendingClock.now - madeAt).components.seconds)
        if now != second {
            if dropped > 0 { log("(\(dropped) more lines of filter-data's output dropped)") }
            second = now
            linesThisSecond = 0
            dropped = 0
        }
        linesThisSecond += 1
        if linesThisSecond <= Self.linesPerSecond { log(line) } else { dropped += 1 }
    }

    /// Logs every complete line waiting in the pipe; with `untilEnd` (the
    /// child has exited) also the last, unterminated one.
    func forwardLines(to log: (String) -> Void, untilEnd: Bool = false) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = FileSystem.readSome(descriptor, into: &buffer)
            if count <= 0 { break }
            partial.append(contentsOf: buffer[0..<count])
            while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
                emit(String(decoding: partial[..<min(newline, Self.longestLine)], as: UTF8.self), to: log)
                partial.removeSubrange(...newline)
            }
            if partial.count > Self.longestLine {
                emit(String(decoding: partial.prefix(Self.longestLine), as: UTF8.self) + "...", to: log)
                partial.removeAll()
            }
        }
        if untilEnd, !partial.isEmpty {
            emit(String(decoding: partial, as: UTF8.self), to: log)
            partial.removeAll()
        }
        if untilEnd, dropped > 0 {
            log("(\(dropped) more lines of filter-data's output dropped)")
            dropped = 0
        }
    }
}
