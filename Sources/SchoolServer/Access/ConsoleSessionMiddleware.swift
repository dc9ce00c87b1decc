import Foundation
public import Hummingbird
import Logging
import NIOCore

/// Puts the console's signed-in person in the context, or refuses: before
/// every console page and form but the sign-in's own. A GET without a
/// session goes to the sign-in page (and back after it); anything else
/// without one is 403. Every request but GET and HEAD must carry the
/// session's CSRF token (the form field `csrf` or the header
/// `X-CSRF-Token`) and, when the browser sends `Origin`, come from this
/// server's own origin.
public struct ConsoleSessionMiddleware: RouterMiddleware {
    public typealias Context = ServerRequestContext
    static let csrfHeader = HTTPFields.Element.Name("X-CSRF-Token")!

    let sessions: Sessions
    /// The listener is plain HTTP behind a TLS proxy: the browser's origin may be either scheme.
    let plainHTTP: Bool

    public init(sessions: Sessions, plainHTTP: Bool = false) {
        self.sessions = sessions
        self.plainHTTP = plainHTTP
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let resolved = try await request.cookies[Sessions.cookieName].asyncFlatMap { try await sessions.resolve($0.value) }
        guard let (session, person) = resolved else {
            if request.method == .get || request.method == .head {
                let asked = request.uri.path + (request.uri.query.map { "?" + $0 } ?? "")
                let target = SignInRoutes.localPath(asked).map { "/console/sign-in?next=" + FormFields.encode($0) } ?? "/console/sign-in"
                return Response(status: .seeOther, headers: [.location: target, .cacheControl: "no-store"])
            }
            throw ConsoleRefusal.signedOut
        }
        var request = request
        var context = context
        context.principal = person.principal
        context.csrfToken = session.csrfToken
        context.logger[metadataKey: "hallpass.person"] = "\(person.login)"
        if request.method != .get && request.method != .head {
            guard Self.sameOrigin(request, plainHTTP: plainHTTP) else {
                context.logger.warning("refused a console request from another origin")
                throw ConsoleRefusal.origin
            }
            var offered = request.headers[Self.csrfHeader]
            if offered == nil, FormFields.isForm(request.headers[.contentType]) {
                let body: ByteBuffer
                do {
                    body = try await request.collectBody(upTo: APILimits.maxBodyBytes)
                } catch let error as HTTPError where error.status == .contentTooLarge {
                    throw APIError.tooLarge
                }
                offered = FormFields.parse(String(buffer: body))["csrf"]
            }
            guard let offered, ConstantTime.equal(offered, session.csrfToken) else {
                context.logger.warning("refused a console request without its session's CSRF token")
                throw ConsoleRefusal.csrf
            }
        }
        return try await next(request, context)
    }

    /// No `Origin` (an older browser, or a GET), or this server's own.
    static func sameOrigin(_ request: Request, plainHTTP: Bool) -> Bool {
        guard let origin = request.headers[.origin] else { return true }
        guard let host = request.head.authority else { return false }
        return origin == "https://" + host || (plainHTTP && origin == "http://" + host)
    }
}

extension Optional {
    func asyncFlatMap<U>(_ transform: (Wrapped) async throws -> U?) async rethrows -> U? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
