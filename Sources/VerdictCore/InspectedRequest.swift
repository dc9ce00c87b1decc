// What an inspected HTTPS request says, read from its Host and its request
// target as they came (bytes a client chose): the name, the path and query
// the URL rules match, the search term, the YouTube video and channel.
// Every input is read in one pass or a few, with bounded copies: any length,
// any bytes, never a trap (the `inspect` fuzz target holds it to that).

/// An HTTP request the proxy terminated, as it came.
public struct InspectedRequest: Sendable, Hashable {
    /// The method token (`GET`), as sent.
    public var method: [UInt8]
    /// The Host header (or HTTP/2's `:authority`), as sent: any case, maybe a port or a trailing dot.
    public var host: [UInt8]
    /// The request target: `/path?query` (origin form), or `https://host/path?query`.
    public var target: [UInt8]
    /// Where the connection was going (`SO_ORIGINAL_DST`), for the address rules.
    public var destination: IPAddress?
    /// The local user of the connection, when known.
    public var uid: UInt32?

    public init(method: some Collection<UInt8>, host: some Collection<UInt8>, target: some Collection<UInt8>, destination: IPAddress? = nil,
                uid: UInt32? = nil) {
        self.method = Array(method)
        self.host = Array(host)
        self.target = Array(target)
        self.destination = destination
        self.uid = uid
    }

    public init(method: String = "GET", host: String, target: String, destination: IPAddress? = nil, uid: UInt32? = nil) {
        self.init(method: method.utf8, host: host.utf8, target: target.utf8, destination: destination, uid: uid)
    }
}

/// The search engines whose search terms hallpass reads from the URL.
public enum SearchEngine: String, Sendable, Hashable, CaseIterable {
    case google, bing, duckduckgo, youtube
}

/// What a request's host and target say, independent of any policy.
public struct RequestAnalysis: Sendable, Hashable {
    /// The host, canonical; nil when the Host is not a name or an IPv4 address.
    public var host: HostName?
    /// The path and query the URL rules match: escapes of unreserved
    /// characters decoded (`%7E` is `~`, `%61` is `a`), `.` and `..` segments
    /// removed, at most `maximumPathBytes`. nil when the target is neither
    /// `/...` nor `http(s)://host/...`.
    public var path: String?
    /// The search engine and the terms searched for (percent- and plus-decoded,
    /// control characters made spaces, each at most `maximumSearchTermBytes`,
    /// at most `maximumSearchTerms`, in the order they came).
    public var searchEngine: SearchEngine?
    public var searchTerms: [String] = []
    /// The host is one of YouTube's.
    public var isYouTube = false
    /// The YouTube video IDs the request names (the path's and every `v=` of
    /// a watch page), each once, at most `maximumVideos`.
    public var videos: [String] = []
    /// A video parameter or path that is no video ID (a playlist embed, a
    /// mistyped ID), or more than `maximumVideos` of them: such a request
    /// cannot be allowed by `allowVideos`.
    public var unreadableVideo = false
    /// The channel page the request is for: a channel ID (`UC...`) or a handle (`@name`, lower case).
    public var channel: String?
    /// A request of YouTube's player itself (its scripts, its API, its
    /// statistics), allowed with the page of an allowed video: the path
    /// prefix it starts with (`playerPrefixes`).
    public var playerResource: String?

    public static let maximumPathBytes = 8192
    public static let maximumSearchTermBytes = 256
    public static let maximumSearchTerms = 4
    public static let maximumVideos = 32

    /// The URL for the record and the block page, `https://host/path`, at most 2048 bytes.
    public var url: String? {
        guard let host else { return nil }
        return Self.prefix("https://" + host.description + (path ?? "/"), bytes: 2048)
    }

    /// The longest start of `text` of at most `limit` UTF-8 bytes that ends
    /// between two scalars (cutting inside one would make U+FFFD, three bytes).
    static func prefix(_ text: String, bytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var count = 0
        var end = text.unicodeScalars.startIndex
        for index in text.unicodeScalars.indices {
            let width = UTF8.width(text.unicodeScalars[index])
            if count + width > limit { break }
            count += width
            end = text.unicodeScalars.index(after: index)
        }
        return String(text.unicodeScalars[..<end])
    }

    public init(host: HostName?, path: String?) {
        self.host = host
        self.path = path
    }

    /// Reads `request`.
    public init(_ request: InspectedRequest) {
        self.init(host: Self.host(request.host), path: nil)
        guard let parts = Self.pathAndQuery(request.target[...]) else { return }
        let (rawPath, rawQuery) = parts
        let decodedPath = Self.normalizedPath(rawPath)
        var enginePath = decodedPath
        if let rawQuery { enginePath += "?" + String(decoding: rawQuery.prefix(Self.maximumPathBytes), as: UTF8.self) }
        enginePath = Self.prefix(enginePath, bytes: Self.maximumPathBytes)
        path = enginePath
        guard let host else { return }
        let name = host.description
        let segments = Self.segments(decodedPath)
        let first = segments.first?.lowercased() ?? ""
        let onlyFirst = segments.count == 1 || (segments.count == 2 && segments[1].isEmpty)

        if let engine = Self.searchEngine(host: host, name: name, segments: segments, first: first, onlyFirst: onlyFirst) {
            searchEngine = engine
            if let rawQuery {
                let key = engine == .youtube ? "search_query" : "q"
                Self.forEachValue(of: key, in: rawQuery) { value in
                    guard searchTerms.count < Self.maximumSearchTerms else { return }
                    let term = Self.searchTerm(value)
                    if !term.isEmpty, !searchTerms.contains(term) { searchTerms.append(term) }
                }
            }
        }

        isYouTube = Self.isYouTubeHost(host)
        guard isYouTube else { return }
        func addVideo(_ text: String) {
            guard YouTubeID.isVideoID(text) else {
                unreadableVideo = true
                return
            }
            if videos.contains(text) { return }
            if videos.count == Self.maximumVideos {
                unreadableVideo = true
                return
            }
            videos.append(text)
        }
        if name == "youtu.be" {
            if !first.isEmpty { addVideo(segments[0]) }
        } else {
            switch first {
            case "shorts", "embed", "live", "v":
                if segments.count >= 2, !segments[1].isEmpty { addVideo(segments[1]) } else if first != "live" { unreadableVideo = true }
            case "channel":
                if segments.count >= 2, YouTubeID.isChannelID(segments[1]) { channel = segments[1] }
            default:
                if let handle = segments.first.flatMap({ YouTubeID.handle($0) }) { channel = handle }
            }
        }
        // Every `v=` names a video, whatever the path: a watch page's, and any other
        // a client adds (a request naming two videos is judged on both).
        var anyParameter = false
        if let rawQuery {
            Self.forEachValue(of: "v", in: rawQuery) { value in
                anyParameter = true
                addVideo(String(decoding: PercentText.decode(value, plusIsSpace: true, limit: 64), as: UTF8.self))
            }
        }
        if first == "watch", onlyFirst, !anyParameter { unreadableVideo = true }
        let lowered = decodedPath.lowercased()
        playerResource = Self.playerPrefixes.first { lowered.utf8.starts(with: $0.utf8) }
    }

    /// The paths of YouTube's player: its scripts and styles, its API calls and statistics.
    public static let playerPrefixes = ["/s/", "/youtubei/v1/player", "/youtubei/v1/log_event", "/api/stats/", "/generate_204", "/iframe_api", "/favicon.ico"]

    /// YouTube's own names: youtube.com and youtube-nocookie.com and the names below them, youtu.be, and YouTube's API hosts.
    public static func isYouTubeHost(_ host: HostName) -> Bool {
        let name = host.description
        return name == "youtu.be" || name == "youtubei.googleapis.com" || name == "youtube.googleapis.com" || name == "youtube.com"
            || name.hasSuffix(".youtube.com") || name == "youtube-nocookie.com" || name.hasSuffix(".youtube-nocookie.com")
    }

    private static func searchEngine(host: HostName, name: String, segments: [String], first: String, onlyFirst: Bool) -> SearchEngine? {
        if (name == "google.com" || SafeSearch.isGoogleSearchName(name)), first == "search", onlyFirst { return .google }
        if name == "www.bing.com" || name == "bing.com" {
            if first == "search", onlyFirst { return .bing }
            if (first == "images" || first == "videos"), segments.count >= 2, segments[1].lowercased() == "search" { return .bing }
        }
        if name == "duckduckgo.com" || name == "html.duckduckgo.com" || name == "lite.duckduckgo.com" {
            if first.isEmpty || ((first == "html" || first == "lite") && onlyFirst) { return .duckduckgo }
        }
        if isYouTubeHost(host), first == "results", onlyFirst { return .youtube }
        return nil
    }

    /// The Host as a name: a port after the last colon removed; an IPv6
    /// literal (brackets) or anything HostName refuses is nil.
    static func host(_ raw: [UInt8]) -> HostName? {
        guard !raw.isEmpty, raw.count <= 1024, raw.first != UInt8(ascii: "[") else { return nil }
        var end = raw.count
        if let colon = raw.lastIndex(of: UInt8(ascii: ":")) {
            let port = raw[(colon + 1)...]
            guard port.count <= 5, port.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
            end = colon
        }
        return try? HostName(bytes: raw[..<end])
    }

    /// The path and the query (without `?`) of an origin-form or absolute
    /// target; a fragment (which a client should not send) is cut off.
    static func pathAndQuery(_ target: ArraySlice<UInt8>) -> (ArraySlice<UInt8>, ArraySlice<UInt8>?)? {
        var target = target
        if let hash = target.firstIndex(of: UInt8(ascii: "#")) { target = target[..<hash] }
        if target.first != UInt8(ascii: "/") {
            // `http://host/...` or `https://host/...`: the path starts at the first slash after the authority.
            guard let colon = target.firstIndex(of: UInt8(ascii: ":")), target[colon...].starts(with: Array("://".utf8)) else { return nil }
            let scheme = String(decoding: target[..<colon], as: UTF8.self).lowercased()
            guard scheme == "http" || scheme == "https" else { return nil }
            let afterAuthority = target[(colon + 3)...]
            guard let slash = afterAuthority.firstIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") }) else {
                return (Array("/".utf8)[...], nil)
            }
            target = afterAuthority[slash...]
            if target.first == UInt8(ascii: "?") { return (Array("/".utf8)[...], target.dropFirst()) }
        }
        guard let question = target.firstIndex(of: UInt8(ascii: "?")) else { return (target, nil) }
        return (target[..<question], target[(question + 1)...])
    }

    /// `raw` (starting with `/`) with escapes of unreserved characters decoded
    /// (RFC 3986 section 6.2.2.2: the same URL) and dot segments removed
    /// (section 5.2.4), at most `maximumPathBytes` of it read.
    static func normalizedPath(_ raw: ArraySlice<UInt8>) -> String {
        let bytes = raw.prefix(maximumPathBytes)
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            // An escape is kept when its character is a hex digit that would make a new escape
            // with the `%` or `%h` before it (`%%34%31` is not `%41`): read again, the path
            // stays the same (found by the `inspect` fuzz target).
            if byte == UInt8(ascii: "%"), bytes.endIndex - index > 2, let high = HexDigit.value(of: bytes[index + 1]),
                let low = HexDigit.value(of: bytes[index + 2]), PercentText.isUnreserved(high << 4 | low),
                HexDigit.value(of: high << 4 | low) == nil || !PercentText.endsInEscapeStart(decoded)
            {
                decoded.append(high << 4 | low)
                index += 3
                continue
            }
            decoded.append(byte)
            index += 1
        }
        // Dot segments, on the segments between slashes (the path starts with one).
        var output: [ArraySlice<UInt8>] = []
        let pieces = decoded.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
        var trailingSlash = false
        for (offset, piece) in pieces.enumerated() {
            let last = offset == pieces.count - 1
            if piece.elementsEqual([UInt8(ascii: ".")]) {
                trailingSlash = last
            } else if piece.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                if !output.isEmpty { output.removeLast() }
                trailingSlash = last
            } else {
                output.append(piece)
                trailingSlash = false
            }
        }
        var result: [UInt8] = [UInt8(ascii: "/")]
        for (offset, piece) in output.enumerated() {
            if offset > 0 { result.append(UInt8(ascii: "/")) }
            result.append(contentsOf: piece)
        }
        if trailingSlash, !output.isEmpty { result.append(UInt8(ascii: "/")) }
        return String(decoding: result, as: UTF8.self)
    }

    /// The path's segments after the first slash, each percent-decoded (invalid UTF-8 repaired).
    static func segments(_ path: String) -> [String] {
        path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst().prefix(8).map {
            String(decoding: PercentText.decode($0, plusIsSpace: false, limit: 256), as: UTF8.self)
        }
    }

    /// Calls `body` with the raw value of every `key=value` pair of `query`
    /// whose key, decoded, is `key` (a pair without `=` has an empty value).
    static func forEachValue(of key: String, in query: ArraySlice<UInt8>, _ body: (ArraySlice<UInt8>) -> Void) {
        let wanted = Array(key.utf8)
        var start = query.startIndex
        while start <= query.endIndex {
            let end = query[start...].firstIndex(of: UInt8(ascii: "&")) ?? query.endIndex
            let pair = query[start..<end]
            let equals = pair.firstIndex(of: UInt8(ascii: "=")) ?? pair.endIndex
            let name = pair[..<equals]
            // Names longer than an escaped `search_query` are not it.
            if name.count <= wanted.count * 3, PercentText.decode(name, plusIsSpace: true, limit: wanted.count * 3) == wanted {
                body(equals < pair.endIndex ? pair[(equals + 1)...] : pair[pair.endIndex...])
            }
            start = end + 1
        }
    }

    /// A search value as a person typed it: decoded, control and format
    /// characters made spaces, runs of spaces made one, at most `maximumSearchTermBytes`.
    static func searchTerm(_ raw: ArraySlice<UInt8>) -> String {
        let decoded = String(decoding: PercentText.decode(raw, plusIsSpace: true, limit: maximumSearchTermBytes * 4), as: UTF8.self)
        var result = ""
        var bytes = 0
        var pendingSpace = false
        for character in decoded {
            let isSpace = character.isWhitespace || character.unicodeScalars.contains {
                switch $0.properties.generalCategory {
                case .control, .format, .lineSeparator, .paragraphSeparator, .unassigned, .privateUse, .surrogate: true
                default: false
                }
            }
            if isSpace {
                pendingSpace = !result.isEmpty
                continue
            }
            let piece = (pendingSpace ? " " : "") + String(character)
            guard bytes + piece.utf8.count <= maximumSearchTermBytes else { break }
            result += piece
            bytes += piece.utf8.count
            pendingSpace = false
        }
        return result
    }
}

/// Lenient percent-decoding for what clients send: a `%` not followed by two
/// hex digits stays itself, bytes outside ASCII pass through, and decoding
/// stops after `limit` decoded bytes. (PercentEncoding refuses such input;
/// here it must be read the way a server would, whatever it is.)
enum PercentText {
    static func decode(_ raw: some Collection<UInt8>, plusIsSpace: Bool, limit: Int) -> [UInt8] {
        var decoded: [UInt8] = []
        decoded.reserveCapacity(min(raw.count, limit))
        var iterator = raw.makeIterator()
        var lookahead: [UInt8] = []
        func next() -> UInt8? { lookahead.isEmpty ? iterator.next() : lookahead.removeFirst() }
        while decoded.count < limit, let byte = next() {
            switch byte {
            case UInt8(ascii: "+") where plusIsSpace:
                decoded.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let first = next() else {
                    decoded.append(byte)
                    break
                }
                guard let high = HexDigit.value(of: first), let second = next() else {
                    decoded.append(byte)
                    lookahead.append(first)
                    break
                }
                guard let low = HexDigit.value(of: second) else {
                    decoded.append(byte)
                    lookahead += [first, second]
                    break
                }
                decoded.append(high << 4 | low)
            default:
                decoded.append(byte)
            }
        }
        return decoded
    }

    /// Whether `bytes` ends in `%` or `%` and a hex digit: a hex digit after it would make an escape.
    static func endsInEscapeStart(_ bytes: [UInt8]) -> Bool {
        guard let last = bytes.last else { return false }
        if last == UInt8(ascii: "%") { return true }
        return bytes.count >= 2 && bytes[bytes.count - 2] == UInt8(ascii: "%") && HexDigit.value(of: last) != nil
    }

    /// RFC 3986 section 2.3: `A-Z a-z 0-9 - . _ ~`.
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default: false
        }
    }
}
