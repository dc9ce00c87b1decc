import HallpassSystem
public import SharedStore

/// The school's bundle folder, written again for each new version so that a
/// machine fetches what changed and no more:
///
/// - a file whose bytes did not change is left as it is (same bytes, same
///   modification time, so a server's ETag and a CDN's cache stay);
/// - the store it replaces is kept in `.previous/` (at most `keepVersions`,
///   the oldest dropped first) and a delta from each kept store to the new
///   one is written beside the files (`rules.hpstore.<from>-<to>.zst`, 16 hex
///   digits of each SHA-256), for the manifest's `delta` lines;
/// - deltas no manifest names any more are removed once the new manifest is
///   in place.
///
/// ```
/// bundle/
///   manifest  manifest.sig  rules.hpstore  policy.yaml
///   rules.hpstore.60303ae22b998861-9f86d081884c7d65.zst
///   .previous/rules.hpstore.60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
///   .previous/order      the kept stores' SHA-256s, newest first
/// ```
///
/// `.previous/` is the publisher's own memory: nothing fetches it (bundle
/// names never start with a dot), and it need not be published.
public struct BundleFolder: Sendable {
    public let directory: String
    /// Earlier stores kept to make deltas from; 0 keeps none and writes no deltas.
    public let keepVersions: Int

    public static let previousFolderName = ".previous"
    static let orderFileName = "order"

    public init(path: String, keepVersions: Int) {
        self.directory = path
        self.keepVersions = keepVersions
    }

    public func path(_ name: String) -> String { directory + "/" + name }
    var previousFolder: String { path(BundleFolder.previousFolderName) }

    /// What a build did with the folder's files.
    public struct Report: Sendable, Hashable {
        /// Files whose bytes were the same already: not written.
        public var unchanged: [String] = []
        public var written: [String] = []
        /// Deltas that were in the folder already (same two versions): not made again.
        public var reusedDeltas: [String] = []
    }

    /// Writes each file whose bytes differ from the folder's copy (the manifest
    /// gives the new SHA-256s); the store it replaces goes to `.previous/`.
    public func writeFiles(_ files: [(name: String, contents: [UInt8])], of manifest: BundleManifest) throws -> Report {
        var report = Report()
        for (name, contents) in files {
            guard let entry = manifest.files.first(where: { $0.name == name }) else { continue }
            let target = path(name)
            let existing = BundleVerifier.sha256(ofFileAt: target)
            if existing?.sha256 == entry.sha256 {
                report.unchanged.append(name)
                continue
            }
            if let existing, name == BundleManifest.storeFileName, keepVersions > 0 {
                try retire(target, name: name, sha256: existing.sha256)
            }
            try AtomicFile.write(contents, to: target, mode: 0o644)
            report.written.append(name)
        }
        return report
    }

    /// Moves the store being replaced into `.previous/` and drops the oldest
    /// kept stores beyond `keepVersions`.
    func retire(_ file: String, name: String, sha256: String) throws {
        try FileSystem.makeDirectories(previousFolder)
        var order = keptOrder().filter { $0 != sha256 }
        try FileSystem.rename(file, to: previousFolder + "/" + name + "." + sha256)
        order.insert(sha256, at: 0)
        for dropped in order.dropFirst(keepVersions) { FileSystem.remove(previousFolder + "/" + name + "." + dropped) }
        order = Array(order.prefix(keepVersions))
        try AtomicFile.write(Array(order.map { $0 + "\n" }.joined().utf8), to: previousFolder + "/" + BundleFolder.orderFileName, mode: 0o644)
    }

    /// The kept stores' SHA-256s, newest first, that are still there.
    func keptOrder() -> [String] {
        guard let bytes = try? BoundedFile.read(previousFolder + "/" + BundleFolder.orderFileName, limit: 64 * 1024) else { return [] }
        return String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init).filter {
            $0.utf8.count == 64 && FileSystem.exists(previousFolder + "/" + BundleManifest.storeFileName + "." + $0)
        }
    }

    /// The delta's file name for `target` from the version whose SHA-256 is `base`.
    public static func deltaName(target: BundleManifest.File, base: String) -> String {
        "\(target.name).\(base.prefix(16))-\(target.sha256.prefix(16)).zst"
    }

    /// Makes (or keeps, when the folder has it) a delta to `target` from each
    /// kept earlier version, newest first; a delta no smaller than the file is left out.
    public func writeDeltas(to target: BundleManifest.File, report: inout Report, level: Int32 = ZstdPatch.defaultLevel) throws
        -> [BundleManifest.Delta]
    {
        guard keepVersions > 0 else { return [] }
        var deltas: [BundleManifest.Delta] = []
        for base in keptOrder().prefix(keepVersions) where base != target.sha256 {
            let name = BundleFolder.deltaName(target: target, base: base)
            if let existing = BundleVerifier.sha256(ofFileAt: path(name)) {
                report.reusedDeltas.append(name)
                deltas.append(.init(name: name, size: existing.size, sha256: existing.sha256, target: target.name, baseSHA256: base))
                continue
            }
            let bytes = try ZstdPatch.make(base: previousFolder + "/" + target.name + "." + base, target: path(target.name), level: level)
            guard UInt64(bytes.count) < target.size else { continue }
            try AtomicFile.write(bytes, to: path(name), mode: 0o644)
            guard let written = BundleVerifier.sha256(ofFileAt: path(name)) else { throw ZstdPatch.Failure("cannot read back \(path(name))") }
            deltas.append(.init(name: name, size: written.size, sha256: written.sha256, target: target.name, baseSHA256: base))
        }
        return deltas
    }

    /// Removes the folder's delta files that `kept` does not name (after the new
    /// manifest is in place: a machine that read the old one and asks for an old
    /// delta gets a 404 and fetches the whole file).
    public func removeDeltas(except kept: [BundleManifest.Delta]) {
        let names = Set(kept.map(\.name))
        for name in FileSystem.names(in: directory) where BundleFolder.isDeltaName(name) && !names.contains(name) {
            FileSystem.remove(path(name))
        }
    }

    /// `rules.hpstore.<16 hex>-<16 hex>.zst`.
    static func isDeltaName(_ name: String) -> Bool {
        let prefix = BundleManifest.storeFileName + "."
        guard name.hasPrefix(prefix), name.hasSuffix(".zst") else { return false }
        let middle = name.dropFirst(prefix.count).dropLast(4)
        let parts = middle.split(separator: "-", omittingEmptySubsequences: false)
        return parts.count == 2 && parts.allSatisfy { $0.utf8.count == 16 && $0.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) } }
    }
}
