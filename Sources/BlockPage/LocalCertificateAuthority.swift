import Crypto
public import Foundation
import HallpassSystem
import SharedStore
import VerdictCore
import SwiftASN1
public import X509

/// The school's local certificate authority for the block page: a P-256 key
/// and a self-signed CA certificate in one folder (`ca-key.pem`, mode 0600,
/// and `ca.pem`), made by `filterctl ca init` and read by filter-control
/// only. With it, the block page answers HTTPS for a blocked name with a
/// certificate for that name, which browsers accept once the school has
/// installed `ca.pem` (docs/block-page.md). The CA certificate may sign end
/// certificates only (path length 0).
public struct LocalCertificateAuthority: Sendable {
    public static let keyFile = "ca-key.pem"
    public static let certificateFile = "ca.pem"

    public let certificate: Certificate
    let key: P256.Signing.PrivateKey
    /// The folder it was read from, watched for a replacement (`filterctl ca init --force`).
    public let folder: String
    /// What the folder's two files looked like when they were read.
    let files: AuthorityFiles?

    /// `folder`'s key and certificate; a clear error when either is missing or does not match.
    public init(folder: String) throws(BlockPageError) {
        let keyPath = folder + "/" + Self.keyFile
        let certificatePath = folder + "/" + Self.certificateFile
        let keyText: String
        let certificateText: String
        self.folder = folder
        // Taken before reading: a CA replaced in between looks changed at the next look, never the reverse.
        files = AuthorityFiles(folder: folder)
        do {
            keyText = try String(contentsOfFile: keyPath, encoding: .utf8)
            certificateText = try String(contentsOfFile: certificatePath, encoding: .utf8)
        } catch {
            guard FileManager.default.fileExists(atPath: keyPath), FileManager.default.fileExists(atPath: certificatePath) else {
                throw BlockPageError(code: "ca.missing", message: "no local CA in \(folder): run 'filterctl ca init'")
            }
            throw BlockPageError(code: "ca.unreadable", message: "the local CA in \(folder) cannot be read: \(error.localizedDescription)")
        }
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: keyText)
            certificate = try Certificate(pemEncoded: certificateText)
        } catch {
            throw BlockPageError(code: "ca.unreadable", message: "the local CA in \(folder) cannot be read: \(error)")
        }
        guard certificate.publicKey == Certificate.PublicKey(key.publicKey) else {
            throw BlockPageError(code: "ca.mismatch", message: "\(keyPath) is not the key of \(certificatePath): run 'filterctl ca init --force'")
        }
    }

    /// Makes a new CA in `folder` (created 0700 if needed). Refuses to replace
    /// an existing one unless `replace`: browsers that trust the old
    /// certificate would stop trusting the block page.
    @discardableResult
    public static func create(folder: String, organization: String, replace: Bool = false, now: Date = Date()) throws(BlockPageError)
        -> LocalCertificateAuthority
    {
        let keyPath = folder + "/" + keyFile
        let certificatePath = folder + "/" + certificateFile
        if !replace, FileManager.default.fileExists(atPath: keyPath) || FileManager.default.fileExists(atPath: certificatePath) {
            throw BlockPageError(
                code: "ca.exists",
                message: "\(folder) already holds a local CA; browsers trust it already. 'filterctl ca init --force' replaces it (and every machine must trust the new one)")
        }
        let key = P256.Signing.PrivateKey()
        let name: DistinguishedName
        let certificate: Certificate
        do {
            name = try DistinguishedName {
                OrganizationName(organization)
                CommonName("\(organization) block page CA (hallpass)")
            }
            certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(),
                publicKey: .init(key.publicKey),
                notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(10 * 365 * 86_400),
                issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    SubjectKeyIdentifier(hash: .init(key.publicKey))
                },
                issuerPrivateKey: .init(key))
        } catch {
            throw BlockPageError(code: "ca.create", message: "cannot make the CA certificate: \(error)")
        }
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // Each file appears whole and with its final mode (the key is never readable by others).
            try AtomicFile.write(Array((key.pemRepresentation + "\n").utf8), to: keyPath, mode: 0o600)
            try AtomicFile.write(Array((try certificate.serializeAsPEM().pemString + "\n").utf8), to: certificatePath, mode: 0o644)
        } catch {
            throw BlockPageError(code: "ca.write", message: "cannot write the CA into \(folder): \(error)")
        }
        return try LocalCertificateAuthority(folder: folder)
    }

    /// The CA certificate in PEM, for installation into browsers and system stores.
    public var pem: String {
        ((try? certificate.serializeAsPEM().pemString) ?? "") + "\n"
    }

    /// SHA-256 of the CA certificate (DER), as browsers show it.
    public var fingerprint: String {
        var serializer = DER.Serializer()
        guard (try? serializer.serialize(certificate)) != nil else { return "?" }
        return SHA256.hash(data: serializer.serializedBytes).map { String(format: "%02X", $0) }.joined(separator: ":")
    }

    /// An end certificate for `host` (a DNS name or an IP address) signed by
    /// this CA for `key`, valid as `policy` says from `now` (by default from
    /// an hour ago for 30 days, within what browsers accept).
    func issue(
        for host: String, key: P256.Signing.PrivateKey, now: Date = Date(), policy: LeafCertificatePolicy = LeafCertificatePolicy()
    ) throws -> Certificate {
        let subject = try DistinguishedName { CommonName(String(host.prefix(64))) }
        let alternativeName: GeneralName =
            if let address = IPAddress(host) {
                .ipAddress(ASN1OctetString(contentBytes: ArraySlice(address.networkBytes)))
            } else {
                .dnsName(host)
            }
        return try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(),
            publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-policy.backdating), notValidAfter: now.addingTimeInterval(policy.lifetime),
            issuer: certificate.subject, subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([alternativeName])
                AuthorityKeyIdentifier(keyIdentifier: try? certificate.extensions.subjectKeyIdentifier?.keyIdentifier)
            },
            issuerPrivateKey: .init(self.key))
    }
}

/// The identity of a CA folder's two files (inode, size, modification
/// time): `filterctl ca init --force` writes each file anew and renames it
/// into place, so a replaced CA always looks different here.
struct AuthorityFiles: Hashable, Sendable {
    struct Stamp: Hashable, Sendable {
        var inode: UInt64
        var size: UInt64
        var modified: Date
    }

    var key: Stamp
    var certificate: Stamp

    /// Nil when either file cannot be looked at.
    init?(folder: String) {
        func stamp(_ path: String) -> Stamp? {
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
                let inode = (attributes[.systemFileNumber] as? NSNumber)?.uint64Value,
                let size = (attributes[.size] as? NSNumber)?.uint64Value,
                let modified = attributes[.modificationDate] as? Date
            else { return nil }
            return Stamp(inode: inode, size: size, modified: modified)
        }
        guard let key = stamp(folder + "/" + LocalCertificateAuthority.keyFile),
            let certificate = stamp(folder + "/" + LocalCertificateAuthority.certificateFile)
        else { return nil }
        self.key = key
        self.certificate = certificate
    }
}
