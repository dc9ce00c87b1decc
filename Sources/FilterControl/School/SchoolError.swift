/// Why talking to the school's server failed, or what it refused. Each case
/// has a stable code (`school.*`, what logs and `filterctl` show) and a
/// message that says what to do. A refusal's code is the server's own
/// (`school.token-expired` for the server's `token-expired`).
public enum SchoolError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The enrolment token is not `hp1.<fingerprint>.<secret>`.
    case malformedToken(reason: String)
    /// The server URL is not one the machine can use.
    case serverURL(reason: String)
    /// The server's certificate key is not the one the token (or `school.fingerprint`) pins; nothing was sent.
    case fingerprintMismatch(server: String, expected: String, seen: String)
    /// The server could not be reached, or the connection failed before an answer.
    case unreachable(server: String, reason: String)
    case timedOut(server: String, seconds: Int)
    /// The TLS handshake failed for a reason other than the pin.
    case tls(server: String, reason: String)
    /// The server answered with a refusal of the contract (`{"error": CODE, "message": ...}`) or another status.
    case refused(status: Int, code: String?, message: String?)
    /// The server's answer is not what the contract says.
    case badAnswer(reason: String)
    /// The machine's identity (`identity`, `identity.key` in rules.directory) is missing or unreadable.
    case identity(path: String, reason: String)
    /// Writing the identity or the configuration failed.
    case io(path: String, reason: String)
    /// The request was cancelled (filter-control is stopping).
    case cancelled

    public var code: String {
        switch self {
        case .malformedToken: "school.token-malformed"
        case .serverURL: "school.server-url"
        case .fingerprintMismatch: "school.fingerprint-mismatch"
        case .unreachable: "school.unreachable"
        case .timedOut: "school.timeout"
        case .tls: "school.tls"
        case .refused(let status, let code, _):
            code.flatMap { SchoolError.knownRefusals.contains($0) ? "school." + $0 : nil } ?? "school.http-\(status)"
        case .badAnswer: "school.protocol"
        case .identity: "school.identity"
        case .io: "school.io"
        case .cancelled: "school.cancelled"
        }
    }

    /// The refusal codes of the contract (docs/server.md).
    static let knownRefusals: Set<String> = [
        "token-unknown", "token-used-up", "token-expired", "bad-request", "signature-invalid", "machine-revoked",
    ]

    public var description: String {
        switch self {
        case .malformedToken(let reason):
            "the enrolment token is not valid: \(reason); copy the whole token 'hallpass-server token create' printed (hp1.FINGERPRINT.SECRET)"
        case .serverURL(let reason):
            "the server: \(reason)"
        case .fingerprintMismatch(let server, let expected, let seen):
            "the certificate of \(server) has the key fingerprint \(seen), not \(expected) as the token says: "
                + "this is not the school's server (or not the one that made the token); nothing was sent"
        case .unreachable(let server, let reason):
            "cannot reach the school's server \(server): \(reason)"
        case .timedOut(let server, let seconds):
            "the school's server \(server) did not answer within \(seconds) s"
        case .tls(let server, let reason):
            "the TLS handshake with the school's server \(server) failed: \(reason)"
        case .refused(let status, let code, let message):
            SchoolError.refusal(status: status, code: code, message: message)
        case .badAnswer(let reason):
            "the school's server answered something this machine cannot read: \(reason)"
        case .identity(let path, let reason):
            "the machine's identity \(path): \(reason); enrol the machine with 'filterctl enroll https://SERVER TOKEN'"
        case .io(let path, let reason):
            "cannot write \(path): \(reason)"
        case .cancelled:
            "cancelled"
        }
    }

    private static func refusal(status: Int, code: String?, message: String?) -> String {
        let said = message.map { " (the server says: \($0.prefix(300)))" } ?? ""
        switch code {
        case "token-unknown":
            return "the server does not know this token: mistyped, or made by another server; ask for a new one (hallpass-server token create)\(said)"
        case "token-used-up":
            return "this token has been used as many times as it allows: make a new one (hallpass-server token create --room ROOM --uses N)\(said)"
        case "token-expired":
            return "this token has expired: make a new one (hallpass-server token create)\(said)"
        case "bad-request":
            return "the server refused the request as malformed\(said)"
        case "signature-invalid":
            return "the server did not accept this machine's signature: the machine's clock must be within 5 minutes of the server's, and the machine enrolled with this server\(said)"
        case "machine-revoked":
            return "the school's server has revoked this machine: enrol it again with a new token (filterctl enroll)\(said)"
        default:
            return "the school's server answered HTTP \(status)\(code.map { " \($0.prefix(60))" } ?? "")\(said)"
        }
    }

    /// A transport failure of `HTTPSClient`, in the school's words.
    static func transport(_ error: RuleUpdateError, expected: ServerFingerprint) -> SchoolError {
        switch error {
        case .unreachable(let server, let reason): .unreachable(server: server, reason: reason)
        case .timedOut(let server, let seconds): .timedOut(server: server, seconds: seconds)
        case .tls(let server, let reason): .tls(server: server, reason: reason)
        case .pinMismatch(let server, let seen): .fingerprintMismatch(server: server, expected: expected.description, seen: seen.joined(separator: ", "))
        case .untrustedCertificate(let server, let reason): .tls(server: server, reason: reason)
        case .certificateName(let server): .tls(server: server, reason: "the certificate is not for this name")
        case .tooLarge(let file, let limit): .badAnswer(reason: "the answer to \(file) is larger than \(limit) bytes")
        case .truncated(let file): .unreachable(server: "-", reason: "the connection ended before the whole answer to \(file) arrived")
        case .badResponse(_, let reason): .badAnswer(reason: reason)
        case .cancelled: .cancelled
        default: .badAnswer(reason: error.description)
        }
    }
}
