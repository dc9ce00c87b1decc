import VerdictCore

/// Where signed bundles come from: the value of `rules.source`.
///
/// - `https://host[:port]/path/`: a folder on a web server holding
///   `manifest`, `manifest.sig` and the files the manifest names.
/// - `file:///path/`: a local folder laid out the same way (offline installs,
///   a USB stick, a folder another tool keeps in sync).
///
/// Anything else, plain `http://` above all, is refused: the bundle is
/// signed, but an attacker on the path could still replay an old signed
/// manifest forever or feed endless bytes, and HTTPS with pins closes that.
public enum BundleSource: Sendable, Hashable, CustomStringConvertible {
    /// `host` is a DNS name or an IP literal (without brackets); `path` starts and ends with `/`.
    case https(host: String, port: Int, path: String)
    /// An absolute folder path, without a trailing `/` (except for `/` itself).
    case directory(path: String)

    /// Why a `rules.source` value was refused.
    public struct ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        /// True for a plain `http://` URL (its own refusal code, `fetch.plain-http`).
        public var isPlainHTTP: Bool
        public var description: String
    }

    /// Parses a source URL; the error says what is wrong and what is expected.
    public init(parsing text: String) throws(ParseError) {
        func fail(_ message: String, plainHTTP: Bool = false) -> ParseError {
            ParseError(isPlainHTTP: plainHTTP, description: message)
        }
        guard text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw fail("the URL must be printable ASCII without spaces (percent-encode anything else), got '\(text.prefix(80))'")
        }
        let lower = text.lowercased()
        if lower.hasPrefix("http://") {
            throw fail(
                "plain http:// is refused: rules must come over https:// (or file:/// for offline installs)", plainHTTP: true)
        }
        if lower.hasPrefix("file://") {
            let rest = String(text.dropFirst("file://".count))
            guard rest.hasPrefix("/") else {
                throw fail("a file URL names a local folder as file:///absolute/path/, got '\(text.prefix(80))'")
            }
            guard !rest.contains("?"), !rest.contains("#") else {
                throw fail("a file URL has no query or fragment, got '\(text.prefix(80))'")
            }
            guard let decoded = BundleSource.percentDecoded(rest), !decoded.utf8.contains(0) else {
                throw fail("the file URL has a bad percent escape: '\(text.prefix(80))'")
            }
            var path = decoded
            while path.count > 1, path.hasSuffix("/") { path.removeLast() }
            guard !path.split(separator: "/").contains(where: { $0 == ".." }) else {
                throw fail("the file URL must not contain '..': '\(text.prefix(80))'")
            }
            self = .directory(path: path)
            return
        }
        guard lower.hasPrefix("https://") else {
            throw fail("expected an https:// or file:/// URL, got '\(text.prefix(80))'")
        }
        let rest = Substring(text.dropFirst("https://".count))
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        var path = String(rest[slash...])
        guard !authority.isEmpty else { throw fail("the URL has no host name: '\(text.prefix(80))'") }
        guard !authority.contains("@") else {
            throw fail("user names or passwords in the URL are not supported: '\(text.prefix(80))'")
        }
        guard !path.contains("?"), !path.contains("#"), !authority.contains("?"), !authority.contains("#") else {
            throw fail("the URL names a bundle folder and has no query or fragment: '\(text.prefix(80))'")
        }

        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw fail("unclosed '[' in the host of '\(text.prefix(80))'") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw fail("unexpected text after ']' in '\(text.prefix(80))'") }
                portText = after.dropFirst()
            }
            guard host.contains(":"), host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else {
                throw fail("'[\(host)]' is not an IPv6 address")
            }
        } else {
            if let colon = authority.firstIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            } else {
                host = authority
            }
            guard BundleSource.isHostName(host) else {
                throw fail("'\(host.prefix(80))' is not a host name (letters, digits, '-' and '.'; punycode for other scripts)")
            }
        }
        var port = 443
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value), portText.allSatisfy(\.isASCII) else {
                throw fail("the port must be a number from 1 to 65535, got '\(portText.prefix(20))'")
            }
            port = value
        }
        if path.isEmpty { path = "/" }
        if !path.hasSuffix("/") { path += "/" }
        guard !path.split(separator: "/").contains(where: { $0 == ".." || $0 == "." }) else {
            throw fail("the URL path must not contain '.' or '..' segments: '\(text.prefix(80))'")
        }
        guard BundleSource.percentDecoded(path) != nil else {
            throw fail("the URL path has a bad percent escape: '\(text.prefix(80))'")
        }
        self = .https(host: host.lowercased(), port: port, path: path)
    }

    /// The URL written back in its normal form.
    public var description: String {
        switch self {
        case .https(let host, let port, let path):
            let shownHost = host.contains(":") ? "[\(host)]" : host
            return "https://\(shownHost)\(port == 443 ? "" : ":\(port)")\(path)"
        case .directory(let path):
            return "file://" + (path == "/" ? "/" : path + "/")
        }
    }

    private static func isHostName(_ host: Substring) -> Bool {
        guard (1...253).contains(host.utf8.count) else { return false }
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        return labels.allSatisfy { label in
            (1...63).contains(label.utf8.count) && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.utf8.allSatisfy { byte in
                    (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                        || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-")
                }
        }
    }

    /// Decodes `%XX` escapes (`PercentEncoding`; `+` is itself in a path); nil for a broken escape or bytes that are not UTF-8.
    static func percentDecoded(_ text: String) -> String? {
        try? PercentEncoding.decode(text.utf8, plusIsSpace: false)
    }
}
