// What the proxy does with a connection once it has read the client's first
// bytes: pure, so the tests walk every case without a socket.
public import FilterData
public import VerdictCore

/// Splice, inspect or refuse, and why.
public enum ProxyDecision: Sendable, Hashable, CustomStringConvertible {
    /// Relay the bytes both ways, the ClientHello first and unchanged.
    case splice(SpliceReason)
    /// Terminate TLS with a leaf for this name (the ClientHello's) and decide each request.
    case inspect(HostName)
    case refuse(RefusalReason)
    /// The ClientHello is not complete yet: read on.
    case readMore

    public var description: String {
        switch self {
        case .splice(let reason): "splice (\(reason))"
        case .inspect(let name): "inspect \(name)"
        case .refuse(let reason): "refuse (\(reason.rawValue))"
        case .readMore: "read more"
        }
    }
}

/// Why a connection the kernel sent to the proxy is refused.
public enum RefusalReason: String, Sendable, Hashable, CaseIterable {
    /// The name is to be inspected, and the proxy has no interception CA
    /// (filter-control hands it over at the proxy's start; none when it could
    /// not make one): the connection is refused rather than passed unseen.
    case noAuthority
    /// The first bytes are no TLS ClientHello (or a malformed one): nothing
    /// says where the connection goes, so nothing is spliced blind.
    case notTLS
    /// A ClientHello larger than the parser reads, or one that did not come
    /// whole in time.
    case incomplete
    /// Nobody answered which group the connection's user is in.
    case unknownUser
    /// The original destination could not be read.
    case noDestination
    /// The proxy already relays as many connections as it may.
    case full
}

public enum ProxyDecisions {
    /// The decision on the client's first bytes so far (`bytes`, from the
    /// start of the connection) under the plan of the connection's user.
    ///
    /// A ClientHello whose name the plan splices (not inspected, on the
    /// never-inspect list, no name or an address) is spliced; an inspected
    /// name is inspected, or refused while the proxy has no interception CA
    /// (`canInspect` false). Anything that is not a ClientHello is refused too: the
    /// kernel sends the proxy only TCP 443 to the addresses of inspected names,
    /// where a client that hides its name must not pass unseen.
    public static func decide(_ bytes: Span<UInt8>, plan: InspectionPlan, canInspect: Bool) -> ProxyDecision {
        switch ClientHelloParser.parse(recordStream: bytes) {
        case .needMoreData:
            return bytes.count >= ClientHelloParser.maximumRecordStreamLength ? .refuse(.incomplete) : .readMore
        case .notTLS, .malformed:
            return .refuse(.notTLS)
        case .tooLarge:
            return .refuse(.incomplete)
        case .clientHello(let hello):
            switch plan.choice(serverName: hello.serverName ?? []) {
            case .inspect:
                // `choice` inspects only a host name.
                guard canInspect, let name = try? HostName(bytes: hello.serverName ?? []) else { return .refuse(.noAuthority) }
                return .inspect(name)
            case .splice(let reason): return .splice(reason)
            }
        }
    }

    /// Whether the bytes so far hold a whole ClientHello (or can never hold one).
    public static func helloIsComplete(_ bytes: Span<UInt8>) -> Bool {
        if case .needMoreData = ClientHelloParser.parse(recordStream: bytes) {
            return bytes.count >= ClientHelloParser.maximumRecordStreamLength
        }
        return true
    }

    /// The server name of a whole ClientHello, for the log; nil when there is none.
    public static func serverName(_ bytes: Span<UInt8>) -> String? {
        guard case .clientHello(let hello) = ClientHelloParser.parse(recordStream: bytes), let name = hello.serverName else { return nil }
        return String(decoding: name, as: UTF8.self)
    }

    /// What the client gets for a refusal: a fatal TLS alert, `access_denied`
    /// (RFC 8446 section 6.2: the sender "decided not to proceed with
    /// negotiation" after access control), in a TLS 1.2 record as every
    /// version reads it. The connection is closed after it.
    public static let accessDeniedAlert: [UInt8] = [21, 3, 3, 0, 2, 2, 49]
}
