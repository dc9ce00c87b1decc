#if canImport(Glibc)
import Glibc
#endif
public import Foundation
import HallpassSystem
import SystemPackage

/// Reads the audit file and its rotated files for `filterctl log` and
/// `filterctl top`: oldest first, every line that is a record (others are
/// counted and skipped), with `--follow` going on across rotations.
public struct AuditLogReader {
    /// Which records to show.
    public struct Filter: Sendable {
        public var blockedOnly = false
        /// The user's name; a record matches by name or by the name's pseudonym.
        public var user: String?
        /// The user's pseudonym under the school's key, when the key could be read.
        public var userPseudonym: String?
        public var since: Date?

        public init(blockedOnly: Bool = false, user: String? = nil, userPseudonym: String? = nil, since: Date? = nil) {
            self.blockedOnly = blockedOnly
            self.user = user
            self.userPseudonym = userPseudonym
            self.since = since
        }

        public func matches(_ record: AuditLine) -> Bool {
            if blockedOnly, record.action != .block { return false }
            if let since, record.time < since { return false }
            if let user {
                guard let recorded = record[.user], recorded == user || recorded == userPseudonym else { return false }
            }
            return true
        }
    }

    public let path: String
    /// Lines that were not records.
    public private(set) var unreadableLines = 0

    public init(path: String) { self.path = path }

    /// The files to read, oldest first: `PATH.N` ... `PATH.1`, `PATH`.
    public func files() -> [String] {
        var rotated: [(Int, String)] = []
        let folder = (path as NSString).deletingLastPathComponent
        let base = (path as NSString).lastPathComponent
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: folder.isEmpty ? "." : folder)) ?? [] {
            guard entry.hasPrefix(base + "."), let number = Int(entry.dropFirst(base.count + 1)), number > 0 else { continue }
            rotated.append((number, (folder as NSString).appendingPathComponent(entry)))
        }
        var result = rotated.sorted { $0.0 > $1.0 }.map(\.1)
        if FileManager.default.fileExists(atPath: path) { result.append(path) }
        return result
    }

    /// Calls `body` with each matching record and its line (without the newline), oldest first.
    public mutating func read(_ filter: Filter, _ body: (AuditLine, Substring) -> Void) throws {
        for file in files() {
            // A rotated file whose last record is older than --since holds nothing to show.
            if let since = filter.since, file != path, let modified = try? FileManager.default.attributesOfItem(atPath: file)[.modificationDate] as? Date,
                modified < since
            {
                continue
            }
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            consume(data, filter: filter, body)
        }
    }

    mutating func consume(_ data: Data, filter: Filter, _ body: (AuditLine, Substring) -> Void) {
        let decoder = JSONDecoder()
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true) {
            guard let record = try? decoder.decode(AuditLine.self, from: Data(line.utf8)) else {
                unreadableLines += 1
                continue
            }
            if filter.matches(record) { body(record, line) }
        }
    }

    /// Shows what is there, then what is appended, until `shouldStop` says so
    /// (checked twice a second). A file moved away (rotation) is read to its
    /// end, then the new file at `path` from its start.
    public mutating func follow(_ filter: Filter, shouldStop: () -> Bool = { false }, _ body: (AuditLine, Substring) -> Void) throws {
        try read(filter, body)
        var handle = FileHandle(forReadingAtPath: path)
        var identity = AuditLogReader.identity(of: path)
        _ = try? handle?.seekToEnd()
        var pending = Data()
        while !shouldStop() {
            if let handle {
                let data = handle.availableData
                if !data.isEmpty {
                    pending.append(data)
                    if let end = pending.lastIndex(of: UInt8(ascii: "\n")) {
                        consume(pending[pending.startIndex...end], filter: filter, body)
                        pending = Data(pending[pending.index(after: end)...])
                    }
                    continue
                }
            }
            let current = AuditLogReader.identity(of: path)
            if current != nil, current != identity {
                // Rotated: the old file was read to its end above; the new one from its start.
                try? handle?.close()
                handle = FileHandle(forReadingAtPath: path)
                identity = current
                pending = Data()
                continue
            }
            usleep(500_000)
        }
        try? handle?.close()
    }

    static func identity(of path: String) -> [UInt64]? {
        guard let status = try? FileSystem.status(path) else { return nil }
        return [UInt64(status.deviceID.rawValue), UInt64(status.inode.rawValue)]
    }
}

/// The lines `filterctl log` prints and the table of `filterctl top`.
public enum AuditLogText {
    /// `TIME  ACTION  KIND  NAME[:PORT]  USER  REASON`, one line per record.
    public static func line(_ record: AuditLine) -> String {
        var name = record[.url] ?? record[.host] ?? record[.destination] ?? "-"
        if record[.url] == nil, let port = record[.port] { name += ":\(port)" }
        var reason = record[.reason] ?? "-"
        if let category = record[.category] { reason += " \(category)" }
        if let rule = record[.rule] { reason += " (rule \(rule))" }
        let user = record[.user] ?? record[.uid].map { "uid \($0)" } ?? "-"
        return [AuditTime.format(record.time), pad(record.action.rawValue, 5), pad(record[.kind] ?? "-", 5), name, user, reason]
            .joined(separator: "  ")
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    /// Counts of blocked records by name, category and user.
    public struct Tally: Sendable {
        public var names: [String: Int] = [:]
        public var categories: [String: Int] = [:]
        public var users: [String: Int] = [:]
        public var blocked = 0
        public var first: Date?
        public var last: Date?

        public init() {}

        public mutating func add(_ record: AuditLine) {
            guard record.action == .block else { return }
            blocked += 1
            names[record[.host] ?? record[.destination] ?? "-", default: 0] += 1
            categories[record[.category] ?? "(\(record[.reason] ?? "-"))", default: 0] += 1
            users[record[.user] ?? record[.uid].map { "uid \($0)" } ?? "-", default: 0] += 1
            let time = record.time
            if first == nil || time < first! { first = time }
            if last == nil || time > last! { last = time }
        }
    }

    /// Three columns side by side: the most blocked names, categories and users, `limit` rows.
    public static func table(_ tally: Tally, limit: Int = 10) -> String {
        func top(_ counts: [String: Int]) -> [(String, Int)] {
            counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.prefix(limit).map { ($0.key, $0.value) }
        }
        let columns = [("NAME", top(tally.names)), ("CATEGORY", top(tally.categories)), ("USER", top(tally.users))]
        var lines: [String] = []
        if let first = tally.first, let last = tally.last {
            lines.append("\(tally.blocked) blocked from \(AuditTime.format(first)) to \(AuditTime.format(last))")
        } else {
            lines.append("nothing blocked in this time")
            return lines.joined(separator: "\n") + "\n"
        }
        lines.append("")
        let widths = columns.map { column in
            max(column.0.count + 7, (column.1.map { $0.0.count + 2 + String($0.1).count }.max() ?? 0))
        }
        func cell(_ text: String, _ count: String, width: Int) -> String {
            let gap = max(2, width - text.count - count.count)
            return text + String(repeating: " ", count: gap) + count
        }
        lines.append(zip(columns, widths).map { cell($0.0.0, "COUNT", width: $0.1) }.joined(separator: "   "))
        let rows = columns.map(\.1.count).max() ?? 0
        for row in 0..<rows {
            let cells = zip(columns, widths).map { column, width -> String in
                guard row < column.1.count else { return String(repeating: " ", count: width) }
                return cell(column.1[row].0, String(column.1[row].1), width: width)
            }
            lines.append(cells.joined(separator: "   ").replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression))
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
