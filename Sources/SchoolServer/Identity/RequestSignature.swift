public import Crypto
import Foundation
import VerdictCore

/// A machine's signed request (docs/server.md, "How a machine
/// authenticates"): Ed25519 by the machine's own key over
///
///     hallpass-request-v1\n<METHOD>\n<path with query, as sent>\n<date>\n<hex SHA-256 of the body>
///
/// with the headers `Hallpass-Machine`, `Hallpass-Date` (Unix seconds) and
/// `Hallpass-Signature: ed25519 <base64>`. Checking is pure: the outcome
/// is a value with its reason, and the clock is passed in.
public enum RequestSignature {
    public static let machineHeader = "Hallpass-Machine"
    public static let dateHeader = "Hallpass-Date"
    public static let signatureHeader = "Hallpass-Signature"
    /// How far a request's date may be from the server's clock, either way.
    public static let allowedSkew: Int64 = 300

    /// The bytes that are signed.
    public static func message(method: String, path: String, date: String, body: [UInt8]) -> [UInt8] {
        let bodyHash = Hex.encode(SHA256.hash(data: body))
        return Array("hallpass-request-v1\n\(method)\n\(path)\n\(date)\n\(bodyHash)".utf8)
    }

    /// The three headers for a request, signed with `key` (what a machine sends; the tests sign with it too).
    public static func headers(
        machine: String, key: Curve25519.Signing.PrivateKey, method: String, path: String, body: [UInt8], now: Int64
    ) throws -> [(String, String)] {
        let date = String(now)
        let signature = try key.signature(for: message(method: method, path: path, date: date, body: body))
        return [
            (machineHeader, machine), (dateHeader, date), (signatureHeader, "ed25519 " + Data(signature).base64EncodedString()),
        ]
    }

    public enum Outcome: Sendable, Hashable {
        case valid
        /// Why not, for the log (the machine is told only `signature-invalid`).
        case invalid(reason: String)
    }

    /// Checks the date and the signature against the machine's public key (32 raw bytes in base64).
    public static func verify(
        method: String, path: String, date: String?, signature: String?, body: [UInt8], publicKey: String, now: Int64
    ) -> Outcome {
        guard let date, let seconds = Int64(date) else { return .invalid(reason: "no \(dateHeader) in Unix seconds") }
        guard abs(seconds - now) <= allowedSkew else {
            return .invalid(reason: "the request's date is \(seconds - now) s from the server's clock (at most \(allowedSkew) s allowed)")
        }
        guard let signature, signature.hasPrefix("ed25519 "), let signatureBytes = Data(base64Encoded: String(signature.dropFirst(8))),
            signatureBytes.count == 64
        else { return .invalid(reason: "no \(signatureHeader): ed25519 <base64 of 64 bytes>") }
        guard let keyBytes = Data(base64Encoded: publicKey), let key = try? Curve25519.Signing.PublicKey(rawRepresentation: keyBytes) else {
            return .invalid(reason: "the machine's stored public key is unreadable")
        }
        guard key.isValidSignature(signatureBytes, for: message(method: method, path: path, date: date, body: body)) else {
            return .invalid(reason: "the signature does not match the machine's key")
        }
        return .valid
    }
}
