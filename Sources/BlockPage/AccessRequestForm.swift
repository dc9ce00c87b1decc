import VerdictCore

/// The built-in request-access form as posted by the browser
/// (`application/x-www-form-urlencoded`, fields `host`, `url`, `category`,
/// `reason`, `token`).
public struct AccessRequestForm: Sendable, Equatable {
    public var host: String
    public var url: String
    /// nil when the page had no category.
    public var category: String?
    /// Trimmed, 1 to `maximumReasonLength` characters, line ends as "\n".
    public var reason: String
    /// The page's CSRF token (`RequestFormTokens`); empty when the form had none.
    public var token: String

    /// The largest body `parse` reads; a server should refuse a longer
    /// Content-Length with 413 before reading it.
    public static let maximumBodyBytes = 8192
    public static let maximumReasonLength = 500
    /// The longest host accepted, in UTF-8 bytes.
    public static let maximumHostBytes = 255

    /// The longest token read (a token is 43 characters).
    public static let maximumTokenBytes = 128

    public init(host: String, url: String, category: String? = nil, reason: String, token: String = "") {
        self.host = host
        self.url = url
        self.category = category
        self.reason = reason
        self.token = token
    }

    /// Decodes a form body strictly: `+` is a space, `%XX` a byte, and the
    /// result must be UTF-8. Refused (`form.too-large`, `form.malformed`,
    /// `form.missing-field`): a body over `maximumBodyBytes`, a bad or
    /// cut-off `%` escape, a raw byte that a browser would have escaped,
    /// invalid UTF-8, control characters (other than line ends and tabs in
    /// the reason), a field given twice, a missing or empty `host`, a token
    /// over `maximumTokenBytes`; a reason that is empty once trimmed
    /// (`form.reason-missing`) or longer than `maximumReasonLength`
    /// characters (`form.reason-too-long`). Unknown fields are ignored; a
    /// missing `url` or `token` is empty.
    public static func parse(_ body: some Collection<UInt8>) throws(BlockPageError) -> AccessRequestForm {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Swift.min(body.underestimatedCount, maximumBodyBytes))
        for byte in body {
            guard bytes.count < maximumBodyBytes else {
                throw BlockPageError(
                    code: "form.too-large",
                    message: "request-access form refused: the body is larger than \(maximumBodyBytes) bytes"
                )
            }
            bytes.append(byte)
        }

        var fields: [String: String] = [:]
        for pair in bytes.split(separator: UInt8(ascii: "&")) {
            let equals = pair.firstIndex(of: UInt8(ascii: "=")) ?? pair.endIndex
            let name = try decode(pair[..<equals], field: "a field name")
            let value = equals == pair.endIndex ? "" : try decode(pair[pair.index(after: equals)...], field: name)
            guard ["host", "url", "category", "reason", "token"].contains(name) else { continue }
            guard fields[name] == nil else { throw .formMalformed("the field '\(name)' appears twice") }
            fields[name] = value
        }

        guard let host = fields["host"]?.trimmingBlanks(), !host.isEmpty else {
            throw BlockPageError(code: "form.missing-field", message: "request-access form refused: the field 'host' is missing or empty")
        }
        guard host.utf8.count <= maximumHostBytes else {
            throw .formMalformed("the host is longer than \(maximumHostBytes) bytes")
        }
        let url = fields["url"] ?? ""
        let category = fields["category"].flatMap { $0.isEmpty ? nil : $0 }
        for (name, value) in [("host", host), ("url", url), ("category", category ?? "")] {
            if value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
                throw .formMalformed("the field '\(name)' contains a control character")
            }
        }
        let token = fields["token"] ?? ""
        guard token.utf8.count <= maximumTokenBytes, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw .formMalformed("the token is not one this page made")
        }
        return AccessRequestForm(host: host, url: url, category: category, reason: try cleanReason(fields["reason"] ?? ""), token: token)
    }

    /// `+` → space, `%XX` → byte, then UTF-8 (`PercentEncoding`).
    static func decode(_ encoded: ArraySlice<UInt8>, field: String) throws(BlockPageError) -> String {
        do throws(PercentEncoding.Failure) {
            return try PercentEncoding.decode(encoded, plusIsSpace: true)
        } catch {
            switch error {
            case .badEscape:
                throw .formMalformed("\(field) has a '%' that is not followed by two hex digits")
            case .rawByte(let byte, _):
                throw .formMalformed("\(field) contains the raw byte 0x\(String(byte, radix: 16, uppercase: true)), which must be percent-encoded")
            case .notUTF8:
                throw .formMalformed("\(field) is not valid UTF-8 once decoded")
            }
        }
    }

    /// Line ends become "\n"; other control characters than tab are refused;
    /// whitespace around is trimmed; then 1 to `maximumReasonLength` characters
    /// (a browser's `maxlength` counts a line end as one, as here).
    private static func cleanReason(_ raw: String) throws(BlockPageError) -> String {
        var scalars = String.UnicodeScalarView()
        var previousWasCarriageReturn = false
        for scalar in raw.unicodeScalars {
            defer { previousWasCarriageReturn = scalar == "\r" }
            switch scalar {
            case "\r": scalars.append("\n")
            case "\n": if !previousWasCarriageReturn { scalars.append("\n") }
            case "\t": scalars.append(scalar)
            default:
                guard scalar.properties.generalCategory != .control else {
                    throw .formMalformed("the field 'reason' contains a control character")
                }
                scalars.append(scalar)
            }
        }
        let trimmed = String(scalars).trimmingWhitespace()
        guard !trimmed.isEmpty else {
            throw BlockPageError(code: "form.reason-missing", message: "request-access form refused: the reason is empty")
        }
        guard trimmed.count <= maximumReasonLength else {
            throw BlockPageError(
                code: "form.reason-too-long", message: "request-access form refused: the reason is longer than \(maximumReasonLength) characters")
        }
        return trimmed
    }
}

extension String {
    /// Without leading and trailing whitespace and line ends.
    func trimmingWhitespace() -> String {
        guard let start = firstIndex(where: { !$0.isWhitespace }), let end = lastIndex(where: { !$0.isWhitespace }) else { return "" }
        return String(self[start...end])
    }
}
