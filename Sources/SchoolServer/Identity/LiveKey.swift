public import Crypto
import Foundation
import HallpassSystem
public import SharedStore

/// The server's live key (docs/server.md, "The live channel"): an Ed25519
/// key that signs each machine's live state. Machines accept a state only
/// when the bundle's policy names this key in `live.keys`, so a live item
/// is never more than the school's signed policy lets it be. Kept in the
/// state folder beside the bundle signing key (PKCS#8 PEM, 0600), made by
/// `init` and at start when missing, never overwritten. Apart from the
/// bundle key on purpose: the bundle key may be offline, the live key signs
/// on every change and must be on the server.
public struct LiveKey: Sendable {
    public let signing: BundleSigningKey

    public init(signing: BundleSigningKey) { self.signing = signing }

    /// `ed25519:BASE64`, as the policy's `live.keys` names it.
    public var publicText: String { signing.publicKey.description }
    public var publicKey: BundlePublicKey { signing.publicKey }

    public func signature(over bytes: [UInt8]) throws -> [UInt8] {
        Array(try signing.key.signature(for: bytes))
    }

    public static func path(configuration: ServerConfiguration) -> String {
        configuration.stateDirectory + "/live-key.pem"
    }

    /// The key in its file, made first when the file is missing; `made` says whether it was.
    public static func loadOrMake(configuration: ServerConfiguration) throws(ServerError) -> (key: LiveKey, made: Bool) {
        let path = path(configuration: configuration)
        if !FileSystem.exists(path) {
            let key = BundleSigningKey()
            do {
                try FileSystem.makeDirectories((path as NSString).deletingLastPathComponent, mode: 0o750)
                try AtomicFile.createNew(Array(key.pem.utf8), at: path, mode: 0o600)
                return (LiveKey(signing: key), true)
            } catch {
                // Another instance sharing the folder made it first: read that one.
                if !FileSystem.exists(path) {
                    throw ServerError(code: "live.key", message: "cannot make the live key \(path): \(error)")
                }
            }
        }
        return (try load(path: path), false)
    }

    public static func load(path: String) throws(ServerError) -> LiveKey {
        let bytes: [UInt8]
        do {
            bytes = try BoundedFile.read(path, limit: 64 * 1024, followingLinks: true)
        } catch {
            throw ServerError(code: "live.key", message: "cannot read the live key \(path): \(error)")
        }
        do {
            return LiveKey(signing: try BundleSigningKey(pem: String(decoding: bytes, as: UTF8.self)))
        } catch {
            throw ServerError(code: "live.key", message: "\(path) is not an Ed25519 PEM private key: \(error)")
        }
    }
}
