import Foundation
import Logging
import Synchronization

/// A test server's log, kept in memory at debug level (the service group's
/// and Hummingbird's lifecycle lines included) while what reaches the
/// wrapped handler stays at its own level. When a server of a test does not
/// stop, `StopWatchdog` prints these lines: which services ended and which
/// did not is what a stop that never comes needs to be taken apart.
struct RecordingLogHandler: LogHandler {
    final class Lines: Sendable {
        private let lines = Mutex<[String]>([])
        func add(_ line: String) {
            lines.withLock {
                $0.append(line)
                if $0.count > 400 { $0.removeFirst($0.count - 400) }
            }
        }
        var text: String { lines.withLock { $0.joined(separator: "\n") } }
    }

    var wrapped: any LogHandler
    let lines: Lines
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .debug

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        lines.add("\(Date()) \(event.level) [\(event.source)] \(fields) \(event.message)")
        if event.level >= wrapped.logLevel {
            var forwarded = event
            forwarded.metadata = merged
            wrapped.log(event: forwarded)
        }
    }

    /// `logger` with every line also kept in `lines`.
    static func recording(_ logger: Logger, into lines: Lines) -> Logger {
        var recording = logger
        recording.handler = RecordingLogHandler(wrapped: logger.handler, lines: lines, metadata: logger.handler.metadata)
        recording.logLevel = .debug
        return recording
    }
}

/// Prints a server's recorded log when its stop takes longer than
/// `seconds` (a stop takes well under a second; a test time limit of ten
/// minutes would otherwise be all anyone learns). Ended once the stop is done.
struct StopWatchdog {
    private let task: Task<Void, Never>

    init(_ what: String, lines: RecordingLogHandler.Lines, seconds: Int = 60) {
        task = Task.detached {
            do {
                try await Task.sleep(for: .seconds(seconds))
            } catch {
                return
            }
            FileHandle.standardError.write(
                Data("\n=== \(what): not stopped \(seconds) s after it was asked to; its log:\n\(lines.text)\n=== end of \(what)'s log\n".utf8))
        }
    }

    func done() { task.cancel() }
}
