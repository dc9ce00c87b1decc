import Foundation
import HallpassSystem
import SharedStore

/// The files of a custom template folder (`blockPage.templates`), read once:
///
/// ```
/// <folder>/block.mustache       replaces the block page        (optional)
/// <folder>/received.mustache    replaces "request received"    (optional)
/// <folder>/error.mustache       replaces the error page        (optional)
/// <folder>/strings/<lang>.strings                               (optional)
/// ```
///
/// Other `.mustache` names are refused (a misspelt file must not be silently
/// ignored); files with other extensions and hidden files are ignored.
struct TemplateFolder {
    var templates: [PageKind: (text: String, path: String)] = [:]
    var strings: [LocalizedStrings.CustomFile] = []

    init(path folder: String) throws(BlockPageError) {
        guard isDirectory(folder) else {
            throw BlockPageError(
                code: "template.unreadable",
                message: "block page template folder \(folder) does not exist or is not a folder; fix blockPage.templates or create it",
                file: folder
            )
        }
        for name in try listing(folder, code: "template.unreadable") where name.hasSuffix(".mustache") && !name.hasPrefix(".") {
            let path = folder + "/" + name
            guard let kind = PageKind.allCases.first(where: { $0.fileName == name }) else {
                let known = PageKind.allCases.map(\.fileName).joined(separator: ", ")
                throw .inFile("template.unknown-file", file: path, line: nil, "not a block page template; the templates are \(known)")
            }
            templates[kind] = (try readText(path, limit: PageTemplate.maximumBytes, codePrefix: "template"), path)
        }

        let stringsFolder = folder + "/strings"
        guard isDirectory(stringsFolder) else { return }
        for name in try listing(stringsFolder, code: "strings.unreadable") where name.hasSuffix(".strings") && !name.hasPrefix(".") {
            let path = stringsFolder + "/" + name
            let tag = String(name.dropLast(".strings".count))
            guard let language = LanguageTag.canonical(tag) else {
                throw .inFile(
                    "strings.language", file: path, line: nil,
                    "'\(tag)' is not a language tag; name the file after the language, e.g. en.strings, ko.strings, pt-BR.strings"
                )
            }
            if let earlier = strings.first(where: { $0.language == language }) {
                throw .inFile("strings.language", file: path, line: nil, "\(earlier.path) is already the file for '\(language)'")
            }
            strings.append(.init(language: language, text: try readText(path, limit: StringsFile.maximumBytes, codePrefix: "strings"), path: path))
        }
    }
}

/// Whether `path` is a folder (symbolic links followed): it lists.
private func isDirectory(_ path: String) -> Bool {
    (try? FileManager.default.contentsOfDirectory(atPath: path)) != nil
}

private func listing(_ folder: String, code: String) throws(BlockPageError) -> [String] {
    do {
        return try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
    } catch {
        throw BlockPageError(code: code, message: "cannot list the folder \(folder): \(error.localizedDescription)", file: folder)
    }
}

/// A regular file of at most `limit` bytes (a symbolic link to one is
/// fine), as UTF-8 text.
private func readText(_ path: String, limit: Int, codePrefix: String) throws(BlockPageError) -> String {
    let data: [UInt8]
    do {
        data = try BoundedFile.read(path, limit: UInt64(limit), followingLinks: true)
    } catch .tooLarge {
        throw .inFile("\(codePrefix).too-large", file: path, line: nil, "more than the \(limit) bytes a file may have")
    } catch .notRegular {
        throw .inFile("\(codePrefix).unreadable", file: path, line: nil, "not a regular file")
    } catch {
        throw .inFile("\(codePrefix).unreadable", file: path, line: nil, "cannot read it: \(error)")
    }
    guard let text = String(validating: data, as: UTF8.self) else {
        throw .inFile("\(codePrefix).unreadable", file: path, line: nil, "not UTF-8 text; save it as UTF-8")
    }
    return text
}
