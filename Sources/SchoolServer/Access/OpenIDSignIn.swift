import Crypto
public import Foundation

/// A sign-in through the school's provider between its two halves: what the
/// console keeps when it sends the browser to the provider, and takes back
/// (once) when the browser returns with a code.
public struct PendingSignIn: Sendable, Hashable {
    /// SHA-256 (hex) of the `state` sent to the provider: the state itself is
    /// a bearer secret in the browser's address bar and is never stored.
    public var stateHash: String
    /// The PKCE code verifier, sent with the code to the token endpoint.
    public var verifier: String
    /// The `nonce` the ID token must carry.
    public var nonce: String
    /// Where the console sends the person once signed in (a local path).
    public var returnTo: String
    /// Unix seconds.
    public var createdAt: Int64

    public init(stateHash: String, verifier: String, nonce: String, returnTo: String, createdAt: Int64) {
        self.stateHash = stateHash
        self.verifier = verifier
        self.nonce = nonce
        self.returnTo = returnTo
        self.createdAt = createdAt
    }
}

/// Where pending sign-ins wait: the server's storage (`sign_in_states`), or
/// memory in unit tests. `take` removes the entry whatever its age, so a
/// state works once; it returns it only when made at or after `notBefore`.
public protocol SignInStateStore: Sendable {
    func add(_ pending: PendingSignIn) async throws
    func take(stateHash: String, notBefore: Int64) async throws -> PendingSignIn?
}

/// `SignInStateStore` in memory, for unit tests and a server without storage of its own.
public actor InMemorySignInStateStore: SignInStateStore {
    private var pending: [String: PendingSignIn] = [:]

    public init() {}

    public func add(_ pending: PendingSignIn) {
        self.pending[pending.stateHash] = pending
    }

    public func take(stateHash: String, notBefore: Int64) -> PendingSignIn? {
        guard let found = pending.removeValue(forKey: stateHash) else { return nil }
        // The old ones go too, so that abandoned sign-ins do not pile up.
        pending = pending.filter { $0.value.createdAt >= notBefore }
        return found.createdAt >= notBefore ? found : nil
    }

    public var count: Int { pending.count }
}

/// PKCE (RFC 7636) with S256: a verifier of 32 random bytes in base64url
/// (43 characters, within the 43 to 128 the RFC allows), and its challenge.
public enum PKCE {
    public static func newVerifier() -> String { Secrets.newSecret() }

    /// BASE64URL(SHA256(ASCII(verifier))), without padding.
    public static func challenge(for verifier: String) -> String {
        Secrets.base64URL(Array(SHA256.hash(data: Array(verifier.utf8))))
    }

    /// RFC 7636 4.1: 43 to 128 of A-Z a-z 0-9 - . _ ~.
    public static func isWellFormedVerifier(_ text: String) -> Bool {
        (43...128).contains(text.utf8.count)
            && text.utf8.allSatisfy { Secrets.isBase64URL($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "~") }
    }
}

extension OpenIDClient {
    /// How long a pending sign-in waits for the browser to come back.
    public static let signInLifetime: Int64 = 600

    /// A local path to return to, or the console's front page: never another
    /// site (`//evil.example`, `https://...`, `/\evil.example`), which would make the
    /// sign-in an open redirect.
    public static func localReturnPath(_ text: String?) -> String {
        SignInRoutes.localPath(text) ?? "/console/"
    }

    /// The provider's authorization endpoint with the request's parameters
    /// (OpenID Connect Core 3.1.2.1, RFC 7636 4.3), the endpoint's own query kept.
    public static func authorizationURL(
        endpoint: URL, clientID: String, redirectURL: String, scopes: [String], state: String, nonce: String, codeChallenge: String
    ) -> URL? {
        guard var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false) else { return nil }
        var items = components.queryItems ?? []
        items += [
            URLQueryItem(name: "response_type", value: "code"),
            URLQueryItem(name: "client_id", value: clientID),
            URLQueryItem(name: "redirect_uri", value: redirectURL),
            URLQueryItem(name: "scope", value: scopes.joined(separator: " ")),
            URLQueryItem(name: "state", value: state),
            URLQueryItem(name: "nonce", value: nonce),
            URLQueryItem(name: "code_challenge", value: codeChallenge),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ]
        // URLComponents leaves '+', '&' and '=' of a value alone in `queryItems`; encoded
        // by hand so that a redirect URL with its own query survives the trip.
        components.percentEncodedQuery = items.map { "\(FormEncoding.encode($0.name))=\(FormEncoding.encode($0.value ?? ""))" }
            .joined(separator: "&")
        return components.url
    }
}

/// application/x-www-form-urlencoded values: everything but unreserved characters percent-encoded.
enum FormEncoding {
    static func encode(_ text: String) -> String {
        var result = ""
        for byte in text.utf8 {
            if Secrets.isBase64URL(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "~") {
                result.unicodeScalars.append(UnicodeScalar(byte))
            } else {
                result += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return result
    }

    static func body(_ fields: [(String, String)]) -> String {
        fields.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&")
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
