import VerdictCore

/// The school server's fingerprint: the SHA-256 of its certificate's
/// SubjectPublicKeyInfo (DER), written as 64 lower-case hex digits
/// (`hallpass-server fingerprint` prints it; the enrolment token carries it).
/// It stays the same when the certificate is renewed with the same key.
public struct ServerFingerprint: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// 64 hex digits, either case; nil otherwise.
    public init?(hex: String) {
        guard hex.utf8.count == 64, let bytes = Hex.decode(hex) else { return nil }
        self.bytes = bytes
    }

    public var description: String { Hex.encode(bytes) }
}

/// `school.server`: the school server's base URL, `https://HOST[:PORT][/PREFIX]/`.
/// The API's paths (`/api/v1/...`) go under the prefix, for a server behind a
/// proxy that serves it in a folder. Plain `http://` is refused: the pinned
/// fingerprint is what makes the server the school's.
public struct SchoolServerURL: Sendable, Hashable, CustomStringConvertible {
    /// A name or an address (IPv6 without brackets).
    public let host: String
    public let port: Int
    /// "" or `/prefix`, without a slash at the end.
    public let prefix: String

    public init(host: String, port: Int, prefix: String = "") {
        self.host = host
        self.port = port
        self.prefix = prefix
    }

    /// Why `text` is not a server URL.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    public init(parsing text: String) throws(ParseError) {
        if text.lowercased().hasPrefix("http://") {
            throw ParseError(description: "'\(text.prefix(120))' is plain http://: the school's server is https:// (its key is pinned by the fingerprint)")
        }
        guard text.lowercased().hasPrefix("https://") else {
            throw ParseError(description: "'\(text.prefix(120))' is not an https:// URL such as https://school.example:8443/")
        }
        let rest = text.dropFirst("https://".count)
        let authority = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(authority.count)
        guard !path.contains("?"), !path.contains("#"), !authority.contains("@") else {
            throw ParseError(description: "'\(text.prefix(120))': give the server's address only, without a query, fragment or user")
        }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw ParseError(description: "'\(text.prefix(120))': an IPv6 address lacks its ']'") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw ParseError(description: "'\(text.prefix(120))': expected ':PORT' after the address") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty, host.count <= 253,
            host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == ":" || $0 == "_") })
        else {
            throw ParseError(description: "'\(text.prefix(120))' has no usable host name or address")
        }
        var port = 443
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw ParseError(description: "'\(text.prefix(120))': the port is not a number from 1 to 65535")
            }
            port = value
        }
        var prefix = String(path)
        while prefix.hasSuffix("/") { prefix.removeLast() }
        guard prefix.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "/-._~".contains($0)) }) else {
            throw ParseError(description: "'\(text.prefix(120))': the path may hold only letters, digits and / - . _ ~")
        }
        self.init(host: host.lowercased(), port: port, prefix: prefix)
    }

    /// The request path of an API endpoint: `path("/api/v1/enrol")`.
    public func path(_ endpoint: String) -> String { prefix + endpoint }

    /// `https://host:port/prefix/`, the form written to the configuration and the identity.
    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "https://\(shownHost)\(port == 443 ? "" : ":\(port)")\(prefix)/"
    }
}
