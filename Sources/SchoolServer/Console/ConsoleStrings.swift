import BlockPage
import Foundation
import HallpassSystem

/// The console's words, per language: the built-in English and Korean, and
/// the files of `console.strings` on top (docs/console.md, "Translating").
/// The files are the block page's format (`key = value`, one a line; BlockPage's
/// `StringsFile`). English defines the keys: a file may set only keys that
/// are here, and a key a language leaves out is taken from English. A value
/// may hold `{name}` placeholders that the page fills in (a date, a count);
/// the page escapes the result.
struct ConsoleStrings: Sendable {
    /// Language tag → key → value.
    let byLanguage: [String: [String: String]]
    let defaultLanguage: String

    var languages: [String] { byLanguage.keys.sorted() }

    init(folder: String?, defaultLanguage: String) throws(ServerError) {
        var english: [String: String] = [:]
        for entry in Self.parse(ConsoleBuiltInStrings.english, file: "built-in en.strings") { english[entry.key] = entry.value }
        let keys = Set(english.keys)
        var custom: [(language: String, path: String, entries: [StringsFile.Entry])] = []
        if let folder {
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
            } catch {
                throw ServerError(code: "console.strings", message: "console.strings: cannot list the folder \(folder): \(error.localizedDescription)")
            }
            for name in names where name.hasSuffix(".strings") && !name.hasPrefix(".") {
                let path = folder + "/" + name
                let tag = String(name.dropLast(".strings".count))
                guard let language = LanguageTag.canonical(tag) else {
                    throw ServerError(
                        code: "console.strings", message: "\(path): '\(tag)' is not a language tag; name the file en.strings, ko.strings, ...")
                }
                let text: String
                do {
                    text = String(decoding: try BoundedFile.read(path, limit: UInt64(StringsFile.maximumBytes)), as: UTF8.self)
                } catch {
                    throw ServerError(
                        code: "console.strings", message: "\(path): cannot read it (at most \(StringsFile.maximumBytes) bytes): \(error)")
                }
                let entries: [StringsFile.Entry]
                do {
                    entries = try StringsFile.parse(text, file: path)
                } catch {
                    throw ServerError(code: "console.strings", message: error.message)
                }
                for entry in entries where !keys.contains(entry.key) {
                    throw ServerError(
                        code: "console.strings",
                        message: "\(path), line \(entry.line): '\(entry.key)' is not a console string (the built-in en.strings lists them)")
                }
                custom.append((language, path, entries))
            }
        }
        // English first, with its custom entries: every other language falls back to it.
        for file in custom where file.language == "en" {
            for entry in file.entries { english[entry.key] = entry.value }
        }
        var tables: [String: [String: String]] = ["en": english]
        for (language, text) in ConsoleBuiltInStrings.others {
            var table = english
            for entry in Self.parse(text, file: "built-in \(language).strings") { table[entry.key] = entry.value }
            tables[language] = table
        }
        for file in custom where file.language != "en" {
            var table = tables[file.language] ?? english
            for entry in file.entries { table[entry.key] = entry.value }
            tables[file.language] = table
        }
        for (language, table) in tables where table["direction"] != "ltr" && table["direction"] != "rtl" {
            throw ServerError(code: "console.strings", message: "the \(language) strings: direction must be ltr or rtl")
        }
        guard tables[defaultLanguage] != nil else {
            throw ServerError(
                code: "console.language",
                message: "console.language '\(defaultLanguage)' has no strings; the languages are \(tables.keys.sorted().joined(separator: ", "))")
        }
        byLanguage = tables
        self.defaultLanguage = defaultLanguage
    }

    private static func parse(_ text: String, file: String) -> [StringsFile.Entry] {
        do {
            return try StringsFile.parse(text, file: file)
        } catch {
            fatalError("the console's \(file) does not parse: \(error)")
        }
    }

    func table(_ language: String) -> [String: String] {
        byLanguage[language] ?? byLanguage[defaultLanguage] ?? [:]
    }

    /// The language a page is shown in: the one chosen with the language
    /// form (its cookie), else the browser's preference, else the default.
    func choose(chosen: String?, acceptLanguage: String?) -> String {
        if let chosen, let tag = LanguageTag.canonical(chosen), byLanguage[tag] != nil { return tag }
        return AcceptLanguage.choose(acceptLanguage, from: languages, default: defaultLanguage)
    }
}

/// A language tag as the console's files and settings write it.
enum ConsoleLanguage {
    static func canonical(_ text: String) -> String? { LanguageTag.canonical(text) }
}

/// Fills `{name}` placeholders of a string with values (plain text: the
/// page escapes the whole). A placeholder with no value stays as it is.
enum ConsoleText {
    static func fill(_ template: String, _ values: [String: String]) -> String {
        // One pass: a value that holds braces is never read as a placeholder.
        var result = ""
        var rest = template[...]
        while let open = rest.firstIndex(of: "{") {
            result += rest[..<open]
            let after = rest[rest.index(after: open)...]
            if let close = after.firstIndex(of: "}"), let value = values[String(after[..<close])] {
                result += value
                rest = after[after.index(after: close)...]
            } else {
                result += "{"
                rest = after
            }
        }
        return result + rest
    }
}
