public import Crypto
import ExtrasBase64
import HallpassSystem
import SharedStore
import VerdictCore

/// Who this machine is to the school's server, written by `filterctl enroll`
/// into rules.directory (each file mode 0600, owner root):
///
/// - `identity`: `machine m-...`, `server https://...`, `fingerprint HEX`, a line each;
/// - `identity.key`: the machine's Ed25519 key, PKCS#8 PEM (`openssl pkey` reads it),
///   made on the machine; only its public half ever left it (in the enrolment).
public struct MachineIdentity: Sendable {
    public static let fileName = "identity"
    public static let keyFileName = "identity.key"

    public var machine: String
    public var server: SchoolServerURL
    public var fingerprint: ServerFingerprint
    public var key: Curve25519.Signing.PrivateKey

    public init(machine: String, server: SchoolServerURL, fingerprint: ServerFingerprint, key: Curve25519.Signing.PrivateKey) {
        self.machine = machine
        self.server = server
        self.fingerprint = fingerprint
        self.key = key
    }

    /// A machine id as the contract gives them: `m-` and 20 base32 characters (a-z, 2-7).
    public static func isMachineID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == 22 && text.hasPrefix("m-")
            && bytes.dropFirst(2).allSatisfy { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "2")...UInt8(ascii: "7")).contains($0) }
    }

    /// The `identity` file's text.
    public var identityText: String {
        "machine \(machine)\nserver \(server)\nfingerprint \(fingerprint)\n"
    }

    /// Writes both files (the key first), each replaced whole, mode 0600.
    public func write(directory: String) throws(SchoolError) {
        let keyPath = directory + "/" + Self.keyFileName
        let identityPath = directory + "/" + Self.fileName
        do {
            try AtomicFile.write(Array(BundleSigningKey(key: key).pem.utf8), to: keyPath, mode: 0o600)
            try AtomicFile.write(Array(identityText.utf8), to: identityPath, mode: 0o600)
        } catch {
            throw .io(path: error.path, reason: error.reason)
        }
    }

    /// Reads both files from `directory`. A key file others may read is refused.
    public static func read(directory: String) throws(SchoolError) -> MachineIdentity {
        let identityPath = directory + "/" + fileName
        let keyPath = directory + "/" + keyFileName
        let text: String
        do {
            text = String(decoding: try BoundedFile.read(identityPath, limit: 4096), as: UTF8.self)
        } catch {
            throw .identity(path: identityPath, reason: "cannot be read (\(error))")
        }
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        guard let machine = fields["machine"], isMachineID(machine) else {
            throw .identity(path: identityPath, reason: "has no 'machine m-...' line")
        }
        guard let serverText = fields["server"], let server = try? SchoolServerURL(parsing: serverText) else {
            throw .identity(path: identityPath, reason: "has no 'server https://...' line")
        }
        guard let fingerprintText = fields["fingerprint"], let fingerprint = ServerFingerprint(hex: fingerprintText) else {
            throw .identity(path: identityPath, reason: "has no 'fingerprint HEX' line")
        }
        if let status = try? FileSystem.status(keyPath), status.permissions.rawValue & 0o077 != 0 {
            throw .identity(path: keyPath, reason: "may be read by others than root (mode \(String(status.permissions.rawValue & 0o777, radix: 8))); it must be 0600")
        }
        let pem: [UInt8]
        do {
            pem = try BoundedFile.read(keyPath, limit: 4096)
        } catch {
            throw .identity(path: keyPath, reason: "cannot be read (\(error))")
        }
        let key: BundleSigningKey
        do {
            key = try BundleSigningKey(pem: String(decoding: pem, as: UTF8.self))
        } catch {
            throw .identity(path: keyPath, reason: "is not an Ed25519 private key in PKCS#8 PEM")
        }
        return MachineIdentity(machine: machine, server: server, fingerprint: fingerprint, key: key.key)
    }
}

/// Signs the requests a machine makes after its enrolment (the contract's
/// `Hallpass-*` headers): Ed25519 by the machine's key over
/// `hallpass-request-v1\n<METHOD>\n<path with query, as sent>\n<unix seconds>\n<hex SHA-256 of the body>`.
/// The server refuses a date more than 300 s from its clock.
public struct RequestSigner: Sendable {
    public let machine: String
    let key: Curve25519.Signing.PrivateKey

    public init(machine: String, key: Curve25519.Signing.PrivateKey) {
        self.machine = machine
        self.key = key
    }

    /// The bytes the signature covers.
    public static func message(method: String, path: String, date: Int64, body: [UInt8]) -> [UInt8] {
        Array("hallpass-request-v1\n\(method)\n\(path)\n\(date)\n\(Hex.encode(SHA256.hash(data: body)))".utf8)
    }

    /// `Hallpass-Machine`, `Hallpass-Date` and `Hallpass-Signature` for one request.
    public func headers(method: String, path: String, date: Int64, body: [UInt8]) throws -> [(String, String)] {
        let signature = try key.signature(for: Self.message(method: method, path: path, date: date, body: body))
        return [
            ("Hallpass-Machine", machine), ("Hallpass-Date", String(date)),
            ("Hallpass-Signature", "ed25519 " + Base64.encodeToString(bytes: signature)),
        ]
    }
}
