public import Crypto
import ExtrasBase64
import Foundation
import HallpassSystem
public import SharedStore

/// `filterctl enroll https://SERVER TOKEN`: the machine makes its Ed25519
/// key, presents the token's secret and its public key to the server whose
/// key the token pins (`POST /api/v1/enrol`), and keeps what the server
/// answers as its identity. The private key never leaves the machine.
public enum Enrolment {
    public struct Outcome: Sendable {
        public var identity: MachineIdentity
        public var room: String?
        /// The keys the server's bundles are signed with (`bundles.trustedKeys`); empty when it publishes none.
        public var bundleKeys: [BundlePublicKey] = []
    }

    /// Enrols with `server` over `transport` (made with the token's
    /// fingerprint and no signer) and returns the identity, not yet written.
    public static func enrol(
        server: SchoolServerURL, token: EnrolmentToken, hostname: String, transport: any SchoolTransport,
        key: Curve25519.Signing.PrivateKey = Curve25519.Signing.PrivateKey()
    ) async throws(SchoolError) -> Outcome {
        let request: [String: String] = [
            "token": token.secret, "publicKey": Base64.encodeToString(bytes: key.publicKey.rawRepresentation), "hostname": hostname,
            "version": HallpassVersion.current,
        ]
        let body: [UInt8]
        do {
            body = Array(try JSONSerialization.data(withJSONObject: request, options: [.sortedKeys]))
        } catch {
            throw .badAnswer(reason: "cannot encode the request: \(error)")
        }
        let answer = try await transport.post("/api/v1/enrol", body: body)
        guard answer.status == 201 || answer.status == 200 else {
            throw SchoolConnection.refusal(status: answer.status, body: answer.body)
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(answer.body))) as? [String: Any],
            let machine = object["machine"] as? String
        else {
            throw .badAnswer(reason: "the enrolment answer has no 'machine'")
        }
        guard MachineIdentity.isMachineID(machine) else {
            throw .badAnswer(reason: "the machine id '\(machine.prefix(40))' is not m- and 20 base32 characters")
        }
        // A server that publishes bundles names the keys that sign them; the answer
        // comes over the pinned connection, so they are the school's server's word.
        var bundleKeys: [BundlePublicKey] = []
        if let bundles = object["bundles"], !(bundles is NSNull) {
            guard let bundles = bundles as? [String: Any], let keys = bundles["trustedKeys"] as? [String] else {
                throw .badAnswer(reason: "the enrolment answer's 'bundles' has no 'trustedKeys' list")
            }
            for text in keys {
                guard let key = try? BundlePublicKey(text) else {
                    throw .badAnswer(reason: "the enrolment answer's bundle key '\(text.prefix(60))' is not ed25519:BASE64 (32 bytes)")
                }
                if !bundleKeys.contains(key) { bundleKeys.append(key) }
            }
        }
        return Outcome(
            identity: MachineIdentity(machine: machine, server: server, fingerprint: token.fingerprint, key: key), room: object["room"] as? String,
            bundleKeys: bundleKeys)
    }

    /// Writes the `school:` section (server, fingerprint and the bundle keys)
    /// into the configuration file at `path` (made when missing, mode 0644; an
    /// existing file keeps its mode), checking first that the result reads.
    public static func writeConfiguration(
        path: String, server: SchoolServerURL, fingerprint: ServerFingerprint, bundleKeys: [BundlePublicKey] = []
    ) throws(SchoolError) {
        var old = ""
        var mode: UInt32 = 0o644
        if let status = try? FileSystem.status(path) {
            mode = UInt32(status.permissions.rawValue & 0o7777)
            do {
                old = String(decoding: try BoundedFile.read(path, limit: 1 << 20), as: UTF8.self)
            } catch {
                throw .io(path: path, reason: "cannot be read (\(error))")
            }
        }
        let new = SchoolSettings.settingSection(in: old, server: server, fingerprint: fingerprint, bundleKeys: bundleKeys)
        do {
            let configuration = try Configuration(yaml: new)
            guard configuration.school?.server == server, configuration.school?.fingerprint == fingerprint,
                configuration.school?.bundleKeys == bundleKeys
            else {
                throw ConfigurationError(key: "school", message: "the section did not read back as written")
            }
        } catch {
            throw .io(path: path, reason: "it would not read with the school section added (\(error)); add it by hand:\n"
                    + SchoolSettings.settingSection(in: "", server: server, fingerprint: fingerprint, bundleKeys: bundleKeys))
        }
        do {
            try AtomicFile.write(Array(new.utf8), to: path, mode: mode)
        } catch {
            throw .io(path: path, reason: error.reason)
        }
    }
}
