import BundleBuilder
import Foundation
import HallpassSystem
public import SharedStore

/// What the `policy` and `publish` commands do and print, apart from
/// argument parsing, so that tests run the same code on both engines.
extension ServerAdministration {
    /// Makes the bundle signing key (PKCS#8 PEM, 0600) unless the key is
    /// offline or the file exists (a key is never overwritten: machines trust
    /// it). Returns the public key when it made one.
    public static func makeSigningKey(configuration: ServerConfiguration) throws -> BundlePublicKey? {
        guard let path = configuration.signingKeyPath, !FileSystem.exists(path) else { return nil }
        let key = BundleSigningKey()
        do {
            try FileSystem.makeDirectories((path as NSString).deletingLastPathComponent, mode: 0o750)
            try AtomicFile.createNew(Array(key.pem.utf8), at: path, mode: 0o600)
        } catch {
            throw ServerError(code: "publishing.signing-key", message: "cannot make the bundle signing key \(path): \(error)")
        }
        return key.publicKey
    }

    /// The lists of `[CATEGORY=]PATH` sources, as `filterctl compile` reads
    /// them: a list file (its category the file name without its extension),
    /// a category folder holding `domains` and/or `urls` (its category the
    /// folder's name), or a UT1 folder of such category folders. A category's
    /// `domains` and `urls` become one list.
    public static func readListSources(_ sources: [String], maxBytes: Int) throws -> [PolicyEditor.NamedList] {
        var lists: [PolicyEditor.NamedList] = []
        let files = FileManager.default
        func read(_ path: String) throws -> [UInt8] {
            do {
                return try BoundedFile.read(path, limit: UInt64(maxBytes), followingLinks: true)
            } catch .tooLarge {
                throw PublishingError(.invalid, "list-too-large", "\(path) is larger than publishing.maxListBytes (\(maxBytes) bytes)")
            } catch {
                throw PublishingError(.invalid, "list-unreadable", "cannot read \(path): \(error)")
            }
        }
        func categoryFolder(_ folder: String, category: String) throws -> PolicyEditor.NamedList? {
            let parts = ["domains", "urls"].filter { files.fileExists(atPath: folder + "/" + $0) }
            guard !parts.isEmpty else { return nil }
            var bytes: [UInt8] = []
            for part in parts {
                let contents = try read(folder + "/" + part)
                bytes += contents
                if let last = contents.last, last != UInt8(ascii: "\n") { bytes.append(UInt8(ascii: "\n")) }
            }
            guard bytes.count <= maxBytes else {
                throw PublishingError(.invalid, "list-too-large", "\(folder) is larger than publishing.maxListBytes (\(maxBytes) bytes)")
            }
            return PolicyEditor.NamedList(category: category.lowercased(), bytes: bytes)
        }
        for text in sources {
            let spec = RuleCompiler.SourceSpec(text)
            guard FileSystem.exists(spec.path) else {
                throw PublishingError(.invalid, "list-unreadable", "\(spec.path): no such file or folder")
            }
            let name = (spec.path as NSString).lastPathComponent
            if !FileSystem.isDirectory(spec.path) {
                let stem = name.contains(".") ? String(name[..<name.lastIndex(of: ".")!]) : name
                lists.append(PolicyEditor.NamedList(category: (spec.category ?? stem).lowercased(), bytes: try read(spec.path)))
                continue
            }
            if let own = try categoryFolder(spec.path, category: spec.category ?? name) {
                lists.append(own)
                continue
            }
            guard spec.category == nil else {
                throw PublishingError(
                    .invalid, "list-unreadable", "\(spec.path): a CATEGORY= prefix needs a list file or a folder holding 'domains' or 'urls'")
            }
            let found = try (files.contentsOfDirectory(atPath: spec.path).sorted()).compactMap { entry in
                try categoryFolder(spec.path + "/" + entry, category: entry)
            }
            guard !found.isEmpty else {
                throw PublishingError(.invalid, "list-unreadable", "\(spec.path): no category folders with 'domains' or 'urls' files found")
            }
            lists += found
        }
        return lists
    }

    // MARK: What the commands print

    /// `policy show [N]`.
    public static func policyText(_ version: StoredPolicyVersion) -> String {
        var lines = ["policy version \(version.version), \(time(version.createdAt)) by \(version.author): \(version.reason)"]
        if version.lists.isEmpty {
            lines.append("lists: none")
        } else {
            lines.append("lists:")
            for list in version.lists {
                let names = String(list.names).padded(12)
                lines.append("  \(list.category.padded(24))\(names)sha256 \(list.sha256.prefix(16))")
            }
        }
        if let policy = version.policy {
            lines.append("policy file:")
            lines.append(policy.hasSuffix("\n") ? String(policy.dropLast()) : policy)
        } else {
            lines.append("policy file: none (machines apply their own hallpass.yaml policy)")
        }
        return lines.joined(separator: "\n")
    }

    /// `policy history`: newest first, each with the bundles it was published as.
    public static func historyText(storage: any ServerStorage) async throws -> String {
        var bundles: [Int64: [Int64]] = [:]
        for publication in try await storage.publications() where publication.state == .published {
            bundles[publication.policyVersion, default: []].append(publication.bundleVersion)
        }
        var lines = ["VERSION  TIME                  AUTHOR              REASON"]
        var before: Int64? = nil
        while true {
            let page = try await storage.policyVersions(before: before, limit: 500)
            for version in page {
                let number = String(version.version).padded(9)
                var line = "\(number)\(time(version.createdAt).padded(22))\(version.author.padded(20))\(version.reason)"
                if let published = bundles[version.version] {
                    line += "  (published as bundle " + published.sorted().map(String.init).joined(separator: ", ") + ")"
                }
                lines.append(line)
            }
            guard page.count == 500, let last = page.last else { break }
            before = last.version
        }
        return lines.joined(separator: "\n")
    }

    /// `policy diff A B`.
    public static func diffText(storage: any ServerStorage, from: Int64, to: Int64) async throws -> String {
        let diff = try await PolicyDiffer(storage: storage).diff(from: from, to: to)
        var lines: [String] = []
        if diff.policy.isEmpty {
            lines.append("policy: the same")
        } else {
            lines += diff.policy
        }
        if diff.lists.isEmpty { lines.append("lists: the same") }
        for list in diff.lists {
            let what = list.fromSHA256 == nil ? " (new)" : list.toSHA256 == nil ? " (removed)" : ""
            lines.append("list \(list.category)\(what): \(list.added) added, \(list.removed) removed")
            for name in list.addedNames { lines.append("  + " + name) }
            if list.added > list.addedNames.count { lines.append("  + ... \(list.added - list.addedNames.count) more") }
            for name in list.removedNames { lines.append("  - " + name) }
            if list.removed > list.removedNames.count { lines.append("  - ... \(list.removed - list.removedNames.count) more") }
        }
        return lines.joined(separator: "\n")
    }

    /// What `publish` prints.
    public static func publishText(_ outcome: Publisher.Outcome, publisher: Publisher) -> String {
        let publication = outcome.publication
        guard publication.state == .published else {
            let file = publisher.pendingManifestPath
            return "prepared bundle version \(publication.bundleVersion); sign \(file) with: filterctl bundle sign --key KEY \(file) --out manifest.sig; "
                + "then: hallpass-server publish complete manifest.sig"
        }
        var lines = ["published bundle version \(publication.bundleVersion) (policy version \(publication.policyVersion)): \(publication.reason)"]
        for file in outcome.manifest.files {
            let before = outcome.previous?.file(named: file.name)
            let state = before == nil ? "new" : before?.sha256 == file.sha256 ? "unchanged" : "changed"
            lines.append("  \(file.name.padded(16))\("\(file.size) bytes".padded(18))\(state)")
        }
        if let previous = outcome.previous {
            for file in previous.files
            where (file.name == BundleManifest.storeFileName || file.name == BundleManifest.policyFileName)
                && !outcome.manifest.files.contains(where: { $0.name == file.name })
            {
                lines.append("  \(file.name.padded(16))removed")
            }
        }
        for delta in outcome.manifest.deltas {
            lines.append("  delta \(delta.name): \(delta.size) bytes, from \(delta.baseSHA256.prefix(16))")
        }
        lines.append("store: \(outcome.storeNames) names; machines trust " + publisher.trustedKeys.map(\.description).joined(separator: ", "))
        lines += outcome.warnings.map { "warning: " + $0 }
        return lines.joined(separator: "\n")
    }

    /// `publish status`.
    public static func statusText(storage: any ServerStorage, publisher: Publisher) async throws -> String {
        func describe(_ publication: StoredPublication) -> String {
            let files = publication.files.filter { $0.name != BundleManifest.fileName && $0.name != BundleManifest.signatureFileName }
            return "bundle version \(publication.bundleVersion) (policy version \(publication.policyVersion)), "
                + "\(time(publication.publishedAt ?? publication.createdAt)) by \(publication.author): \(publication.reason)\n"
                + files.map { "  \($0.name.padded(40))\($0.size) bytes  sha256 \($0.sha256.prefix(16))" }.joined(separator: "\n")
        }
        var lines: [String] = []
        lines.append("published: " + (try await storage.currentPublication().map(describe) ?? "none"))
        if let pending = try await storage.pendingPublication() {
            lines.append("pending (waiting for the offline key's signature): " + describe(pending))
        }
        lines.append("signing key: " + (publisher.configuration.publishing.offline ? "offline" : publisher.configuration.signingKeyPath ?? "-"))
        lines.append("machines trust: " + (publisher.trustedKeys.isEmpty ? "nothing yet (run hallpass-server init)" : publisher.trustedKeys.map(\.description).joined(separator: ", ")))
        return lines.joined(separator: "\n")
    }

    static func time(_ seconds: Int64) -> String {
        UTCTime.format(seconds)
    }
}

extension String {
    fileprivate func padded(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
