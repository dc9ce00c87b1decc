public import Foundation
import HallpassSystem
import SharedStore
import Synchronization
import SystemPackage

/// A child process started with posix_spawn (HallpassSystem's
/// `ProcessID.spawn`) and reaped by its pid.
///
/// filter-control runs filter-data for as long as it lives and short
/// commands (iptables-restore) next to it; each is waited for by its own
/// pid, so no reaping of one can steal another's exit status (Foundation's
/// Process reaps through a shared SIGCHLD handler and has been seen to miss
/// an exit while another child was running).
public final class ChildProcess: Sendable {
    public let pid: Int32
    /// The exit status, once reaped.
    private let status = Mutex<Int32?>(nil)

    public struct LaunchError: Error, CustomStringConvertible {
        public var executable: String
        public var errno: Int32
        public var description: String { "cannot start \(executable): \(Errno(rawValue: errno))" }
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
        do {
            pid = try ProcessID.spawn(
                executable: executable, arguments: arguments,
                descriptors: descriptors.map { (FileDescriptor(rawValue: $0.from), FileDescriptor(rawValue: $0.to)) }, outputPath: outputPath,
                environment: extra, inheritEnvironment: inheritEnvironment
            ).rawValue
        } catch {
            throw LaunchError(executable: executable, errno: error.rawValue)
        }
    }

    /// The exit status once reaped: the code, or 128 + the signal that ended it.
    public var exitStatus: Int32? {
        status.withLock { $0 }
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
        // Held across a blocking reap: a second caller waits for its status rather than
        // reaping a pid that may already belong to another process.
        status.withLock { status in
            if let status { return status }
            status = ProcessID(rawValue: pid).reap(blocking: blocking)
            return status
        }
    }

    /// Sends `signal` unless the child has ended; returns why the kernel
    /// refused it, or nil. Root may signal a process that runs as another
    /// user (filter-data drops to its own, `queue.user`) only with CAP_KILL.
    public func send(_ signal: Int32) -> String? {
        guard isRunning else { return nil }
        do {
            try ProcessID(rawValue: pid).send(signal)
            return nil
        } catch .noSuchProcess {
            return nil
        } catch {
            return error.description + (error == .notPermitted ? " (signalling another user's process needs CAP_KILL)" : "")
        }
    }

    /// Waits at most `seconds` for the child to end; its exit status, or nil while it runs.
    /// For tests and one-off commands (filter-data's supervisor waits in its poll(2)
    /// instead): it checks every 10 ms, against the monotonic clock, so a step of
    /// the wall clock neither cuts the wait short nor stretches it.
    public func wait(atMost seconds: Double) -> Int32? {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .milliseconds(Int64((seconds * 1000).rounded(.up))))
        while isRunning {
            if clock.now >= deadline { return nil }
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
    public static func run(_ executable: String, _ arguments: [String], input text: String? = nil) throws -> (status: Int32, output: String) {
        let input: (readEnd: FileDescriptor, writeEnd: FileDescriptor)
        let output: (readEnd: FileDescriptor, writeEnd: FileDescriptor)
        do {
            input = try FileDescriptor.pipe(options: .closeOnExec)
        } catch {
            throw LaunchError(executable: executable, errno: error.rawValue)
        }
        do {
            output = try FileDescriptor.pipe(options: .closeOnExec)
        } catch {
            input.readEnd.closeQuietly()
            input.writeEnd.closeQuietly()
            throw LaunchError(executable: executable, errno: error.rawValue)
        }
        let child: ChildProcess
        do {
            child = try ChildProcess(
                executable: executable, arguments: arguments,
                descriptors: [(input.readEnd.rawValue, 0), (output.writeEnd.rawValue, 1), (output.writeEnd.rawValue, 2)])
        } catch {
            for descriptor in [input.readEnd, input.writeEnd, output.readEnd, output.writeEnd] { descriptor.closeQuietly() }
            throw error
        }
        input.readEnd.closeQuietly()
        output.writeEnd.closeQuietly()
        // The commands run here read all their input before they write much,
        // so writing first and reading after cannot deadlock on these sizes.
        // A failed write leaves the rest unwritten; the command's output and
        // status tell what happened.
        if let text {
            try? input.writeEnd.write(contentsOf: Array(text.utf8))
        }
        input.writeEnd.closeQuietly()
        var collected: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while let count = try? output.readEnd.readSome(into: &buffer), count > 0 {
            if collected.count < 1 << 20 { collected.append(contentsOf: buffer[0..<count]) }
        }
        output.readEnd.closeQuietly()
        return (child.wait(), String(decoding: collected, as: UTF8.self))
    }
}

/// The read end of a pipe that a child writes its standard output and error
/// to, split into lines for filter-control's log. Non-blocking: the
/// supervisor polls it with the control channel.
final class ChildOutput {
    let descriptor: FileDescriptor
    let writeEnd: FileDescriptor
    private var writeEndOpen = true
    private var partial: [UInt8] = []
    /// A line longer than this is cut (filter-data's lines are short).
    static let longestLine = 4096

    init() throws(ChildProcess.LaunchError) {
        do {
            (descriptor, writeEnd) = try FileDescriptor.pipe(options: .closeOnExec)
        } catch {
            throw ChildProcess.LaunchError(executable: "pipe", errno: error.rawValue)
        }
        // Only the read end: the write end's copy in the child blocks as a pipe should.
        try? descriptor.setNonBlocking()
    }

    deinit {
        descriptor.closeQuietly()
        closeWriteEnd()
    }

    /// Once the child has its copy: the child's exit then ends the pipe.
    func closeWriteEnd() {
        if writeEndOpen { writeEnd.closeQuietly() }
        writeEndOpen = false
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
    /// child has exited) also the last, unterminated one. True once the
    /// pipe has ended (every writer closed it).
    @discardableResult
    func forwardLines(to log: (String) -> Void, untilEnd: Bool = false) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        var ended = false
        while true {
            let count: Int
            do {
                count = try descriptor.readSome(into: &buffer)
            } catch {
                // Nothing waiting (EAGAIN), or an error that would wake every poll (none is expected on a pipe).
                ended = error != .resourceTemporarilyUnavailable
                break
            }
            guard count > 0 else {
                ended = true
                break
            }
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
        return ended
    }
}

/// A pipe that wakes a thread blocked in poll(2): `wake()`, from any thread,
/// makes `descriptor` readable until the thread calls `drain()`. Both ends
/// are non-blocking, so a wake never blocks, however many come before a drain.
final class WakeUpPipe: Sendable {
    let descriptor: FileDescriptor
    private let writeEnd: FileDescriptor

    init() throws(Errno) {
        (descriptor, writeEnd) = try FileDescriptor.pipe(options: .closeOnExec)
        try descriptor.setNonBlocking()
        try writeEnd.setNonBlocking()
    }

    deinit {
        descriptor.closeQuietly()
        writeEnd.closeQuietly()
    }

    func wake() {
        // A full pipe (EAGAIN) is awake already.
        _ = try? writeEnd.writeSome([1])
    }

    func drain() {
        var buffer = [UInt8](repeating: 0, count: 256)
        while let count = try? descriptor.readSome(into: &buffer), count > 0 {}
    }
}
