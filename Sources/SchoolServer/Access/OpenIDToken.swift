import Foundation
public import JWTKit

/// One claim's value in an ID token, as JSON has it.
public enum ClaimValue: Sendable, Hashable, Codable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case array([ClaimValue])
    case object([String: ClaimValue])
    case null

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let text = try? container.decode(String.self) {
            self = .string(text)
        } else if let flag = try? container.decode(Bool.self) {
            self = .bool(flag)
        } else if let number = try? container.decode(Double.self) {
            self = .number(number)
        } else if let items = try? container.decode([ClaimValue].self) {
            self = .array(items)
        } else {
            self = .object(try container.decode([String: ClaimValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let text): try container.encode(text)
        case .number(let number): try container.encode(number)
        case .bool(let flag): try container.encode(flag)
        case .array(let items): try container.encode(items)
        case .object(let fields): try container.encode(fields)
        case .null: try container.encodeNil()
        }
    }

    public var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// A whole number of seconds (`exp`, `iat`), nil for anything else.
    public var seconds: Int64? {
        guard case .number(let number) = self, number.isFinite, abs(number) < 1e15 else { return nil }
        return Int64(number.rounded(.down))
    }

    /// The strings of a string or of a list (`aud`, `groups`); other items are left out.
    public var strings: [String] {
        switch self {
        case .string(let text): return [text]
        case .array(let items): return items.compactMap(\.string)
        default: return []
        }
    }
}

/// An ID token's claims, all of them: the client checks the standard ones
/// itself (`IDTokenCheck`), with its own clock and leeway, and maps the
/// configured ones to a role.
public struct IDTokenClaims: JWTPayload, Hashable {
    public var claims: [String: ClaimValue]

    public init(_ claims: [String: ClaimValue]) { self.claims = claims }

    public init(from decoder: any Decoder) throws {
        claims = try decoder.singleValueContainer().decode([String: ClaimValue].self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(claims)
    }

    /// Nothing here: jwt-kit calls this after the signature, and the claims are
    /// checked by `IDTokenCheck`, whose every refusal says which claim failed.
    public func verify(using algorithm: some JWTAlgorithm) async throws {}

    public subscript(_ name: String) -> ClaimValue? { claims[name] }
}

/// What an ID token must say for this sign-in (OpenID Connect Core 3.1.3.7).
public struct IDTokenCheck: Sendable {
    public var issuer: String
    public var clientID: String
    public var nonce: String
    /// Unix seconds.
    public var now: Int64
    /// Clock difference allowed between the provider and this server.
    public var leeway: Int64 = 120

    public init(issuer: String, clientID: String, nonce: String, now: Int64, leeway: Int64 = 120) {
        self.issuer = issuer
        self.clientID = clientID
        self.nonce = nonce
        self.now = now
        self.leeway = leeway
    }

    /// Refuses the claims with the first check that fails.
    public func check(_ claims: IDTokenClaims) throws(ServerError) {
        guard claims["iss"]?.string == issuer else {
            throw ServerError(code: "oidc.id-token.issuer", message: "the ID token's issuer is not \(issuer)")
        }
        guard let subject = claims["sub"]?.string, !subject.isEmpty else {
            throw ServerError(code: "oidc.id-token.subject", message: "the ID token has no subject (sub)")
        }
        let audiences = claims["aud"]?.strings ?? []
        guard audiences.contains(clientID) else {
            throw ServerError(code: "oidc.id-token.audience", message: "the ID token is not meant for this client (\(clientID) is not in aud)")
        }
        // Core 3.1.3.7 (3): a token that also names audiences this client does not trust is refused.
        guard audiences.allSatisfy({ $0 == clientID }) else {
            throw ServerError(code: "oidc.id-token.audience", message: "the ID token names other audiences besides \(clientID)")
        }
        if let presenter = claims["azp"] {
            guard presenter.string == clientID else {
                throw ServerError(code: "oidc.id-token.azp", message: "the ID token was issued to another client (azp)")
            }
        }
        guard let expires = claims["exp"]?.seconds else {
            throw ServerError(code: "oidc.id-token.expired", message: "the ID token has no expiry (exp)")
        }
        guard now < expires + leeway else {
            throw ServerError(code: "oidc.id-token.expired", message: "the ID token expired \(now - expires) seconds ago")
        }
        guard let issued = claims["iat"]?.seconds else {
            throw ServerError(code: "oidc.id-token.issued-at", message: "the ID token has no issue time (iat)")
        }
        // Issued during this sign-in: not in the future, not before the sign-in could have begun.
        guard issued <= now + leeway, issued >= now - OpenIDClient.signInLifetime - leeway else {
            throw ServerError(code: "oidc.id-token.issued-at", message: "the ID token's issue time (iat) is \(now - issued) seconds from now")
        }
        if let notBefore = claims["nbf"] {
            guard let seconds = notBefore.seconds, seconds <= now + leeway else {
                throw ServerError(code: "oidc.id-token.not-before", message: "the ID token is not valid yet (nbf)")
            }
        }
        guard claims["nonce"]?.string == nonce else {
            throw ServerError(code: "oidc.id-token.nonce", message: "the ID token's nonce is not this sign-in's")
        }
    }
}

/// The signature of an ID token against the provider's keys (JWKS), with jwt-kit.
public enum IDTokenSignature {
    /// Asymmetric algorithms only: `none` and the HMAC family (whose key would be
    /// the client secret, and which a forged header could ask for) are refused.
    public static let algorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]

    /// The keys of a JWKS document that may sign: each key decoded on its own,
    /// so that one the client does not know (an encryption key, a new type)
    /// does not hide the others.
    public static func signingKeys(jwks bytes: [UInt8]) throws(ServerError) -> [JWK] {
        struct Document: Decodable { var keys: [ClaimValue] }
        let document: Document
        do {
            document = try JSONDecoder().decode(Document.self, from: Data(bytes))
        } catch {
            throw ServerError(code: "oidc.jwks", message: "the provider's key set (jwks_uri) is not a JWKS document")
        }
        var keys: [JWK] = []
        for key in document.keys {
            guard case .object(let fields) = key, fields["use"]?.string ?? "sig" == "sig",
                let data = try? JSONEncoder().encode(key), let jwk = try? JSONDecoder().decode(JWK.self, from: data)
            else { continue }
            keys.append(jwk)
        }
        return keys
    }

    struct Header: Decodable {
        var alg: String
        var kid: String?
    }

    /// Verifies the signature of `token` with the key its header names and
    /// returns its claims. An unknown `kid` is `oidc.id-token.unknown-key`, for
    /// the caller to fetch the key set again.
    public static func verify(_ token: String, keys: [JWK]) async throws(ServerError) -> IDTokenClaims {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]),
            let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes))
        else {
            throw ServerError(code: "oidc.id-token.malformed", message: "the provider's ID token is not a signed JWT")
        }
        guard algorithms.contains(header.alg) else {
            throw ServerError(code: "oidc.id-token.algorithm", message: "the ID token is signed with \(header.alg), which is not accepted")
        }
        let candidates: [JWK]
        if let kid = header.kid {
            candidates = keys.filter { $0.keyIdentifier?.string == kid }
            guard !candidates.isEmpty else {
                throw ServerError(code: "oidc.id-token.unknown-key", message: "the ID token is signed with a key the provider's key set does not hold")
            }
        } else {
            candidates = keys.filter { fits($0, algorithm: header.alg) }
        }
        for jwk in candidates where fits(jwk, algorithm: header.alg) {
            do {
                let collection = JWTKeyCollection()
                var key = jwk
                // jwt-kit keeps keys by kid; one without gets a name of its own in this collection.
                if key.keyIdentifier == nil { key.keyIdentifier = JWKIdentifier(string: "key") }
                try await collection.add(jwk: key)
                return try await collection.verify(token, as: IDTokenClaims.self)
            } catch {
                continue
            }
        }
        throw ServerError(code: "oidc.id-token.signature", message: "the ID token's signature does not verify with the provider's keys")
    }

    /// Whether a key may check a signature of `algorithm`: its type fits, and its
    /// own `alg`, when it names one, is that algorithm.
    static func fits(_ jwk: JWK, algorithm: String) -> Bool {
        if let own = jwk.algorithm, own.rawValue != algorithm { return false }
        switch algorithm.prefix(2) {
        case "RS", "PS": return jwk.keyType == .rsa
        case "ES": return jwk.keyType == .ecdsa
        default: return jwk.keyType == .octetKeyPair
        }
    }
}

enum Base64URL {
    static func decode(_ text: Substring) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map(Array.init)
    }
}
