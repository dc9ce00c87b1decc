import Crypto
import ExtrasBase64
import Foundation
import SwiftASN1
import VerdictCore
import X509

/// Decides whether the rule server's certificate chain is acceptable:
/// a path to a root of the system trust store or of `rules.caFile`, valid
/// now, with a leaf for the server's name (and usable for TLS servers), and,
/// when `rules.pins` is set, at least one certificate of that verified path
/// whose SubjectPublicKeyInfo has a pinned SHA-256.
///
/// This replaces BoringSSL's own verification for the rule connection (NIOSSL
/// hands the presented chain to ``HTTPSClient``'s callback), so that the
/// pins are checked against the *verified* chain, root included, and every
/// refusal carries its own reason.
struct ServerTrust: Sendable {
    /// The outcome of ``evaluate(presented:host:)``.
    enum Verdict: Sendable, Hashable {
        case trusted
        case untrusted(reason: String)
        case wrongName
        case pinMismatch(seen: [String])
    }

    private let extraRoots: [Certificate]
    private let useSystemRoots: Bool
    /// 32-byte SHA-256 digests of pinned SubjectPublicKeyInfos.
    private let pins: [[UInt8]]

    /// - Parameters:
    ///   - caFile: a PEM file of one or more extra trusted certificates.
    ///   - pins: `sha256/BASE64` values.
    ///   - useSystemRoots: false only in tests that must not depend on the machine's store.
    init(caFile: String?, pins: [String], useSystemRoots: Bool = true) throws(RuleUpdateError) {
        var roots: [Certificate] = []
        if let caFile {
            guard let data = FileManager.default.contents(atPath: caFile) else {
                throw .caFile(path: caFile, reason: "cannot read the file")
            }
            do {
                let documents = try PEMDocument.parseMultiple(pemString: String(decoding: data, as: UTF8.self))
                roots = try documents.filter { $0.discriminator == "CERTIFICATE" }.map { try Certificate(pemDocument: $0) }
            } catch {
                throw .caFile(path: caFile, reason: "not a PEM file of certificates (\(error))")
            }
            guard !roots.isEmpty else { throw .caFile(path: caFile, reason: "holds no CERTIFICATE block") }
        }
        var digests: [[UInt8]] = []
        for pin in pins {
            guard pin.hasPrefix("sha256/"), let digest = try? Base64.decode(string: String(pin.dropFirst("sha256/".count))),
                digest.count == 32
            else {
                throw .invalidSetting(key: "rules.pins", reason: "'\(pin.prefix(60))' is not sha256/ and 32 bytes of base64")
            }
            digests.append(digest)
        }
        self.extraRoots = roots
        self.useSystemRoots = useSystemRoots
        self.pins = digests
    }

    var hasPins: Bool { !pins.isEmpty }

    /// Checks the chain the server presented (DER, leaf first) for `host`
    /// (a DNS name or an IP literal), against the current time.
    func evaluate(presented: [[UInt8]], host: String) async -> Verdict {
        let certificates: [Certificate]
        do {
            certificates = try presented.map { try Certificate(derEncoded: $0) }
        } catch {
            return .untrusted(reason: "the server sent a certificate that cannot be parsed: \(error)")
        }
        guard let leaf = certificates.first else { return .untrusted(reason: "the server sent no certificate") }
        let roots =
            useSystemRoots
            ? CertificateStore.systemTrustRoots.appending(contentsOf: extraRoots) : CertificateStore(extraRoots)
        let intermediates = CertificateStore(certificates.dropFirst())
        let isAddress = host.contains(":") || host.allSatisfy { $0.isNumber || $0 == "." }
        let identity = ServerIdentityPolicy(serverHostname: isAddress ? nil : host, serverIP: isAddress ? host : nil)

        var verifier = Verifier(rootCertificates: roots) {
            RFC5280Policy()
            identity
        }
        let chain: ValidatedCertificateChain
        switch await verifier.validate(leaf: leaf, intermediates: intermediates) {
        case .validCertificate(let validated):
            chain = validated
        case .couldNotValidate(let failures):
            // Tell a wrong name from an untrusted chain: the same check without the name.
            var withoutName = Verifier(rootCertificates: roots) { RFC5280Policy() }
            switch await withoutName.validate(leaf: leaf, intermediates: intermediates) {
            case .validCertificate:
                return .wrongName
            case .couldNotValidate(let plainFailures):
                let reasons = (plainFailures.isEmpty ? failures : plainFailures).map { "\($0.policyFailureReason)" }
                let reason =
                    reasons.isEmpty
                    ? "no chain from its certificate (issued by \(leaf.issuer)) to a trusted root"
                    : Array(Set(reasons)).sorted().joined(separator: "; ")
                return .untrusted(reason: String(reason.prefix(300)))
            }
        }
        if let usages = try? leaf.extensions.extendedKeyUsage, !usages.contains(.serverAuth), !usages.contains(.any) {
            return .untrusted(reason: "the server's certificate is not for TLS servers (extended key usage)")
        }
        guard hasPins else { return .trusted }
        var seen: [String] = []
        for certificate in chain {
            guard let info = ServerTrust.subjectPublicKeyInfo(of: certificate) else { continue }
            let digest = Array(SHA256.hash(data: info))
            if pins.contains(digest) { return .trusted }
            seen.append("sha256/" + Base64.encodeToString(bytes: digest))
        }
        return .pinMismatch(seen: seen)
    }

    /// Checks only the leaf the server presented (DER, leaf first) against a
    /// pinned SubjectPublicKeyInfo SHA-256 (the school's server fingerprint):
    /// no chain, no name, no dates. A mismatch reports the leaf's own
    /// fingerprint, lower-case hex, as the contract writes fingerprints.
    static func evaluate(presented: [[UInt8]], pinnedKey: [UInt8]) -> Verdict {
        guard let first = presented.first else { return .untrusted(reason: "the server sent no certificate") }
        guard let leaf = try? Certificate(derEncoded: first), let info = subjectPublicKeyInfo(of: leaf) else {
            return .untrusted(reason: "the server sent a certificate that cannot be parsed")
        }
        let digest = Array(SHA256.hash(data: info))
        return digest == pinnedKey ? .trusted : .pinMismatch(seen: [Hex.encode(digest)])
    }

    /// The DER bytes of a certificate's SubjectPublicKeyInfo, exactly as the
    /// certificate carries them (what `openssl x509 -pubkey | openssl pkey -pubin -outform der` prints).
    static func subjectPublicKeyInfo(of certificate: Certificate) -> [UInt8]? {
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
        return Array(list[index].encodedBytes)
    }
}
