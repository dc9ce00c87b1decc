/// Why the block page cannot start with the given settings, or why a
/// request-access form was refused.
///
/// `code` is stable (for logs, `filterctl status` and tests); `message` says
/// what is wrong and, for files, names the file and line so an admin can fix
/// it. Codes:
///
/// - `template.unreadable`, `template.too-large`, `template.syntax`,
///   `template.unsafe-tag`, `template.unknown-file`: the template folder or
///   one of its `.mustache` files.
/// - `strings.unreadable`, `strings.too-large`, `strings.syntax`,
///   `strings.unknown-key`, `strings.duplicate-key`, `strings.language`,
///   `strings.value`: a `strings/<lang>.strings` file.
/// - `requestAccess.scheme`, `requestAccess.placeholder`, `requestAccess.url`,
///   `requestAccess.text`: the request-access link or form settings.
/// - `settings.language`: the default language has no strings.
/// - `form.too-large`, `form.malformed`, `form.missing-field`,
///   `form.reason-missing`, `form.reason-too-long`: a posted request-access
///   form (the server answers 413 or 400); `form.token`: its CSRF token is
///   missing, stale or not for this user and host (403).
public struct BlockPageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A short stable identifier such as `template.syntax`.
    public var code: String
    /// A sentence a person can act on; names the file and line where there is one.
    public var message: String
    /// The file the problem is in, when it is in a file.
    public var file: String?
    /// The 1-based line in `file`, when known.
    public var line: Int?

    public init(code: String, message: String, file: String? = nil, line: Int? = nil) {
        self.code = code
        self.message = message
        self.file = file
        self.line = line
    }

    public var description: String { message }
}

extension BlockPageError {
    /// An error located in a file: the message starts with "file, line n: ".
    static func inFile(_ code: String, file: String, line: Int?, column: Int? = nil, _ detail: String) -> BlockPageError {
        var place = file
        if let line {
            place += ", line \(line)"
            if let column { place += ", column \(column)" }
        }
        return BlockPageError(code: code, message: "\(place): \(detail)", file: file, line: line)
    }

    static func formMalformed(_ detail: String) -> BlockPageError {
        BlockPageError(code: "form.malformed", message: "request-access form refused: \(detail)")
    }
}
