// The head of an HTTP/1.x request (RFC 9112 sections 3 and 5): the request
// line and the header fields up to the empty line, as the first bytes of a
// client's TCP stream.
import HallpassWire

/// The request methods recognised. Only these start a request, so that other
/// protocols on port 80 (TLS, for one) are not taken for HTTP.
public enum HTTPMethod: UInt8, CaseIterable, Hashable, Sendable {
    case get, head, post, put, delete, options, patch, connect, trace
    // WebDAV (RFC 4918) and friends.
    case propfind, proppatch, mkcol, copy, move, lock, unlock, report, search

    /// The method token as it appears on the wire.
    public var token: StaticString {
        switch self {
        case .get: "GET"
        case .head: "HEAD"
        case .post: "POST"
        case .put: "PUT"
        case .delete: "DELETE"
        case .options: "OPTIONS"
        case .patch: "PATCH"
        case .connect: "CONNECT"
        case .trace: "TRACE"
        case .propfind: "PROPFIND"
        case .proppatch: "PROPPATCH"
        case .mkcol: "MKCOL"
        case .copy: "COPY"
        case .move: "MOVE"
        case .lock: "LOCK"
        case .unlock: "UNLOCK"
        case .report: "REPORT"
        case .search: "SEARCH"
        }
    }
}

/// The facts of a request head that a filter decides on.
public struct HTTPRequestHead: Hashable, Sendable {
    public enum TargetForm: Hashable, Sendable {
        /// `/path?query` with the host in the Host header (RFC 9112 section 3.2.1).
        case origin
        /// `http://host:port/path` (section 3.2.2); the target's host wins over Host.
        case absolute
        /// `host:port`, for CONNECT (section 3.2.3).
        case authority
        /// `*`, for OPTIONS (section 3.2.4).
        case asterisk
    }

    public var method: HTTPMethod
    public var targetForm: TargetForm
    /// The host, ASCII lower-cased, port removed; IP literals are kept, an
    /// IPv6 literal without its brackets. Nil when the request names no host.
    public var host: [UInt8]?
    /// The port given with the host, if any.
    public var port: UInt16?
    /// The path and query (origin form, or taken from an absolute target);
    /// `*` for the asterisk form; nil for CONNECT.
    public var path: [UInt8]?
    /// The length of the head, up to and including the empty line.
    public var headLength: Int
}

public enum HTTPRequestOutcome: Hashable, Sendable {
    /// A plausible start of a request head, not yet complete.
    case needMoreData
    /// The bytes do not start with a known method and a space.
    case notHTTP
    /// A request that a correct server would refuse; `reason` says why.
    case malformed(reason: String)
    case request(HTTPRequestHead)
}

/// Parses the request head at the start of a client's byte stream.
public enum HTTPRequestHeadParser {
    /// A head longer than this is refused (the default peek bound).
    public static let maximumHeadLength = 16_384

    /// The lower-case tokens compared without regard to case.
    private enum Token {
        static let httpVersion = Array("http/1.".utf8)
        static let host = Array("host".utf8)
        static let http = Array("http://".utf8)
        static let https = Array("https://".utf8)
    }

    private static let methodTable: [(HTTPMethod, [UInt8])] = HTTPMethod.allCases.map { method in
        (method, Array(method.token.description.utf8))
    }

    /// Parses `bytes`, the stream prefix. Bare LF line endings are accepted.
    public static func parse(_ bytes: Span<UInt8>, maximumHeadLength: Int = maximumHeadLength) -> HTTPRequestOutcome {
        // 1. The method and one space, or a prefix of one.
        var matched: HTTPMethod? = nil
        var couldStillMatch = false
        for (method, token) in methodTable {
            let compared = min(token.count + 1, bytes.count)
            var equal = true
            for index in 0..<compared {
                let expected: UInt8 = index < token.count ? token[index] : 0x20
                if bytes[index] != expected { equal = false; break }
            }
            guard equal else { continue }
            if compared == token.count + 1 { matched = method; break }
            couldStillMatch = true
        }
        guard let method = matched else { return couldStillMatch || bytes.isEmpty ? .needMoreData : .notHTTP }

        // 2. The end of the head: an empty line. (Scanning a span of exactly
        // `limit` bytes lets the compiler drop the per-byte range checks.)
        let limit = min(bytes.count, maximumHeadLength)
        let scanned = bytes.extracting(0..<limit)
        var headEnd: Int? = nil
        var index = 0
        while index < scanned.count {
            if scanned[index] == 0x0A {
                if index + 1 < limit, scanned[index + 1] == 0x0A { headEnd = index + 2; break }
                if index + 2 < limit, scanned[index + 1] == 0x0D, scanned[index + 2] == 0x0A { headEnd = index + 3; break }
            }
            index += 1
        }
        guard let end = headEnd else {
            if bytes.count >= maximumHeadLength {
                return .malformed(reason: "request head longer than \(maximumHeadLength) bytes")
            }
            // Fail early on binary junk after a method-like start.
            for position in scanned.indices where scanned[position] == 0 {
                _ = position
                return .malformed(reason: "NUL byte in the request head")
            }
            return .needMoreData
        }

        // The rest reads only the head: one range check here, and every index
        // below `end` is then known to be inside it.
        let bytes = bytes.extracting(0..<end)

        // 3. The request line: METHOD SP target SP HTTP/1.x
        var lineEnd = 0
        while bytes[lineEnd] != 0x0A { lineEnd += 1 }
        let lineContentEnd = lineEnd > 0 && bytes[lineEnd - 1] == 0x0D ? lineEnd - 1 : lineEnd
        // RFC 9112 section 3 allows recipients to accept runs of whitespace between the parts.
        var targetStart = methodTable.first(where: { $0.0 == method }).map { $0.1.count + 1 } ?? 0
        while targetStart < lineContentEnd, bytes[targetStart] == 0x20 || bytes[targetStart] == 0x09 { targetStart += 1 }
        var targetEnd = targetStart
        while targetEnd < lineContentEnd, bytes[targetEnd] != 0x20, bytes[targetEnd] != 0x09 { targetEnd += 1 }
        guard targetEnd > targetStart else { return .malformed(reason: "empty request-target") }
        var versionStart = targetEnd
        while versionStart < lineContentEnd, bytes[versionStart] == 0x20 || bytes[versionStart] == 0x09 { versionStart += 1 }
        var versionEnd = lineContentEnd
        while versionEnd > versionStart, bytes[versionEnd - 1] == 0x20 || bytes[versionEnd - 1] == 0x09 { versionEnd -= 1 }
        guard versionStart > targetEnd, versionEnd - versionStart == 8,
              ASCII.equalsIgnoringCase(bytes, versionStart..<(versionStart + 7), Token.httpVersion),
              bytes[versionStart + 7] >= 0x30, bytes[versionStart + 7] <= 0x39 else {
            return .malformed(reason: "request line does not end in HTTP/1.x")
        }
        for position in targetStart..<targetEnd where bytes[position] <= 0x20 || bytes[position] == 0x7F {
            _ = position
            return .malformed(reason: "control byte in the request-target")
        }

        // 4. Header fields: find the (single) Host.
        var hostValue: Range<Int>? = nil
        var lineStart = lineEnd + 1
        var previousWasHost = false
        while lineStart < end {
            var next = lineStart
            while next < end, bytes[next] != 0x0A { next += 1 }
            var contentEnd = next
            if contentEnd > lineStart, bytes[contentEnd - 1] == 0x0D { contentEnd -= 1 }
            defer { lineStart = next + 1 }
            if contentEnd == lineStart { break }  // the empty line
            if bytes[lineStart] == 0x20 || bytes[lineStart] == 0x09 {
                // Obsolete line folding (RFC 9112 section 5.2); a folded Host is refused.
                if previousWasHost { return .malformed(reason: "folded Host header") }
                continue
            }
            var colon = lineStart
            while colon < contentEnd, bytes[colon] != 0x3A { colon += 1 }
            guard colon < contentEnd, colon > lineStart else { return .malformed(reason: "header line without a name and colon") }
            if bytes[colon - 1] == 0x20 || bytes[colon - 1] == 0x09 {
                return .malformed(reason: "whitespace between header name and colon")  // RFC 9112 section 5.1
            }
            previousWasHost = ASCII.equalsIgnoringCase(bytes, lineStart..<colon, Token.host)
            if previousWasHost {
                guard hostValue == nil else { return .malformed(reason: "more than one Host header") }  // RFC 9112 section 3.2
                var valueStart = colon + 1
                var valueEnd = contentEnd
                while valueStart < valueEnd, bytes[valueStart] == 0x20 || bytes[valueStart] == 0x09 { valueStart += 1 }
                while valueEnd > valueStart, bytes[valueEnd - 1] == 0x20 || bytes[valueEnd - 1] == 0x09 { valueEnd -= 1 }
                hostValue = valueStart..<valueEnd
            }
        }

        // 5. Combine target and Host.
        var head = HTTPRequestHead(method: method, targetForm: .origin, host: nil, port: nil, path: nil, headLength: end)
        let target = targetStart..<targetEnd
        if method == .connect {
            head.targetForm = .authority
            guard let authority = parseAuthority(bytes, target) else { return .malformed(reason: "bad CONNECT authority") }
            head.host = authority.host
            head.port = authority.port
            return .request(head)
        }
        if bytes[targetStart] == 0x2F {  // "/"
            head.path = bytes.copied(target)
        } else if target.count == 1, bytes[targetStart] == 0x2A {  // "*"
            head.targetForm = .asterisk
            head.path = [0x2A]
        } else if let schemeEnd = schemeLength(bytes, target) {
            head.targetForm = .absolute
            var authorityEnd = targetStart + schemeEnd
            while authorityEnd < targetEnd, bytes[authorityEnd] != 0x2F, bytes[authorityEnd] != 0x3F, bytes[authorityEnd] != 0x23 {
                authorityEnd += 1
            }
            var authorityStart = targetStart + schemeEnd
            // Drop userinfo ("user:pass@").
            for position in authorityStart..<authorityEnd where bytes[position] == 0x40 { authorityStart = position + 1 }
            guard let authority = parseAuthority(bytes, authorityStart..<authorityEnd) else {
                return .malformed(reason: "bad host in absolute request-target")
            }
            head.host = authority.host
            head.port = authority.port
            head.path = authorityEnd < targetEnd ? bytes.copied(authorityEnd..<targetEnd) : [0x2F]
            return .request(head)
        } else {
            return .malformed(reason: "request-target is not origin, absolute or asterisk form")
        }
        if let hostValue, !hostValue.isEmpty {
            guard let authority = parseAuthority(bytes, hostValue) else { return .malformed(reason: "bad Host header value") }
            head.host = authority.host
            head.port = authority.port
        }
        return .request(head)
    }

    /// Convenience for an array.
    public static func parse(_ bytes: [UInt8], maximumHeadLength: Int = maximumHeadLength) -> HTTPRequestOutcome {
        parse(bytes.span, maximumHeadLength: maximumHeadLength)
    }

    /// The length of `http://` or `https://` at the start of `range`, if present.
    private static func schemeLength(_ bytes: Span<UInt8>, _ range: Range<Int>) -> Int? {
        let start = range.lowerBound
        if range.count >= 7, ASCII.equalsIgnoringCase(bytes, start..<(start + 7), Token.http) { return 7 }
        if range.count >= 8, ASCII.equalsIgnoringCase(bytes, start..<(start + 8), Token.https) { return 8 }
        return nil
    }

    /// `host[:port]` or `[v6]:port` (RFC 3986 section 3.2.2), host lower-cased.
    static func parseAuthority(_ bytes: Span<UInt8>, _ range: Range<Int>) -> (host: [UInt8], port: UInt16?)? {
        guard !range.isEmpty else { return nil }
        // Indices below `range.upperBound` are then known to be in range.
        let bytes = bytes.extracting(0..<range.upperBound)
        var hostRange = range
        var portStart: Int? = nil
        if bytes[range.lowerBound] == 0x5B {  // "[" IPv6 literal
            var close = range.lowerBound
            while close < range.upperBound, bytes[close] != 0x5D { close += 1 }
            guard close < range.upperBound, close > range.lowerBound + 1 else { return nil }
            hostRange = (range.lowerBound + 1)..<close
            if close + 1 < range.upperBound {
                guard bytes[close + 1] == 0x3A else { return nil }
                portStart = close + 2
            } else if close + 1 == range.upperBound {
                portStart = nil
            }
            for position in hostRange {
                let byte = bytes[position]
                let ok = (byte >= 0x30 && byte <= 0x3A) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x66) || byte == 0x2E
                if !ok { return nil }
            }
        } else {
            var colon = range.upperBound
            for position in range where bytes[position] == 0x3A { colon = position; break }
            hostRange = range.lowerBound..<colon
            if colon < range.upperBound { portStart = colon + 1 }
            guard !hostRange.isEmpty else { return nil }
            for position in hostRange {
                let byte = bytes[position]
                // RFC 3986 reg-name: unreserved / pct-encoded / sub-delims.
                let ok = (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A)
                    || byte == 0x2D || byte == 0x2E || byte == 0x5F || byte == 0x7E || byte == 0x25
                    || byte == 0x21 || byte == 0x24 || (byte >= 0x26 && byte <= 0x2C) || byte == 0x3B || byte == 0x3D
                if !ok { return nil }
            }
        }
        var port: UInt16? = nil
        if let portStart {
            if portStart < range.upperBound {
                guard range.upperBound - portStart <= 5 else { return nil }
                var value = 0
                for position in portStart..<range.upperBound {
                    let byte = bytes[position]
                    guard byte >= 0x30, byte <= 0x39 else { return nil }
                    value = value * 10 + Int(byte - 0x30)
                }
                guard value <= 65_535 else { return nil }
                port = UInt16(value)
            }
        }
        var host = bytes.lowercasedASCII(hostRange)
        // A trailing dot names the same host ("example.com." is "example.com").
        if host.count > 1, host.last == 0x2E { host.removeLast() }
        return (host, port)
    }
}
