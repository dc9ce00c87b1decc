/// Which names a domain rule covers.
public enum MatchKind: UInt8, Sendable, Hashable, CaseIterable {
    /// `example.com`: the name and every name below it (the default).
    case subtree = 0
    /// `=example.com`: exactly that name.
    case exact = 1
    /// `*.example.com`: names below it, not the name itself.
    case subdomainsOnly = 2

    /// Whether a rule of this kind on a suffix `depth` labels above the looked-up
    /// name applies (depth 0 is the name itself).
    @inlinable
    public func applies(atDepth depth: Int) -> Bool {
        switch self {
        case .subtree: true
        case .exact: depth == 0
        case .subdomainsOnly: depth > 0
        }
    }

    /// How the rule is written: `""`, `"="` or `"*."` before the name.
    public var marker: String {
        switch self {
        case .subtree: ""
        case .exact: "="
        case .subdomainsOnly: "*."
        }
    }
}

/// One entry of a rule list or of the local allow/deny lists, in the syntax
/// an admin writes:
///
/// | written | matches |
/// |---|---|
/// | `example.com` or `.example.com` | example.com and every subdomain |
/// | `=example.com` | exactly example.com |
/// | `*.example.com` | subdomains of example.com, not example.com itself |
/// | `192.0.2.7`, `2001:db8::1` | that address |
/// | `198.51.100.0/24`, `2001:db8::/32` | that block of addresses |
/// | `example.com/path` | URLs on example.com (and subdomains) whose path starts with `/path` |
public enum RulePattern: Hashable, Sendable, CustomStringConvertible {
    case domain(HostName, MatchKind)
    case network(IPNetwork)
    /// A host (subtree) plus a path prefix starting with `/`, lower case.
    case urlPrefix(HostName, path: String)

    public enum ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        case empty
        case badHost(String, HostNameError)
        case badNetwork(String)
        /// A space, a control character or `#` (the entry as written, with such characters escaped).
        case badCharacter(String)

        public var description: String {
            switch self {
            case .empty: "the entry is empty"
            case .badHost(let text, let error): "'\(text)' is not a host name: \(error)"
            case .badNetwork(let text): "'\(text)' is not an IP address or network (expected e.g. 192.0.2.0/24)"
            case .badCharacter(let text):
                "'\(text)' holds a space, a control character or '#', which no entry may (a URL prefix writes them percent-encoded, e.g. %20)"
            }
        }
    }

    /// Whether a scalar may not appear in an entry: spaces and control
    /// characters (a URL's path never holds them raw), and `#` (a fragment,
    /// which no request carries). Entries are written one to a line in
    /// filter-data's policy text, where a line break would start a line of
    /// the entry's own choosing and `#` starts a comment that would cut the
    /// entry short: refused here, no entry can do either, wherever it came
    /// from (the school's policy, `filterctl allow`, a live item, a room rule).
    @inlinable
    public static func isRefused(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value <= 0x20 || scalar.value == 0x7f || scalar == "#"
    }

    /// Parses one entry. In a URL list (`urlList`, as UT1 `urls` files are)
    /// an IPv4 literal followed by a slash is always a host and a path, never a network.
    public init(_ rawText: some StringProtocol, urlList: Bool = false) throws(ParseError) {
        var text = rawText.trimmingASCIISpaces()
        guard !text.isEmpty else { throw .empty }
        if text.unicodeScalars.contains(where: Self.isRefused) {
            let shown = text.unicodeScalars.prefix(120).map { Self.isRefused($0) && $0 != "#" ? $0.escaped(asASCII: true) : String($0) }.joined()
            throw .badCharacter(shown)
        }
        // A leading dot before a name or an address means what no marker means (`.example.com`
        // is `example.com`), so it goes before the address checks: `.192.0.2.7` is the address, as
        // `192.0.2.7` is, and reads the same once written back without the dot (found by the
        // policy fuzzer). Before a marker (`.=`, `.*.`, `..`, `.[`, `./`) it stays, and the entry is refused.
        if text.hasPrefix("."), let next = text.unicodeScalars.dropFirst().first, !".=*[/".unicodeScalars.contains(next) {
            text.removeFirst()
        }
        // `192.0.2.7.` is the address 192.0.2.7, as URL parsers read it (the WHATWG URL
        // standard's IPv4 parser drops one trailing dot), not a name whose last label is 7.
        let slash = text.firstIndex(of: "/") ?? text.endIndex
        if slash > text.startIndex {
            let dot = text.index(before: slash)
            if text[dot] == ".", case .v4 = IPAddress(text[..<dot]) { text.remove(at: dot) }
        }
        if let network = IPNetwork(text) {
            self = .network(network)
            return
        }
        // Anything shaped like an address must be a valid one: `1.2.3.4/33` is
        // a mistake, not the URL prefix `/33` on host 1.2.3.4.
        // Empty pieces kept: an entry that starts with a slash has an empty host, not no first piece.
        let beforeSlash = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)[0]
        if text.hasPrefix("[") || beforeSlash.contains(":") || IPAddress(beforeSlash) != nil {
            if !(urlList && text.contains("/")), let network = IPNetwork(text.replacingBrackets()) {
                self = .network(network)
                return
            }
            // `192.0.2.7/some/path`: a URL prefix on an IPv4 literal host (UT1 `urls` have these).
            let suffix = text.dropFirst(beforeSlash.count)
            if case .v4 = IPAddress(beforeSlash), suffix.count > 1, urlList || !suffix.dropFirst().allSatisfy(\.isNumber),
                let host = try? HostName(beforeSlash)
            {
                self = .urlPrefix(host, path: suffix.lowercased())
                return
            }
            throw .badNetwork(text)
        }
        var kind = MatchKind.subtree
        var hostPart = Substring(text)
        if hostPart.hasPrefix("=") {
            kind = .exact
            hostPart = hostPart.dropFirst()
        } else if hostPart.hasPrefix("*.") {
            kind = .subdomainsOnly
            hostPart = hostPart.dropFirst(2)
        }
        var path: Substring? = nil
        if let slash = hostPart.firstIndex(of: "/") {
            path = hostPart[slash...]
            hostPart = hostPart[..<slash]
        }
        let host: HostName
        do {
            host = try HostName(hostPart)
        } catch {
            throw .badHost(String(hostPart), error)
        }
        let urlPath = path.flatMap { $0 == "/" ? nil : $0.lowercased() }
        let pattern: RulePattern = urlPath.map { .urlPrefix(host, path: $0) } ?? .domain(host, kind)
        // A name shaped like an address is written back without its marker or extra dots when it
        // has none or a path (`1.2.3.4..` as `1.2.3.4`, `=1.2.3.4/11` as `1.2.3.4/11`), and must
        // read back as itself: otherwise it is refused, never widened to the address or to a
        // network of two million (found by the policy fuzzer). The text read again here starts
        // with the address, so it never comes back to this line.
        if kind == .subtree || urlPath != nil, case .v4 = IPAddress(host.description),
            (try? RulePattern(pattern.description, urlList: urlList)) != pattern
        {
            throw .badNetwork(text)
        }
        self = pattern
    }

    public var description: String {
        switch self {
        case .domain(let host, let kind): kind.marker + host.description
        case .network(let network): network.description
        case .urlPrefix(let host, let path): host.description + path
        }
    }
}

extension StringProtocol {
    func trimmingASCIISpaces() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" || $0 == "\r\n" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }

    fileprivate func replacingBrackets() -> String {
        var text = String(self)
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            text = String(text[text.index(after: text.startIndex)..<close]) + text[text.index(after: close)...]
        }
        return text
    }
}
