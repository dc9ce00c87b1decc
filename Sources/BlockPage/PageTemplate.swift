import Mustache

/// The three pages and the files that may replace them in a template folder.
enum PageKind: String, Sendable, CaseIterable {
    case block, received, error

    var fileName: String { "\(rawValue).mustache" }

    var builtInText: String {
        switch self {
        case .block: BuiltInTemplates.block
        case .received: BuiltInTemplates.received
        case .error: BuiltInTemplates.error
        }
    }

    /// The built-in template, compiled once per process (the renderer is
    /// made again on every reload). The texts are constants; the tests
    /// render each one.
    var builtInTemplate: MustacheTemplate {
        guard let template = Self.builtInTemplates[self] else { fatalError("no built-in \(fileName)") }
        return template
    }

    private static let builtInTemplates: [PageKind: MustacheTemplate] = {
        var templates: [PageKind: MustacheTemplate] = [:]
        for kind in PageKind.allCases {
            do {
                templates[kind] = try PageTemplate.compile(kind.builtInText, file: "built-in \(kind.fileName)")
            } catch {
                fatalError("the built-in \(kind.fileName) does not compile: \(error)")
            }
        }
        return templates
    }()
}

/// Compiles and checks page templates.
///
/// Escaping: swift-mustache's `{{name}}` escapes `<` `>` `&` `"` and `'`
/// (its `String.htmlEscape`), which makes a value safe both in text and in a
/// quoted attribute, so values are handed over unescaped. What could switch
/// that escaping off is refused when a template is loaded: `{{{name}}}` and
/// `{{&name}}` (unescaped output), `{{=...=}}` (new delimiters would hide
/// tags from this check), `{{%...}}` (the `CONTENT_TYPE` pragma), and
/// partials `{{>...}}` / `{{<...}}` (there is no partial library).
enum PageTemplate {
    /// The largest template file read.
    static let maximumBytes = 256 * 1024

    static func compile(_ text: String, file: String) throws(BlockPageError) -> MustacheTemplate {
        try refuseUnsafeTags(text, file: file)
        do {
            return try MustacheTemplate(string: text)
        } catch let error as MustacheTemplate.ParserError {
            throw .inFile(
                "template.syntax", file: file, line: error.context.lineNumber, column: error.context.columnNumber,
                "\(explanation(of: error.error)) (in '\(error.context.line.prefix(80))')"
            )
        } catch {
            throw .inFile("template.syntax", file: file, line: nil, "not a valid Mustache template: \(error)")
        }
    }

    /// Tags that start `{{` followed by one of `{ & = % > <`.
    static func refuseUnsafeTags(_ text: String, file: String) throws(BlockPageError) {
        let bytes = Array(text.utf8)
        var line = 1
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\n") { line += 1 }
            if byte == UInt8(ascii: "{"), index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "{") {
                let sigil = bytes[index + 2]
                let reason: String? =
                    switch sigil {
                    case UInt8(ascii: "{"), UInt8(ascii: "&"):
                        "unescaped output ({{{name}}} or {{&name}}) is not allowed: write {{name}}, which escapes the value for HTML"
                    case UInt8(ascii: "="): "changing the delimiters ({{=...=}}) is not allowed"
                    case UInt8(ascii: "%"): "pragmas ({{%...}}) are not allowed"
                    case UInt8(ascii: ">"), UInt8(ascii: "<"): "partials ({{>name}}, {{<name}}) are not supported: put everything in one file"
                    default: nil
                    }
                if let reason {
                    throw .inFile("template.unsafe-tag", file: file, line: line, reason)
                }
            }
            index += 1
        }
    }

    private static func explanation(of error: any Error) -> String {
        guard let parseError = error as? MustacheTemplate.Error else { return "\(error)" }
        switch parseError {
        case .sectionCloseNameIncorrect: return "this closing tag {{/name}} does not match the section that is open"
        case .unfinishedName: return "a tag is not closed with }} or its name has characters a name may not have"
        case .expectedSectionEnd: return "a section {{#name}} or {{^name}} is never closed with {{/name}}"
        default: return "the template is malformed (\(parseError))"
        }
    }
}
