import HallpassSystem
public import SharedStore

/// Why a rule update was refused. Each case has a stable code (what
/// `filterctl status` and the logs show, and what scripts may match on) and
/// a message that says what is wrong and what to do.
///
/// Codes: `fetch.*` for getting the bytes, `bundle.*` and `store.*` for
/// checking them (from ``BundleError`` and ``StoreError``), `install.*` for
/// putting them in place. Whatever the code, nothing installed was changed.
public enum RuleUpdateError: Error, Hashable, Sendable, CustomStringConvertible {
    /// `rules.source` is not set.
    case noSource
    /// A setting is unusable (`rules.source` not an https:// or file:/// URL, a malformed pin).
    case invalidSetting(key: String, reason: String)
    /// `rules.source` is a plain http:// URL.
    case plainHTTP(source: String)
    /// The server could not be reached (name not found, connection refused, reset).
    case unreachable(server: String, reason: String)
    /// The server took longer than the connect or request timeout.
    case timedOut(server: String, seconds: Int)
    /// The TLS handshake failed for a reason other than the certificate (version, ciphers, protocol).
    case tls(server: String, reason: String)
    /// The server's certificate chain does not lead to a trusted root, or a certificate is expired.
    case untrustedCertificate(server: String, reason: String)
    /// The server's certificate is not valid for the host name in `rules.source`.
    case certificateName(server: String)
    /// No key in the server's verified chain matches `rules.pins`.
    case pinMismatch(server: String, seen: [String])
    /// The school's server's certificate does not carry the key `school.fingerprint` pins (rules from the school's server).
    case serverKeyMismatch(server: String, expected: String, seen: String)
    /// `rules.caFile` cannot be read or holds no certificate.
    case caFile(path: String, reason: String)
    /// The server answered a status other than 200 (or 304 for the manifest).
    case httpStatus(file: String, status: Int)
    /// A file is larger than its limit (64 KiB for the manifest, the signed size for the others).
    case tooLarge(file: String, limit: UInt64)
    /// The signed manifest asks for more than `rules.maxBundleBytes`.
    case bundleTooLarge(total: UInt64, limit: UInt64)
    /// The connection ended before the whole file arrived.
    case truncated(file: String)
    /// The server's answer is not well-formed HTTP/1.1.
    case badResponse(file: String, reason: String)
    /// The bundle itself was refused (signature, manifest, expiry, hashes, sizes).
    case bundle(BundleError)
    /// The bundle's rule store cannot be read.
    case store(StoreError)
    /// The school's policy in the bundle is not one this machine can apply.
    case policy(ConfigurationError)
    /// The bundle's version is not newer than the one installed.
    case rollback(offered: UInt64, installed: UInt64)
    /// Reading or writing the rule folder failed.
    case io(path: String, reason: String)
    /// Another process is installing rules into the same folder.
    case busy(path: String)
    /// The update was cancelled (the daemon is stopping).
    case cancelled

    public var code: String {
        switch self {
        case .noSource: "fetch.no-source"
        case .invalidSetting: "config.invalid"
        case .plainHTTP: "fetch.plain-http"
        case .unreachable: "fetch.unreachable"
        case .timedOut: "fetch.timeout"
        case .tls: "fetch.tls"
        case .untrustedCertificate: "fetch.tls-untrusted"
        case .certificateName: "fetch.tls-name"
        case .pinMismatch, .serverKeyMismatch: "fetch.pin-mismatch"
        case .caFile: "fetch.ca-file"
        case .httpStatus: "fetch.http-status"
        case .tooLarge, .bundleTooLarge: "fetch.too-large"
        case .truncated: "fetch.truncated"
        case .badResponse: "fetch.protocol"
        case .bundle(let error): error.code
        case .store(let error): error.code
        case .policy: "bundle.policy-invalid"
        case .rollback: "install.rollback"
        case .io: "install.io"
        case .busy: "install.busy"
        case .cancelled: "fetch.cancelled"
        }
    }

    public var description: String {
        switch self {
        case .noSource:
            "rules.source is not set: there is nowhere to fetch rules from (set it to the school's https:// bundle folder)"
        case .invalidSetting(let key, let reason):
            "\(key): \(reason)"
        case .plainHTTP(let source):
            "rules.source \(source.prefix(120)) is plain http://, which is refused: publish the bundle over https://"
        case .unreachable(let server, let reason):
            "cannot reach the rule server \(server): \(reason); the installed rules stay in force"
        case .timedOut(let server, let seconds):
            "the rule server \(server) did not answer within \(seconds) s; the installed rules stay in force"
        case .tls(let server, let reason):
            "the TLS handshake with \(server) failed: \(reason)"
        case .untrustedCertificate(let server, let reason):
            "the certificate of \(server) is not trusted (\(reason)); install its CA in the system store or set rules.caFile"
        case .certificateName(let server):
            "the certificate of \(server) is not valid for that name: the server is not the one rules.source names"
        case .pinMismatch(let server, let seen):
            "no key in the certificate chain of \(server) matches rules.pins (the chain has \(seen.joined(separator: ", "))); if the server's keys changed on purpose, update rules.pins"
        case .serverKeyMismatch(let server, let expected, let seen):
            "the certificate of \(server) does not carry the school's server key (school.fingerprint \(expected), it has \(seen)): not the school's server, or the server has a new key and the machine must enrol again"
        case .caFile(let path, let reason):
            "rules.caFile \(path): \(reason)"
        case .httpStatus(let file, let status):
            switch status {
            case 404: "the rule server has no \(file) (HTTP 404): check rules.source and that the whole bundle folder is published"
            case 300..<400: "the rule server answered \(file) with a redirect (HTTP \(status)); redirects are not followed: set rules.source to the final URL"
            case 500..<600: "the rule server failed to send \(file) (HTTP \(status)); it is retried later"
            default: "the rule server refused \(file) (HTTP \(status))"
            }
        case .tooLarge(let file, let limit):
            "\(file) from the rule server is larger than its limit of \(limit) bytes; refused without reading the rest"
        case .bundleTooLarge(let total, let limit):
            "the bundle holds \(total) bytes, more than rules.maxBundleBytes (\(limit)); raise the limit if the rules really are that big"
        case .truncated(let file):
            "the connection ended before all of \(file) arrived; it is retried later"
        case .badResponse(let file, let reason):
            "the rule server's answer for \(file) is not valid HTTP: \(reason)"
        case .bundle(let error):
            error.description
        case .store(let error):
            error.description
        case .policy(let error):
            "the school's policy in the bundle cannot be applied: \(error); the installed rules and policy stay in force"
        case .rollback(let offered, let installed):
            "the bundle has version \(offered), not newer than the installed version \(installed): refused (no rollback); publish a bundle with a higher version"
        case .io(let path, let reason):
            "cannot write the rules at \(path): \(reason)"
        case .busy(let path):
            "another process is installing rules in \(path); try again when it is done"
        case .cancelled:
            "the update was cancelled"
        }
    }

    /// Failures worth another try soon: the network or the server may recover.
    /// A bundle that fails verification is never retried: the same bytes would fail again.
    public var isTransient: Bool {
        switch self {
        case .unreachable, .timedOut, .truncated: true
        case .httpStatus(_, let status): status >= 500 || status == 408 || status == 429
        default: false
        }
    }
}

extension RuleUpdateError {
    /// A file-system failure in the rule folder, as ``io(path:reason:)``.
    init(_ error: FileError) {
        self = .io(path: error.path, reason: error.reason)
    }
}

/// Runs file-system steps of the rule installer, reporting a failure as
/// ``RuleUpdateError/io(path:reason:)``.
func inRuleFolder<T>(_ body: () throws(FileError) -> T) throws(RuleUpdateError) -> T {
    do {
        return try body()
    } catch {
        throw RuleUpdateError(error)
    }
}
