/// The strings file format, one file per language (`strings/<lang>.strings`):
///
/// ```
/// # A comment: a line whose first non-blank character is '#'.
/// heading = This page is blocked
/// ```
///
/// UTF-8 text; one `key = value` per line; spaces around the key and the
/// value are dropped; the value runs to the end of the line (a `#` inside it
/// is text); blank lines are ignored. Keys are letters and digits, starting
/// with a letter. Values are plain text: the page escapes them.
///
/// Public for hallpass-server's console, whose strings a school translates
/// in files of the same format.
public enum StringsFile {
    public struct Entry: Equatable, Sendable {
        public var key: String
        public var value: String
        public var line: Int
    }

    /// The largest strings file read.
    public static let maximumBytes = 64 * 1024

    public static func parse(_ text: String, file: String) throws(BlockPageError) -> [Entry] {
        var entries: [Entry] = []
        var lineNumbers: [String: Int] = [:]
        // Splitting on scalars, not Characters, keeps "\r\n" apart so that
        // Windows line ends work.
        let lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, scalars) in lines.enumerated() {
            let lineNumber = index + 1
            var line = String(String.UnicodeScalarView(scalars))
            if lineNumber == 1, line.hasPrefix("\u{FEFF}") { line.removeFirst() }
            let content = line.trimmingBlanks()
            if content.isEmpty || content.hasPrefix("#") { continue }
            guard let equals = content.firstIndex(of: "=") else {
                throw .inFile("strings.syntax", file: file, line: lineNumber, "expected 'key = value' or a '#' comment, found '\(content.prefix(60))'")
            }
            let key = String(content[..<equals]).trimmingBlanks()
            let value = String(content[content.index(after: equals)...]).trimmingBlanks()
            guard isValidKey(key) else {
                throw .inFile("strings.syntax", file: file, line: lineNumber, "'\(key.prefix(60))' is not a key: keys are letters and digits, starting with a letter")
            }
            if let control = value.unicodeScalars.first(where: { $0.properties.generalCategory == .control && $0 != "\t" }) {
                throw .inFile(
                    "strings.syntax", file: file, line: lineNumber,
                    "the value of '\(key)' contains the control character U+\(String(control.value, radix: 16, uppercase: true))"
                )
            }
            if let earlier = lineNumbers[key] {
                throw .inFile("strings.duplicate-key", file: file, line: lineNumber, "'\(key)' is already set on line \(earlier)")
            }
            lineNumbers[key] = lineNumber
            entries.append(Entry(key: key, value: value, line: lineNumber))
        }
        return entries
    }

    private static func isValidKey(_ key: String) -> Bool {
        guard let first = key.unicodeScalars.first, first.isASCIILetter else { return false }
        return key.unicodeScalars.allSatisfy { $0.isASCIILetter || ("0"..."9").contains($0) }
    }
}

extension Unicode.Scalar {
    var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}

extension String {
    /// Without leading and trailing spaces, tabs and carriage returns.
    func trimmingBlanks() -> String {
        let isBlank = { (scalar: Unicode.Scalar) in scalar == " " || scalar == "\t" || scalar == "\r" }
        let scalars = unicodeScalars
        guard let start = scalars.firstIndex(where: { !isBlank($0) }), let end = scalars.lastIndex(where: { !isBlank($0) }) else {
            return ""
        }
        return String(scalars[start...end])
    }
}
