import Foundation
import HummingbirdBcrypt
public import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// The console's local sign-in and its sign-outs (the pages are the
/// console's): `POST /console/sign-in` with the form fields `login`,
/// `password` and `next`, `POST /console/sign-out`, `POST
/// /console/sign-out-everywhere`. Every answer is a 303 the browser follows.
public struct SignInRoutes: Sendable {
    /// bcrypt's cost for new passwords: 2^12 rounds, about a quarter of a second on a server's core.
    public static let bcryptCost: UInt8 = 12

    let storage: any ServerStorage
    let sessions: Sessions
    let configuration: ServerConfiguration
    let clock: @Sendable () -> Int64
    let limiter: RateLimiter

    public init(storage: any ServerStorage, sessions: Sessions, configuration: ServerConfiguration, clock: @escaping @Sendable () -> Int64) {
        self.storage = storage
        self.sessions = sessions
        self.configuration = configuration
        self.clock = clock
        self.limiter = RateLimiter(perMinute: configuration.console.signInRate)
    }

    public func add(to router: Router<ServerRequestContext>) {
        router.post("/console/sign-in") { request, context in try await signIn(request, context) }
        let signedIn = router.group("/console")
            .add(middleware: ConsoleSessionMiddleware(sessions: sessions, plainHTTP: configuration.listen.plainHTTP))
        signedIn.post("sign-out") { request, context in try await signOut(request, context) }
        signedIn.post("sign-out-everywhere") { _, context in try await signOutEverywhere(context) }
    }

    // MARK: Sign-in

    func signIn(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        var request = request
        let address = context.remoteAddress?.ipAddress ?? "unknown"
        let now = clock()
        guard limiter.allow(RateLimiter.key(address), now: now) else {
            context.logger.warning("refused a sign-in: more than \(configuration.console.signInRate) a minute from \(address)")
            return Response(
                status: .tooManyRequests,
                headers: [.contentType: "text/plain; charset=utf-8", .retryAfter: "60", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(string: "Too many sign-in attempts from this address. Wait a minute and try again.\n")))
        }
        guard ConsoleSessionMiddleware.sameOrigin(request, plainHTTP: configuration.listen.plainHTTP) else { throw ConsoleRefusal.origin }
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: 64 << 10)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError(.contentTooLarge, "too-large", "a sign-in form is at most 64 KiB")
        }
        let fields = FormFields.parse(String(buffer: body))
        let login = (fields["login"] ?? "").trimmingCharacters(in: .whitespaces).lowercased()
        let password = fields["password"] ?? ""
        let next = Self.localPath(fields["next"])

        // The trail names the account only when there is one: a password typed
        // into the login field by mistake is never written down.
        func refuse(_ action: String, account: String? = nil, detail: String? = nil) async throws -> Response {
            try await storage.audit(NewAuditEvent(time: now, actor: "address:\(address)", action: action, target: account, detail: detail))
            context.logger.notice("refused a sign-in", metadata: ["hallpass.signin.action": "\(action)", "hallpass.peer": "\(address)"])
            let target = "/console/sign-in?error=1" + (next.map { "&next=" + FormFields.encode($0) } ?? "")
            return Response(status: .seeOther, headers: [.location: target, .cacheControl: "no-store"])
        }

        // Every refusal below costs one bcrypt, as a wrong password does: the
        // answer and its time are the same for an unknown login, a wrong
        // password, an account of the OpenID provider, a disabled or a locked one.
        guard configuration.signIn.local, StoredPerson.isLogin(login), !password.isEmpty, password.utf8.count <= 1024,
            let person = try await storage.person(login: login), person.method == .local, let hash = person.passwordHash,
            person.disabledAt == nil
        else {
            _ = try await Self.verifyDecoy(password)
            return try await refuse("sign-in.failed")
        }
        if let lockedUntil = person.lockedUntil, lockedUntil > now {
            _ = try await Self.verifyDecoy(password)
            return try await refuse("sign-in.locked", account: login, detail: "locked until \(RecordTime.format(milliseconds: lockedUntil * 1000))")
        }
        guard try await Self.verify(password, hash: hash) else {
            let locked = try await storage.recordFailedSignIn(
                login: login, now: now, lockAfter: configuration.console.lockoutFailures, lockFor: Int64(configuration.console.lockoutDuration))
            return try await refuse(
                "sign-in.failed", account: login, detail: locked ? "locked for \(configuration.console.lockoutDuration) s after \(configuration.console.lockoutFailures) failures" : nil)
        }
        let started = try await sessions.start(for: person, method: .local)
        try await storage.audit(NewAuditEvent(time: now, actor: person.principal.author, action: "sign-in", detail: "local from \(address)"))
        context.logger.notice("signed in", metadata: ["hallpass.person": "\(login)", "hallpass.peer": "\(address)"])
        return Response(
            status: .seeOther,
            headers: [.location: next ?? "/console/", .setCookie: Sessions.setCookieHeader(started.cookie), .cacheControl: "no-store"])
    }

    // MARK: Sign-out

    func signOut(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        if let value = request.cookies[Sessions.cookieName]?.value { try await sessions.signOut(value) }
        if let principal = context.principal {
            try await storage.audit(NewAuditEvent(time: clock(), actor: principal.author, action: "sign-out"))
        }
        return Self.toSignIn
    }

    func signOutEverywhere(_ context: ServerRequestContext) async throws -> Response {
        guard let principal = context.principal, case .person(let login) = principal.kind else { throw ConsoleRefusal.signedOut }
        let ended = try await sessions.signOutEverywhere(login: login)
        try await storage.audit(
            NewAuditEvent(time: clock(), actor: principal.author, action: "session.sign-out-everywhere", target: login, detail: "\(ended) sessions"))
        return Self.toSignIn
    }

    static let toSignIn = Response(
        status: .seeOther, headers: [.location: "/console/sign-in", .setCookie: Sessions.clearCookieHeader, .cacheControl: "no-store"])

    // MARK: Helpers

    /// `path` when it is a path of the console on this server (`/console`
    /// or below, no `//`, no `..`, no backslash, printable ASCII, at most
    /// 2,048 bytes): where a sign-in may send the browser; nil otherwise.
    public static func localPath(_ path: String?) -> String? {
        guard let path, path.utf8.count <= 2048, path == "/console" || path.hasPrefix("/console/") || path.hasPrefix("/console?"),
            !path.contains("//"), !path.contains("\\"), path.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f })
        else { return nil }
        let pathPart = path.split(separator: "?", maxSplits: 1).first ?? ""
        guard !pathPart.split(separator: "/").contains(where: { $0 == ".." || $0 == "." || $0.contains("%") }) else { return nil }
        return path
    }

    /// bcrypt of `password` at `bcryptCost`, on NIO's thread pool: a quarter
    /// of a second of one core that must not hold an event loop.
    public static func hashPassword(_ password: String) async throws -> String {
        try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: bcryptCost) }
    }

    static func verify(_ password: String, hash: String) async throws -> Bool {
        try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: hash) }
    }

    /// Checks `password` against the decoy, on the thread pool (where the
    /// decoy is made, the first time).
    static func verifyDecoy(_ password: String) async throws -> Bool {
        try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: decoyHash) }
    }

    /// A hash no password is known for, checked when there is no account's
    /// own: the refusal then takes as long as a wrong password's.
    static let decoyHash = Bcrypt.hash(Secrets.newSecret(), cost: bcryptCost)
}
