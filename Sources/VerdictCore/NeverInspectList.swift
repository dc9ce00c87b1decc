// hallpass's built-in never-inspect list (rules/never-inspect/names, carried
// in NeverInspectBuiltIn.swift): the names whose connections are spliced
// whatever a school's `inspect.hosts` says. A school adds to it and removes
// entries only by naming them exactly (docs/inspection.md).

/// A list of never-inspect entries in groups, as rules/never-inspect/names writes them.
public struct NeverInspectList: Sendable, Hashable {
    public struct Entry: Sendable, Hashable {
        /// The entry as written (`paypal.com`, `=update.microsoft.com`): what `inspectAnyway` names.
        public var text: String
        public var pattern: RulePattern
        /// The group it is in (`banking`, `identity`, ...).
        public var group: String
    }

    /// The group whose entries a header rule inspects anyway (the headers only work there).
    public static let identityGroup = "identity"

    public var entries: [Entry]

    public init(entries: [Entry]) {
        self.entries = entries
    }

    /// A line of the list that does not read.
    public struct ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        public var line: Int
        public var message: String
        public var description: String { "never-inspect list line \(line): \(message)" }
    }

    /// Reads the list's text: `[group]` lines, `#` comments, one entry a line.
    /// Entries are names (`example.com`, `=example.com`, `*.example.com`), never
    /// addresses or URL prefixes, and each is written once.
    public init(text: String) throws(ParseError) {
        var entries: [Entry] = []
        var group: String? = nil
        var seen: Set<String> = []
        var number = 0
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let line = raw.trimmingASCIISpaces()
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                guard line.hasSuffix("]"), line.count > 2 else { throw ParseError(line: number, message: "'\(line)' is not a [group] line") }
                group = String(line.dropFirst().dropLast())
                continue
            }
            guard let group else { throw ParseError(line: number, message: "an entry before the first [group]") }
            let pattern: RulePattern
            do {
                pattern = try RulePattern(line)
            } catch {
                throw ParseError(line: number, message: error.description)
            }
            guard case .domain = pattern else { throw ParseError(line: number, message: "'\(line)' is not a name (addresses and paths are not inspected anyway)") }
            guard pattern.description == line else { throw ParseError(line: number, message: "'\(line)' is written '\(pattern.description)'") }
            guard seen.insert(line).inserted else { throw ParseError(line: number, message: "'\(line)' is listed twice") }
            entries.append(Entry(text: line, pattern: pattern, group: group))
        }
        self.entries = entries
    }

    /// The list hallpass ships. The tests check that every line of it reads;
    /// a line that did not would be left out here rather than stop a program.
    public static let builtIn: NeverInspectList = (try? NeverInspectList(text: builtInText)) ?? NeverInspectList(entries: [])

    /// The entry written exactly `text` (spaces around it and letter case aside), if any.
    public func entry(named text: String) -> Entry? {
        let wanted = text.trimmingASCIISpaces().lowercased()
        return entries.first { $0.text == wanted }
    }

    /// The entries that cover `host`, in the list's order.
    public func entries(covering host: HostName) -> [Entry] {
        entries.filter { $0.pattern.coversName(host) }
    }
}

extension RulePattern {
    /// Whether this name pattern covers `host` (never for addresses and URL prefixes).
    public func coversName(_ host: HostName) -> Bool {
        guard case .domain(let name, let kind) = self else { return false }
        let pattern = name.bytes
        let bytes = host.bytes
        if bytes == pattern { return kind.applies(atDepth: 0) }
        guard bytes.count > pattern.count, kind.applies(atDepth: 1) else { return false }
        let start = bytes.count - pattern.count
        return bytes[start - 1] == UInt8(ascii: ".") && bytes[start...].elementsEqual(pattern)
    }
}
