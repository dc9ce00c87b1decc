public import BundleBuilder
public import BundleDelta
import Foundation
import HallpassSystem
public import Logging
public import SharedStore

/// Builds, signs and publishes the school's bundles (docs/server.md,
/// "Publishing"), as `filterctl bundle build` does: the lists compiled by
/// RuleCompiler (with hallpass's own protection lists), the folder written by
/// BundleWriter (unchanged files kept byte for byte, deltas from the kept
/// earlier stores). The folder is the publisher's workspace
/// (`<state>/publish/bundle`); what machines are served is the publication
/// stored in the database with its files, so that every server instance on
/// one PostgreSQL serves the same.
///
/// One publish at a time: within the process by a gate, between processes
/// on this host (the command line beside the server) by a lock file on the
/// folder, and between hosts by the storage's numbering under its lock.
public final class Publisher: Sendable {
    public let configuration: ServerConfiguration
    public let storage: any ServerStorage
    /// nil with `signingKey: offline`, or before `init` made the key.
    public let signingKey: BundleSigningKey?
    /// What machines trust: `publishing.trustedKeys`, or the signing key's public key.
    public let trustedKeys: [BundlePublicKey]
    public let cache: BundleFileCache
    let logger: Logger
    /// Where hallpass's own protection lists are, found when a store is built.
    let protections: @Sendable () throws -> ProtectionLists
    private let gate = SerialGate()

    public init(
        configuration: ServerConfiguration, storage: any ServerStorage, signingKey: BundleSigningKey?, logger: Logger,
        protections: @escaping @Sendable () throws -> ProtectionLists = { try ServerProtectionLists.locate() }
    ) {
        self.configuration = configuration
        self.storage = storage
        self.signingKey = signingKey
        self.trustedKeys = configuration.publishing.trustedKeys.isEmpty ? signingKey.map { [$0.publicKey] } ?? [] : configuration.publishing.trustedKeys
        self.cache = BundleFileCache(directory: configuration.stateDirectory + "/bundle-cache", storage: storage)
        self.logger = logger
        self.protections = protections
    }

    /// The publisher of `configuration`, with its signing key read from its
    /// file (none with an offline key; none yet when the file is missing:
    /// publishing then says to run `init`).
    public static func load(configuration: ServerConfiguration, storage: any ServerStorage, logger: Logger) throws -> Publisher {
        var key: BundleSigningKey? = nil
        if let path = configuration.signingKeyPath, FileSystem.exists(path) {
            let bytes: [UInt8]
            do {
                bytes = try BoundedFile.read(path, limit: 64 * 1024, followingLinks: true)
            } catch {
                throw PublishingError(.failed, "signing-key", "cannot read the signing key \(path): \(error)")
            }
            do {
                key = try BundleSigningKey(pem: String(decoding: bytes, as: UTF8.self))
            } catch {
                throw PublishingError(.failed, "signing-key", "\(path): \(error)")
            }
        }
        return Publisher(configuration: configuration, storage: storage, signingKey: key, logger: logger)
    }

    /// Whether machines are told where to fetch bundles (the enrol reply's `bundles`).
    public var publishes: Bool { !trustedKeys.isEmpty }

    var folder: BundleFolder {
        BundleFolder(path: configuration.stateDirectory + "/publish/bundle", keepVersions: configuration.publishing.keepVersions)
    }

    var lockPath: String { configuration.stateDirectory + "/publish/lock" }

    /// Where `publish` leaves a pending manifest for the offline key's holder.
    public var pendingManifestPath: String { configuration.stateDirectory + "/publish/pending-manifest" }

    /// What a publish did.
    public struct Outcome: Sendable {
        public var publication: StoredPublication
        public var manifest: BundleManifest
        /// The files written and those kept byte for byte.
        public var report: BundleFolder.Report
        /// The publication machines had before (for "changed").
        public var previous: StoredPublication?
        public var storeNames: Int
        /// What the server found that machines will not like (PolicyChecks.liveWarnings).
        public var warnings: [String] = []
    }

    /// Builds the bundle of policy version `policyVersion` (the latest when
    /// nil) and publishes it, or, with an offline key, leaves it pending.
    public func publish(reason: String?, policyVersion: Int64?, author: String, now: Int64) async throws -> Outcome {
        let reason = try PolicyChecks.reason(reason)
        if signingKey == nil && !configuration.publishing.offline {
            throw PublishingError(
                .conflict, "no-signing-key",
                "there is no signing key at \(configuration.signingKeyPath ?? "-"); `hallpass-server init` makes one (or set publishing.signingKey: offline)")
        }
        let version: StoredPolicyVersion
        if let policyVersion {
            guard let found = try await storage.policyVersion(policyVersion) else {
                throw PublishingError(.notFound, "version-unknown", "there is no policy version \(policyVersion)")
            }
            version = found
        } else {
            guard let latest = try await storage.latestPolicyVersion() else {
                throw PublishingError(.conflict, "no-policy", "there is no policy version yet: make one with `hallpass-server policy set`")
            }
            version = latest
        }
        await gate.enter()
        do {
            var outcome = try await withFolderLock { try await build(version, reason: reason, author: author, now: now) }
            await gate.leave()
            let keyPath = LiveKey.path(configuration: configuration)
            let liveKey = FileSystem.exists(keyPath) ? (try? LiveKey.load(path: keyPath))?.publicText : nil
            outcome.warnings = PolicyChecks.liveWarnings(policy: version.policy, liveKey: liveKey)
            for warning in outcome.warnings { logger.warning("\(warning)") }
            return outcome
        } catch {
            await gate.leave()
            throw error
        }
    }

    /// Publishes the pending bundle with `signature` (the bytes of
    /// `manifest.sig`) when it verifies with one of the trusted keys.
    public func complete(signature: [UInt8], now: Int64) async throws -> StoredPublication {
        guard let pending = try await storage.pendingPublication() else {
            throw PublishingError(.conflict, "nothing-pending", "no bundle is waiting for a signature (hallpass-server publish status)")
        }
        guard signature.count <= BundleManifest.maximumSignatureBytes else {
            throw PublishingError(.invalid, "signature-invalid", "a signature file is at most \(BundleManifest.maximumSignatureBytes) bytes")
        }
        do {
            _ = try BundleVerifier(signatures: .trusted(trustedKeys), now: now).verifyManifest(pending.manifest, signature: signature)
        } catch {
            throw PublishingError(
                .invalid, "signature-invalid", "the signature does not publish bundle version \(pending.bundleVersion): \(error.description)")
        }
        await gate.enter()
        do {
            let published = try await withFolderLock { () async throws -> StoredPublication in
                guard let published = try await storage.completePublication(bundleVersion: pending.bundleVersion, signature: signature, now: now)
                else {
                    throw PublishingError(.conflict, "nothing-pending", "bundle version \(pending.bundleVersion) is no longer pending")
                }
                let manifest = try BundleManifest(parsing: published.manifest)
                // The folder holds the staged files when this host prepared the bundle.
                if FileSystem.exists(folder.directory) {
                    let store = manifest.files.first { $0.name == BundleManifest.storeFileName }
                    if store == nil || BundleVerifier.sha256(ofFileAt: folder.path(BundleManifest.storeFileName))?.sha256 == store?.sha256 {
                        try seal(folder: folder, manifest: manifest, manifestBytes: published.manifest, signature: signature)
                    }
                }
                try await copy(published, manifest: manifest)
                return published
            }
            await gate.leave()
            await prune()
            FileSystem.remove(pendingManifestPath)
            logger.notice(
                "published a bundle signed offline",
                metadata: ["hallpass.bundle.version": "\(published.bundleVersion)", "hallpass.policy.version": "\(published.policyVersion)"])
            return published
        } catch {
            await gate.leave()
            throw error
        }
    }

    // MARK: Building

    private func build(_ version: StoredPolicyVersion, reason: String, author: String, now: Int64) async throws -> Outcome {
        let previous = try await storage.currentPublication()
        let work = configuration.stateDirectory + "/publish/work/build-" + Secrets.randomBase32(count: 12)
        defer { FileSystem.removeTree(work) }
        var specs: [RuleCompiler.SourceSpec] = []
        do {
            try FileSystem.makeDirectories(work, mode: 0o750)
            for (index, list) in version.lists.enumerated() {
                guard let bytes = try await storage.listContent(sha256: list.sha256) else {
                    throw PublishingError(.failed, "list-missing", "the list \(list.category) (\(list.sha256.prefix(16))) is not in the database")
                }
                let path = work + "/list-\(index)"
                try AtomicFile.write(bytes, to: path, mode: 0o600)
                specs.append(RuleCompiler.SourceSpec(list.category + "=" + path))
            }
        } catch let error as PublishingError {
            throw error
        } catch {
            throw PublishingError(.failed, "work-folder", "cannot write the lists to \(work): \(error)")
        }
        let result: RuleCompiler.Result
        do {
            var protections: ProtectionLists? = nil
            if configuration.publishing.builtinProtections { protections = try self.protections() }
            if specs.isEmpty, let lists = protections {
                // No list of the school's: the store is hallpass's own lists (RuleCompiler needs a source).
                specs = ProtectionLists.categories.map { RuleCompiler.SourceSpec($0 + "=" + lists.listFile(of: $0)) }
                result = try RuleCompiler().compile(
                    specs, version: 0, metadata: [RuleCompiler.protectionsMetadataKey: ProtectionLists.categories.joined(separator: " ")])
            } else {
                // Version 0 and no build time, as `filterctl bundle build`: equal rules give a
                // byte-identical store, which a machine that has it does not fetch again.
                result = try RuleCompiler().compile(specs, version: 0, protections: protections)
            }
        } catch let error as PublishingError {
            throw error
        } catch let error as RuleCompiler.CompileError {
            throw PublishingError(.invalid, "list-invalid", "policy version \(version.version) does not compile: \(error.message)")
        }
        var files = [(name: BundleManifest.storeFileName, contents: result.bytes)]
        if let policy = version.policy { files.append((name: BundleManifest.policyFileName, contents: Array(policy.utf8))) }

        let folder = self.folder
        try await catchUp(folder, with: previous)
        let writer = BundleWriter(folder: folder)
        var staged: BundleWriter.Staged
        do {
            // The version is the storage's to give; the manifest's bytes are made again with it below.
            staged = try writer.stage(
                files: files, version: 0, issuedAt: now, expiresAt: now + Int64(configuration.publishing.expires))
        } catch {
            throw PublishingError(.failed, "bundle-folder", "cannot write the bundle folder \(folder.directory): \(error)")
        }
        var stored: [(file: PublishedFile, bytes: [UInt8])] = files.map {
            (file: PublishedFile(name: $0.name, sha256: Secrets.sha256($0.contents), size: Int64($0.contents.count)), bytes: $0.contents)
        }
        for delta in staged.manifest.deltas {
            let bytes: [UInt8]
            do {
                bytes = try BoundedFile.read(folder.path(delta.name), limit: BundleManifest.maximumFileBytes)
            } catch {
                throw PublishingError(.failed, "bundle-folder", "cannot read the delta \(folder.path(delta.name)): \(error)")
            }
            stored.append((file: PublishedFile(name: delta.name, sha256: delta.sha256, size: Int64(delta.size)), bytes: bytes))
        }
        let manifestTemplate = staged.manifest
        let key = signingKey
        let publication = try await storage.addPublication(
            NewPublication(policyVersion: version.version, author: author, reason: reason, files: stored), now: now
        ) { bundleVersion in
            var manifest = manifestTemplate
            manifest.version = UInt64(bundleVersion)
            let bytes = manifest.encoded
            return SignedManifest(manifest: bytes, signature: try key.map { try $0.signatureFile(for: bytes) })
        }
        staged.manifest.version = UInt64(publication.bundleVersion)
        // What is served comes from the cache: fill it now with the bytes at hand.
        for (file, bytes) in stored { cache.put(file, bytes) }
        if let signature = publication.signature {
            try seal(folder: folder, manifest: staged.manifest, manifestBytes: publication.manifest, signature: signature)
            try await copy(publication, manifest: staged.manifest)
            logger.notice(
                "published a bundle",
                metadata: [
                    "hallpass.bundle.version": "\(publication.bundleVersion)", "hallpass.policy.version": "\(version.version)",
                    "hallpass.publish.author": "\(author)",
                ])
        } else {
            do {
                try FileSystem.makeDirectories(configuration.stateDirectory + "/publish", mode: 0o750)
                try AtomicFile.write(publication.manifest, to: pendingManifestPath, mode: 0o640)
            } catch {
                throw PublishingError(.failed, "bundle-folder", "cannot write the pending manifest \(pendingManifestPath): \(error)")
            }
            logger.notice(
                "prepared a bundle for the offline key",
                metadata: ["hallpass.bundle.version": "\(publication.bundleVersion)", "hallpass.policy.version": "\(version.version)"])
        }
        await prune()
        return Outcome(
            publication: publication, manifest: staged.manifest, report: staged.report, previous: previous,
            storeNames: result.report.acceptedRules)
    }

    /// Puts the current publication's store in the folder when the folder
    /// holds another (or none): the folder of a new instance, or of one that
    /// another instance on the same PostgreSQL published past. Written as the
    /// folder writes a new store, so the one it replaces is kept in
    /// `.previous/`, and the new store gets a delta from the store machines have.
    private func catchUp(_ folder: BundleFolder, with current: StoredPublication?) async throws {
        guard configuration.publishing.keepVersions > 0, let current, let store = current.file(named: BundleManifest.storeFileName),
            BundleVerifier.sha256(ofFileAt: folder.path(BundleManifest.storeFileName))?.sha256 != store.sha256
        else { return }
        do {
            let manifest = try BundleManifest(parsing: current.manifest)
            let bytes = try BoundedFile.read(try await cache.path(for: store), limit: BundleManifest.maximumFileBytes)
            try FileSystem.makeDirectories(folder.directory, mode: 0o750)
            _ = try folder.writeFiles([(name: BundleManifest.storeFileName, contents: bytes)], of: manifest)
        } catch {
            // Only the delta from that store is lost: the whole store is the machines' fallback.
            logger.warning(
                "cannot put the published store in the bundle folder; no delta from it",
                metadata: ["hallpass.bundle.version": "\(current.bundleVersion)", "hallpass.error": "\(error)"])
        }
    }

    /// How many of the newest publications keep their files' bytes: the
    /// current one, and as many before it as the folder keeps stores, so that
    /// an instance that read the publication just before a publish still finds
    /// its files. Older publications keep their names and hashes (history).
    var publicationsKeptWhole: Int { max(2, configuration.publishing.keepVersions + 1) }

    /// Removes the bytes of older publications' files from the database and
    /// from this instance's cache. A failure costs only space, so it is logged.
    func prune() async {
        let keep = publicationsKeptWhole
        do {
            let removed = try await storage.pruneBundleFiles(keepingPublished: keep)
            var kept = Set<String>()
            var published = 0
            for publication in try await storage.publications() {
                if publication.state == .published {
                    guard published < keep else { continue }
                    published += 1
                }
                kept.formUnion(publication.files.map(\.sha256))
            }
            cache.remove(except: kept)
            if removed > 0 {
                logger.info("removed the files of older publications", metadata: ["hallpass.bundle.files.removed": "\(removed)"])
            }
        } catch {
            logger.warning("cannot remove the files of older publications", metadata: ["hallpass.error": "\(error)"])
        }
    }

    /// The signature, then the manifest (a machine that reads the new manifest
    /// finds all it names), then the deltas it no longer names go.
    private func seal(folder: BundleFolder, manifest: BundleManifest, manifestBytes: [UInt8], signature: [UInt8]) throws {
        do {
            try AtomicFile.write(signature, to: folder.path(BundleManifest.signatureFileName), mode: 0o644)
            try AtomicFile.write(manifestBytes, to: folder.path(BundleManifest.fileName), mode: 0o644)
        } catch {
            throw PublishingError(.failed, "bundle-folder", "cannot write the bundle folder \(folder.directory): \(error)")
        }
        folder.removeDeltas(except: manifest.deltas)
    }

    /// Writes the publication to `publishing.copyTo` in the same order: the
    /// files whose bytes differ, the signature, the manifest, then what the
    /// manifest no longer names goes.
    func copy(_ publication: StoredPublication, manifest: BundleManifest) async throws {
        guard let target = configuration.publishing.copyTo else { return }
        do {
            try FileSystem.makeDirectories(target, mode: 0o755)
            let last = [BundleManifest.signatureFileName, BundleManifest.fileName]
            let ordered = publication.files.filter { !last.contains($0.name) } + last.compactMap { publication.file(named: $0) }
            for file in ordered {
                let path = target + "/" + file.name
                if BundleVerifier.sha256(ofFileAt: path)?.sha256 == file.sha256 { continue }
                let source = try await cache.path(for: file)
                let bytes = try BoundedFile.read(source, limit: BundleManifest.maximumFileBytes)
                try AtomicFile.write(bytes, to: path, mode: 0o644)
            }
        } catch {
            throw PublishingError(.failed, "copy-to", "bundle version \(publication.bundleVersion) is published, but writing it to publishing.copyTo \(target) failed: \(error)")
        }
        BundleFolder(path: target, keepVersions: 0).removeDeltas(except: manifest.deltas)
        if publication.file(named: BundleManifest.policyFileName) == nil { FileSystem.remove(target + "/" + BundleManifest.policyFileName) }
    }

    /// Runs `body` holding the lock file of the publisher's folder, waiting for
    /// another process (the command line beside the server) to let it go.
    private func withFolderLock<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let path = lockPath
        do {
            try FileSystem.makeDirectories(configuration.stateDirectory + "/publish", mode: 0o750)
        } catch {
            throw PublishingError(.failed, "bundle-folder", "cannot make \(configuration.stateDirectory)/publish: \(error)")
        }
        var lock: FileLock? = nil
        for attempt in 0..<6000 {
            do {
                lock = try FileLock(path)
            } catch {
                throw PublishingError(.failed, "bundle-folder", "cannot lock \(path): \(error)")
            }
            if lock != nil { break }
            if attempt == 0 { logger.info("waiting for another publish to finish", metadata: ["hallpass.publish.lock": "\(path)"]) }
            try await Task.sleep(for: .milliseconds(100))
        }
        guard let held = lock else {
            throw PublishingError(.conflict, "publish-busy", "another publish has held \(path) for ten minutes")
        }
        defer { held.release() }
        return try await body()
    }
}

/// Where hallpass-server finds hallpass's own protection lists: the server's
/// package puts them in `/usr/share/hallpass-server/bypass` (beside
/// /usr/sbin: `../share/hallpass-server/bypass`), apart from the machine
/// package's `/usr/share/hallpass/bypass`, so that both packages install on
/// one host; failing that, where filterctl finds them (the machine's
/// package, or the source tree's `rules/bypass` for a program built in it).
public enum ServerProtectionLists {
    public static let installedFolder = "../share/hallpass-server/bypass"

    public static func locate() throws -> ProtectionLists {
        let executable = FileSystem.linkTarget("/proc/self/exe") ?? CommandLine.arguments[0]
        let own = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent(installedFolder).standardized.path
        let lists = ProtectionLists(folder: own)
        if ProtectionLists.categories.allSatisfy({ FileManager.default.isReadableFile(atPath: lists.listFile(of: $0)) }) { return lists }
        do {
            return try ProtectionLists.forThisProgram()
        } catch {
            throw PublishingError(
                .failed, "protections-missing",
                "hallpass's own protection lists (categories \(ProtectionLists.categories.joined(separator: ", "))) are missing: no "
                    + "\(lists.listFile(of: ProtectionLists.categories[0])) (looked there and in \(error.places.joined(separator: " and "))); "
                    + "the hallpass-server package and 'make install-server' put them there: install it again, "
                    + "or set publishing.builtinProtections: false")
        }
    }
}
