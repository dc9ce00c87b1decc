#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
public import Crypto
import ExtrasBase64
import HallpassSystem

/// A public key that may sign bundles, written `ed25519:BASE64` (the 32 raw bytes).
public struct BundlePublicKey: Sendable, Hashable, CustomStringConvertible {
    public let key: Curve25519.Signing.PublicKey

    public init(_ text: String) throws(BundleError) {
        guard text.hasPrefix("ed25519:") else {
            throw .invalidKey(reason: "a trusted key is written ed25519:BASE64, got '\(text.prefix(60))'")
        }
        guard let raw = try? Base64.decode(string: String(text.dropFirst("ed25519:".count))), raw.count == 32,
            let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw)
        else {
            throw .invalidKey(reason: "'\(text.prefix(60))' is not 32 bytes of base64 after 'ed25519:'")
        }
        self.key = key
    }

    public init(key: Curve25519.Signing.PublicKey) { self.key = key }

    /// 16 hex digits of the key's SHA-256: short enough to read, long enough to tell keys apart.
    public var keyID: String {
        lowerHex(SHA256.hash(data: key.rawRepresentation).prefix(8))
    }

    public var description: String { "ed25519:" + Base64.encodeToString(bytes: key.rawRepresentation) }

    public static func == (lhs: BundlePublicKey, rhs: BundlePublicKey) -> Bool {
        lhs.key.rawRepresentation == rhs.key.rawRepresentation
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(key.rawRepresentation) }
}

/// The school's signing key, kept as a PKCS#8 PEM file (`openssl pkey -in KEYFILE -text` reads it).
public struct BundleSigningKey: Sendable {
    public let key: Curve25519.Signing.PrivateKey

    /// The fixed DER prefix of a PKCS#8 Ed25519 private key (RFC 8410): the 32-byte seed follows.
    private static let pkcs8Prefix: [UInt8] = [
        0x30, 0x2E, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
    ]

    public init() { key = Curve25519.Signing.PrivateKey() }

    /// An Ed25519 key made elsewhere (a machine's identity key, kept in the same PEM form).
    public init(key: Curve25519.Signing.PrivateKey) { self.key = key }

    public init(pem: String) throws(BundleError) {
        let lines = pem.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters() }
        guard let begin = lines.firstIndex(of: "-----BEGIN PRIVATE KEY-----"),
            let end = lines.firstIndex(of: "-----END PRIVATE KEY-----"), begin < end
        else {
            throw .invalidKey(reason: "the key file is not a PEM 'PRIVATE KEY' (make one with 'filterctl bundle keygen')")
        }
        guard let der = try? Base64.decode(string: lines[(begin + 1)..<end].joined()),
            der.count == 48, Array(der.prefix(16)) == BundleSigningKey.pkcs8Prefix,
            let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: der.suffix(32))
        else {
            throw .invalidKey(reason: "the key file does not hold an Ed25519 private key")
        }
        self.key = key
    }

    public var pem: String {
        let der = BundleSigningKey.pkcs8Prefix + Array(key.rawRepresentation)
        return "-----BEGIN PRIVATE KEY-----\n" + Base64.encodeToString(bytes: der) + "\n-----END PRIVATE KEY-----\n"
    }

    public var publicKey: BundlePublicKey { BundlePublicKey(key: key.publicKey) }

    /// The contents of `manifest.sig` for `manifest`: `ed25519 KEYID BASE64\n`.
    public func signatureFile(for manifest: [UInt8]) throws -> [UInt8] {
        let signature = try key.signature(for: manifest)
        return Array("ed25519 \(publicKey.keyID) \(Base64.encodeToString(bytes: signature))\n".utf8)
    }
}

extension Substring {
    fileprivate func trimmingCharacters() -> String {
        String(self.drop(while: { $0 == " " || $0 == "\t" || $0 == "\r" }).reversed().drop(while: { $0 == " " || $0 == "\t" || $0 == "\r" }).reversed())
    }
}

/// A bundle whose signature, manifest and files all checked out.
public struct VerifiedBundle: Sendable, Hashable {
    public var directory: String
    public var manifest: BundleManifest
    /// The key that signed it, or nil when only integrity was checked.
    public var signerKeyID: String?

    public func path(of name: String) -> String { directory + "/" + name }
}

/// Checks a bundle folder: signature against the trusted keys, manifest,
/// expiry, and every file's size and SHA-256. Time is injected so tests
/// and replays can choose it.
public struct BundleVerifier: Sendable {
    public enum SignaturePolicy: Sendable, Hashable {
        /// The signature must verify with one of these keys.
        case trusted([BundlePublicKey])
        /// Check hashes and sizes only (offline tools without a key; never for installing).
        case integrityOnly
    }

    public var signatures: SignaturePolicy
    public var checkExpiry: Bool
    /// Unix seconds.
    public var now: Int64
    /// How far in the future an issue time may be before the bundle is refused (clock skew).
    public var allowedClockSkew: Int64 = 86_400

    public init(signatures: SignaturePolicy, checkExpiry: Bool = true, now: Int64 = BundleVerifier.currentTime()) {
        self.signatures = signatures
        self.checkExpiry = checkExpiry
        self.now = now
    }

    /// The system clock in Unix seconds.
    public static func currentTime() -> Int64 { Int64(time(nil)) }

    public func verify(directory: String) throws(BundleError) -> VerifiedBundle {
        let manifestPath = directory + "/" + BundleManifest.fileName
        let manifestBytes: [UInt8]
        do {
            manifestBytes = try BoundedFile.read(manifestPath, limit: UInt64(BundleManifest.maximumManifestBytes))
        } catch .missing {
            throw .missingManifest(path: manifestPath)
        } catch .tooLarge {
            throw .malformedManifest(line: 0, reason: "the manifest is larger than \(BundleManifest.maximumManifestBytes) bytes")
        } catch {
            throw .unreadable(path: manifestPath, reason: error.description)
        }

        var signatureBytes: [UInt8]? = nil
        if case .trusted(let keys) = signatures {
            guard !keys.isEmpty else { throw .noTrustedKeys }
            let signaturePath = directory + "/" + BundleManifest.signatureFileName
            do {
                signatureBytes = try BoundedFile.read(signaturePath, limit: UInt64(BundleManifest.maximumSignatureBytes))
            } catch .missing {
                throw .missingSignature(path: signaturePath)
            } catch {
                throw .malformedSignature(reason: error.description)
            }
        }
        let (manifest, signer) = try verifyManifest(manifestBytes, signature: signatureBytes)
        for file in manifest.files {
            try verifyFile(file, in: directory)
        }
        return VerifiedBundle(directory: directory, manifest: manifest, signerKeyID: signer)
    }

    /// Steps 2 to 5 of ``verify(directory:)`` on bytes in memory: the signature
    /// (when the policy is `.trusted`), the manifest's shape and its validity
    /// period. A downloader calls this before fetching the files, so it learns
    /// their sizes only from a manifest the school signed.
    ///
    /// Returns the manifest and the id of the key that signed it.
    public func verifyManifest(_ manifestBytes: [UInt8], signature: [UInt8]?) throws(BundleError) -> (BundleManifest, signerKeyID: String?) {
        guard manifestBytes.count <= BundleManifest.maximumManifestBytes else {
            throw .malformedManifest(line: 0, reason: "the manifest is larger than \(BundleManifest.maximumManifestBytes) bytes")
        }
        var signer: String? = nil
        if case .trusted(let keys) = signatures {
            guard !keys.isEmpty else { throw .noTrustedKeys }
            guard let signature else { throw .missingSignature(path: BundleManifest.signatureFileName) }
            guard signature.count <= BundleManifest.maximumSignatureBytes else {
                throw .malformedSignature(reason: "the file is larger than \(BundleManifest.maximumSignatureBytes) bytes")
            }
            signer = try verifySignature(signature, manifest: manifestBytes, keys: keys)
        }

        let manifest = try BundleManifest(parsing: manifestBytes)
        if checkExpiry {
            guard manifest.expiresAt > now else { throw .expired(at: manifest.expiresAt) }
            guard manifest.issuedAt <= now + allowedClockSkew else { throw .notYetValid(issuedAt: manifest.issuedAt) }
        }
        return (manifest, signer)
    }

    private func verifySignature(_ bytes: [UInt8], manifest: [UInt8], keys: [BundlePublicKey]) throws(BundleError) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .malformedSignature(reason: "not text") }
        let fields = text.split(separator: "\n", omittingEmptySubsequences: false)[0].split(separator: " ").map(String.init)
        guard fields.count == 3, fields[0] == "ed25519" else {
            throw .malformedSignature(reason: "expected 'ed25519 KEYID BASE64'")
        }
        guard let signature = try? Base64.decode(string: fields[2]), signature.count == 64 else {
            throw .malformedSignature(reason: "the signature is not 64 bytes of base64")
        }
        let keyID = fields[1]
        // Try every trusted key: the key id is only a hint for the error message.
        for key in keys where key.key.isValidSignature(signature, for: manifest) {
            return key.keyID
        }
        if keys.contains(where: { $0.keyID == keyID }) { throw .badSignature(keyID: keyID) }
        throw .unknownKey(keyID: String(keyID.prefix(32)))
    }

    /// Checks that every delta the verified manifest names that is in the
    /// folder has its signed size and SHA-256 (`filterctl bundle verify` on the
    /// school's folder before it is published), and returns the names of those
    /// that are not there: a machine then downloads the whole file, and an
    /// installed version's folder keeps no deltas at all.
    public func verifyDeltas(of bundle: VerifiedBundle) throws(BundleError) -> [String] {
        var missing: [String] = []
        for delta in bundle.manifest.deltas {
            do {
                try verifyFile(BundleManifest.File(name: delta.name, size: delta.size, sha256: delta.sha256), in: bundle.directory)
            } catch .missingFile {
                missing.append(delta.name)
            }
        }
        return missing
    }

    /// The SHA-256 (lower-case hex) and size of the file at `path`, read to its end
    /// but never past `limit` bytes; nil when it cannot be read or is larger.
    public static func sha256(ofFileAt path: String, limit: UInt64 = BundleManifest.maximumFileBytes) -> (sha256: String, size: UInt64)? {
        var hasher = SHA256()
        guard let size = try? BoundedFile.stream(path, limit: limit, { chunk in hasher.update(data: chunk) }) else { return nil }
        return (lowerHex(hasher.finalize()), size)
    }

    private func verifyFile(_ file: BundleManifest.File, in directory: String) throws(BundleError) {
        let path = directory + "/" + file.name
        var hasher = SHA256()
        let size: UInt64
        do {
            size = try BoundedFile.stream(path, limit: BundleManifest.maximumFileBytes) { chunk in hasher.update(data: chunk) }
        } catch .missing {
            throw .missingFile(name: file.name)
        } catch .tooLarge {
            throw .sizeMismatch(name: file.name, expected: file.size, actual: BundleManifest.maximumFileBytes + 1)
        } catch {
            throw .unreadable(path: path, reason: error.description)
        }
        guard size == file.size else { throw .sizeMismatch(name: file.name, expected: file.size, actual: size) }
        let digest = lowerHex(hasher.finalize())
        guard digest == file.sha256 else { throw .hashMismatch(name: file.name) }
    }
}

/// Builds the manifest and signature of a bundle from its files.
public enum BundleSigner {
    public static func manifest(
        files: [(name: String, contents: [UInt8])],
        version: UInt64,
        issuedAt: Int64,
        expiresAt: Int64,
        deltas: [BundleManifest.Delta] = []
    ) -> BundleManifest {
        BundleManifest(
            version: version,
            issuedAt: issuedAt,
            expiresAt: expiresAt,
            files: files.map { file in
                BundleManifest.File(
                    name: file.name,
                    size: UInt64(file.contents.count),
                    sha256: lowerHex(SHA256.hash(data: file.contents))
                )
            },
            deltas: deltas
        )
    }
}

/// Bytes as lower-case hex, two digits each (the manifest's and key ids' form).
func lowerHex(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var text: [UInt8] = []
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0xF)])
    }
    return String(decoding: text, as: UTF8.self)
}

