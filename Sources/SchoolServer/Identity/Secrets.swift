import Crypto
import Foundation
import VerdictCore

/// The secrets and names the server hands out: enrolment tokens, API
/// tokens, machine ids. Only hashes of the secrets are stored.
public enum Secrets {
    /// `hp1.<fingerprint>.<secret>`: what a person copies to a machine.
    public static let enrolmentPrefix = "hp1"
    /// `hpa1.<id>.<secret>`: an API token, sent as `Authorization: Bearer ...`.
    public static let apiPrefix = "hpa1"

    /// 32 random bytes in base64url without padding (43 characters).
    public static func newSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return base64URL((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// Lower-case hex SHA-256 of the text's UTF-8 bytes: what is stored of a secret.
    public static func hash(_ text: String) -> String {
        Hex.encode(SHA256.hash(data: Array(text.utf8)))
    }

    /// Lower-case hex SHA-256 of `bytes`: how lists and bundle files are named.
    public static func sha256(_ bytes: [UInt8]) -> String {
        Hex.encode(SHA256.hash(data: bytes))
    }

    /// A secret as `newSecret` makes them: 43 characters of base64url.
    public static func isWellFormedSecret(_ text: String) -> Bool {
        text.utf8.count == 43 && text.utf8.allSatisfy(isBase64URL)
    }

    static func isBase64URL(_ byte: UInt8) -> Bool {
        (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122) || (byte >= 48 && byte <= 57) || byte == 45 || byte == 95
    }

    public static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// `m-` and 20 characters of base32 (a-z, 2-7): 100 random bits.
    public static func newMachineID() -> String {
        "m-" + randomBase32(count: 20)
    }

    public static func isMachineID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == 22 && text.hasPrefix("m-") && bytes[2...].allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 50 && $0 <= 55) }
    }

    /// An access request's id on the server (a machine's own ids are only unique on that machine).
    public static func newAccessRequestID() -> String {
        "rq-" + randomBase32(count: 16)
    }

    public static func isAccessRequestID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == 19 && text.hasPrefix("rq-") && bytes[3...].allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 50 && $0 <= 55) }
    }

    /// A safeguarding alert's id.
    public static func newAlertID() -> String {
        "al-" + randomBase32(count: 16)
    }

    public static func isAlertID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == 19 && text.hasPrefix("al-") && bytes[3...].allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 50 && $0 <= 55) }
    }

    static func randomBase32(count: Int) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)
        var generator = SystemRandomNumberGenerator()
        return String(decoding: (0..<count).map { _ in alphabet[Int.random(in: 0..<32, using: &generator)] }, as: UTF8.self)
    }

    /// The whole enrolment token for `secret` on the server with `fingerprint`.
    public static func enrolmentToken(fingerprint: String, secret: String) -> String {
        "\(enrolmentPrefix).\(fingerprint).\(secret)"
    }

    /// A new API token and its id (the id names it in lists; the token is shown once).
    public static func newAPIToken() -> (id: String, token: String) {
        let id = randomBase32(count: 8)
        return (id, "\(apiPrefix).\(id).\(newSecret())")
    }
}
