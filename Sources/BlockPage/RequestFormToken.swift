import Crypto
public import Foundation

/// The request-access form's CSRF token: HMAC-SHA256, with a secret made
/// when filter-control starts, over the requesting user (as the page found
/// them, by the owner of the browser's socket), the blocked host and an
/// hour's window. Another site cannot post a request in a student's name
/// (it cannot read the page that carries the token), and one local user
/// cannot post in another's (the token is for the socket's owner).
///
/// A token made in one window is taken in that window and the next, so a
/// page is good for one to two hours; a restart makes every open page's
/// token stale (the student reloads the page).
public struct RequestFormTokens: Sendable {
    /// The length of a window, in seconds.
    public static let window: Int64 = 3600

    private let key: SymmetricKey

    /// `secret`: at least 32 random bytes, kept in memory only.
    public init(secret: [UInt8]) {
        key = SymmetricKey(data: secret)
    }

    /// A fresh random secret.
    public static func random() -> RequestFormTokens {
        var generator = SystemRandomNumberGenerator()
        return RequestFormTokens(secret: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// The token for `user` (nil: not known) asking for `host` at `now`.
    public func token(user: String?, host: String, now: Date = Date()) -> String {
        token(user: user, host: host, window: Self.windowNumber(now))
    }

    /// Whether `token` was made for `user` and `host` in the window of `now` or the one before.
    public func verify(_ token: String, user: String?, host: String, now: Date = Date()) -> Bool {
        let current = Self.windowNumber(now)
        var valid = false
        // Both compared, always: the time taken says nothing about which one matched.
        for window in [current, current - 1] {
            valid = Self.constantTimeEqual(Array(token.utf8), Array(self.token(user: user, host: host, window: window).utf8)) || valid
        }
        return valid
    }

    private func token(user: String?, host: String, window: Int64) -> String {
        // Fields joined by a byte neither a user name nor a host holds (the form refuses control characters).
        let message = ["hallpass-request-form-1", user ?? "", host.lowercased(), String(window)].joined(separator: "\u{0}")
        let mac = HMAC<SHA256>.authenticationCode(for: Array(message.utf8), using: key)
        return Data(mac).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func windowNumber(_ now: Date) -> Int64 {
        Int64((now.timeIntervalSince1970 / Double(window)).rounded(.down))
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
