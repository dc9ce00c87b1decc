// What the proxy does with a connection once it has read the client's first
// bytes: pure, so the tests walk every case without a socket.
public import FilterData
import HallpassIPC
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
    /// The connection was to be spliced, and the certificate its server
    /// shows for its name covers a name the person's plan inspects.
    case certificateCoversInspected
    /// The connection was to be spliced, and its server showed the proxy's
    /// check no certificate (for a name not on the never-inspect list).
    case certificateUnchecked
}

/// What a splice becomes once the server's certificate was checked.
public enum CertificateCheckOutcome: Sendable, Hashable {
    case splice
    /// Refused, with the reason its record carries.
    case refuse(RefusalReason, Reason)
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

    /// The category of the record of a splice refused for the server's
    /// certificate: it covers the inspected name the rule names.
    public static let certificateCoversCategory = "certificate-covers"
    /// The category of the record of a splice refused because the server
    /// showed no certificate.
    public static let certificateUncheckedCategory = "certificate-unchecked"

    /// Splice or refuse a connection the plan splices (`reason`), now that
    /// its server's certificate for the connection's name is known.
    ///
    /// A certificate that covers a name the plan inspects is refused,
    /// whatever the name the connection showed: a browser would send that
    /// name's requests over it, and so could a student (an uninspected or a
    /// never-inspect name, or none, sent to an inspected host's address).
    /// No certificate at all is refused too, except for a never-inspect
    /// name: nothing is spliced to an inspected host's address unchecked,
    /// but a bank, a health service or an update server whose handshake the
    /// proxy could not complete is never broken by that (the check only
    /// reads what the same server shows everyone; it cannot be made to fail
    /// by the client, whose bytes wait in the proxy meanwhile).
    public static func afterCertificateCheck(_ certificate: ServerCertificate, splicing reason: SpliceReason, plan: InspectionPlan)
        -> CertificateCheckOutcome
    {
        // Nothing of this person's is inspected: nothing to protect (`needsCertificateCheck`).
        guard plan.inspectsAnything else { return .splice }
        switch certificate {
        case .names(let names):
            guard let covered = plan.inspectedName(coveredBy: names) else { return .splice }
            return .refuse(.certificateCoversInspected, Reason(source: .inspectBlock, category: certificateCoversCategory, rule: covered))
        case .unavailable:
            if case .neverInspect = reason { return .splice }
            return .refuse(.certificateUnchecked, Reason(source: .inspectBlock, category: certificateUncheckedCategory))
        }
    }

    /// Whether a splice under `plan` waits for the check of the server's
    /// certificate: not for a person whose plan inspects nothing (a group
    /// with `inspect: none`), whose connections reach the proxy only because
    /// someone else's plan selected the address.
    public static func needsCertificateCheck(_ plan: InspectionPlan) -> Bool { plan.inspectsAnything }

    /// The server name a certificate check sends for the ClientHello's
    /// `serverName`: the name when it is a host name, none otherwise (an
    /// address or bytes no TLS library sends; the server answers as it
    /// answers a ClientHello without one).
    public static func checkName(_ serverName: String?) -> String? {
        guard let serverName, let host = try? HostName(serverName), !host.isIPv4Literal else { return nil }
        return host.description
    }

    /// The flow recorded when the connection's addresses cannot be read.
    static let unknownFlow = FlowKey(
        protocolNumber: 6, source: IPAddress("0.0.0.0")!, sourcePort: 0, destination: IPAddress("0.0.0.0")!, destinationPort: 443)

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
