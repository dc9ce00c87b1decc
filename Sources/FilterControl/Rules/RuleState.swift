import HallpassSystem
import SharedStore

/// What filter-control remembers about rule updates, in `rules.directory/state`:
/// the installed version (the floor for "no rollback", also after a
/// restart), when and where it came from, the ETag for the next conditional
/// GET, and the last attempt and its result (what `filterctl status` shows).
///
/// The file is small text, one `key value` line each, written atomically
/// (temporary file, fsync, rename, fsync of the folder):
///
/// ```
/// hallpass-rules-state 1
/// installed-version 42
/// installed-at 2026-11-22T08:00:03Z
/// installed-from https://rules.example.org/hallpass/
/// previous-version 41
/// etag "5f1c-2a9b"
/// etag-source https://rules.example.org/hallpass/
/// last-attempt 2026-11-22T08:30:00Z
/// last-result refused
/// last-code fetch.unreachable
/// last-message cannot reach the rule server rules.example.org:443: connection refused; ...
/// last-success 2026-11-22T08:00:03Z
/// last-download-bytes 1834
/// last-files kept rules.hpstore; downloaded policy.yaml
/// ```
///
/// Unknown lines are ignored, so a newer hallpass may add keys.
public struct RuleState: Sendable, Hashable {
    public enum Result: String, Sendable, Hashable {
        case installed
        case alreadyCurrent = "already-current"
        case refused
    }

    public static let fileName = "state"

    public var installedVersion: UInt64?
    /// Unix seconds.
    public var installedAt: Int64?
    /// The source URL (or folder) of the installed bundle.
    public var installedFrom: String?
    public var previousVersion: UInt64?
    /// The manifest's entity tag, valid only for `etagSource`.
    public var etag: String?
    public var etagSource: String?
    /// Unix seconds.
    public var lastAttemptAt: Int64?
    public var lastResult: Result?
    /// The refusal code of the last attempt (nil unless refused).
    public var lastCode: String?
    /// What happened on the last attempt, in words.
    public var lastMessage: String?
    /// The last time the server confirmed or delivered the rules (Unix seconds).
    public var lastSuccessAt: Int64?
    /// The bytes the last attempt downloaded, all requests together (bodies only).
    public var lastDownloadBytes: UInt64?
    /// How the last installed bundle's files came: kept, patched from a delta, downloaded.
    public var lastFiles: String?

    public init() {}

    /// The file's bytes.
    public var encoded: [UInt8] {
        var text = "hallpass-rules-state 1\n"
        func line(_ key: String, _ value: String?) {
            guard let value else { return }
            let clean = String(value.map { $0.isNewline || $0 == "\t" ? " " : $0 }.prefix(1000))
            text += "\(key) \(clean)\n"
        }
        line("installed-version", installedVersion.map(String.init))
        line("installed-at", installedAt.map(UTCTime.format))
        line("installed-from", installedFrom)
        line("previous-version", previousVersion.map(String.init))
        line("etag", etag)
        line("etag-source", etagSource)
        line("last-attempt", lastAttemptAt.map(UTCTime.format))
        line("last-result", lastResult?.rawValue)
        line("last-code", lastCode)
        line("last-message", lastMessage)
        line("last-success", lastSuccessAt.map(UTCTime.format))
        line("last-download-bytes", lastDownloadBytes.map(String.init))
        line("last-files", lastFiles)
        return Array(text.utf8)
    }

    /// Reads the file's bytes; anything unreadable leaves that field empty
    /// (a damaged state file loses history, never the installed rules).
    public init(parsing bytes: [UInt8]) {
        self.init()
        let text = String(decoding: bytes, as: UTF8.self)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: true)
        guard lines.first == "hallpass-rules-state 1" else { return }
        lines.removeFirst()
        for line in lines {
            guard let space = line.firstIndex(of: " ") else { continue }
            let key = line[..<space]
            let value = String(line[line.index(after: space)...])
            switch key {
            case "installed-version": installedVersion = UInt64(value)
            case "installed-at": installedAt = UTCTime.parse(value)
            case "installed-from": installedFrom = value
            case "previous-version": previousVersion = UInt64(value)
            case "etag": etag = value
            case "etag-source": etagSource = value
            case "last-attempt": lastAttemptAt = UTCTime.parse(value)
            case "last-result": lastResult = Result(rawValue: value)
            case "last-code": lastCode = value
            case "last-message": lastMessage = value
            case "last-success": lastSuccessAt = UTCTime.parse(value)
            case "last-download-bytes": lastDownloadBytes = UInt64(value)
            case "last-files": lastFiles = value
            default: continue
            }
        }
    }

    /// Reads `directory/state`; an empty state when there is none.
    public static func load(directory: String) -> RuleState {
        guard let bytes = try? BoundedFile.read(directory + "/" + fileName, limit: 64 * 1024) else { return RuleState() }
        return RuleState(parsing: bytes)
    }

    /// Writes `directory/state` atomically and durably.
    func save(directory: String) throws(RuleUpdateError) {
        let path = directory + "/" + RuleState.fileName
        do {
            try AtomicFile.write(encoded, to: path, mode: 0o644)
        } catch {
            throw .io(path: error.path, reason: error.reason)
        }
    }
}
