import FilterControl
import Foundation
import HallpassSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What one attempt to hand a message on came to.
public enum AlertSendOutcome: Sendable, Hashable {
    case sent
    /// Not sent; `reason` is one line for the delivery's `last_error`.
    case notSent(reason: String)
}

/// The host's sendmail interface (`alerts.sendmail`): the program and its
/// arguments run directly (posix_spawn, never a shell, so nothing in a
/// message or an address is ever read as a command), the message on its
/// standard input, its standard error read for the reason it gives. Exit
/// status 0 is sent; anything else, or no exit within `timeout` (the child
/// is then killed), is not, with the first line of its standard error.
/// The child holds nothing of the server's but the two pipes.
public struct SendmailCommand: Sendable {
    public var command: [String]
    public var timeout: Duration

    public init(command: [String], timeout: Duration = .seconds(30)) {
        self.command = command
        self.timeout = timeout
    }

    /// The most of standard error kept (its first line is what is reported).
    static let errorBytes = 4096

    public func send(_ message: [UInt8]) async -> AlertSendOutcome {
        guard let program = command.first else { return .notSent(reason: "no sendmail command") }
        // A child that exits without reading all of its input makes the next
        // write fail; with SIGPIPE ignored that is EPIPE, not the server's end.
        // (SwiftNIO ignores it too once it has a socket; this does not rely on that.)
        _ = Self.brokenPipesIgnored
        let input: (readEnd: FileDescriptor, writeEnd: FileDescriptor)
        let errors: (readEnd: FileDescriptor, writeEnd: FileDescriptor)
        let nothing: FileDescriptor
        do {
            input = try FileDescriptor.pipe(options: .closeOnExec)
        } catch {
            return .notSent(reason: "cannot make a pipe for \(program): \(error)")
        }
        do {
            errors = try FileDescriptor.pipe(options: .closeOnExec)
        } catch {
            input.readEnd.closeQuietly()
            input.writeEnd.closeQuietly()
            return .notSent(reason: "cannot make a pipe for \(program): \(error)")
        }
        do {
            nothing = try FileDescriptor.open(FilePath("/dev/null"), .writeOnly, options: .closeOnExec)
        } catch {
            for descriptor in [input.readEnd, input.writeEnd, errors.readEnd, errors.writeEnd] { descriptor.closeQuietly() }
            return .notSent(reason: "cannot open /dev/null: \(error)")
        }
        let child: ChildProcess
        do {
            child = try ChildProcess(
                executable: program, arguments: Array(command.dropFirst()),
                descriptors: [(input.readEnd.rawValue, 0), (nothing.rawValue, 1), (errors.writeEnd.rawValue, 2)])
        } catch {
            for descriptor in [input.readEnd, input.writeEnd, errors.readEnd, errors.writeEnd, nothing] { descriptor.closeQuietly() }
            return .notSent(reason: error.description)
        }
        // The child has its copies; with ours closed, its exit ends the error pipe and its input ends at ours.
        input.readEnd.closeQuietly()
        errors.writeEnd.closeQuietly()
        nothing.closeQuietly()
        defer { errors.readEnd.closeQuietly() }
        var writeEnd: FileDescriptor? = input.writeEnd
        defer { writeEnd?.closeQuietly() }
        try? input.writeEnd.setNonBlocking()
        try? errors.readEnd.setNonBlocking()

        // Non-blocking both ways, in small steps on the task's own time: a
        // child that stops reading, or writes more than a pipe holds, or never
        // exits, never holds a thread of the server.
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var written = 0
        var stderr: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        func readErrors() {
            while let count = try? errors.readEnd.readSome(into: &buffer), count > 0 {
                if stderr.count < Self.errorBytes { stderr += buffer[0..<min(count, Self.errorBytes - stderr.count)] }
            }
        }
        while true {
            if let descriptor = writeEnd {
                do {
                    while written < message.count {
                        written += try descriptor.writeSome(message, from: written)
                    }
                    descriptor.closeQuietly()
                    writeEnd = nil
                } catch .resourceTemporarilyUnavailable {
                    // The pipe is full: the child reads on its own time.
                } catch {
                    // EPIPE: the child closed its input; its exit status says what it thought of that.
                    descriptor.closeQuietly()
                    writeEnd = nil
                }
            }
            readErrors()
            if !child.isRunning { break }
            // The server stops: the child goes with it, and the delivery is tried again after the restart.
            let stopping = Task.isCancelled
            if stopping || clock.now >= deadline {
                _ = child.send(SIGKILL)
                // A killed child is reaped at once; the bound is for a kill the kernel refused.
                for _ in 0..<500 where child.isRunning { try? await Task.sleep(for: .milliseconds(10)) }
                readErrors()
                if stopping { return .notSent(reason: "the server stopped while \(program) ran" + Self.firstLine(stderr, prefix: ": ")) }
                return .notSent(reason: "\(program) did not finish within \(timeout.components.seconds) s; it was stopped" + Self.firstLine(stderr, prefix: ": "))
            }
            try? await Task.sleep(for: .milliseconds(written < message.count ? 2 : 10))
        }
        readErrors()
        let status = child.exitStatus ?? 255
        if status == 0 {
            if written < message.count {
                return .notSent(reason: "\(program) exited before reading the whole message" + Self.firstLine(stderr, prefix: ": "))
            }
            return .sent
        }
        let line = Self.firstLine(stderr, prefix: "")
        return .notSent(reason: line.isEmpty ? "\(program) exited with status \(status)" : line)
    }

    /// The first non-empty line of `bytes`, control characters made spaces, at most 300 characters; `prefix` before it when there is one.
    static func firstLine(_ bytes: [UInt8], prefix: String) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let line = text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }).map({ $0.trimmingCharacters(in: .whitespaces) })
            .first(where: { !$0.isEmpty })
        else { return "" }
        return prefix + AlertEmail.clean(line, 300)
    }

    private static let brokenPipesIgnored: Bool = {
        signal(SIGPIPE, SIG_IGN)
        return true
    }()
}
