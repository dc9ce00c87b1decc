/// Why a bundle was refused. Each case has a stable code and a message
/// that says what is wrong and what to do.
public enum BundleError: Error, Hashable, Sendable, CustomStringConvertible {
    case missingManifest(path: String)
    case missingSignature(path: String)
    case malformedSignature(reason: String)
    case unknownKey(keyID: String)
    case badSignature(keyID: String)
    case malformedManifest(line: Int, reason: String)
    case expired(at: Int64)
    case notYetValid(issuedAt: Int64)
    case unsafeFileName(String)
    case missingFile(name: String)
    case sizeMismatch(name: String, expected: UInt64, actual: UInt64)
    case hashMismatch(name: String)
    case unreadable(path: String, reason: String)
    case noTrustedKeys
    case invalidKey(reason: String)

    public var code: String {
        switch self {
        case .missingManifest: "bundle.manifest-missing"
        case .missingSignature: "bundle.signature-missing"
        case .malformedSignature: "bundle.signature-malformed"
        case .unknownKey: "bundle.unknown-key"
        case .badSignature: "bundle.bad-signature"
        case .malformedManifest: "bundle.manifest-malformed"
        case .expired: "bundle.expired"
        case .notYetValid: "bundle.not-yet-valid"
        case .unsafeFileName: "bundle.path-escape"
        case .missingFile: "bundle.file-missing"
        case .sizeMismatch: "bundle.file-size"
        case .hashMismatch: "bundle.file-hash"
        case .unreadable: "bundle.unreadable"
        case .noTrustedKeys: "bundle.no-trusted-keys"
        case .invalidKey: "bundle.invalid-key"
        }
    }

    public var description: String {
        switch self {
        case .missingManifest(let path):
            "no bundle manifest at \(path): is this a bundle folder made by 'filterctl bundle build'?"
        case .missingSignature(let path):
            "the bundle has no signature file \(path); sign it with 'filterctl bundle build --key'"
        case .malformedSignature(let reason):
            "the bundle signature file is malformed (\(reason))"
        case .unknownKey(let keyID):
            "the bundle is signed by key \(keyID), which is not among the trusted keys; add its public key to rules.trustedKeys if it is the school's"
        case .badSignature(let keyID):
            "the bundle signature does not match its manifest (key \(keyID)): the manifest was changed after signing, or the signature is forged"
        case .malformedManifest(let line, let reason):
            line > 0 ? "the bundle manifest is invalid at line \(line): \(reason)" : "the bundle manifest is invalid: \(reason)"
        case .expired(let at):
            "the bundle expired at \(UTCTime.format(at)); publish a new one (or check this machine's clock)"
        case .notYetValid(let issuedAt):
            "the bundle is issued in the future (\(UTCTime.format(issuedAt))); check this machine's clock"
        case .unsafeFileName(let name):
            "the bundle names a file '\(name.prefix(120))' that is not a plain file name inside the bundle folder; refused"
        case .missingFile(let name):
            "the bundle file \(name) is missing"
        case .sizeMismatch(let name, let expected, let actual):
            "the bundle file \(name) is \(actual) bytes, the manifest says \(expected): truncated or replaced; download it again"
        case .hashMismatch(let name):
            "the bundle file \(name) does not match the SHA-256 in the manifest: it was changed or damaged"
        case .unreadable(let path, let reason):
            "cannot read \(path): \(reason)"
        case .noTrustedKeys:
            "no trusted keys given: pass --trusted-key ed25519:BASE64 (see 'filterctl bundle keygen')"
        case .invalidKey(let reason):
            "invalid key: \(reason)"
        }
    }
}
