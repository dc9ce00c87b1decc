public import Crypto
public import Foundation
import HallpassSystem
import SwiftASN1
#if canImport(Glibc)
import Glibc
#endif
public import X509

/// The interception CA of the inspection proxy (docs/inspection.md): the
/// authority whose certificates a browser is shown for the few names the
/// school's policy inspects. It is not the block page's CA
/// (`LocalCertificateAuthority`): that one signs for any blocked name and
/// must, so it cannot be constrained; this one is constrained by X.509 name
/// constraints to the names the policy inspects, so its key, if stolen,
/// opens nothing else in a browser that honours them (docs/threat-model.md).
///
/// filter-control makes it on first need (a policy that inspects anything)
/// in its own folder (`proxy.ca`, default `/var/lib/hallpass/inspect-ca`:
/// `ca-key.pem` mode 0600 and `ca.pem`, owner root, folder 0700), and makes
/// it again when the policy inspects a name its constraints do not cover,
/// or when it has less than `renewalMargin` left. The key never leaves
/// root's files except over the proxy's control channel (`handover`), at
/// the proxy's start; the proxy signs the leaves in memory.
public struct InterceptionAuthority: Sendable {
    public static let keyFile = "ca-key.pem"
    public static let certificateFile = "ca.pem"
    /// The CA's life: long enough that browsers are not asked to trust a
    /// new one often, short enough that a forgotten machine's CA ends.
    public static let lifetime: TimeInterval = 2 * 365 * 86_400
    /// A CA with less than this left is made again at the next start or reload.
    public static let renewalMargin: TimeInterval = 30 * 86_400

    public let certificate: Certificate
    let key: P256.Signing.PrivateKey

    /// The names its leaves may carry: its permitted dNSName subtrees (each
    /// name and every name below it).
    public var permittedNames: [String] {
        guard let constraints = try? certificate.extensions.nameConstraints else { return [] }
        return Array(constraints.permittedDNSDomains)
    }

    /// Whether every name of `names` lies in one of the permitted subtrees.
    public func covers(_ names: [String]) -> Bool {
        let permitted = permittedNames.map { $0.lowercased() }
        return names.allSatisfy { name in
            let name = name.lowercased()
            return permitted.contains { name == $0 || name.hasSuffix("." + $0) }
        }
    }

    /// The CA certificate in PEM, for the browsers (`filterctl browser-policies`).
    public var pem: String {
        ((try? certificate.serializeAsPEM().pemString) ?? "") + "\n"
    }

    /// The CA certificate's DER bytes.
    public var certificateDER: [UInt8] { (try? Self.der(certificate)) ?? [] }

    /// SHA-256 of the CA certificate (DER), as browsers show it.
    public var fingerprint: String {
        SHA256.hash(data: certificateDER).map { String(format: "%02X", $0) }.joined(separator: ":")
    }

    /// What the proxy is handed (its control channel's `intercept` message):
    /// the key's 32 bytes and the certificate's DER.
    public var handover: (key: [UInt8], certificate: [UInt8]) { (Array(key.rawRepresentation), certificateDER) }

    /// The CA the proxy was handed; a clear error when the two do not belong together.
    public init(key keyBytes: [UInt8], certificate certificateBytes: [UInt8]) throws(BlockPageError) {
        do {
            key = try P256.Signing.PrivateKey(rawRepresentation: keyBytes)
            certificate = try Certificate(derEncoded: certificateBytes)
        } catch {
            throw BlockPageError(code: "intercept-ca.unreadable", message: "the interception CA handed over cannot be read: \(error)")
        }
        guard certificate.publicKey == Certificate.PublicKey(key.publicKey) else {
            throw BlockPageError(code: "intercept-ca.mismatch", message: "the interception CA's key is not its certificate's")
        }
    }

    init(key: P256.Signing.PrivateKey, certificate: Certificate) {
        self.key = key
        self.certificate = certificate
    }

    // MARK: The folder

    /// The CA in `folder`; nil when there is none (neither file).
    public static func read(folder: String) throws(BlockPageError) -> InterceptionAuthority? {
        let keyPath = folder + "/" + keyFile
        let certificatePath = folder + "/" + certificateFile
        let keyText: String
        let certificateText: String
        do {
            keyText = try String(contentsOfFile: keyPath, encoding: .utf8)
            certificateText = try String(contentsOfFile: certificatePath, encoding: .utf8)
        } catch {
            if !FileManager.default.fileExists(atPath: keyPath), !FileManager.default.fileExists(atPath: certificatePath) { return nil }
            throw BlockPageError(code: "intercept-ca.unreadable", message: "the interception CA in \(folder) cannot be read: \(error.localizedDescription)")
        }
        let key: P256.Signing.PrivateKey
        let certificate: Certificate
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: keyText)
            certificate = try Certificate(pemEncoded: certificateText)
        } catch {
            throw BlockPageError(code: "intercept-ca.unreadable", message: "the interception CA in \(folder) cannot be read: \(error)")
        }
        guard certificate.publicKey == Certificate.PublicKey(key.publicKey) else {
            throw BlockPageError(code: "intercept-ca.mismatch", message: "\(keyPath) is not the key of \(certificatePath)")
        }
        if let exposure = exposure(of: keyPath) {
            throw BlockPageError(code: "intercept-ca.exposed", message: "\(keyPath) \(exposure), so the key may have been copied")
        }
        return InterceptionAuthority(key: key, certificate: certificate)
    }

    /// What makes the key file at `path` readable by more than this process's
    /// user (another owner, a group or others with any right); nil when only it can.
    /// A key that may have been read is not used again: `prepare` makes a new CA.
    static func exposure(of path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue,
            let owner = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value
        else { return "cannot be checked" }
        if owner != geteuid() { return "belongs to user \(owner), not \(geteuid())" }
        if mode & 0o077 != 0 { return "has mode \(String(mode, radix: 8)), not 600" }
        return nil
    }

    /// What `prepare` did.
    public enum Outcome: Sendable, Equatable {
        /// The CA in the folder covers the names and stays.
        case kept
        /// There was none: browsers must be given this one.
        case made
        /// The one there did not cover the names (or was unreadable, or near
        /// its end): replaced, and browsers must be given the new one. `why` says which.
        case replaced(why: String)
    }

    /// The CA in `folder` when it covers `names` and has time left; otherwise a
    /// new one constrained to `names`, written there (the folder made 0700).
    public static func prepare(folder: String, names: [String], organization: String, now: Date = Date()) throws(BlockPageError)
        -> (InterceptionAuthority, Outcome)
    {
        var why: String?
        do {
            if let existing = try read(folder: folder) {
                if !existing.covers(names) {
                    why = "its name constraints (\(existing.permittedNames.joined(separator: ", "))) do not cover every inspected name"
                } else if existing.certificate.notValidAfter.timeIntervalSince(now) < renewalMargin {
                    why = "it ends on \(existing.certificate.notValidAfter)"
                } else {
                    return (existing, .kept)
                }
            }
        } catch {
            why = error.message
        }
        let made = try create(folder: folder, names: names, organization: organization, now: now)
        return (made, why.map { .replaced(why: $0) } ?? .made)
    }

    /// A new CA constrained to `names` (each a host name: it and every name
    /// below it), with every IP address excluded, written into `folder`.
    public static func create(folder: String, names: [String], organization: String, now: Date = Date()) throws(BlockPageError)
        -> InterceptionAuthority
    {
        let authority = try make(names: names, organization: organization, now: now)
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // A folder that was there already is made 0700 too (the key is never readable by others anyway).
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder)
            // Each file appears whole and with its final mode (the key is never readable by others).
            try AtomicFile.write(Array((authority.key.pemRepresentation + "\n").utf8), to: folder + "/" + keyFile, mode: 0o600)
            try AtomicFile.write(Array(authority.pem.utf8), to: folder + "/" + certificateFile, mode: 0o644)
        } catch {
            throw BlockPageError(code: "intercept-ca.write", message: "cannot write the interception CA into \(folder): \(error)")
        }
        return authority
    }

    /// A new CA in memory (for `create`, and for tests).
    static func make(names: [String], organization: String, now: Date) throws(BlockPageError) -> InterceptionAuthority {
        guard !names.isEmpty else {
            // No permitted subtree would permit every name: a CA is made only for a policy that inspects something.
            throw BlockPageError(code: "intercept-ca.create", message: "an interception CA needs at least one name to be constrained to")
        }
        let key = P256.Signing.PrivateKey()
        do {
            let name = try DistinguishedName {
                OrganizationName(organization)
                CommonName("\(organization) HTTPS inspection CA (hallpass)")
            }
            // Every IPv4 and IPv6 address excluded: the proxy never makes a leaf for an
            // address (a ClientHello without a host name is spliced), so none is needed.
            let everyAddress = [ASN1OctetString(contentBytes: ArraySlice(repeating: 0, count: 8)), ASN1OctetString(contentBytes: ArraySlice(repeating: 0, count: 32))]
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(),
                publicKey: .init(key.publicKey),
                notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(lifetime),
                issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    SubjectKeyIdentifier(hash: .init(key.publicKey))
                    Critical(NameConstraints(permittedDNSDomains: names, excludedIPRanges: everyAddress))
                },
                issuerPrivateKey: .init(key))
            return InterceptionAuthority(key: key, certificate: certificate)
        } catch {
            throw BlockPageError(code: "intercept-ca.create", message: "cannot make the interception CA's certificate: \(error)")
        }
    }

    // MARK: Leaves

    /// A leaf for exactly `host` (a DNS name), for `leafKey`, valid from
    /// `backdating` before `now` for `lifetime`.
    public func issue(for host: String, leafKey: P256.Signing.PublicKey, now: Date, lifetime: TimeInterval, backdating: TimeInterval) throws
        -> Certificate
    {
        try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(),
            publicKey: .init(leafKey),
            notValidBefore: now.addingTimeInterval(-backdating), notValidAfter: now.addingTimeInterval(lifetime),
            issuer: certificate.subject, subject: try DistinguishedName { CommonName(String(host.prefix(64))) },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([.dnsName(host)])
                AuthorityKeyIdentifier(keyIdentifier: try? certificate.extensions.subjectKeyIdentifier?.keyIdentifier)
            },
            issuerPrivateKey: .init(key))
    }

    /// SHA-256 of the CA's SubjectPublicKeyInfo (DER): how the proxy recognizes it in a trust store.
    public var keyHash: [UInt8] { Self.keyHash(of: certificate) ?? [] }

    /// SHA-256 of a certificate's SubjectPublicKeyInfo (DER).
    public static func keyHash(of certificate: Certificate) -> [UInt8]? {
        var serializer = DER.Serializer()
        guard (try? serializer.serialize(certificate.publicKey)) != nil else { return nil }
        return Array(SHA256.hash(data: serializer.serializedBytes))
    }

    /// The same for the first certificate of a PEM text; nil when it holds none.
    public static func keyHash(ofPEM pem: String) -> [UInt8]? {
        (try? Certificate(pemEncoded: pem)).flatMap(keyHash(of:))
    }

    public static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }
}
