import Foundation
import Hummingbird
import Logging
import NIOCore

/// Checks a machine's signed request (RequestSignature) before any machine
/// route runs, and puts the machine in the context. The body is read here,
/// bounded, because the signature covers it; the route decodes the same bytes.
struct MachineSignatureMiddleware: RouterMiddleware {
    typealias Context = ServerRequestContext
    let storage: any ServerStorage
    let metrics: ServerMetrics
    let clock: @Sendable () -> Int64
    /// Signed requests a minute per machine.
    let limiter: RateLimiter

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await check(request, context: context, next: next)
        } catch let error as APIError {
            metrics.refused(error.code)
            throw error
        }
    }

    private func check(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var request = request
        var context = context
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: APILimits.maxBodyBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError.tooLarge
        }
        let claimed = request.header(RequestSignature.machineHeader)
        guard let id = claimed, Secrets.isMachineID(id), let machine = try await storage.machine(id: id) else {
            context.logger.warning("refused a request: no such machine", metadata: ["hallpass.machine": "\(claimed ?? "-")"])
            throw APIError.signatureInvalid
        }
        let outcome = RequestSignature.verify(
            method: request.method.rawValue, path: request.uri.description,
            date: request.header(RequestSignature.dateHeader), signature: request.header(RequestSignature.signatureHeader),
            body: Array(buffer: body), publicKey: machine.publicKey, now: clock())
        if case .invalid(let reason) = outcome {
            context.logger.warning("refused a request: \(reason)", metadata: ["hallpass.machine": "\(id)"])
            throw APIError.signatureInvalid
        }
        // A revoked machine is told so only when it proves who it is.
        guard machine.revokedAt == nil else {
            context.logger.warning("refused a revoked machine", metadata: ["hallpass.machine": "\(id)"])
            throw APIError.machineRevoked
        }
        // Counted once the machine proved who it is: a forged id cannot use up another machine's allowance.
        guard limiter.allow(id, now: clock()) else {
            context.logger.warning("refused a machine's request: more than \(limiter.perMinute) a minute", metadata: ["hallpass.machine": "\(id)"])
            throw APIError.rateLimited("more than \(limiter.perMinute) requests a minute from this machine")
        }
        context.machine = machine
        context.logger[metadataKey: "hallpass.machine"] = "\(id)"
        return try await next(request, context)
    }
}

/// Checks `Authorization: Bearer <API token>`, puts the token's principal
/// (its role and scope) in the context, and asks the principal for the
/// route's `Permission` (`Role.may`, the one table of who may do what).
/// A route whose answer is the whole school's and cannot be narrowed to a
/// scope (the counters of /metrics) refuses a principal with a scope.
struct APITokenMiddleware: RouterMiddleware {
    typealias Context = ServerRequestContext
    let storage: any ServerStorage
    let permission: Permission
    var needsWholeSchool = false

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { throw APIError.unauthorized }
        let token = String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        guard token.hasPrefix(Secrets.apiPrefix + "."), let stored = try await storage.apiToken(hash: Secrets.hash(token)) else {
            context.logger.warning("refused an API request: unknown token")
            throw APIError.unauthorized
        }
        let principal = Principal(kind: .token(stored.id), role: stored.role, scope: stored.scope)
        try Self.check(principal, permission, needsWholeSchool: needsWholeSchool)
        var context = context
        context.apiToken = stored
        context.principal = principal
        context.logger[metadataKey: "hallpass.api.token"] = "\(stored.id)"
        return try await next(request, context)
    }

    /// Refuses `principal` a route of `permission` (403 `role-forbidden`),
    /// or a whole-school route when it has a scope (403 `scope-forbidden`).
    static func check(_ principal: Principal, _ permission: Permission, needsWholeSchool: Bool = false) throws {
        guard principal.may(permission) else { throw APIError.roleForbidden(principal.role) }
        guard !needsWholeSchool || principal.scope.isWholeSchool else {
            throw APIError(.forbidden, "scope-forbidden", "this answers for the whole school; a token with a scope may not read it")
        }
    }
}

extension Request {
    /// The first value of the header `name` (case-insensitive).
    func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name.canonicalName == lowered }?.value
    }
}
