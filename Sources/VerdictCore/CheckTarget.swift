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

    public init(_ rawText: some StringProtocol) throws(ParseError) {
        let text = rawText.trimmingASCIISpaces()
        guard !text.isEmpty else { throw .empty }
        var rest = Substring(text)
        var scheme: Substring? = nil
        if let colon = rest.firstIndex(of: ":"), rest[colon...].hasPrefix("://") {
            scheme = rest[..<colon]
            rest = rest[rest.index(colon, offsetBy: 3)...]
        }
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        var pathPart = rest[authorityEnd...]
        if let hash = pathPart.firstIndex(of: "#") { pathPart = pathPart[..<hash] }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }

        var hostText = authority
        var portText: Substring? = nil
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .badAddress(String(authority)) }
            hostText = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw .badAddress(String(authority)) }
            guard let address = IPAddress(hostText) else { throw .badAddress(String(hostText)) }
            self.address = address
        } else if authority.filter({ $0 == ":" }).count > 1 {
            // A bare IPv6 address (no brackets, so no port).
            guard let address = IPAddress(authority) else { throw .badAddress(String(authority)) }
            self.address = address
        } else {
            if let colon = authority.lastIndex(of: ":") {
                hostText = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            }
            if let address = IPAddress(hostText) {
                self.address = address
            } else {
                do {
                    self.host = try HostName(hostText)
                } catch {
                    throw .badHost(String(hostText), error)
                }
            }
        }
        if let portText {
            guard let port = UInt16(portText), portText.allSatisfy(\.isASCII) else { throw .badPort(String(portText)) }
            self.port = port
        } else if let scheme {
            switch scheme.lowercased() {
            case "http": self.port = 80
            case "https": self.port = 443
            default: break
            }
        }
        let seesPath = scheme == nil || scheme!.lowercased() == "http"
        if seesPath, !pathPart.isEmpty {
            self.path = pathPart.hasPrefix("/") ? String(pathPart) : "/" + pathPart
        }
    }

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
