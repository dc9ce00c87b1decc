import Crypto
public import Foundation
import HallpassSystem
import SwiftASN1
import VerdictCore
public import X509

/// The server's TLS certificate and key (PEM files, `tls:` in server.yaml),
/// and its fingerprint: the lower-case hex SHA-256 of the certificate's
/// SubjectPublicKeyInfo DER, which machines pin at enrolment. The
/// fingerprint names the key, not the certificate: a renewal with the same
/// key keeps it.
public struct ServerCertificate: Sendable {
    public let certificate: Certificate
    public let certificatePEM: String
    public let keyPEM: String

    /// Reads and checks the pair: the key must be the certificate's.
    public init(certificatePath: String, keyPath: String) throws(ServerError) {
        guard let certificateData = FileManager.default.contents(atPath: certificatePath),
            let certificateText = String(data: certificateData, encoding: .utf8)
        else {
            throw ServerError(code: "tls.read", message: "cannot read the TLS certificate \(certificatePath) (tls.certificate); `hallpass-server init` makes one")
        }
        guard let keyData = FileManager.default.contents(atPath: keyPath), let keyText = String(data: keyData, encoding: .utf8) else {
            throw ServerError(code: "tls.read", message: "cannot read the TLS key \(keyPath) (tls.key); `hallpass-server init` makes one")
        }
        let certificate: Certificate
        do {
            certificate = try Certificate(pemEncoded: certificateText)
        } catch {
            throw ServerError(code: "tls.certificate", message: "\(certificatePath) is not a PEM certificate: \(error)")
        }
        let publicKey: Certificate.PublicKey
        if let key = try? P256.Signing.PrivateKey(pemRepresentation: keyText) {
            publicKey = .init(key.publicKey)
        } else if let key = try? P384.Signing.PrivateKey(pemRepresentation: keyText) {
            publicKey = .init(key.publicKey)
        } else if let key = try? Certificate.PrivateKey(pemEncoded: keyText) {
            publicKey = key.publicKey
        } else {
            throw ServerError(code: "tls.key", message: "\(keyPath) is not a PEM private key this server reads (P-256, P-384, RSA, Ed25519)")
        }
        guard publicKey == certificate.publicKey else {
            throw ServerError(code: "tls.mismatch", message: "the key \(keyPath) is not the key of the certificate \(certificatePath)")
        }
        self.certificate = certificate
        self.certificatePEM = certificateText
        self.keyPEM = keyText
    }

    public var fingerprint: String {
        ServerCertificate.fingerprint(of: certificate) ?? ""
    }

    /// Lower-case hex SHA-256 of the certificate's SubjectPublicKeyInfo, the
    /// DER bytes exactly as the certificate carries them (as filter-control's
    /// ServerTrust reads them for its pins).
    public static func fingerprint(of certificate: Certificate) -> String? {
        var serializer = DER.Serializer()
        guard (try? serializer.serialize(certificate)) != nil, let root = try? DER.parse(serializer.serializedBytes),
            case .constructed(let parts) = root.content, let tbs = parts.first(where: { _ in true }),
            case .constructed(let fields) = tbs.content
        else { return nil }
        let list = Array(fields)
        // TBSCertificate: [0] version (optional), serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo.
        let hasVersion = list.first?.identifier.tagClass == .contextSpecific
        let index = hasVersion ? 6 : 5
        guard list.count > index else { return nil }
        return Hex.encode(SHA256.hash(data: Array(list[index].encodedBytes)))
    }

    /// Makes a self-signed P-256 certificate for `names` (host names or
    /// addresses), valid ten years, and writes the key (0600) and the
    /// certificate (0644), each whole. Refuses to replace either file.
    @discardableResult
    public static func create(
        certificatePath: String, keyPath: String, names: [String], now: Date = Date()
    ) throws(ServerError) -> ServerCertificate {
        for path in [certificatePath, keyPath] where FileManager.default.fileExists(atPath: path) {
            throw ServerError(code: "tls.exists", message: "\(path) exists already; remove it first to make a new pair (machines pin the key: every machine must enrol again)")
        }
        let key = P256.Signing.PrivateKey()
        do {
            let subject = try DistinguishedName { CommonName(String((names.first ?? "hallpass-server").prefix(64))) }
            let alternativeNames: [GeneralName] = names.map { name in
                if let address = IPv4Address(name) {
                    return .ipAddress(ASN1OctetString(contentBytes: ArraySlice(address.bytes)))
                }
                return .dnsName(name)
            }
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(),
                publicKey: .init(key.publicKey),
                notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(10 * 365 * 86_400),
                issuer: subject, subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    try ExtendedKeyUsage([.serverAuth])
                    SubjectAlternativeNames(alternativeNames)
                },
                issuerPrivateKey: .init(key))
            for path in [certificatePath, keyPath] {
                let folder = (path as NSString).deletingLastPathComponent
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            }
            try AtomicFile.write(Array((key.pemRepresentation + "\n").utf8), to: keyPath, mode: 0o600)
            try AtomicFile.write(Array((try certificate.serializeAsPEM().pemString + "\n").utf8), to: certificatePath, mode: 0o644)
        } catch {
            throw ServerError(code: "tls.create", message: "cannot make the TLS certificate: \(error)")
        }
        return try ServerCertificate(certificatePath: certificatePath, keyPath: keyPath)
    }
}

/// A dotted IPv4 address, for the certificate's names.
struct IPv4Address {
    let bytes: [UInt8]

    init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard !part.isEmpty, part.count <= 3, let value = UInt8(part) else { return nil }
            bytes.append(value)
        }
        self.bytes = bytes
    }
}
