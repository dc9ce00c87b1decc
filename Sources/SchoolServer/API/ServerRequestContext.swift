import Foundation
public import Hummingbird
import Logging
public import NIOCore

/// Who is asking, as the authentication middlewares found it. Routes read
/// it; only the middlewares set it.
public struct ServerRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The machine that signed the request (machine routes).
    public var machine: StoredMachine?
    /// The API token the request carried (admin routes).
    public var apiToken: StoredAPIToken?
    /// Who is asking, with their role and scope: set by the middleware that
    /// checked the API token or the console's session.
    public var principal: Principal?
    /// The console session's CSRF token, which every form of the page carries
    /// back (set by the console's session middleware; nil for API requests).
    public var csrfToken: String?

    /// The peer, for the log of bundle fetches.
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// A machine's post is bounded before it is read (docs/server.md).
    public var maxUploadSize: Int { APILimits.maxBodyBytes }
}

public enum APILimits {
    /// The most bytes of a request body: 1 MiB.
    public static let maxBodyBytes = 1 << 20
    /// The most records in one post.
    public static let maxRecords = 1000
}

/// A refusal as the API answers it: `{"error": "<code>", "message": "<sentence>"}`
/// with its status. The codes are stable (docs/api/openapi.yaml lists them).
private struct ErrorBody: Encodable {
    let error: String
    let message: String
}

public struct APIError: HTTPResponseError, Sendable {
    public let status: HTTPResponse.Status
    public let code: String
    public let message: String
    /// Headers the refusal needs besides its body (`Allow` on a 405).
    public let headers: HTTPFields

    public init(_ status: HTTPResponse.Status, _ code: String, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let data = try JSONEncoder().encode(ErrorBody(error: code, message: message))
        var fields = headers
        fields[.contentType] = "application/json"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func badRequest(_ message: String) -> APIError { APIError(.badRequest, "bad-request", message) }
    static let signatureInvalid = APIError(.unauthorized, "signature-invalid", "the request is not signed by an enrolled machine's key, or its date is more than 300 s from the server's clock")
    static let machineRevoked = APIError(.forbidden, "machine-revoked", "this machine's enrolment was revoked; enrol it again with a new token")
    static let tooLarge = APIError(.contentTooLarge, "too-large", "the body is larger than 1 MiB")
    /// 429 with `Retry-After: 60`: a machine's sender backs off and sends again; nothing is lost.
    static func rateLimited(_ message: String) -> APIError {
        APIError(.tooManyRequests, "rate-limited", message, headers: [.retryAfter: "60"])
    }
    static let unauthorized = APIError(.unauthorized, "token-invalid", "send an API token: Authorization: Bearer hpa1....")
    static func roleForbidden(_ role: Role) -> APIError {
        APIError(.forbidden, "role-forbidden", "an API token of role \(role.rawValue) may not do this")
    }
    static func scopeForbidden(_ message: String) -> APIError { APIError(.forbidden, "scope-forbidden", message) }
}

