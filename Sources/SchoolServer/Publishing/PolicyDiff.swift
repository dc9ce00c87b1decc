import Foundation

/// What changed between two policy versions: the policy file's lines as a
/// unified diff, and per list the names added and removed (counts, and the
/// first few of each in the order of the list). Pure: the storage reads the
/// versions and the lists' bytes, this compares them.
public struct PolicyDiff: Sendable, Hashable, Codable {
    public struct ListChange: Sendable, Hashable, Codable {
        public var category: String
        /// nil: the list is not in that version.
        public var fromSHA256: String?
        public var toSHA256: String?
        public var added: Int
        public var removed: Int
        /// The first `PolicyDiff.sampleSize` of each, in the order of their list.
        public var addedNames: [String]
        public var removedNames: [String]
    }

    public var from: Int64
    public var to: Int64
    /// Unified diff lines (`---`, `+++`, `@@ ... @@`, then ` `, `-`, `+` lines); empty when the policy is the same.
    public var policy: [String]
    /// The lists that differ, by category.
    public var lists: [ListChange]

    public static let sampleSize = 20
    /// Lines of context around a change.
    static let context = 3

    /// The unified diff of two texts (nil: no policy in that version).
    public static func unified(_ old: String?, _ new: String?, fromLabel: String, toLabel: String) -> [String] {
        guard old != new else { return [] }
        let a = lines(old)
        let b = lines(new)
        let difference = b.difference(from: a)
        var removed = Set<Int>()
        var inserted = Set<Int>()
        for change in difference {
            switch change {
            case .remove(let offset, _, _): removed.insert(offset)
            case .insert(let offset, _, _): inserted.insert(offset)
            }
        }
        // The edit script: each line kept, removed or added, with its line numbers (1-based).
        struct Line {
            let mark: Character
            let text: String
            let old: Int
            let new: Int
        }
        var script: [Line] = []
        var i = 0
        var j = 0
        while i < a.count || j < b.count {
            if i < a.count, removed.contains(i) {
                script.append(Line(mark: "-", text: a[i], old: i + 1, new: j))
                i += 1
            } else if j < b.count, inserted.contains(j) {
                script.append(Line(mark: "+", text: b[j], old: i, new: j + 1))
                j += 1
            } else {
                script.append(Line(mark: " ", text: a[i], old: i + 1, new: j + 1))
                i += 1
                j += 1
            }
        }
        let changed = script.indices.filter { script[$0].mark != " " }
        guard !changed.isEmpty else { return [] }
        // Hunks: each change with its context, joined where they meet.
        var ranges: [ClosedRange<Int>] = []
        for index in changed {
            let range = max(0, index - context)...min(script.count - 1, index + context)
            if let last = ranges.last, range.lowerBound <= last.upperBound + 1 {
                ranges[ranges.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                ranges.append(range)
            }
        }
        var output = ["--- \(fromLabel)", "+++ \(toLabel)"]
        for range in ranges {
            let hunk = script[range]
            let oldCount = hunk.filter { $0.mark != "+" }.count
            let newCount = hunk.filter { $0.mark != "-" }.count
            let oldStart = hunk.first(where: { $0.mark != "+" })?.old ?? hunk.first!.old
            let newStart = hunk.first(where: { $0.mark != "-" })?.new ?? hunk.first!.new
            output.append("@@ -\(oldStart),\(oldCount) +\(newStart),\(newCount) @@")
            for line in hunk { output.append(String(line.mark) + line.text) }
        }
        return output
    }

    static func lines(_ text: String?) -> [String] {
        guard let text, !text.isEmpty else { return [] }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        return lines
    }

    /// The names of a list, in its order, each once: its lines without blanks
    /// and comments (as RuleListParser skips them), trimmed.
    public static func names(_ bytes: [UInt8]) -> [String] {
        var seen = Set<String>()
        var names: [String] = []
        for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard let first = text.first, !"#!;[".contains(first) else { continue }
            if seen.insert(text).inserted { names.append(text) }
        }
        return names
    }

    /// The change of one list from `old` to `new` (nil: absent).
    public static func listChange(category: String, old: (sha256: String, bytes: [UInt8])?, new: (sha256: String, bytes: [UInt8])?)
        -> ListChange
    {
        let oldNames = old.map { names($0.bytes) } ?? []
        let newNames = new.map { names($0.bytes) } ?? []
        let oldSet = Set(oldNames)
        let newSet = Set(newNames)
        let added = newNames.filter { !oldSet.contains($0) }
        let removed = oldNames.filter { !newSet.contains($0) }
        return ListChange(
            category: category, fromSHA256: old?.sha256, toSHA256: new?.sha256, added: added.count, removed: removed.count,
            addedNames: Array(added.prefix(sampleSize)), removedNames: Array(removed.prefix(sampleSize)))
    }
}

