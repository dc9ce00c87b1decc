public import Foundation
import HallpassSystem
import JWTKit

/// What the provider's discovery document (`ISSUER/.well-known/openid-configuration`)
/// says that the client uses, checked.
public struct OpenIDProviderMetadata: Sendable, Hashable {
    public enum ClientAuthentication: String, Sendable, Hashable {
        /// HTTP Basic with the client id and secret (RFC 6749 2.3.1).
        case basic = "client_secret_basic"
        /// Both in the form's body.
        case post = "client_secret_post"
    }

    public var issuer: String
    public var authorizationEndpoint: URL
    public var tokenEndpoint: URL
    public var jwksURI: URL
    public var clientAuthentication: ClientAuthentication

    public init(issuer: String, authorizationEndpoint: URL, tokenEndpoint: URL, jwksURI: URL, clientAuthentication: ClientAuthentication) {
        self.issuer = issuer
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.jwksURI = jwksURI
        self.clientAuthentication = clientAuthentication
    }

    /// Discovery 1.0 section 3 and 4.3: the document's issuer is the one configured,
    /// character for character; every endpoint is https.
    public init(discovery bytes: [UInt8], expectedIssuer: String) throws(ServerError) {
        struct Document: Decodable {
            var issuer: String?
            var authorization_endpoint: String?
            var token_endpoint: String?
            var jwks_uri: String?
            var response_types_supported: [String]?
            var token_endpoint_auth_methods_supported: [String]?
            var code_challenge_methods_supported: [String]?
        }
        let document: Document
        do {
            document = try JSONDecoder().decode(Document.self, from: Data(bytes))
        } catch {
            throw ServerError(code: "oidc.discovery", message: "the provider's discovery document is not the JSON of OpenID Connect Discovery")
        }
        guard document.issuer == expectedIssuer else {
            throw ServerError(
                code: "oidc.discovery",
                message: "the provider calls itself '\(document.issuer?.prefix(200) ?? "")', not '\(expectedIssuer)' (signIn.oidc.issuer must be written exactly as the provider writes it)")
        }
        func endpoint(_ text: String?, _ name: String) throws(ServerError) -> URL {
            guard let text, let url = URL(string: text), url.scheme == "https", url.host?.isEmpty == false else {
                throw ServerError(code: "oidc.discovery", message: "the provider's discovery document has no https \(name)")
            }
            return url
        }
        issuer = expectedIssuer
        authorizationEndpoint = try endpoint(document.authorization_endpoint, "authorization_endpoint")
        tokenEndpoint = try endpoint(document.token_endpoint, "token_endpoint")
        jwksURI = try endpoint(document.jwks_uri, "jwks_uri")
        if let types = document.response_types_supported, !types.contains("code") {
            throw ServerError(code: "oidc.discovery", message: "the provider does not offer the authorization code flow (response type code)")
        }
        // Absent: the provider does not say, and many (Entra ID among them) take PKCE all the same.
        if let methods = document.code_challenge_methods_supported, !methods.contains("S256") {
            throw ServerError(code: "oidc.discovery", message: "the provider does not offer PKCE with S256 (code_challenge_methods_supported)")
        }
        // Discovery 1.0: when absent, client_secret_basic.
        let methods = document.token_endpoint_auth_methods_supported ?? ["client_secret_basic"]
        if methods.contains(ClientAuthentication.basic.rawValue) {
            clientAuthentication = .basic
        } else if methods.contains(ClientAuthentication.post.rawValue) {
            clientAuthentication = .post
        } else {
            throw ServerError(
                code: "oidc.discovery",
                message: "the provider takes neither client_secret_basic nor client_secret_post at its token endpoint (it offers \(methods.prefix(8).joined(separator: ", ")))")
        }
    }

    /// `ISSUER/.well-known/openid-configuration` (Discovery 1.0 4.1: the issuer's trailing slash dropped).
    public static func discoveryURL(issuer: String) -> URL? {
        var base = issuer
        while base.hasSuffix("/") { base.removeLast() }
        return URL(string: base + "/.well-known/openid-configuration")
    }
}

/// Signing in to the console with the school's OpenID Connect provider: the
/// authorization code flow with PKCE (S256), `state` and `nonce`
/// (docs/server.md, "Signing in with the school's accounts").
///
/// `begin` makes a pending sign-in and the provider's URL to send the
/// browser to; `finish` takes the code and state the browser brings back,
/// exchanges the code at the token endpoint, verifies the ID token (its
/// signature against the provider's key set, issuer, audience, times and
/// nonce) and maps its claims to a login, a role and a scope. No message
/// of either carries a code, a token, a state or the secret.
public actor OpenIDClient {
    public let configuration: OpenIDConfiguration
    let clientSecret: String
    let store: any SignInStateStore
    let transport: any OpenIDTransport
    let clock: @Sendable () -> Int64

    private var metadata: (value: OpenIDProviderMetadata, fetchedAt: Int64)?
    private var keys: [JWK] = []
    private var keysFetchedAt: Int64?

    /// Bounds of what the provider may send.
    static let discoveryLimit = 64 << 10
    static let jwksLimit = 256 << 10
    static let tokenLimit = 64 << 10
    /// The discovery document is fetched again after this long (seconds).
    static let metadataLifetime: Int64 = 3600
    /// An unknown key fetches the key set again, at most this often (seconds),
    /// so that tokens with made-up key ids cannot make the server hammer the provider.
    static let keysRefetchInterval: Int64 = 60

    public init(
        configuration: OpenIDConfiguration, clientSecret: String, store: any SignInStateStore, transport: any OpenIDTransport,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.configuration = configuration
        self.clientSecret = clientSecret
        self.store = store
        self.transport = transport
        self.clock = clock
    }

    /// The client as the server runs it: the secret read from `clientSecretFile`,
    /// HTTPS through AsyncHTTPClient with `caFile` when given.
    public static func make(configuration: OpenIDConfiguration, store: any SignInStateStore) throws -> OpenIDClient {
        let secret = try readClientSecret(configuration.clientSecretFile)
        let transport = try HTTPClientOpenIDTransport(caFile: configuration.caFile)
        return OpenIDClient(configuration: configuration, clientSecret: secret, store: store, transport: transport)
    }

    /// The secret's first line. The file may be the service's group's (0640,
    /// as the TLS key is), never others': a secret anyone on the server can
    /// read lets them sign in as the console to the provider.
    public static func readClientSecret(_ path: String) throws(ServerError) -> String {
        let mode: UInt32
        do {
            mode = UInt32(try FileSystem.status(path).permissions.rawValue)
        } catch {
            throw ServerError(code: "oidc.secret", message: "signIn.oidc.clientSecretFile \(path): \(error)")
        }
        guard mode & 0o007 == 0 else {
            throw ServerError(
                code: "oidc.secret",
                message: "signIn.oidc.clientSecretFile \(path) may be read by others (mode \(String(mode & 0o777, radix: 8))); chmod 0640 or 0600 it")
        }
        let bytes: [UInt8]
        do {
            bytes = try BoundedFile.read(path, limit: 4096, followingLinks: true)
        } catch {
            throw ServerError(code: "oidc.secret", message: "signIn.oidc.clientSecretFile \(path): \(error)")
        }
        let secret = String(decoding: bytes, as: UTF8.self).split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        guard !secret.isEmpty else {
            throw ServerError(code: "oidc.secret", message: "signIn.oidc.clientSecretFile \(path) is empty; write the client secret on its first line")
        }
        return secret
    }

    // MARK: The two halves of a sign-in

    /// Keeps a new pending sign-in and returns the provider's URL to send the
    /// browser to. `returnTo`: where to go once signed in (a local path; anything else is the console's front page).
    public func begin(returnTo: String?) async throws -> URL {
        let provider = try await providerMetadata()
        let state = Secrets.newSecret()
        let nonce = Secrets.newSecret()
        let verifier = PKCE.newVerifier()
        try await store.add(
            PendingSignIn(
                stateHash: Secrets.hash(state), verifier: verifier, nonce: nonce, returnTo: Self.localReturnPath(returnTo), createdAt: clock()))
        guard
            let url = Self.authorizationURL(
                endpoint: provider.authorizationEndpoint, clientID: configuration.clientID, redirectURL: configuration.redirectURL,
                scopes: configuration.scopes, state: state, nonce: nonce, codeChallenge: PKCE.challenge(for: verifier))
        else {
            throw ServerError(code: "oidc.discovery", message: "the provider's authorization_endpoint cannot take a query")
        }
        return url
    }

    /// Finishes the sign-in the browser came back from with `code` and `state`.
    public func finish(code: String, state: String) async throws -> VerifiedIdentity {
        guard !code.isEmpty, code.utf8.count <= 4096, !state.isEmpty, state.utf8.count <= 256 else {
            throw ServerError(code: "oidc.callback", message: "the provider's answer has no usable code and state")
        }
        let now = clock()
        guard let pending = try await store.take(stateHash: Secrets.hash(state), notBefore: now - Self.signInLifetime) else {
            throw ServerError(
                code: "oidc.state", message: "this sign-in is unknown, already finished or older than 10 minutes; sign in again")
        }
        let provider = try await providerMetadata()
        let idToken = try await exchange(code: code, verifier: pending.verifier, at: provider)
        let claims = try await verifiedClaims(idToken, nonce: pending.nonce)
        return try configuration.identity(from: claims, returnTo: pending.returnTo)
    }

    public func shutdown() async throws {
        try await transport.shutdown()
    }

    // MARK: Talking to the provider

    func providerMetadata() async throws -> OpenIDProviderMetadata {
        if let metadata, clock() - metadata.fetchedAt < Self.metadataLifetime { return metadata.value }
        guard let url = OpenIDProviderMetadata.discoveryURL(issuer: configuration.issuer) else {
            throw ServerError(code: "oidc.discovery", message: "no discovery URL can be made of \(configuration.issuer)")
        }
        let response = try await transport.get(url, limit: Self.discoveryLimit)
        guard response.status == 200 else {
            throw ServerError(code: "oidc.discovery", message: "the provider's discovery document (\(url.absoluteString)) answered \(response.status)")
        }
        let value = try OpenIDProviderMetadata(discovery: response.body, expectedIssuer: configuration.issuer)
        metadata = (value, clock())
        return value
    }

    /// The code for tokens at the token endpoint (Core 3.1.3.1); returns the ID token.
    func exchange(code: String, verifier: String, at provider: OpenIDProviderMetadata) async throws -> String {
        var form = [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", configuration.redirectURL), ("code_verifier", verifier),
        ]
        var headers: [(String, String)] = []
        switch provider.clientAuthentication {
        case .basic:
            // RFC 6749 2.3.1: each form-encoded before they are joined.
            let credentials = FormEncoding.encode(configuration.clientID) + ":" + FormEncoding.encode(clientSecret)
            headers.append(("Authorization", "Basic " + Data(credentials.utf8).base64EncodedString()))
        case .post:
            form += [("client_id", configuration.clientID), ("client_secret", clientSecret)]
        }
        let response = try await transport.post(provider.tokenEndpoint, form: FormEncoding.body(form), headers: headers, limit: Self.tokenLimit)
        struct TokenResponse: Decodable {
            var id_token: String?
            var error: String?
            var error_description: String?
        }
        let answer = try? JSONDecoder().decode(TokenResponse.self, from: Data(response.body))
        guard response.status == 200 else {
            // RFC 6749 5.2's error code and description: the provider's words, never what was sent.
            let reason = [answer?.error, answer?.error_description].compactMap { $0.map { String($0.prefix(200)) } }.joined(separator: ": ")
            throw ServerError(
                code: "oidc.token",
                message: "the provider's token endpoint refused the code (\(response.status)\(reason.isEmpty ? "" : ", " + reason))")
        }
        guard let idToken = answer?.id_token, !idToken.isEmpty else {
            throw ServerError(code: "oidc.token", message: "the provider's token endpoint answered without an ID token (is openid among the scopes?)")
        }
        return idToken
    }

    /// The ID token's claims, its signature and standard claims verified.
    func verifiedClaims(_ idToken: String, nonce: String) async throws -> IDTokenClaims {
        let claims: IDTokenClaims
        do {
            claims = try await IDTokenSignature.verify(idToken, keys: try await signingKeys(refresh: false))
        } catch let error as ServerError where error.code == "oidc.id-token.unknown-key" {
            // The provider may have rolled its keys since they were fetched: once more with a fresh set.
            guard let fetched = keysFetchedAt, clock() - fetched >= Self.keysRefetchInterval else { throw error }
            claims = try await IDTokenSignature.verify(idToken, keys: try await signingKeys(refresh: true))
        }
        try IDTokenCheck(issuer: configuration.issuer, clientID: configuration.clientID, nonce: nonce, now: clock()).check(claims)
        return claims
    }

    func signingKeys(refresh: Bool) async throws -> [JWK] {
        if !refresh, keysFetchedAt != nil { return keys }
        let provider = try await providerMetadata()
        let response = try await transport.get(provider.jwksURI, limit: Self.jwksLimit)
        guard response.status == 200 else {
            throw ServerError(code: "oidc.jwks", message: "the provider's key set (\(provider.jwksURI.absoluteString)) answered \(response.status)")
        }
        let fetched = try IDTokenSignature.signingKeys(jwks: response.body)
        guard !fetched.isEmpty else { throw ServerError(code: "oidc.jwks", message: "the provider's key set holds no signing key") }
        keys = fetched
        keysFetchedAt = clock()
        return fetched
    }
}
