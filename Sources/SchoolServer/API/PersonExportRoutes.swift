import Foundation
import Hummingbird
import NIOCore

/// `GET /api/v1/people/{user}/export`: one person's records, alerts and
/// access requests as one JSON document, for a subject access request
/// (`PersonExport`), for a token whose role may export a person's records
/// (`exportPerson`: admin, safeguarding lead) and sees names (not one of
/// `console.pseudonyms`), within the token's scope. Each export is in the
/// audit trail (`person.export`, with whose).
struct PersonExportRoutes {
    let storage: any ServerStorage
    /// `console.pseudonyms`: roles that never see a name, so never export one.
    let pseudonymRoles: Set<Role>
    let clock: @Sendable () -> Int64

    func add(to router: Router<ServerRequestContext>) {
        router.group("/api/v1/people")
            .add(middleware: APITokenMiddleware(storage: storage, permission: .exportPerson))
            .get(":user/export") { _, context in try await export(context) }
    }

    func export(_ context: ServerRequestContext) async throws -> Response {
        guard let principal = context.principal else { throw APIError.unauthorized }
        guard !pseudonymRoles.contains(principal.role) else {
            throw APIError(.forbidden, "role-forbidden", "the role \(principal.role.rawValue) sees pseudonyms (console.pseudonyms), not names")
        }
        guard let user = PersonExport.userName(context.parameters.get("user"), percentEncoded: true) else {
            throw APIError.badRequest("the user name is empty, longer than \(PersonExport.maxUserCharacters) characters, or holds a control character")
        }
        let now = clock()
        // In the audit trail before a byte of it leaves.
        try await storage.audit(NewAuditEvent(time: now, actor: principal.author, action: "person.export", target: user))
        return PersonExportRoutes.response(PersonExport(storage: storage), user: user, principal: principal, now: now)
    }

    /// The export as a download, streamed (the console's button answers the same).
    static func response(_ export: PersonExport, user: String, principal: Principal, now: Int64) -> Response {
        let body = ResponseBody { writer in
            try await export.write(user: user, scope: principal.scope, by: principal.author, now: now) { try await writer.write($0) }
            try await writer.finish(nil)
        }
        return Response(
            status: .ok,
            headers: [
                .contentType: "application/json", .contentDisposition: "attachment; filename=\"\(PersonExport.fileName(user))\"",
                .cacheControl: "no-store",
            ],
            body: body)
    }
}
