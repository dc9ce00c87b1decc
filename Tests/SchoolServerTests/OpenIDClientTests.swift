import Crypto
import CryptoExtras
import Foundation
import JWTKit
import SchoolServer
import Synchronization
import Testing

/// The console's OpenID client with a provider of the test's own in memory
/// (its discovery document, key set and token endpoint, and ID tokens
/// signed with keys made here): PKCE, the authorization URL, the code
/// exchange, and each check of the ID token refused on its own. The real
/// provider is in IntegrationTests/OpenIDIntegrationTests.swift.
@Suite struct OpenIDClientTests {
    static let issuer = "https://id.school.test/realms/school"
    static let start: Int64 = 1_800_000_000

    static func configuration(unmatched: OpenIDConfiguration.Unmatched = .refuse) -> OpenIDConfiguration {
        var configuration = OpenIDConfiguration(
            issuer: issuer, clientID: "hallpass", clientSecretFile: "/unused", redirectURL: "https://hallpass.school.test:8443/console/oidc/callback")
        configuration.roles = [
            .init(value: "admins", role: .admin),
            .init(value: "dsl", role: .safeguarding),
            .init(value: "teacher-lab2", role: .teacher, scope: Scope(rooms: ["lab2"])),
            .init(value: "teacher-year9", role: .teacher, scope: Scope(groups: ["year9"])),
            .init(value: "staff", role: .auditor),
        ]
        configuration.unmatched = unmatched
        return configuration
    }

    // MARK: PKCE and the authorization URL

    /// RFC 7636 appendix B.
    @Test func theChallengeIsTheRFCsExample() {
        #expect(PKCE.challenge(for: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func verifiersAreFreshAndWellFormed() {
        let verifiers = (0..<50).map { _ in PKCE.newVerifier() }
        #expect(Set(verifiers).count == 50)
        for verifier in verifiers {
            #expect(verifier.utf8.count == 43)
            #expect(PKCE.isWellFormedVerifier(verifier))
        }
        #expect(!PKCE.isWellFormedVerifier("short"))
        #expect(!PKCE.isWellFormedVerifier(String(repeating: "a", count: 129)))
        #expect(!PKCE.isWellFormedVerifier(String(repeating: "a", count: 42) + "+"))
    }

    @Test func theAuthorizationURLCarriesEveryParameterEncoded() throws {
        let url = try #require(
            OpenIDClient.authorizationURL(
                endpoint: URL(string: "https://id.school.test/authorize?tenant=a%26b")!, clientID: "hall pass",
                redirectURL: "https://hallpass.school.test/console/oidc/callback?x=1&y=2", scopes: ["openid", "groups"], state: "s+t",
                nonce: "n", codeChallenge: "c"))
        let components = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false))
        #expect(components.host == "id.school.test")
        #expect(components.path == "/authorize")
        let items = Dictionary(uniqueKeysWithValues: (components.queryItems ?? []).map { ($0.name, $0.value ?? "") })
        #expect(
            items == [
                "tenant": "a&b", "response_type": "code", "client_id": "hall pass",
                "redirect_uri": "https://hallpass.school.test/console/oidc/callback?x=1&y=2", "scope": "openid groups", "state": "s+t",
                "nonce": "n", "code_challenge": "c", "code_challenge_method": "S256",
            ])
        #expect(components.percentEncodedQuery?.contains("state=s%2Bt") == true)
    }

    @Test(arguments: [
        ("/console/records?user=ada", "/console/records?user=ada"),
        (nil, "/console/"),
        ("", "/console/"),
        ("https://evil.test/", "/console/"),
        ("//evil.test/", "/console/"),
        ("/\\evil.test/", "/console/"),
        ("/console/\n", "/console/"),
        ("console", "/console/"),
    ] as [(String?, String)])
    func onlyLocalPathsAreReturnedTo(given: String?, expected: String) {
        #expect(OpenIDClient.localReturnPath(given) == expected)
    }

    // MARK: Discovery

    @Test func discoveryTakesTheConfiguredIssuerOnly() throws {
        let document = TestProvider.discovery(issuer: Self.issuer)
        let metadata = try OpenIDProviderMetadata(discovery: document, expectedIssuer: Self.issuer)
        #expect(metadata.tokenEndpoint.absoluteString == Self.issuer + "/token")
        #expect(metadata.clientAuthentication == .basic)
        #expect(throws: ServerError.self) { try OpenIDProviderMetadata(discovery: document, expectedIssuer: Self.issuer + "/") }
        #expect(throws: ServerError.self) {
            try OpenIDProviderMetadata(discovery: TestProvider.discovery(issuer: "https://evil.test"), expectedIssuer: Self.issuer)
        }
        #expect(OpenIDProviderMetadata.discoveryURL(issuer: "https://a.test/r/")?.absoluteString == "https://a.test/r/.well-known/openid-configuration")
    }

    @Test func discoveryRefusesWhatTheClientCannotUse() throws {
        func metadata(_ change: (inout [String: Any]) -> Void) throws -> OpenIDProviderMetadata {
            var document = TestProvider.discoveryFields(issuer: Self.issuer)
            change(&document)
            return try OpenIDProviderMetadata(discovery: Array(try JSONSerialization.data(withJSONObject: document)), expectedIssuer: Self.issuer)
        }
        #expect(try metadata { $0["token_endpoint_auth_methods_supported"] = ["client_secret_post", "private_key_jwt"] }.clientAuthentication == .post)
        #expect(try metadata { $0["token_endpoint_auth_methods_supported"] = nil }.clientAuthentication == .basic)
        #expect(try metadata { $0["code_challenge_methods_supported"] = nil }.clientAuthentication == .basic)
        for change in [
            { (document: inout [String: Any]) in document["token_endpoint"] = "http://id.school.test/token" },
            { $0["jwks_uri"] = nil },
            { $0["code_challenge_methods_supported"] = ["plain"] },
            { $0["response_types_supported"] = ["id_token"] },
            { $0["token_endpoint_auth_methods_supported"] = ["private_key_jwt"] },
        ] as [(inout [String: Any]) -> Void] {
            #expect(throws: ServerError.self) { try metadata(change) }
        }
        #expect(throws: ServerError.self) { try OpenIDProviderMetadata(discovery: Array("<html>".utf8), expectedIssuer: Self.issuer) }
    }

    // MARK: A whole sign-in

    @Test func aTeacherSignsInWithRoomAndGroupFromEveryTeachersRule() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let clock = SignInClock(Self.start)
        let store = InMemorySignInStateStore()
        let client = OpenIDClient(configuration: Self.configuration(), clientSecret: "s3cret/+", store: store, transport: provider, clock: clock.read)

        let url = try await client.begin(returnTo: "/console/records?user=bo")
        let request = try AuthorizationRequest(url)
        #expect(url.absoluteString.hasPrefix(Self.issuer + "/authorize?"))
        #expect(request.items["client_id"] == "hallpass")
        #expect(request.items["redirect_uri"] == "https://hallpass.school.test:8443/console/oidc/callback")
        #expect(request.items["scope"] == "openid profile email")
        #expect(request.items["code_challenge_method"] == "S256")
        #expect(request.state.utf8.count == 43 && request.nonce.utf8.count == 43)
        #expect(await store.count == 1)

        clock.advance(30)
        provider.nextClaims = provider.claims(
            nonce: request.nonce, now: clock.read(),
            extra: ["preferred_username": .string("Ada"), "name": .string("Ada Lovelace"), "groups": .array([.string("teacher-lab2"), .string("teacher-year9"), .string("chess-club")])])
        let identity = try await client.finish(code: "the-code", state: request.state)
        #expect(identity == VerifiedIdentity(
            login: "ada", name: "Ada Lovelace", role: .teacher, scope: Scope(rooms: ["lab2"], groups: ["year9"]), subject: "subject-1",
            returnTo: "/console/records?user=bo"))

        // The code exchange: PKCE's verifier matches the challenge sent, the secret in HTTP Basic (form-encoded first).
        let exchange = try #require(provider.tokenRequests.first)
        #expect(exchange.form["grant_type"] == "authorization_code")
        #expect(exchange.form["code"] == "the-code")
        #expect(exchange.form["redirect_uri"] == "https://hallpass.school.test:8443/console/oidc/callback")
        #expect(PKCE.challenge(for: try #require(exchange.form["code_verifier"])) == request.items["code_challenge"])
        #expect(exchange.form["client_secret"] == nil)
        #expect(exchange.headers["Authorization"] == "Basic " + Data("hallpass:s3cret%2F%2B".utf8).base64EncodedString())
        #expect(await store.count == 0)

        // The same state again is refused: it was taken.
        await #expect(throws: ServerError.self) { try await client.finish(code: "the-code", state: request.state) }
        #expect(provider.tokenRequests.count == 1)
    }

    @Test func theSecretGoesInTheFormWhenTheProviderTakesOnlyThat() async throws {
        let provider = try await TestProvider(issuer: Self.issuer, authMethods: ["client_secret_post"])
        let clock = SignInClock(Self.start)
        let client = OpenIDClient(
            configuration: Self.configuration(), clientSecret: "s3cret", store: InMemorySignInStateStore(), transport: provider, clock: clock.read)
        let request = try AuthorizationRequest(try await client.begin(returnTo: nil))
        provider.nextClaims = provider.claims(nonce: request.nonce, now: clock.read(), extra: ["preferred_username": .string("dora"), "groups": .string("dsl")])
        let identity = try await client.finish(code: "c", state: request.state)
        #expect(identity.role == .safeguarding)
        #expect(identity.scope == .school)
        #expect(identity.name == "dora")
        #expect(identity.returnTo == "/console/")
        let exchange = try #require(provider.tokenRequests.first)
        #expect(exchange.form["client_id"] == "hallpass")
        #expect(exchange.form["client_secret"] == "s3cret")
        #expect(exchange.headers["Authorization"] == nil)
    }

    @Test func aStateOlderThanTenMinutesIsRefused() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let clock = SignInClock(Self.start)
        let client = OpenIDClient(
            configuration: Self.configuration(), clientSecret: "s", store: InMemorySignInStateStore(), transport: provider, clock: clock.read)
        let request = try AuthorizationRequest(try await client.begin(returnTo: nil))
        clock.advance(601)
        provider.nextClaims = provider.claims(nonce: request.nonce, now: clock.read(), extra: ["preferred_username": .string("ada")])
        let error = await #expect(throws: ServerError.self) { try await client.finish(code: "c", state: request.state) }
        #expect(error?.code == "oidc.state")
        #expect(provider.tokenRequests.isEmpty)
        // A state never given out, likewise.
        let unknown = await #expect(throws: ServerError.self) { try await client.finish(code: "c", state: Secrets.newSecret()) }
        #expect(unknown?.code == "oidc.state")
    }

    @Test func theProvidersRefusalIsReportedWithoutTheCode() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        provider.tokenError = (400, #"{"error":"invalid_grant","error_description":"code expired"}"#)
        let client = OpenIDClient(
            configuration: Self.configuration(), clientSecret: "s3cret", store: InMemorySignInStateStore(), transport: provider,
            clock: SignInClock(Self.start).read)
        let request = try AuthorizationRequest(try await client.begin(returnTo: nil))
        let error = await #expect(throws: ServerError.self) { try await client.finish(code: "secret-code-123", state: request.state) }
        #expect(error?.code == "oidc.token")
        #expect(error?.message.contains("invalid_grant: code expired") == true)
        for secret in ["secret-code-123", "s3cret", request.state] { #expect(error?.message.contains(secret) == false) }
    }

    @Test func nobodyWithoutAMatchingRuleSignsIn() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let clock = SignInClock(Self.start)
        for unmatched in OpenIDConfiguration.Unmatched.allCases {
            let client = OpenIDClient(
                configuration: Self.configuration(unmatched: unmatched), clientSecret: "s", store: InMemorySignInStateStore(), transport: provider,
                clock: clock.read)
            let request = try AuthorizationRequest(try await client.begin(returnTo: nil))
            provider.nextClaims = provider.claims(
                nonce: request.nonce, now: clock.read(), extra: ["preferred_username": .string("sam"), "groups": .array([.string("year9-pupils")])])
            switch unmatched {
            case .refuse:
                let error = await #expect(throws: ServerError.self) { try await client.finish(code: "c", state: request.state) }
                #expect(error?.code == "oidc.no-role")
                #expect(error?.message.contains("sam") == true)
            case .people:
                let identity = try await client.finish(code: "c", state: request.state)
                #expect(identity.login == "sam")
                #expect(identity.role == nil)
            }
        }
    }

    // MARK: The ID token's checks, each on its own

    /// A fresh client and sign-in; `token` makes the ID token the provider answers with.
    static func finish(
        provider: TestProvider, clock: SignInClock = SignInClock(start), token: (TestProvider, AuthorizationRequest, Int64) async throws -> String
    ) async throws -> VerifiedIdentity {
        let client = OpenIDClient(
            configuration: configuration(), clientSecret: "s", store: InMemorySignInStateStore(), transport: provider, clock: clock.read)
        let request = try AuthorizationRequest(try await client.begin(returnTo: nil))
        provider.nextToken = try await token(provider, request, clock.read())
        return try await client.finish(code: "c", state: request.state)
    }

    static let ada: [String: ClaimValue] = ["preferred_username": .string("ada"), "groups": .array([.string("teacher-lab2")])]

    @Test func aGoodTokenSignedWithRS256OrES256IsTaken() async throws {
        for algorithm in [TestProvider.KeyKind.rsa, .ecdsa] {
            let provider = try await TestProvider(issuer: Self.issuer, keyKind: algorithm)
            let identity = try await Self.finish(provider: provider) { provider, request, now in
                try await provider.sign(provider.claims(nonce: request.nonce, now: now, extra: Self.ada))
            }
            #expect(identity.login == "ada")
            #expect(identity.role == .teacher)
        }
    }

    @Test(arguments: [
        ("iss", ClaimValue.string("https://evil.test"), "oidc.id-token.issuer"),
        ("iss", ClaimValue.null, "oidc.id-token.issuer"),
        ("aud", .string("another-client"), "oidc.id-token.audience"),
        ("aud", .array([.string("hallpass"), .string("another-client")]), "oidc.id-token.audience"),
        ("azp", .string("another-client"), "oidc.id-token.azp"),
        ("nonce", .string("another-sign-in"), "oidc.id-token.nonce"),
        ("nonce", .null, "oidc.id-token.nonce"),
        ("exp", .number(Double(OpenIDClientTests.start - 200)), "oidc.id-token.expired"),
        ("exp", .null, "oidc.id-token.expired"),
        ("iat", .number(Double(OpenIDClientTests.start + 600)), "oidc.id-token.issued-at"),
        ("iat", .number(Double(OpenIDClientTests.start - 3600)), "oidc.id-token.issued-at"),
        ("nbf", .number(Double(OpenIDClientTests.start + 600)), "oidc.id-token.not-before"),
        ("sub", .null, "oidc.id-token.subject"),
        ("preferred_username", .string("ada lovelace"), "oidc.claims"),
        ("preferred_username", .null, "oidc.claims"),
    ])
    func aTokenWithAWrongClaimIsRefused(claim: String, value: ClaimValue, code: String) async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let error = await #expect(throws: ServerError.self) {
            try await Self.finish(provider: provider) { provider, request, now in
                var claims = provider.claims(nonce: request.nonce, now: now, extra: Self.ada)
                claims[claim] = value == .null ? nil : value
                return try await provider.sign(claims)
            }
        }
        #expect(error?.code == code, "\(String(describing: error))")
    }

    /// Within the leeway (two minutes) a token just expired or issued a moment ahead still counts.
    @Test func aSmallClockDifferenceIsTolerated() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let identity = try await Self.finish(provider: provider) { provider, request, now in
            var claims = provider.claims(nonce: request.nonce, now: now, extra: Self.ada)
            claims["exp"] = .number(Double(now - 60))
            claims["iat"] = .number(Double(now + 60))
            claims["aud"] = .array([.string("hallpass")])
            claims["azp"] = .string("hallpass")
            return try await provider.sign(claims)
        }
        #expect(identity.login == "ada")
    }

    @Test func aTokenSignedWithAnotherKeyOfTheSameIdIsRefused() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let error = await #expect(throws: ServerError.self) {
            try await Self.finish(provider: provider) { provider, request, now in
                let other = JWTKeyCollection()
                let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
                await other.add(rsa: key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: provider.kid))
                return try await other.sign(IDTokenClaims(provider.claims(nonce: request.nonce, now: now, extra: Self.ada)), kid: JWKIdentifier(string: provider.kid))
            }
        }
        #expect(error?.code == "oidc.id-token.signature")
    }

    @Test func aTamperedPayloadIsRefused() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let error = await #expect(throws: ServerError.self) {
            try await Self.finish(provider: provider) { provider, request, now in
                let token = try await provider.sign(provider.claims(nonce: request.nonce, now: now, extra: Self.ada))
                var parts = token.split(separator: ".").map(String.init)
                var claims = provider.claims(nonce: request.nonce, now: now, extra: Self.ada)
                claims["groups"] = .array([.string("admins")])
                parts[1] = Secrets.base64URL(Array(try JSONEncoder().encode(claims)))
                return parts.joined(separator: ".")
            }
        }
        #expect(error?.code == "oidc.id-token.signature")
    }

    /// `none` and HMAC (whose key a forger would take to be the client secret or the public key) are never accepted.
    @Test(arguments: ["none", "HS256"])
    func symmetricAndUnsignedTokensAreRefused(algorithm: String) async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let error = await #expect(throws: ServerError.self) {
            try await Self.finish(provider: provider) { provider, request, now in
                let header = Secrets.base64URL(Array(#"{"alg":"\#(algorithm)","kid":"\#(provider.kid)"}"#.utf8))
                let payload = Secrets.base64URL(Array(try JSONEncoder().encode(provider.claims(nonce: request.nonce, now: now, extra: Self.ada))))
                let signature =
                    algorithm == "none"
                    ? "" : Secrets.base64URL(Array(HMAC<SHA256>.authenticationCode(for: Array("\(header).\(payload)".utf8), using: SymmetricKey(data: Array("s".utf8)))))
                return "\(header).\(payload).\(signature)"
            }
        }
        #expect(error?.code == "oidc.id-token.algorithm")
    }

    /// The provider rolls its key: the first token with the new key id fetches the key set again, once.
    @Test func anUnknownKeyIdFetchesTheKeySetAgainOnce() async throws {
        let provider = try await TestProvider(issuer: Self.issuer)
        let clock = SignInClock(Self.start)
        let client = OpenIDClient(
            configuration: Self.configuration(), clientSecret: "s", store: InMemorySignInStateStore(), transport: provider, clock: clock.read)
        func signIn() async throws -> VerifiedIdentity {
            let request = try AuthorizationRequest(try await client.begin(returnTo: nil))
            provider.nextToken = try await provider.sign(provider.claims(nonce: request.nonce, now: clock.read(), extra: Self.ada))
            return try await client.finish(code: "c", state: request.state)
        }
        #expect(try await signIn().login == "ada")
        #expect(provider.jwksFetches == 1)
        #expect(try await signIn().login == "ada")
        #expect(provider.jwksFetches == 1)

        try await provider.rollKey()
        clock.advance(120)
        #expect(try await signIn().login == "ada")
        #expect(provider.jwksFetches == 2)

        // A key id the provider never had: one fetch at most a minute, then refused.
        provider.signingKID = "made-up"
        clock.advance(120)
        let error = await #expect(throws: ServerError.self) { try await signIn() }
        #expect(error?.code == "oidc.id-token.unknown-key")
        #expect(provider.jwksFetches == 3)
        let again = await #expect(throws: ServerError.self) { try await signIn() }
        #expect(again?.code == "oidc.id-token.unknown-key")
        #expect(provider.jwksFetches == 3)
    }

    @Test func aKeySetWithKeysTheClientCannotUseStillGivesTheOthers() throws {
        let jwks = #"{"keys":[{"kty":"RSA","use":"enc","kid":"e","n":"AQAB","e":"AQAB"},{"kty":"weird","kid":"w"},{"kty":"EC","crv":"P-256","kid":"k","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#
        let keys = try IDTokenSignature.signingKeys(jwks: Array(jwks.utf8))
        #expect(keys.map { $0.keyIdentifier?.string } == ["k"])
        #expect(throws: ServerError.self) { try IDTokenSignature.signingKeys(jwks: Array("[]".utf8)) }
    }

    // MARK: Roles from claims

    @Test func theFirstMatchingRuleGivesTheRole() throws {
        let configuration = Self.configuration()
        func identity(_ groups: [String]) throws -> VerifiedIdentity {
            try configuration.identity(
                from: IDTokenClaims(["sub": .string("x"), "preferred_username": .string("Ian@School.Example"), "groups": .array(groups.map(ClaimValue.string))]),
                returnTo: "/console/")
        }
        #expect(try identity(["staff", "admins"]).role == .admin)
        #expect(try identity(["staff", "admins"]).login == "ian@school.example")
        #expect(try identity(["staff", "teacher-lab2"]).role == .teacher)
        #expect(try identity(["staff"]).role == .auditor)
        #expect(try identity(["staff"]).scope == .school)
        #expect(try identity(["teacher-year9"]).scope == Scope(groups: ["year9"]))
    }

    // MARK: The client secret's file

    @Test func theSecretFileMayNotBeReadByOthers() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-oidc-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/secret"
        try "s3cret \n#comment\n".write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: path)
        #expect(try OpenIDClient.readClientSecret(path) == "s3cret")
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        let error = #expect(throws: ServerError.self) { try OpenIDClient.readClientSecret(path) }
        #expect(error?.message.contains("may be read by others (mode 644)") == true)
        try "\n".write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(throws: ServerError.self) { try OpenIDClient.readClientSecret(path) }
        #expect(throws: ServerError.self) { try OpenIDClient.readClientSecret(folder + "/missing") }
    }

    @Test func anInMemoryStateIsTakenOnce() async {
        let store = InMemorySignInStateStore()
        let pending = PendingSignIn(stateHash: "h", verifier: "v", nonce: "n", returnTo: "/console/", createdAt: 100)
        await store.add(pending)
        await store.add(PendingSignIn(stateHash: "old", verifier: "v", nonce: "n", returnTo: "/", createdAt: 10))
        #expect(await store.take(stateHash: "h", notBefore: 50) == pending)
        #expect(await store.take(stateHash: "h", notBefore: 50) == nil)
        #expect(await store.count == 0)
        await store.add(pending)
        #expect(await store.take(stateHash: "h", notBefore: 101) == nil)
        #expect(await store.count == 0)
    }
}

/// A settable clock for the client.
final class SignInClock: Sendable {
    private let now: Mutex<Int64>
    init(_ start: Int64) { now = Mutex(start) }
    func advance(_ seconds: Int64) { now.withLock { $0 += seconds } }
    var read: @Sendable () -> Int64 { { [self] in now.withLock { $0 } } }
}

/// The parameters of an authorization URL the client made.
struct AuthorizationRequest {
    var items: [String: String]
    var state: String { items["state"] ?? "" }
    var nonce: String { items["nonce"] ?? "" }

    init(_ url: URL) throws {
        let components = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false))
        items = Dictionary((components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { first, _ in first })
    }
}

/// The provider's side in memory: discovery, key set, token endpoint.
final class TestProvider: OpenIDTransport, @unchecked Sendable {
    enum KeyKind { case rsa, ecdsa }

    struct TokenRequest {
        var form: [String: String]
        var headers: [String: String]
    }

    let issuer: String
    let authMethods: [String]
    let keyKind: KeyKind
    private let lock = NSLock()
    private var signer = JWTKeyCollection()
    private var publicJWKS = ""
    private var _kid = "key-1"
    private var _signingKID: String?
    private var _nextToken: String?
    private var _nextClaims: [String: ClaimValue]?
    private var _tokenRequests: [TokenRequest] = []
    private var _jwksFetches = 0
    private var _tokenError: (Int, String)?

    init(issuer: String, authMethods: [String] = ["client_secret_basic", "client_secret_post"], keyKind: KeyKind = .rsa) async throws {
        self.issuer = issuer
        self.authMethods = authMethods
        self.keyKind = keyKind
        try await makeKey()
    }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    var kid: String { locked { _kid } }
    /// The key id the next tokens name (by default the current key's).
    var signingKID: String {
        get { locked { _signingKID ?? _kid } }
        set { locked { _signingKID = newValue } }
    }
    var nextToken: String? {
        get { locked { _nextToken } }
        set { locked { _nextToken = newValue } }
    }
    /// Claims signed with the current key for the next token request.
    var nextClaims: [String: ClaimValue]? {
        get { locked { _nextClaims } }
        set { locked { _nextClaims = newValue } }
    }
    var tokenRequests: [TokenRequest] { locked { _tokenRequests } }
    var jwksFetches: Int { locked { _jwksFetches } }
    var tokenError: (Int, String)? {
        get { locked { _tokenError } }
        set { locked { _tokenError = newValue } }
    }

    private func makeKey() async throws {
        let collection = JWTKeyCollection()
        let kid = locked { _kid }
        let jwk: String
        switch keyKind {
        case .rsa:
            let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
            let (modulus, exponent) = try key.publicKey.getKeyPrimitives()
            jwk = #"{"kty":"RSA","use":"sig","alg":"RS256","kid":"\#(kid)","n":"\#(Secrets.base64URL(Array(modulus)))","e":"\#(Secrets.base64URL(Array(exponent)))"}"#
            await collection.add(rsa: key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
        case .ecdsa:
            let key = ES256PrivateKey()
            let parameters = try #require(key.parameters)
            // No alg: the key's type and the token's header say it.
            jwk = #"{"kty":"EC","crv":"P-256","kid":"\#(kid)","x":"\#(parameters.x)","y":"\#(parameters.y)"}"#
            await collection.add(ecdsa: key, kid: JWKIdentifier(string: kid))
        }
        locked {
            signer = collection
            publicJWKS = #"{"keys":[\#(jwk)]}"#
        }
    }

    /// A new key under a new id; the old one leaves the key set.
    func rollKey() async throws {
        locked { _kid = "key-2" }
        try await makeKey()
    }

    func sign(_ claims: [String: ClaimValue]) async throws -> String {
        let (collection, kid) = locked { (signer, _signingKID ?? _kid) }
        // A kid the collection does not hold is signed with its only key, under that kid.
        return try await collection.sign(IDTokenClaims(claims), kid: JWKIdentifier(string: kid))
    }

    func claims(nonce: String, now: Int64, extra: [String: ClaimValue]) -> [String: ClaimValue] {
        var claims: [String: ClaimValue] = [
            "iss": .string(issuer), "sub": .string("subject-1"), "aud": .string("hallpass"), "exp": .number(Double(now + 600)),
            "iat": .number(Double(now)), "nonce": .string(nonce),
        ]
        claims.merge(extra) { $1 }
        return claims
    }

    static func discoveryFields(issuer: String, authMethods: [String] = ["client_secret_basic", "client_secret_post"]) -> [String: Any] {
        [
            "issuer": issuer, "authorization_endpoint": issuer + "/authorize", "token_endpoint": issuer + "/token",
            "jwks_uri": issuer + "/jwks", "response_types_supported": ["code", "id_token"],
            "token_endpoint_auth_methods_supported": authMethods, "code_challenge_methods_supported": ["S256", "plain"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        ]
    }

    static func discovery(issuer: String) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: discoveryFields(issuer: issuer))) ?? Data())
    }

    func get(_ url: URL, limit: Int) async throws -> OpenIDResponse {
        switch url.absoluteString {
        case issuer + "/.well-known/openid-configuration":
            return OpenIDResponse(
                status: 200, body: Array(try JSONSerialization.data(withJSONObject: Self.discoveryFields(issuer: issuer, authMethods: authMethods))))
        case issuer + "/jwks":
            return locked {
                _jwksFetches += 1
                return OpenIDResponse(status: 200, body: Array(publicJWKS.utf8))
            }
        default:
            return OpenIDResponse(status: 404, body: [])
        }
    }

    func post(_ url: URL, form: String, headers: [(String, String)], limit: Int) async throws -> OpenIDResponse {
        guard url.absoluteString == issuer + "/token" else { return OpenIDResponse(status: 404, body: []) }
        var fields: [String: String] = [:]
        for pair in form.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            fields[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        let (error, claims) = locked {
            _tokenRequests.append(TokenRequest(form: fields, headers: Dictionary(headers, uniquingKeysWith: { $1 })))
            return (_tokenError, _nextClaims)
        }
        if let error { return OpenIDResponse(status: error.0, body: Array(error.1.utf8)) }
        var token = nextToken
        if token == nil, let claims { token = try await sign(claims) }
        return OpenIDResponse(status: 200, body: Array(#"{"access_token":"a","token_type":"Bearer","id_token":"\#(token ?? "")"}"#.utf8))
    }

    func shutdown() async throws {}
}
