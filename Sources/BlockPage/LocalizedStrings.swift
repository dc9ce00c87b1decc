/// Every language's strings, complete: English from the built-in file (with
/// any custom overrides), other languages filled up from English.
struct LocalizedStrings: Sendable {
    /// Canonical language tag → key → value.
    let byLanguage: [String: [String: String]]

    var languages: [String] { byLanguage.keys.sorted() }

    /// One custom strings file, already read.
    struct CustomFile {
        var language: String
        var text: String
        var path: String
    }

    init(custom: [CustomFile]) throws(BlockPageError) {
        var tables: [String: [String: String]] = [:]
        var english = Self.builtIn.english
        let keys = Set(english.keys)

        // Built-in languages first, then the custom files on top.
        var customEnglish: [StringsFile.Entry] = []
        var customOthers: [(language: String, entries: [StringsFile.Entry], file: String)] = []
        for file in custom {
            let entries = try StringsFile.parse(file.text, file: file.path)
            for entry in entries where !keys.contains(entry.key) {
                throw .inFile(
                    "strings.unknown-key", file: file.path, line: entry.line,
                    "'\(entry.key)' is not a block page string; the keys are: \(keys.sorted().joined(separator: ", "))"
                )
            }
            if file.language == "en" {
                customEnglish += entries
            } else {
                customOthers.append((file.language, entries, file.path))
            }
        }
        // English overrides first: every other language falls back to the
        // English an admin has set.
        for entry in customEnglish { english[entry.key] = entry.value }
        try Self.checkDirection(english["direction"], file: custom.first { $0.language == "en" }?.path ?? "built-in en.strings")
        tables["en"] = english

        for other in Self.builtIn.others {
            var table = english
            for entry in other.entries { table[entry.key] = entry.value }
            tables[other.language] = table
        }
        for other in customOthers {
            var table = tables[other.language] ?? english
            for entry in other.entries { table[entry.key] = entry.value }
            try Self.checkDirection(table["direction"], file: other.file)
            tables[other.language] = table
        }
        self.byLanguage = tables
    }

    /// The built-in files, parsed once per process (the renderer is made
    /// again on every reload): English as a table, then every other
    /// language's entries. They are constants; the tests parse each one.
    private static let builtIn: (english: [String: String], others: [(language: String, entries: [StringsFile.Entry])]) = {
        func parse(_ text: String, language: String) -> [StringsFile.Entry] {
            do {
                return try StringsFile.parse(text, file: "built-in \(language).strings")
            } catch {
                fatalError("the built-in \(language).strings does not parse: \(error)")
            }
        }
        var english: [String: String] = [:]
        for entry in parse(BuiltInStrings.english, language: "en") { english[entry.key] = entry.value }
        let others = BuiltInStrings.byLanguage.filter { $0.language != "en" }.map { ($0.language, parse($0.text, language: $0.language)) }
        return (english, others)
    }()

    func strings(for language: String) -> [String: String] {
        byLanguage[language] ?? byLanguage["en"] ?? [:]
    }

    private static func checkDirection(_ value: String?, file: String) throws(BlockPageError) {
        guard let value, value != "ltr", value != "rtl" else { return }
        throw .inFile("strings.value", file: file, line: nil, "direction must be ltr or rtl, not '\(value)'")
    }
}

/// Language tags as used in file names (`strings/pt-BR.strings`), in
/// `Content-Language` and in `<html lang>` (the console's strings files too).
public enum LanguageTag {
    /// The tag in its usual case (`pt-BR`, `zh-Hant`, `ko`), or nil when the
    /// text is not `language(-subtag)*` with a 2–3 letter language.
    public static func canonical(_ text: String) -> String? {
        let subtags = text.split(separator: "-", omittingEmptySubsequences: false)
        guard let primary = subtags.first, (2...3).contains(primary.count), primary.unicodeScalars.allSatisfy(\.isASCIILetter) else {
            return nil
        }
        var result = [primary.lowercased()]
        for subtag in subtags.dropFirst() {
            guard (1...8).contains(subtag.count), subtag.unicodeScalars.allSatisfy({ $0.isASCIILetter || ("0"..."9").contains($0) }) else {
                return nil
            }
            switch subtag.count {
            case 2 where subtag.unicodeScalars.allSatisfy(\.isASCIILetter): result.append(subtag.uppercased())
            case 4 where subtag.unicodeScalars.allSatisfy(\.isASCIILetter): result.append(subtag.prefix(1).uppercased() + subtag.dropFirst().lowercased())
            default: result.append(subtag.lowercased())
            }
        }
        return result.joined(separator: "-")
    }
}
