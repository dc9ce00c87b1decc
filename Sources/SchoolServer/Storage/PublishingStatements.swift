import Foundation
import SharedStore

/// The statements of publishing: policy versions with their lists, and
/// publications with their files. Versions are numbered inside the
/// transaction that stores them, after taking the publishing lock, so two
/// changes or two publishes at once (two server instances, or the command
/// line beside the server) get two numbers, one after the other.
extension SQLStorage {
    /// Taken first in every transaction that numbers a version: an upsert
    /// holds the row's lock until the commit in PostgreSQL; SQLite's
    /// `BEGIN IMMEDIATE` has already made the transaction the only writer.
    static let publishingLock =
        "INSERT INTO server_state (name, value) VALUES ('publishingLock', '') ON CONFLICT (name) DO UPDATE SET value = excluded.value"

    // MARK: Policy versions

    public func latestPolicyVersion() async throws -> StoredPolicyVersion? {
        guard let row = try await engine.run("SELECT * FROM policy_versions ORDER BY version DESC LIMIT 1").first else { return nil }
        return try await policyVersion(row, session: engine)
    }

    public func policyVersion(_ version: Int64) async throws -> StoredPolicyVersion? {
        guard let row = try await engine.run("SELECT * FROM policy_versions WHERE version = $1", SQLValue(version)).first else { return nil }
        return try await policyVersion(row, session: engine)
    }

    public func policyVersions(before: Int64?, limit: Int) async throws -> [StoredPolicyVersion] {
        let rows = try await engine.run(
            "SELECT * FROM policy_versions WHERE version < $1 ORDER BY version DESC LIMIT $2", SQLValue(before ?? Int64.max), SQLValue(limit))
        var versions: [StoredPolicyVersion] = []
        for row in rows { versions.append(try await policyVersion(row, session: engine)) }
        return versions
    }

    public func addPolicyVersion(_ new: NewPolicyVersion, now: Int64) async throws -> StoredPolicyVersion {
        try await engine.transaction { session in
            try await session.run(Self.publishingLock)
            let latest = try await session.run("SELECT COALESCE(MAX(version), 0) AS latest FROM policy_versions").first?.integer("latest") ?? 0
            for content in new.contents {
                // A list stored already (by an earlier version) is not sent again.
                let known = try await session.run("SELECT sha256 FROM list_contents WHERE sha256 = $1", SQLValue(content.sha256))
                guard known.isEmpty else { continue }
                try await session.run(
                    "INSERT INTO list_contents (sha256, size, names, contents) VALUES ($1, $2, $3, $4)",
                    SQLValue(content.sha256), SQLValue(content.bytes.count), SQLValue(content.names), SQLValue(content.bytes))
            }
            let version = latest + 1
            try await session.run(
                "INSERT INTO policy_versions (version, created_at, author, reason, policy) VALUES ($1, $2, $3, $4, $5)",
                SQLValue(version), SQLValue(now), SQLValue(new.author), SQLValue(new.reason), SQLValue(new.policy))
            for list in new.lists {
                try await session.run(
                    "INSERT INTO policy_lists (version, category, sha256) VALUES ($1, $2, $3)",
                    SQLValue(version), SQLValue(list.category), SQLValue(list.sha256))
            }
            return StoredPolicyVersion(
                version: version, createdAt: now, author: new.author, reason: new.reason, policy: new.policy, lists: new.lists)
        }
    }

    public func listContent(sha256: String) async throws -> [UInt8]? {
        try await engine.run("SELECT contents FROM list_contents WHERE sha256 = $1", SQLValue(sha256)).first?.bytes("contents")
    }

    private func policyVersion(_ row: SQLRow, session: any SQLSession) async throws -> StoredPolicyVersion {
        let version = try row.integer("version")
        let lists = try await session.run(
            """
            SELECT policy_lists.category AS category, policy_lists.sha256 AS sha256, list_contents.names AS names
            FROM policy_lists JOIN list_contents ON list_contents.sha256 = policy_lists.sha256
            WHERE policy_lists.version = $1 ORDER BY policy_lists.category
            """,
            SQLValue(version)
        ).map { row throws in PolicyList(category: try row.text("category"), sha256: try row.text("sha256"), names: try row.integer("names")) }
        return StoredPolicyVersion(
            version: version, createdAt: try row.integer("created_at"), author: try row.text("author"), reason: try row.text("reason"),
            policy: row.optionalText("policy"), lists: lists)
    }

    // MARK: Publications

    public func addPublication(
        _ new: NewPublication, now: Int64, sign: @Sendable (Int64) throws -> SignedManifest
    ) async throws -> StoredPublication {
        try await engine.transaction { session in
            try await session.run(Self.publishingLock)
            // Above every publication, pending ones too (a manifest handed out
            // for signing is never reused for other content), and above the
            // version the server was told to start from.
            let latest = try await session.run("SELECT COALESCE(MAX(bundle_version), 0) AS latest FROM publications").first?.integer("latest") ?? 0
            let floor = try await Self.publishedVersionFloor(session)
            let version = max(latest, floor) + 1
            let signed = try sign(version)
            // A newer bundle replaces a pending one: its manifest will never be published.
            try await session.run(
                "DELETE FROM publication_files WHERE bundle_version IN (SELECT bundle_version FROM publications WHERE state = 'pending')")
            try await session.run("DELETE FROM publications WHERE state = 'pending'")

            var files = new.files
            let manifestFile = PublishedFile(
                name: BundleNames.manifest, sha256: Secrets.sha256(signed.manifest), size: Int64(signed.manifest.count))
            files.append((manifestFile, signed.manifest))
            if let signature = signed.signature {
                files.append((PublishedFile(name: BundleNames.signature, sha256: Secrets.sha256(signature), size: Int64(signature.count)), signature))
            }
            for (file, bytes) in files { try await Self.storeBundleFile(file, bytes, session) }
            let state: StoredPublication.State = signed.signature == nil ? .pending : .published
            try await session.run(
                """
                INSERT INTO publications (bundle_version, policy_version, created_at, author, reason, state, manifest, signature, published_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                """,
                SQLValue(version), SQLValue(new.policyVersion), SQLValue(now), SQLValue(new.author), SQLValue(new.reason),
                SQLValue(state.rawValue), SQLValue(signed.manifest), SQLValue(signed.signature), SQLValue(state == .published ? now : nil))
            for (file, _) in files {
                try await session.run(
                    "INSERT INTO publication_files (bundle_version, name, sha256, size) VALUES ($1, $2, $3, $4)",
                    SQLValue(version), SQLValue(file.name), SQLValue(file.sha256), SQLValue(file.size))
            }
            return StoredPublication(
                bundleVersion: version, policyVersion: new.policyVersion, createdAt: now, author: new.author, reason: new.reason,
                state: state, manifest: signed.manifest, signature: signed.signature, publishedAt: state == .published ? now : nil,
                files: files.map(\.file).sorted { $0.name < $1.name })
        }
    }

    public func completePublication(bundleVersion: Int64, signature: [UInt8], now: Int64) async throws -> StoredPublication? {
        let done: Bool = try await engine.transaction { session in
            try await session.run(Self.publishingLock)
            let rows = try await session.run(
                "UPDATE publications SET state = 'published', signature = $2, published_at = $3 WHERE bundle_version = $1 AND state = 'pending' RETURNING bundle_version",
                SQLValue(bundleVersion), SQLValue(signature), SQLValue(now))
            guard !rows.isEmpty else { return false }
            let file = PublishedFile(name: BundleNames.signature, sha256: Secrets.sha256(signature), size: Int64(signature.count))
            try await Self.storeBundleFile(file, signature, session)
            try await session.run(
                "INSERT INTO publication_files (bundle_version, name, sha256, size) VALUES ($1, $2, $3, $4)",
                SQLValue(bundleVersion), SQLValue(file.name), SQLValue(file.sha256), SQLValue(file.size))
            return true
        }
        return done ? try await publication(bundleVersion: bundleVersion) : nil
    }

    public func publication(bundleVersion: Int64) async throws -> StoredPublication? {
        guard let row = try await engine.run("SELECT * FROM publications WHERE bundle_version = $1", SQLValue(bundleVersion)).first else {
            return nil
        }
        return try await publication(row)
    }

    public func currentPublication() async throws -> StoredPublication? {
        guard
            let row = try await engine.run("SELECT * FROM publications WHERE state = 'published' ORDER BY bundle_version DESC LIMIT 1").first
        else { return nil }
        return try await publication(row)
    }

    public func pendingPublication() async throws -> StoredPublication? {
        guard let row = try await engine.run("SELECT * FROM publications WHERE state = 'pending' ORDER BY bundle_version DESC LIMIT 1").first
        else { return nil }
        return try await publication(row)
    }

    public func publications() async throws -> [StoredPublication] {
        var result: [StoredPublication] = []
        for row in try await engine.run("SELECT * FROM publications ORDER BY bundle_version DESC") { result.append(try await publication(row)) }
        return result
    }

    public func bundleFile(sha256: String) async throws -> [UInt8]? {
        try await engine.run("SELECT contents FROM bundle_files WHERE sha256 = $1", SQLValue(sha256)).first?.bytes("contents")
    }

    public func pruneBundleFiles(keepingPublished published: Int) async throws -> Int64 {
        try await engine.transaction { session in
            // Under the lock: a publication being stored names its files before they could go.
            try await session.run(Self.publishingLock)
            let kept = """
                SELECT publication_files.sha256 FROM publication_files WHERE publication_files.bundle_version IN (
                    SELECT bundle_version FROM publications WHERE state = 'published' ORDER BY bundle_version DESC LIMIT $1)
                UNION SELECT publication_files.sha256 FROM publication_files JOIN publications
                    ON publications.bundle_version = publication_files.bundle_version WHERE publications.state = 'pending'
                """
            let count = try await session.run(
                "SELECT COUNT(*) AS count FROM bundle_files WHERE sha256 NOT IN (\(kept))", SQLValue(published)
            ).first?.integer("count") ?? 0
            try await session.run("DELETE FROM bundle_files WHERE sha256 NOT IN (\(kept))", SQLValue(published))
            return count
        }
    }

    private func publication(_ row: SQLRow) async throws -> StoredPublication {
        let version = try row.integer("bundle_version")
        guard let state = StoredPublication.State(rawValue: try row.text("state")) else { throw StorageError.unexpectedRow(column: "state") }
        let files = try await engine.run(
            "SELECT name, sha256, size FROM publication_files WHERE bundle_version = $1 ORDER BY name", SQLValue(version)
        ).map { row throws in PublishedFile(name: try row.text("name"), sha256: try row.text("sha256"), size: try row.integer("size")) }
        return StoredPublication(
            bundleVersion: version, policyVersion: try row.integer("policy_version"), createdAt: try row.integer("created_at"),
            author: try row.text("author"), reason: try row.text("reason"), state: state, manifest: try row.bytes("manifest"),
            signature: row.optionalBytes("signature"), publishedAt: row.optionalInteger("published_at"), files: files)
    }

    static func storeBundleFile(_ file: PublishedFile, _ bytes: [UInt8], _ session: any SQLSession) async throws {
        // A file stored already (an unchanged store) is not sent again.
        let known = try await session.run("SELECT sha256 FROM bundle_files WHERE sha256 = $1", SQLValue(file.sha256))
        guard known.isEmpty else { return }
        try await session.run(
            "INSERT INTO bundle_files (sha256, size, contents) VALUES ($1, $2, $3)", SQLValue(file.sha256), SQLValue(bytes.count),
            SQLValue(bytes))
    }

    /// The version set with `setPublishedVersion` (0 when none): the next bundle is above it.
    static func publishedVersionFloor(_ session: any SQLSession) async throws -> Int64 {
        let rows = try await session.run("SELECT value FROM server_state WHERE name = 'publishedVersion'")
        return rows.first.flatMap { $0.optionalText("value") }.flatMap { Int64($0) } ?? 0
    }
}

/// The names of a bundle's files, as SharedStore's BundleManifest names them.
enum BundleNames {
    static let manifest = BundleManifest.fileName
    static let signature = BundleManifest.signatureFileName
    static let store = BundleManifest.storeFileName
    static let policy = BundleManifest.policyFileName
}
