/// The built-in request-access form as posted by the browser
/// (`application/x-www-form-urlencoded`, fields `host`, `url`, `category`,
/// `reason`).
public struct AccessRequestForm: Sendable, Equatable {
    public var host: String
    public var url: String
    /// nil when the page had no category.
    public var category: String?
    /// Trimmed, at most `maximumReasonLength` characters, line ends as "\n"; may be empty.
    public var reason: String

    /// The largest body `parse` reads; a server should refuse a longer
    /// Content-Length with 413 before reading it.
    public static let maximumBodyBytes = 8192
    public static let maximumReasonLength = 500
    /// The longest host accepted, in UTF-8 bytes.
    public static let maximumHostBytes = 255

    public init(host: String, url: String, category: String? = nil, reason: String = "") {
        self.host = host
        self.url = url
        self.category = category
        self.reason = reason
    }

    /// Decodes a form body strictly: `+` is a space, `%XX` a byte, and the
    /// result must be UTF-8. Refused (`form.too-large`, `form.malformed`,
    /// `form.missing-field`): a body over `maximumBodyBytes`, a bad or
    /// cut-off `%` escape, a raw byte that a browser would have escaped,
    /// invalid UTF-8, control characters (other than line ends and tabs in
    /// the reason), a field given twice, and a missing or empty `host`.
    /// Unknown fields are ignored; a missing `url` is empty.
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
            guard ["host", "url", "category", "reason"].contains(name) else { continue }
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
        return AccessRequestForm(host: host, url: url, category: category, reason: try cleanReason(fields["reason"] ?? ""))
    }

    /// `+` → space, `%XX` → byte, then UTF-8.
    static func decode(_ encoded: ArraySlice<UInt8>, field: String) throws(BlockPageError) -> String {
        var decoded: [UInt8] = []
        decoded.reserveCapacity(encoded.count)
        var index = encoded.startIndex
        while index < encoded.endIndex {
            let byte = encoded[index]
            switch byte {
            case UInt8(ascii: "+"):
                decoded.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard encoded.endIndex - index > 2, let high = hexValue(encoded[index + 1]), let low = hexValue(encoded[index + 2]) else {
                    throw .formMalformed("\(field) has a '%' that is not followed by two hex digits")
                }
                decoded.append(high << 4 | low)
                index += 2
            case 0x21...0x7E:
                decoded.append(byte)
            default:
                throw .formMalformed("\(field) contains the raw byte 0x\(String(byte, radix: 16, uppercase: true)), which must be percent-encoded")
            }
            index += 1
        }
        guard let text = String(validating: decoded, as: UTF8.self) else {
            throw .formMalformed("\(field) is not valid UTF-8 once decoded")
        }
        return text
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Line ends become "\n"; other control characters than tab are refused;
    /// whitespace around is trimmed; at most `maximumReasonLength` characters.
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
        guard trimmed.count > maximumReasonLength else { return trimmed }
        return String(trimmed.prefix(maximumReasonLength)).trimmingWhitespace()
    }
}

extension String {
    /// Without leading and trailing whitespace and line ends.
    func trimmingWhitespace() -> String {
        guard let start = firstIndex(where: { !$0.isWhitespace }), let end = lastIndex(where: { !$0.isWhitespace }) else { return "" }
        return String(self[start...end])
    }
}
