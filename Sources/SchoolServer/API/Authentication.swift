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
        context.machine = machine
        context.logger[metadataKey: "hallpass.machine"] = "\(id)"
        return try await next(request, context)
    }
}

/// Checks `Authorization: Bearer <API token>` and the token's role before
/// any admin route runs. One place decides: a route names the roles it
/// allows when it is added.
struct APITokenMiddleware: RouterMiddleware {
    typealias Context = ServerRequestContext
    let storage: any ServerStorage
    let allowed: Set<Role>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { throw APIError.unauthorized }
        let token = String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        guard token.hasPrefix(Secrets.apiPrefix + "."), let stored = try await storage.apiToken(hash: Secrets.hash(token)) else {
            context.logger.warning("refused an API request: unknown token")
            throw APIError.unauthorized
        }
        guard allowed.contains(stored.role) else {
            throw APIError(.forbidden, "role-forbidden", "an API token of role \(stored.role.rawValue) may not do this")
        }
        var context = context
        context.apiToken = stored
        context.principal = Principal(kind: .token(stored.id), role: stored.role, scope: .school)
        context.logger[metadataKey: "hallpass.api.token"] = "\(stored.id)"
        return try await next(request, context)
    }
}

extension Request {
    /// The first value of the header `name` (case-insensitive).
    func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name.canonicalName == lowered }?.value
    }
}
