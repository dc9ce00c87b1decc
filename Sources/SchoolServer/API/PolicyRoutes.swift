import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// The school's versioned policy and its publishing (docs/server.md,
/// "Publishing"): API tokens whose role may edit the policy change and
/// publish, those that may view it read (`Role.may`). Machines never reach
/// these routes: only an API token opens them. Every change is written to
/// the audit trail.
struct PolicyRoutes {
    let storage: any ServerStorage
    let editor: PolicyEditor
    let publisher: Publisher
    let clock: @Sendable () -> Int64

    func add(to router: Router<ServerRequestContext>) {
        let read = router.group("/api/v1/policy").add(middleware: APITokenMiddleware(storage: storage, permission: .viewPolicy))
        read.get { _, _ in try await current() }
        read.get("versions") { request, _ in try await versions(request) }
        read.get("versions/:version") { _, context in try await version(context) }
        read.get("diff") { request, _ in try await diff(request) }
        read.get("pending/manifest") { _, _ in try await pendingManifest() }

        let write = router.group("/api/v1/policy").add(middleware: APITokenMiddleware(storage: storage, permission: .editPolicy))
        write.put { request, context in try await setPolicy(request, context) }
        write.put("lists/:category") { request, context in try await putList(request, context) }
        write.delete("lists/:category") { request, context in try await deleteList(request, context) }
        write.post("rollback") { request, context in try await rollback(request, context) }
        write.post("publish") { request, context in try await publish(request, context) }
        write.post("pending/signature") { request, context in try await signature(request, context) }
    }

    // MARK: Answers

    struct VersionView: ResponseEncodable {
        let version: Int64
        let time: String
        let author: String
        let reason: String
        let policy: String?
        let lists: [PolicyList]

        init(_ stored: StoredPolicyVersion) {
            version = stored.version
            time = RecordTime.format(milliseconds: stored.createdAt * 1000)
            author = stored.author
            reason = stored.reason
            policy = stored.policy
            lists = stored.lists
        }

        enum CodingKeys: String, CodingKey { case version, time, author, reason, policy, lists }

        /// `policy` is written `null` when the version has none (machines then apply their own).
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(version, forKey: .version)
            try container.encode(time, forKey: .time)
            try container.encode(author, forKey: .author)
            try container.encode(reason, forKey: .reason)
            try container.encode(policy, forKey: .policy)
            try container.encode(lists, forKey: .lists)
        }
    }

    struct PublicationView: Codable, Sendable {
        let bundleVersion: Int64
        let policyVersion: Int64
        let time: String
        let state: StoredPublication.State
        let author: String
        let reason: String
        let files: [PublishedFile]

        init(_ stored: StoredPublication) {
            bundleVersion = stored.bundleVersion
            policyVersion = stored.policyVersion
            time = RecordTime.format(milliseconds: (stored.publishedAt ?? stored.createdAt) * 1000)
            state = stored.state
            author = stored.author
            reason = stored.reason
            files = stored.files
        }
    }

    struct CurrentView: ResponseEncodable {
        let version: Int64?
        let time: String?
        let author: String?
        let reason: String?
        let policy: String?
        let lists: [PolicyList]
        let published: PublicationView?
        let pending: PublicationView?

        enum CodingKeys: String, CodingKey { case version, time, author, reason, policy, lists, published, pending }

        /// `policy`, `published` and `pending` are written `null` when there is none;
        /// the version's own keys are left out before the first version.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(version, forKey: .version)
            try container.encodeIfPresent(time, forKey: .time)
            try container.encodeIfPresent(author, forKey: .author)
            try container.encodeIfPresent(reason, forKey: .reason)
            try container.encode(policy, forKey: .policy)
            try container.encode(lists, forKey: .lists)
            try container.encode(published, forKey: .published)
            try container.encode(pending, forKey: .pending)
        }
    }

    struct VersionsView: ResponseEncodable {
        let versions: [VersionView]
        /// Pass as `before` for the next page; absent on the last.
        let next: Int64?
    }

    struct Created: ResponseEncodable {
        let version: Int64
    }

    struct Published: ResponseEncodable {
        let bundleVersion: Int64
        let state: StoredPublication.State
    }

    struct SetPolicyRequest: Decodable {
        let policy: String?
        let reason: String

        enum CodingKeys: String, CodingKey { case policy, reason }

        /// `policy` must be there, as text or null: a body that forgets it must
        /// not remove the school's policy.
        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            guard container.contains(.policy) else {
                throw DecodingError.keyNotFound(
                    CodingKeys.policy, .init(codingPath: [], debugDescription: "give the policy YAML, or null for none"))
            }
            policy = try container.decodeIfPresent(String.self, forKey: .policy)
            reason = try container.decode(String.self, forKey: .reason)
        }
    }

    struct RollbackRequest: Decodable {
        let version: Int64
        let reason: String
    }

    struct PublishRequest: Decodable {
        let reason: String
        let policyVersion: Int64?
    }

    // MARK: Reading

    func current() async throws -> CurrentView {
        let latest = try await storage.latestPolicyVersion()
        let published = try await storage.currentPublication()
        let pending = try await storage.pendingPublication()
        return CurrentView(
            version: latest?.version, time: latest.map { RecordTime.format(milliseconds: $0.createdAt * 1000) }, author: latest?.author,
            reason: latest?.reason, policy: latest?.policy, lists: latest?.lists ?? [], published: published.map(PublicationView.init),
            pending: pending.map(PublicationView.init))
    }

    func versions(_ request: Request) async throws -> VersionsView {
        var limit = 50
        var before: Int64? = nil
        for (name, value) in request.uri.queryParameters {
            switch name {
            case "limit":
                guard let number = Int(String(value)), (1...500).contains(number) else { throw APIError.badRequest("limit must be from 1 to 500") }
                limit = number
            case "before":
                guard let number = Int64(String(value)), number >= 1 else { throw APIError.badRequest("before must be a version number") }
                before = number
            default:
                throw APIError.badRequest("unknown query parameter '\(name.prefix(40))'; this takes limit and before")
            }
        }
        let versions = try await storage.policyVersions(before: before, limit: limit + 1)
        let page = versions.prefix(limit)
        return VersionsView(versions: page.map(VersionView.init), next: versions.count > limit ? page.last?.version : nil)
    }

    func version(_ context: ServerRequestContext) async throws -> VersionView {
        let number = try Self.versionNumber(context.parameters.get("version"), name: "version")
        guard let stored = try await storage.policyVersion(number) else {
            throw APIError(.notFound, "version-unknown", "there is no policy version \(number)")
        }
        return VersionView(stored)
    }

    func diff(_ request: Request) async throws -> DiffResponse {
        var from: Int64?
        var to: Int64?
        for (name, value) in request.uri.queryParameters {
            switch name {
            case "from": from = try Self.versionNumber(String(value), name: "from")
            case "to": to = try Self.versionNumber(String(value), name: "to")
            default: throw APIError.badRequest("unknown query parameter '\(name.prefix(40))'; this takes from and to")
            }
        }
        guard let from, let to else { throw APIError.badRequest("give both from and to (policy version numbers)") }
        return DiffResponse(diff: try await Self.mapping { try await PolicyDiffer(storage: storage).diff(from: from, to: to) })
    }

    func pendingManifest() async throws -> Response {
        guard let pending = try await storage.pendingPublication() else {
            throw APIError(.notFound, "nothing-pending", "no bundle is waiting for a signature")
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; charset=utf-8", .contentDisposition: "attachment; filename=\"manifest\""],
            body: .init(byteBuffer: ByteBuffer(bytes: pending.manifest)))
    }

    // MARK: Changing

    func setPolicy(_ request: Request, _ context: ServerRequestContext) async throws -> EditedResponse<Created> {
        let body = try await decode(SetPolicyRequest.self, request, context)
        let stored = try await Self.mapping {
            try await editor.change(
                policy: body.policy.map { .set($0) } ?? .remove, lists: [], removing: [], reason: body.reason, author: Self.author(context),
                now: clock())
        }
        Self.logChange(context, stored)
        try await audit(context, "policy.set", target: "version \(stored.version)", reason: body.reason)
        return EditedResponse(status: .created, response: Created(version: stored.version))
    }

    func putList(_ request: Request, _ context: ServerRequestContext) async throws -> EditedResponse<Created> {
        let category = context.parameters.get("category") ?? ""
        let reason = try Self.reasonParameter(request)
        try Self.mappingSync { try PolicyChecks.category(category) }
        // Streamed to a file, bounded by publishing.maxListBytes: a list of
        // millions of names is not held whole in memory while it arrives.
        let folder = editor.workFolder
        let path = folder + "/upload-" + Secrets.randomBase32(count: 12)
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Self.mappingSync {
            do {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o750])
            } catch {
                throw PublishingError(.failed, "work-folder", "cannot make \(folder): \(error)")
            }
        }
        guard FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]),
            let handle = FileHandle(forWritingAtPath: path)
        else { throw APIError(.internalServerError, "work-folder", "cannot write the upload to \(folder)") }
        var received = 0
        do {
            for try await buffer in request.body {
                received += buffer.readableBytes
                guard received <= editor.maxListBytes else {
                    throw APIError(.contentTooLarge, "too-large", "the list is larger than publishing.maxListBytes (\(editor.maxListBytes) bytes)")
                }
                try handle.write(contentsOf: Data(buffer.readableBytesView))
            }
            try handle.close()
        } catch {
            try? handle.close()
            throw error
        }
        let stored = try await Self.mapping {
            try await editor.changeList(category: category, fileAt: path, reason: reason, author: Self.author(context), now: clock())
        }
        Self.logChange(context, stored)
        try await audit(context, "policy.set", target: "version \(stored.version)", reason: reason, detail: "list \(category) replaced")
        return EditedResponse(status: .created, response: Created(version: stored.version))
    }

    func deleteList(_ request: Request, _ context: ServerRequestContext) async throws -> EditedResponse<Created> {
        let category = context.parameters.get("category") ?? ""
        let reason = try Self.reasonParameter(request)
        let stored = try await Self.mapping {
            try PolicyChecks.category(category)
            return try await editor.change(
                policy: .keep, lists: [], removing: [category], reason: reason, author: Self.author(context), now: clock())
        }
        Self.logChange(context, stored)
        try await audit(context, "policy.set", target: "version \(stored.version)", reason: reason, detail: "list \(category) removed")
        return EditedResponse(status: .created, response: Created(version: stored.version))
    }

    func rollback(_ request: Request, _ context: ServerRequestContext) async throws -> EditedResponse<Created> {
        let body = try await decode(RollbackRequest.self, request, context)
        let stored = try await Self.mapping {
            try await editor.rollback(to: body.version, reason: body.reason, author: Self.author(context), now: clock())
        }
        Self.logChange(context, stored)
        try await audit(
            context, "policy.rollback", target: "version \(stored.version)", reason: body.reason, detail: "the content of version \(body.version)")
        return EditedResponse(status: .created, response: Created(version: stored.version))
    }

    func publish(_ request: Request, _ context: ServerRequestContext) async throws -> EditedResponse<Published> {
        let body = try await decode(PublishRequest.self, request, context)
        let outcome = try await Self.mapping {
            try await publisher.publish(reason: body.reason, policyVersion: body.policyVersion, author: Self.author(context), now: clock())
        }
        try await audit(
            context, "publish", target: "bundle \(outcome.publication.bundleVersion)", reason: body.reason,
            detail: "policy version \(outcome.publication.policyVersion), \(outcome.publication.state.rawValue)")
        return EditedResponse(
            status: .created, response: Published(bundleVersion: outcome.publication.bundleVersion, state: outcome.publication.state))
    }

    func signature(_ request: Request, _ context: ServerRequestContext) async throws -> Published {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: 4096)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError(.contentTooLarge, "too-large", "a signature file is at most 4096 bytes")
        }
        let published = try await Self.mapping { try await publisher.complete(signature: Array(buffer: body), now: clock()) }
        try await audit(
            context, "publish.complete", target: "bundle \(published.bundleVersion)", detail: "policy version \(published.policyVersion)")
        return Published(bundleVersion: published.bundleVersion, state: published.state)
    }

    // MARK: Helpers

    static func author(_ context: ServerRequestContext) -> String {
        context.principal?.author ?? "token:?"
    }

    /// Writes what the request changed to the audit trail, after the change.
    func audit(_ context: ServerRequestContext, _ action: String, target: String, reason: String? = nil, detail: String? = nil) async throws {
        try await storage.audit(
            NewAuditEvent(time: clock(), actor: Self.author(context), action: action, target: target, reason: reason, detail: detail))
    }

    static func logChange(_ context: ServerRequestContext, _ stored: StoredPolicyVersion) {
        context.logger.notice(
            "made a policy version",
            metadata: ["hallpass.policy.version": "\(stored.version)", "hallpass.policy.author": "\(stored.author)"])
    }

    static func reasonParameter(_ request: Request) throws -> String {
        var reason: String? = nil
        for (name, value) in request.uri.queryParameters {
            guard name == "reason" else { throw APIError.badRequest("unknown query parameter '\(name.prefix(40))'; this takes reason") }
            reason = String(value)
        }
        return try mappingSync { try PolicyChecks.reason(reason) }
    }

    static func versionNumber(_ text: String?, name: String) throws -> Int64 {
        guard let text, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let number = Int64(text), number >= 1 else {
            throw APIError.badRequest("\(name) must be a policy version number (1, 2, ...)")
        }
        return number
    }

    /// A PublishingError as the API answers it.
    static func apiError(_ error: PublishingError) -> APIError {
        switch error.kind {
        case .invalid: APIError(.badRequest, error.code, error.message)
        case .notFound: APIError(.notFound, error.code, error.message)
        case .conflict: APIError(.conflict, error.code, error.message)
        case .failed: APIError(.internalServerError, error.code, error.message)
        }
    }

    static func mapping<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PublishingError {
            throw apiError(error)
        }
    }

    static func mappingSync<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PublishingError {
            throw apiError(error)
        }
    }
}

/// Reads two versions and their changed lists from the storage and compares them.
struct PolicyDiffer {
    let storage: any ServerStorage

    func diff(from: Int64, to: Int64) async throws -> PolicyDiff {
        guard let old = try await storage.policyVersion(from) else {
            throw PublishingError(.notFound, "version-unknown", "there is no policy version \(from)")
        }
        guard let new = try await storage.policyVersion(to) else {
            throw PublishingError(.notFound, "version-unknown", "there is no policy version \(to)")
        }
        let oldLists = Dictionary(uniqueKeysWithValues: old.lists.map { ($0.category, $0.sha256) })
        let newLists = Dictionary(uniqueKeysWithValues: new.lists.map { ($0.category, $0.sha256) })
        var changes: [PolicyDiff.ListChange] = []
        for category in Set(oldLists.keys).union(newLists.keys).sorted() where oldLists[category] != newLists[category] {
            func content(_ sha256: String?) async throws -> (sha256: String, bytes: [UInt8])? {
                guard let sha256 else { return nil }
                return (sha256, try await storage.listContent(sha256: sha256) ?? [])
            }
            changes.append(
                PolicyDiff.listChange(
                    category: category, old: try await content(oldLists[category]), new: try await content(newLists[category])))
        }
        return PolicyDiff(
            from: from, to: to,
            policy: PolicyDiff.unified(old.policy, new.policy, fromLabel: "policy version \(from)", toLabel: "policy version \(to)"),
            lists: changes)
    }
}

/// A diff as the API answers it.
struct DiffResponse: ResponseEncodable {
    let diff: PolicyDiff
    func encode(to encoder: any Encoder) throws { try diff.encode(to: encoder) }
}
