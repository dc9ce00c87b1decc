import BundleDelta
import HallpassSystem
import NIOCore
import SharedStore
import SystemPackage

/// How often and how patiently a request is tried again after a transient
/// failure (``RuleUpdateError/isTransient``: the server unreachable or slow,
/// a 5xx answer, a connection cut short). A bundle that fails verification
/// is never tried again.
public struct RetryPolicy: Sendable, Hashable {
    /// Tries in all, the first included.
    public var attempts: Int
    /// The wait before the second try; it doubles for each further try.
    public var firstDelay: Duration
    /// The longest wait between two tries.
    public var maximumDelay: Duration

    public init(attempts: Int = 4, firstDelay: Duration = .seconds(2), maximumDelay: Duration = .seconds(30)) {
        self.attempts = max(1, attempts)
        self.firstDelay = firstDelay
        self.maximumDelay = maximumDelay
    }

    /// The wait before try `attempt + 1` (attempt counts from 1): the doubled
    /// delay, capped, then scaled by a random factor in 0.5...1 so that a
    /// fleet of machines does not retry in step.
    public func delay(after attempt: Int, random: Double) -> Duration {
        var delay = firstDelay
        for _ in 1..<max(1, attempt) where delay < maximumDelay { delay *= 2 }
        delay = min(delay, maximumDelay)
        return delay * (0.5 + 0.5 * min(max(random, 0), 1))
    }
}

/// Where the bytes of a bundle come from: the school's HTTPS server or a local folder.
protocol BundleTransport: Sendable {
    /// Copies the bundle file `name` into `file`, refusing more than `limit`
    /// bytes. With `ifNoneMatch`, a server may answer "not modified" (nil).
    /// Returns the entity tag the server sent, if any.
    func fetch(_ name: String, into file: NewFile, limit: UInt64, ifNoneMatch: String?) async throws(RuleUpdateError)
        -> FetchedFile?

    /// Describes the place for the state file and messages.
    var source: String { get }
}

struct FetchedFile: Sendable, Hashable {
    var etag: String?
    var byteCount: UInt64
}

/// Files from `https://host:port/path/NAME`, each request tried again after
/// transient failures with jittered exponential backoff.
struct HTTPSTransport: BundleTransport {
    let client: HTTPSClient
    let host: String
    let port: Int
    let path: String
    let retry: RetryPolicy
    let source: String

    func fetch(_ name: String, into file: NewFile, limit: UInt64, ifNoneMatch: String?) async throws(RuleUpdateError)
        -> FetchedFile?
    {
        var attempt = 1
        while true {
            do {
                let response = try await client.get(
                    host: host, port: port, path: path + name, file: name, ifNoneMatch: ifNoneMatch, limit: limit
                ) { (buffer: ByteBuffer) throws(RuleUpdateError) in
                    try inRuleFolder { () throws(FileError) in try file.write(Array(buffer.readableBytesView)) }
                }
                return response.status == 304 ? nil : FetchedFile(etag: response.etag, byteCount: response.byteCount)
            } catch {
                guard error.isTransient, attempt < retry.attempts else { throw error }
                try inRuleFolder { () throws(FileError) in try file.reset() }
                let delay = retry.delay(after: attempt, random: Double.random(in: 0...1))
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    throw .cancelled
                }
                attempt += 1
            }
        }
    }
}

/// Files from a local bundle folder (`file:///...` or a first install from a
/// folder): regular files only, links not followed, the same size limits.
struct DirectoryTransport: BundleTransport {
    let directory: String

    var source: String { BundleSource.directory(path: directory).description }

    func fetch(_ name: String, into file: NewFile, limit: UInt64, ifNoneMatch: String?) async throws(RuleUpdateError)
        -> FetchedFile?
    {
        let path = directory + "/" + name
        // SystemPackage's, not NIOCore's protocol of the same name.
        let descriptor: SystemPackage.FileDescriptor
        do {
            descriptor = try FileSystem.open(path, .readOnly, options: .noFollow)
        } catch .noSuchFileOrDirectory {
            switch name {
            case BundleManifest.fileName: throw .bundle(.missingManifest(path: path))
            case BundleManifest.signatureFileName: throw .bundle(.missingSignature(path: path))
            default: throw .bundle(.missingFile(name: name))
            }
        } catch .tooManySymbolicLinkLevels {
            throw .bundle(.unreadable(path: path, reason: "a symbolic link (not followed)"))
        } catch {
            throw .bundle(.unreadable(path: path, reason: error.description))
        }
        defer { descriptor.closeQuietly() }
        guard let status = try? descriptor.stat(), status.type == .regular else {
            throw .bundle(.unreadable(path: path, reason: "not a regular file"))
        }
        guard UInt64(status.size) <= limit else { throw .tooLarge(file: name, limit: limit) }
        var total: UInt64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count: Int
            do {
                count = try descriptor.readSome(into: &buffer)
            } catch {
                throw .bundle(.unreadable(path: path, reason: error.description))
            }
            if count == 0 { break }
            total += UInt64(count)
            guard total <= limit else { throw .tooLarge(file: name, limit: limit) }
            try inRuleFolder { () throws(FileError) in try file.write(Array(buffer[0..<count])) }
        }
        return FetchedFile(etag: nil, byteCount: total)
    }
}

/// Brings one bundle into a staging folder, checking as it goes: the
/// manifest (at most 64 KiB) and its signature first, then, only if the
/// signed manifest is acceptable, each file it names with its signed size as
/// the limit and `maxBundleBytes` for the whole.
struct BundleFetcher {
    let transport: any BundleTransport
    let verifier: BundleVerifier
    let maxBundleBytes: UInt64

    enum ManifestResult {
        /// The server said 304 to `If-None-Match`.
        case notModified
        /// A manifest whose signature, shape and validity period checked out;
        /// `bytes` the manifest's and the signature's together.
        case verified(BundleManifest, etag: String?, bytes: UInt64)
    }

    /// How the files of one bundle came to the staging folder.
    struct FilesReport: Sendable, Hashable {
        /// Bytes downloaded (deltas and whole files).
        var downloadedBytes: UInt64 = 0
        /// Files this machine had already (an installed version's), linked or copied.
        var kept: [String] = []
        /// Files rebuilt from a delta.
        var patched: [String] = []
        /// Files downloaded whole.
        var downloaded: [String] = []
        /// Deltas that were tried and failed (missing, damaged, a result with the wrong
        /// SHA-256), each with why; their files were downloaded whole.
        var refusedDeltas: [String] = []

        var summary: String {
            var parts: [String] = []
            if !kept.isEmpty { parts.append("kept " + kept.joined(separator: ", ")) }
            if !patched.isEmpty { parts.append("patched " + patched.joined(separator: ", ")) }
            if !downloaded.isEmpty { parts.append("downloaded " + downloaded.joined(separator: ", ")) }
            if !refusedDeltas.isEmpty { parts.append("refused deltas: " + refusedDeltas.joined(separator: "; ")) }
            return parts.isEmpty ? "none" : parts.joined(separator: "; ")
        }
    }

    /// Fetches `manifest` and `manifest.sig` into `staging` and checks them.
    func fetchManifest(into staging: String, etag: String?) async throws(RuleUpdateError) -> ManifestResult {
        let manifestFile = try inRuleFolder { () throws(FileError) in try NewFile(staging + "/" + BundleManifest.fileName) }
        guard
            let fetched = try await transport.fetch(
                BundleManifest.fileName, into: manifestFile, limit: UInt64(BundleManifest.maximumManifestBytes), ifNoneMatch: etag)
        else { return .notModified }
        try inRuleFolder { () throws(FileError) in try manifestFile.finish() }
        let signatureFile = try inRuleFolder { () throws(FileError) in try NewFile(staging + "/" + BundleManifest.signatureFileName) }
        let signature = try await transport.fetch(
            BundleManifest.signatureFileName, into: signatureFile, limit: UInt64(BundleManifest.maximumSignatureBytes), ifNoneMatch: nil)
        try inRuleFolder { () throws(FileError) in try signatureFile.finish() }

        let manifestBytes = try Self.readStaged(staging + "/" + BundleManifest.fileName, limit: BundleManifest.maximumManifestBytes) ?? []
        let signatureBytes = try Self.readStaged(staging + "/" + BundleManifest.signatureFileName, limit: BundleManifest.maximumSignatureBytes)
        do {
            let (manifest, _) = try verifier.verifyManifest(manifestBytes, signature: signatureBytes)
            return .verified(manifest, etag: fetched.etag, bytes: fetched.byteCount + (signature?.byteCount ?? 0))
        } catch {
            throw .bundle(error)
        }
    }

    /// Brings every file the verified manifest names into `staging`, each
    /// the cheapest way that ends with its signed SHA-256: a file of an
    /// installed version with that hash (`installed`) is linked (or copied);
    /// otherwise a delta from a version this machine has is downloaded and
    /// applied; otherwise, or when the delta fails or makes anything else,
    /// the whole file is downloaded.
    func fetchFiles(
        of manifest: BundleManifest, into staging: String, installed: [String: InstalledFile] = [:]
    ) async throws(RuleUpdateError) -> FilesReport {
        guard manifest.files.contains(where: { $0.name == BundleManifest.storeFileName }) else {
            throw .bundle(.missingFile(name: BundleManifest.storeFileName))
        }
        let total = manifest.files.reduce(UInt64(0)) { $0 + $1.size }
        guard total <= maxBundleBytes else { throw .bundleTooLarge(total: total, limit: maxBundleBytes) }
        var report = FilesReport()
        for entry in manifest.files {
            // The parser already refused names that could leave the folder; check again where it matters.
            guard BundleManifest.isSafeFileName(entry.name) else { throw .bundle(.unsafeFileName(entry.name)) }
            let path = staging + "/" + entry.name
            if let local = installed[entry.sha256], local.size == entry.size, Self.keep(local.path, as: path, entry) {
                report.kept.append(entry.name)
                continue
            }
            var patched = false
            for delta in manifest.deltas(making: entry, from: { installed[$0] != nil }) {
                guard let base = installed[delta.baseSHA256] else { continue }
                do throws(DeltaFailure) {
                    report.downloadedBytes += try await applyDelta(delta, to: entry, base: base.path, staging: staging)
                    patched = true
                    break
                } catch {
                    if case .cancelled = error.reason { throw .cancelled }
                    report.downloadedBytes += error.downloadedBytes
                    report.refusedDeltas.append("\(delta.name): \(error.message)")
                }
            }
            if patched {
                report.patched.append(entry.name)
                continue
            }
            let file = try inRuleFolder { () throws(FileError) in try NewFile(path) }
            let fetched = try await transport.fetch(entry.name, into: file, limit: entry.size, ifNoneMatch: nil)
            try inRuleFolder { () throws(FileError) in try file.finish() }
            report.downloadedBytes += fetched?.byteCount ?? 0
            report.downloaded.append(entry.name)
        }
        return report
    }

    /// Puts the installed file at `local` into the staging folder as `path`, if its
    /// bytes still have the signed SHA-256: a hard link (installed files are never
    /// changed in place), or a copy when the link fails.
    static func keep(_ local: String, as path: String, _ entry: BundleManifest.File) -> Bool {
        guard let found = BundleVerifier.sha256(ofFileAt: local), found.sha256 == entry.sha256, found.size == entry.size else { return false }
        do {
            try FileSystem.hardLink(local, at: path)
            return true
        } catch {
            FileSystem.remove(path)
        }
        guard let file = try? NewFile(path) else { return false }
        do {
            _ = try BoundedFile.stream(local, limit: entry.size) { chunk in try? file.write(Array(chunk)) }
            try file.finish()
        } catch {
            FileSystem.remove(path)
            return false
        }
        guard BundleVerifier.sha256(ofFileAt: path)?.sha256 == entry.sha256 else {
            FileSystem.remove(path)
            return false
        }
        return true
    }

    /// Why a delta was not used; the file is then downloaded whole.
    struct DeltaFailure: Error {
        enum Reason { case refused, cancelled }
        var reason: Reason = .refused
        var message: String
        var downloadedBytes: UInt64 = 0
    }

    /// Downloads `delta` (its signed size the limit), checks its signed SHA-256,
    /// applies it to the installed file at `base` into the staging file of `entry`,
    /// and checks the result's signed SHA-256. Returns the bytes downloaded.
    /// On any failure nothing of it is left in the staging folder.
    func applyDelta(_ delta: BundleManifest.Delta, to entry: BundleManifest.File, base: String, staging: String) async throws(DeltaFailure) -> UInt64 {
        // A name no bundle file can have (a leading dot), removed whatever happens.
        let deltaPath = staging + "/.delta-" + delta.name
        let output = staging + "/" + entry.name
        defer { FileSystem.remove(deltaPath) }
        var downloaded: UInt64 = 0
        do throws(RuleUpdateError) {
            let file = try inRuleFolder { () throws(FileError) in try NewFile(deltaPath) }
            downloaded = try await transport.fetch(delta.name, into: file, limit: delta.size, ifNoneMatch: nil)?.byteCount ?? 0
            try inRuleFolder { () throws(FileError) in try file.finish() }
        } catch {
            if case .cancelled = error { throw DeltaFailure(reason: .cancelled, message: "cancelled") }
            throw DeltaFailure(message: "\(error.code): \(error.description)", downloadedBytes: downloaded)
        }
        guard let found = BundleVerifier.sha256(ofFileAt: deltaPath, limit: delta.size), found.sha256 == delta.sha256, found.size == delta.size
        else {
            throw DeltaFailure(message: "the delta does not match its signed size and SHA-256", downloadedBytes: downloaded)
        }
        FileSystem.remove(output)
        do throws(ZstdPatch.Failure) {
            try ZstdPatch.apply(patch: deltaPath, base: base, output: output, size: entry.size)
        } catch {
            FileSystem.remove(output)
            throw DeltaFailure(message: error.description, downloadedBytes: downloaded)
        }
        guard BundleVerifier.sha256(ofFileAt: output)?.sha256 == entry.sha256 else {
            FileSystem.remove(output)
            throw DeltaFailure(message: "the file it makes does not match the signed SHA-256 of \(entry.name)", downloadedBytes: downloaded)
        }
        return downloaded
    }

    /// A file just fetched into the staging folder (no link followed); nil when it is not there.
    static func readStaged(_ path: String, limit: Int) throws(RuleUpdateError) -> [UInt8]? {
        do {
            return try BoundedFile.read(path, limit: UInt64(limit))
        } catch .missing {
            return nil
        } catch .tooLarge {
            throw .io(path: path, reason: "larger than \(limit) bytes")
        } catch {
            throw .io(path: path, reason: "cannot read: \(error)")
        }
    }
}
