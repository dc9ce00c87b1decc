import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import SharedStore

/// `GET /bundle/{name}` (and HEAD): the files of the current publication,
/// unauthenticated (they are signed; machines fetch them over the pinned
/// TLS). The publication is read from the database on each request, so
/// every instance serves the same one; the bytes are streamed from the file
/// cache. The ETag is the file's SHA-256, so a machine's `If-None-Match`
/// costs a 304 for a file that did not change, and `no-cache` makes a cache
/// between them ask again each time. Each GET is logged at info, one line
/// with the name, status, bytes sent and peer: what a school reads to see
/// what an update cost.
struct BundleRoutes {
    let storage: any ServerStorage
    let cache: BundleFileCache
    let fileIO = FileIO()

    func add(to router: Router<ServerRequestContext>) {
        router.get("/bundle/:name") { request, context in try await serve(request, context) }
        // Named, not left to the router's own HEAD from GET, so that a 405 on this path lists it in Allow.
        router.head("/bundle/:name") { request, context in try await serve(request, context) }
    }

    func serve(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        let name = context.parameters.get("name") ?? ""
        guard let publication = try await storage.currentPublication(), let file = publication.file(named: name) else {
            log(request, context, name: name, status: 404, bytes: 0)
            throw APIError(.notFound, "not-found", "the current bundle has no file of that name")
        }
        let etag = "\"\(file.sha256)\""
        var headers: HTTPFields = [.eTag: etag, .cacheControl: "no-cache"]
        if let asked = request.headers[values: .ifNoneMatch].first, Self.matches(asked, sha256: file.sha256) {
            log(request, context, name: name, status: 304, bytes: 0)
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = name == BundleNames.policy ? "application/yaml" : "application/octet-stream"
        headers[.contentLength] = String(file.size)
        guard request.method == .get else { return Response(status: .ok, headers: headers) }
        let path: String
        do {
            path = try await cache.path(for: file)
        } catch let error as PublishingError {
            context.logger.error("cannot serve a bundle file: \(error.message)", metadata: ["hallpass.bundle.file": "\(name)"])
            log(request, context, name: name, status: 500, bytes: 0)
            throw APIError(.internalServerError, error.code, "the server cannot read this file now; try again later")
        }
        let body = try await fileIO.loadFile(path: path, context: context)
        log(request, context, name: name, status: 200, bytes: file.size)
        return Response(status: .ok, headers: headers, body: body)
    }

    /// The asked name as the log shows it: one a bundle could hold, or a
    /// placeholder. Anyone may ask, so a decoded `%0A` in the path must not
    /// write a line of its own into the server's log.
    static func shown(_ name: String) -> String {
        name == BundleManifest.fileName || name == BundleManifest.signatureFileName || BundleManifest.isSafeFileName(name)
            ? name : "(not a bundle file name)"
    }

    /// `If-None-Match`: `*`, or a list of entity tags, weak (`W/"..."`) or strong.
    static func matches(_ header: String, sha256: String) -> Bool {
        for part in header.split(separator: ",") {
            var tag = part.trimmingCharacters(in: .whitespaces)
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            if tag == "\"\(sha256)\"" { return true }
        }
        return false
    }

    private func log(_ request: Request, _ context: ServerRequestContext, name: String, status: Int, bytes: Int64) {
        guard request.method == .get else { return }
        let peer = context.remoteAddress.map { "\($0.ipAddress ?? "?")" } ?? "-"
        let name = Self.shown(name)
        context.logger.info(
            "bundle GET \(name) \(status) \(bytes) bytes to \(peer)",
            metadata: [
                "hallpass.bundle.file": "\(name)", "hallpass.http.status": "\(status)", "hallpass.http.bytes": "\(bytes)",
                "hallpass.peer": "\(peer)",
            ])
    }
}
