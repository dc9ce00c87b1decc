import ExtrasBase64

/// What a person copies to a machine to enrol it:
/// `hp1.<fingerprint, 64 hex>.<secret, 32 bytes of base64url without padding>`.
/// The fingerprint pins the server's key for the first contact; only the
/// secret is sent (the server keeps its SHA-256).
public struct EnrolmentToken: Sendable, Hashable {
    public let fingerprint: ServerFingerprint
    /// The secret as it was written (base64url), what the enrolment request carries.
    public let secret: String

    public init(parsing text: String) throws(SchoolError) {
        let trimmed = text.trimmingWhitespace()
        let parts = trimmed.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.first == "hp1" else {
            throw .malformedToken(reason: parts.count == 3 ? "it is not version hp1 (starts with '\(parts[0].prefix(10))')" : "it does not start with 'hp1.'")
        }
        guard parts.count == 3 else {
            throw .malformedToken(reason: "it has \(parts.count) parts separated by '.', not 3")
        }
        guard let fingerprint = ServerFingerprint(hex: String(parts[1])) else {
            throw .malformedToken(reason: "its second part is not a fingerprint of 64 hex digits")
        }
        let secret = String(parts[2])
        guard secret.utf8.allSatisfy({ byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }), let bytes = try? Base64.decode(string: secret, options: [.base64UrlAlphabet, .omitPaddingCharacter]), bytes.count == 32
        else {
            throw .malformedToken(reason: "its secret is not 32 bytes of base64url (43 characters of A-Z, a-z, 0-9, '-', '_')")
        }
        self.fingerprint = fingerprint
        self.secret = secret
    }
}

extension String {
    func trimmingWhitespace() -> String {
        String(self.drop(while: { $0.isWhitespace }).reversed().drop(while: { $0.isWhitespace }).reversed())
    }
}
