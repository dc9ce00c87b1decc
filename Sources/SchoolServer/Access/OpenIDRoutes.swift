import Foundation
public import Hummingbird
import ServiceLifecycle
import Logging
import HTTPTypes
import NIOCore

/// The console's sign-in through the school's OpenID provider:
/// `GET /console/oidc/start?next=PATH` sends the browser to the provider,
/// `GET /console/oidc/callback` takes it back, finishes the sign-in with
/// `OpenIDClient` and starts a session as the local sign-in does.
///
/// The person's account: the first sign-in makes one (method `oidc`, no
/// password) with the role and scope the mapping gave; each later sign-in
/// writes the mapping's role and scope again, so a teacher who leaves a
/// group in the provider loses its room at the next sign-in. A login that
/// belongs to a local account is refused (a provider must not take over a
/// password account of the same name), and so is a disabled account. With
/// `unmatched: people` a person the mapping gives no role signs in only when
/// an admin made the account with a role. An account without an email
/// address takes the provider's `email` claim (for alert emails); one an
/// admin gave an address keeps it.
public struct OpenIDRoutes: Sendable {
    let client: OpenIDClient
    let storage: any ServerStorage
    let sessions: Sessions
    let clock: @Sendable () -> Int64
    /// Each start keeps a pending sign-in (a row) and each callback may write
    /// the audit trail: both are counted by address, as the sign-in form is.
    let limiter: RateLimiter

    public init(
        client: OpenIDClient, storage: any ServerStorage, sessions: Sessions, perMinute: Int, clock: @escaping @Sendable () -> Int64
    ) {
        self.client = client
        self.storage = storage
        self.sessions = sessions
        self.clock = clock
        self.limiter = RateLimiter(perMinute: perMinute)
    }

    public func add(to router: Router<ServerRequestContext>) {
        router.get("/console/oidc/start") { request, context in
            guard limiter.allow(RateLimiter.key(context.remoteAddress), now: clock()) else { return Self.tooMany }
            return try await start(request, context)
        }
        router.get("/console/oidc/callback") { request, context in
            guard limiter.allow(RateLimiter.key(context.remoteAddress), now: clock()) else { return Self.tooMany }
            return try await callback(request, context)
        }
    }

    static let tooMany = Response(
        status: .tooManyRequests, headers: [.contentType: "text/plain; charset=utf-8", .retryAfter: "60", .cacheControl: "no-store"],
        body: .init(byteBuffer: ByteBuffer(string: "Too many sign-in attempts from this address. Wait a minute and try again.\n")))

    /// The cookie that ties a sign-in to the browser that began it: the
    /// sign-in's `state`, which the callback must bring back in the cookie
    /// as well as in the link. Without it, a link with someone else's code
    /// and state (from a sign-in they began) would sign the browser in as
    /// them (login CSRF). `Lax`: the provider's redirect back is a top-level
    /// navigation from another site, which a `Strict` cookie would not join.
    static let stateCookie = "__Host-hallpass-oidc"

    func start(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        // `next` is kept only when the sign-in began on the console's own
        // pages (the browser's Sec-Fetch-Site, or no such header from an older
        // browser): a link on another site could otherwise send a signed-in
        // person, through the provider, to a page that writes the audit trail
        // in their name (a pupil's timeline, a CSV export).
        let site = request.header("Sec-Fetch-Site")
        let next = site == nil || site == "same-origin" || site == "none" ? request.uri.queryParameters["next"].map(String.init) : nil
        do {
            let url = try await client.begin(returnTo: SignInRoutes.localPath(next))
            let state = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == "state" }?.value ?? ""
            var headers: HTTPFields = [.location: url.absoluteString, .cacheControl: "no-store"]
            headers[.setCookie] = "\(Self.stateCookie)=\(state); Path=/; Max-Age=\(OpenIDClient.signInLifetime); Secure; HttpOnly; SameSite=Lax"
            return Response(status: .seeOther, headers: headers)
        } catch let error as ServerError {
            context.logger.error("cannot begin an OpenID sign-in: \(error.message)", metadata: ["hallpass.error": "\(error.code)"])
            return Self.backToSignIn("oidc-unavailable")
        }
    }

    func callback(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        let address = context.remoteAddress?.ipAddress ?? "unknown"
        // The provider's own refusal (the person cancelled, or the client is
        // not allowed): RFC 6749 4.1.2.1. Its text is not shown, only logged, bounded.
        if let error = query["error"] {
            context.logger.notice(
                "the OpenID provider returned no sign-in", metadata: ["hallpass.oidc.error": "\(String(error).prefix(64))", "hallpass.peer": "\(address)"])
            return Self.backToSignIn("oidc-cancelled")
        }
        let state = String(query["state"] ?? "")
        guard let cookie = request.cookies[Self.stateCookie]?.value, !state.isEmpty, ConstantTime.equal(cookie, state) else {
            try await storage.audit(
                NewAuditEvent(time: clock(), actor: "address:\(address)", action: "sign-in.failed", detail: "oidc: not begun in this browser"))
            context.logger.notice("refused an OpenID sign-in that this browser did not begin", metadata: ["hallpass.peer": "\(address)"])
            return Self.backToSignIn("oidc-failed")
        }
        let identity: VerifiedIdentity
        do {
            identity = try await client.finish(code: String(query["code"] ?? ""), state: state)
        } catch let error as ServerError {
            try await storage.audit(NewAuditEvent(time: clock(), actor: "address:\(address)", action: "sign-in.failed", detail: "oidc: \(error.code)"))
            context.logger.notice("refused an OpenID sign-in: \(error.message)", metadata: ["hallpass.peer": "\(address)"])
            return Self.backToSignIn(error.code == "oidc.no-role" ? "oidc-no-role" : "oidc-failed")
        }
        let now = clock()
        guard let person = try await account(for: identity, now: now, logger: context.logger) else {
            try await storage.audit(
                NewAuditEvent(time: now, actor: "address:\(address)", action: "sign-in.failed", target: identity.login, detail: "oidc: no account"))
            return Self.backToSignIn("oidc-no-account")
        }
        try await storage.recordSignIn(login: person.login, now: now)
        let started = try await sessions.start(for: person, method: .oidc)
        try await storage.audit(NewAuditEvent(time: now, actor: person.principal.author, action: "sign-in", detail: "oidc from \(address)"))
        context.logger.notice("signed in", metadata: ["hallpass.person": "\(person.login)", "hallpass.peer": "\(address)"])
        return Self.signedIn(to: SignInRoutes.localPath(identity.returnTo) ?? "/console/", sessionCookie: started.cookie)
    }

    /// The answer that ends a sign-in through the provider: the session's
    /// cookie, and a page that moves on to `path` by itself. Not a redirect:
    /// the browser came here from the provider's site, and a redirect
    /// continues that cross-site navigation, on which the browser leaves out
    /// the `SameSite=Strict` session cookie just set; a navigation the
    /// console's own page starts is same-site and carries it.
    static func signedIn(to path: String, sessionCookie: String) -> Response {
        let escaped = path.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;").replacingOccurrences(of: "'", with: "&#39;")
        let page = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=\(escaped)"><title>hallpass</title></head>
            <body><p><a href="\(escaped)">Continue to the console</a></p></body></html>

            """
        var headers: HTTPFields = [
            .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
            .contentSecurityPolicy: "default-src 'none'; frame-ancestors 'none'", .xContentTypeOptions: "nosniff", .referrerPolicy: "same-origin",
        ]
        headers.append(HTTPField(name: .setCookie, value: Sessions.setCookieHeader(sessionCookie)))
        headers.append(HTTPField(name: .setCookie, value: "\(stateCookie)=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Lax"))
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page)))
    }

    /// The account `identity` signs in as, made or updated from the mapping; nil when it may not sign in.
    func account(for identity: VerifiedIdentity, now: Int64, logger: Logger) async throws -> StoredPerson? {
        guard StoredPerson.isLogin(identity.login) else {
            logger.notice("refused an OpenID sign-in: the provider's login is not one the console takes (a-z 0-9 . _ - @, at most 64)")
            return nil
        }
        if var person = try await storage.person(login: identity.login) {
            guard person.method == .oidc, person.disabledAt == nil else { return nil }
            // No rule matches any more (`unmatched: people`): an account the
            // mapping made signs in no longer (its role was the mapping's, which
            // the provider has taken away); one an admin made keeps the role the admin gave.
            if identity.role == nil, person.createdBy.hasPrefix("oidc:") { return nil }
            if let role = identity.role, StoredPerson.refusal(role: role, scope: identity.scope) == nil,
                role != person.role || identity.scope != person.scope || identity.name != person.displayName
            {
                let before = "\(person.role.rawValue) \(Self.describe(person.scope))"
                person.role = role
                person.scope = identity.scope
                person.displayName = identity.name
                _ = try await storage.updatePerson(person)
                try await storage.audit(
                    NewAuditEvent(
                        time: now, actor: "oidc:\(identity.login)", action: "person.change", target: person.login,
                        detail: "from the provider's claims: \(before) -> \(role.rawValue) \(Self.describe(identity.scope))"))
            }
            if person.email == nil, let email = identity.email {
                person.email = email
                _ = try await storage.updatePerson(person)
                try await storage.audit(
                    NewAuditEvent(
                        time: now, actor: "oidc:\(identity.login)", action: "person.change", target: person.login,
                        detail: "email \(email), from the provider's claims"))
            }
            return person
        }
        guard let role = identity.role, StoredPerson.refusal(role: role, scope: identity.scope) == nil else { return nil }
        let person = StoredPerson(
            login: identity.login, displayName: identity.name, role: role, scope: identity.scope, method: .oidc,
            createdBy: "oidc:\(identity.login)", createdAt: now, email: identity.email)
        // Made at the same moment by another sign-in or an admin: that account decides, at the next sign-in.
        guard try await storage.addPerson(person) else { return nil }
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: "oidc:\(identity.login)", action: "person.add", target: person.login,
                detail: "first sign-in through the provider: \(role.rawValue) \(Self.describe(identity.scope))"
                    + (identity.email.map { ", email \($0)" } ?? "")))
        return person
    }

    static func describe(_ scope: Scope) -> String {
        scope.isWholeSchool ? "(whole school)" : "(rooms: \(scope.rooms.joined(separator: ", ")); groups: \(scope.groups.joined(separator: ", ")))"
    }

    static func backToSignIn(_ error: String) -> Response {
        Response(status: .seeOther, headers: [.location: "/console/sign-in?error=\(error)", .cacheControl: "no-store"])
    }
}

/// Keeps the OpenID client's HTTPS connections for the server's life and
/// shuts them down when the server stops.
struct OpenIDClientService: Service {
    let client: OpenIDClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}
