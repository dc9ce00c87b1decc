import Foundation
public import Hummingbird
import NIOCore
import Logging

/// The console's sessions (docs/server.md, "Accounts and sessions"). The
/// cookie holds 32 random bytes; the server keeps only their SHA-256, as
/// it does of API tokens, so a copy of the database opens no session. A
/// session ends at `console.sessionLifetime` after its sign-in, after
/// `console.idleTimeout` without a request, at sign-out, or when its person
/// is removed or disabled.
public struct Sessions: Sendable {
    /// `__Host-`: the browser takes the cookie only from this host over HTTPS,
    /// with Path=/ and no Domain, so no other host of the school's domain can set or shadow it.
    public static let cookieName = "__Host-hallpass-session"
    /// How often a session's last use is written, at most (seconds).
    static let touchInterval: Int64 = 60

    let storage: any ServerStorage
    public let settings: ServerConfiguration.Console
    let clock: @Sendable () -> Int64

    public init(storage: any ServerStorage, settings: ServerConfiguration.Console, clock: @escaping @Sendable () -> Int64) {
        self.storage = storage
        self.settings = settings
        self.clock = clock
    }

    /// Starts a session for `person`, who has just proved who they are:
    /// a new id at every sign-in (nothing a browser held before is kept).
    /// Returns the cookie's value and the session's CSRF token.
    public func start(for person: StoredPerson, method: SignInMethod) async throws -> (cookie: String, csrf: String) {
        let value = Secrets.newSecret()
        let csrf = Secrets.newSecret()
        let now = clock()
        try await storage.addSession(
            StoredSession(
                hash: Secrets.hash(value), login: person.login, csrfToken: csrf, createdAt: now, lastSeen: now,
                expiresAt: now + Int64(settings.sessionLifetime), method: method))
        try await storage.recordSignIn(login: person.login, now: now)
        return (value, csrf)
    }

    /// The session a cookie's value names and its person, when the session
    /// is in force and the person may sign in; nil otherwise. An ended
    /// session is removed; a used one has its last use written (at most once a minute).
    public func resolve(_ value: String) async throws -> (session: StoredSession, person: StoredPerson)? {
        guard Secrets.isWellFormedSecret(value) else { return nil }
        let hash = Secrets.hash(value)
        guard let session = try await storage.session(hash: hash) else { return nil }
        let now = clock()
        if session.expiresAt <= now || session.lastSeen + Int64(settings.idleTimeout) <= now {
            _ = try await storage.removeSession(hash: hash)
            return nil
        }
        guard let person = try await storage.person(login: session.login), person.disabledAt == nil else { return nil }
        if now - session.lastSeen >= Self.touchInterval { try await storage.touchSession(hash: hash, now: now) }
        return (session, person)
    }

    /// Ends the session a cookie's value names; false when there was none.
    @discardableResult
    public func signOut(_ value: String) async throws -> Bool {
        guard Secrets.isWellFormedSecret(value) else { return false }
        return try await storage.removeSession(hash: Secrets.hash(value))
    }

    /// Ends every session of `login`; returns how many.
    @discardableResult
    public func signOutEverywhere(login: String) async throws -> Int {
        try await storage.removeSessions(login: login)
    }

    /// The `Set-Cookie` value that gives the browser a session: Secure,
    /// HttpOnly (no script reads it), SameSite=Strict (no other site's page
    /// sends it), no Max-Age (the browser forgets it when it closes; the
    /// server ends it anyway).
    public static func setCookieHeader(_ value: String) -> String {
        "\(cookieName)=\(value); Path=/; Secure; HttpOnly; SameSite=Strict"
    }

    /// The `Set-Cookie` value that makes the browser forget the session.
    public static let clearCookieHeader = "\(cookieName)=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Strict"
}

/// Equality that takes as long for a near miss as for a far one, for
/// secrets compared with what a request offers (the CSRF token).
enum ConstantTime {
    static func equal(_ a: String, _ b: String) -> Bool {
        let left = Array(a.utf8)
        let right = Array(b.utf8)
        guard left.count == right.count else { return false }
        var difference: UInt8 = 0
        for index in left.indices { difference |= left[index] ^ right[index] }
        return difference == 0
    }
}

/// `application/x-www-form-urlencoded`, as a browser posts a form.
enum FormFields {
    /// The fields of a form's body, read by the console's one form reader
    /// (`ConsoleForm`: bounded, a pair that does not decode refuses the whole
    /// form); a name given twice keeps its first value. Empty for a form that does not decode.
    static func parse(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in ConsoleForm(text)?.pairs ?? [] where fields[name] == nil { fields[name] = value }
        return fields
    }

    /// `text` for a query string's value: everything but letters, digits, `-._~/` percent-encoded.
    static func encode(_ text: String) -> String {
        var allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        allowed.insert(charactersIn: "-._~/")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    static func isForm(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        return contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
            == "application/x-www-form-urlencoded"
    }
}

/// A console request refused: 403 with a short page that says why and what
/// to do. Plain text in the page, no markup from the request.
public struct ConsoleRefusal: HTTPResponseError, Sendable {
    public let status: HTTPResponse.Status
    /// Stable: `signed-out`, `csrf`, `origin`.
    public let code: String
    public let message: String

    public static let signedOut = ConsoleRefusal(
        status: .forbidden, code: "signed-out", message: "You are not signed in, or your session has ended. Sign in again and repeat what you did.")
    public static let csrf = ConsoleRefusal(
        status: .forbidden, code: "csrf",
        message: "This form was refused: it did not carry this session's security token (an old page, or a form from another site). Reload the page and try again.")
    public static let origin = ConsoleRefusal(
        status: .forbidden, code: "origin", message: "This request was refused: it came from a page of another site.")

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let page = """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"><title>Refused: hallpass</title></head>
            <body><main><h1>Refused</h1><p>\(message)</p><p><a href="/console/">Back to the console</a></p></main></body></html>

            """
        return Response(
            status: status,
            headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store", HTTPFields.Element.Name("Hallpass-Refusal")!: code],
            body: .init(byteBuffer: ByteBuffer(string: page)))
    }
}
