import VerdictCore

/// A request-access URL template (`blockPage.requestAccess.url`), split
/// once into literal text and placeholders.
struct RequestAccessLink: Sendable, Equatable {
    enum Placeholder: String, Sendable, CaseIterable {
        case url, host, category, user, org
    }

    enum Part: Sendable, Equatable {
        case literal(String)
        case placeholder(Placeholder)
    }

    let text: String
    let parts: [Part]

    /// Values that stand in for a real request when the template is checked.
    static let sampleRequest = BlockedRequest(
        host: "blocked.example",
        url: "http://blocked.example/path?q=1",
        category: "sample-category",
        user: "student"
    )

    /// Splits and checks the template: known placeholders only, and the
    /// result must be an `http:` or `https:` URL with a host.
    init(text: String, urlTemplate: String, organization: String) throws(BlockPageError) {
        guard !text.allSatisfy(\.isWhitespace) else {
            throw BlockPageError(code: "requestAccess.text", message: "blockPage.requestAccess.text is empty; give the link a text such as \"Ask for access\"")
        }
        if let bad = urlTemplate.unicodeScalars.first(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control }) {
            throw BlockPageError(
                code: "requestAccess.url",
                message: "blockPage.requestAccess.url contains a space or control character (U+\(String(bad.value, radix: 16, uppercase: true))); write spaces in the URL as %20"
            )
        }
        self.text = text
        self.parts = try Self.split(urlTemplate)

        // The scheme must be written out, not come from a placeholder, so
        // no request value can ever turn the link into `javascript:` or `data:`.
        let literalPrefix: String = if case .literal(let first) = parts.first { first.lowercased() } else { "" }
        let sample = url(for: Self.sampleRequest, organization: organization)
        guard literalPrefix.hasPrefix("http://") || literalPrefix.hasPrefix("https://"), Self.isWebURLWithHost(sample) else {
            throw BlockPageError(
                code: "requestAccess.scheme",
                message: "blockPage.requestAccess.url must be an http:// or https:// URL with a host, written out before any placeholder (with sample values it gives '\(sample)')"
            )
        }
    }

    /// The link for one blocked request, each placeholder percent-encoded.
    func url(for request: BlockedRequest, organization: String) -> String {
        var result = ""
        for part in parts {
            switch part {
            case .literal(let text):
                result += text
            case .placeholder(let placeholder):
                let value: String =
                    switch placeholder {
                    case .url: request.url
                    case .host: request.host
                    case .category: request.category ?? ""
                    case .user: request.user ?? ""
                    case .org: organization
                    }
                result += PercentEncoding.encode(value)
            }
        }
        return result
    }

    private static func split(_ template: String) throws(BlockPageError) -> [Part] {
        var parts: [Part] = []
        var literal = ""
        var rest = Substring(template)
        while let character = rest.first {
            rest = rest.dropFirst()
            switch character {
            case "{":
                guard let close = rest.firstIndex(of: "}") else {
                    throw placeholderError("has a '{' without a closing '}'")
                }
                let name = rest[..<close]
                guard let placeholder = Placeholder(rawValue: String(name)) else {
                    throw placeholderError("has an unknown placeholder {\(name)}")
                }
                if !literal.isEmpty { parts.append(.literal(literal)) }
                literal = ""
                parts.append(.placeholder(placeholder))
                rest = rest[rest.index(after: close)...]
            case "}":
                throw placeholderError("has a '}' without an opening '{'")
            default:
                literal.append(character)
            }
        }
        if !literal.isEmpty { parts.append(.literal(literal)) }
        return parts
    }

    private static func placeholderError(_ detail: String) -> BlockPageError {
        let known = Placeholder.allCases.map { "{\($0.rawValue)}" }.joined(separator: " ")
        return BlockPageError(code: "requestAccess.placeholder", message: "blockPage.requestAccess.url \(detail); the placeholders are \(known)")
    }

    /// `http://` or `https://` (any case) followed by a non-empty authority.
    private static func isWebURLWithHost(_ url: String) -> Bool {
        guard let colon = url.firstIndex(of: ":") else { return false }
        let scheme = url[..<colon].lowercased()
        guard scheme == "http" || scheme == "https" else { return false }
        let afterScheme = url[url.index(after: colon)...]
        guard afterScheme.hasPrefix("//") else { return false }
        let authority = afterScheme.dropFirst(2).prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let host = authority.split(separator: "@").last.map { $0.prefix { $0 != ":" } } ?? ""
        return !host.isEmpty
    }
}
