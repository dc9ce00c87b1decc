/// A URL or host name given by a person to check (`filterctl check`), turned
/// into the facts a flow to it would show.
///
/// Accepted: `example.com`, `example.com/path`, `http://example.com:8080/a?b`,
/// `https://user@example.com/`, `192.0.2.1`, `[2001:db8::1]:443`, `2001:db8::1`,
/// IDN names. For `https://` (and any scheme but `http`) only the name
/// counts: a filter sees the TLS server name, not the path.
public struct CheckTarget: Sendable, Hashable {
    public var host: HostName?
    public var address: IPAddress?
    public var path: String?
    public var port: UInt16?

    public enum ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        case empty
        case badHost(String, HostNameError)
        case badPort(String)
        case badAddress(String)

        public var description: String {
            switch self {
            case .empty: "empty target"
            case .badHost(let host, let error): "'\(host.prefix(80))' is not a host name: \(error)"
            case .badPort(let port): "'\(port.prefix(20))' is not a port number"
            case .badAddress(let text): "'\(text.prefix(60))' is not an IP address"
            }
        }
    }

    public init(_ text: some StringProtocol) throws(ParseError) {
        try self.init(utf8: Array(text.utf8)[...])
    }

    /// Parses UTF-8 bytes directly (the batch path of `filterctl check`).
    public init(utf8 input: ArraySlice<UInt8>) throws(ParseError) {
        var start = input.startIndex
        var end = input.endIndex
        while start < end, CheckTarget.isSpace(input[start]) { start += 1 }
        while end > start, CheckTarget.isSpace(input[end - 1]) { end -= 1 }
        guard start < end else { throw .empty }
        let text = input[start..<end]

        // scheme "://"
        var rest = text
        var scheme: ArraySlice<UInt8>? = nil
        if let colon = text.firstIndex(of: UInt8(ascii: ":")), colon > text.startIndex, colon + 2 < text.endIndex,
            text[colon + 1] == UInt8(ascii: "/"), text[colon + 2] == UInt8(ascii: "/"),
            text[..<colon].allSatisfy(CheckTarget.isSchemeByte)
        {
            scheme = text[..<colon]
            rest = text[(colon + 3)...]
        }
        let authorityEnd = rest.firstIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        var pathPart = rest[authorityEnd...]
        if let hash = pathPart.firstIndex(of: UInt8(ascii: "#")) { pathPart = pathPart[..<hash] }
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) { authority = authority[(at + 1)...] }

        var hostPart = authority
        var portPart: ArraySlice<UInt8>? = nil
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { throw .badAddress(CheckTarget.text(authority)) }
            hostPart = authority[(authority.startIndex + 1)..<close]
            let after = authority[(close + 1)...]
            if after.first == UInt8(ascii: ":") {
                portPart = after.dropFirst()
            } else if !after.isEmpty {
                throw .badAddress(CheckTarget.text(authority))
            }
            guard let address = IPAddress.parseIPv6(hostPart) else { throw .badAddress(CheckTarget.text(hostPart)) }
            self.address = address
        } else if authority.lazy.filter({ $0 == UInt8(ascii: ":") }).count > 1 {
            // A bare IPv6 address (no brackets, so no port).
            guard let address = IPAddress.parseIPv6(authority) else { throw .badAddress(CheckTarget.text(authority)) }
            self.address = address
        } else {
            if let colon = authority.lastIndex(of: UInt8(ascii: ":")) {
                hostPart = authority[..<colon]
                portPart = authority[(colon + 1)...]
            }
            if let v4 = IPAddress.parseIPv4(hostPart) {
                self.address = .v4(v4)
            } else {
                do {
                    self.host = try HostName(bytes: hostPart)
                } catch {
                    throw .badHost(CheckTarget.text(hostPart), error)
                }
            }
        }
        if let portPart {
            var value = 0
            for byte in portPart {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), value <= 65535 else { throw .badPort(CheckTarget.text(portPart)) }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            guard !portPart.isEmpty, value <= 65535 else { throw .badPort(CheckTarget.text(portPart)) }
            self.port = UInt16(value)
        }
        let schemeName = scheme.map { String(decoding: $0, as: UTF8.self).lowercased() }
        if port == nil {
            switch schemeName {
            case "http": self.port = 80
            case "https": self.port = 443
            default: break
            }
        }
        if schemeName == nil || schemeName == "http", !pathPart.isEmpty {
            let path = String(decoding: pathPart, as: UTF8.self)
            self.path = pathPart.first == UInt8(ascii: "/") ? path : "/" + path
        }
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\n")
    }

    private static func isSchemeByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
            || byte == UInt8(ascii: ".")
    }

    private static func text(_ bytes: ArraySlice<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }

    /// What a flow to this target shows the filter.
    public var facts: FlowFacts {
        FlowFacts(
            host: host,
            nameSource: host == nil ? nil : .request,
            path: path,
            destination: address,
            destinationPort: port,
            transport: .tcp
        )
    }
}
