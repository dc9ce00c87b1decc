import Foundation
import HallpassSystem
import SharedStore

/// The files of publications as files under the state folder, named by
/// their SHA-256, so that a 70 MB store is streamed from disk to each
/// machine rather than read from the database into memory for each request.
/// A file missing here (another instance published it, or the folder was
/// cleared) is read once from the database, checked against its hash and
/// written; machines asking for it at the same time wait for that one read.
public final class BundleFileCache: Sendable {
    public let directory: String
    let storage: any ServerStorage
    private let loads = Loads()

    public init(directory: String, storage: any ServerStorage) {
        self.directory = directory
        self.storage = storage
    }

    /// The cached file of `file`, read from the database first when it is not here.
    public func path(for file: PublishedFile) async throws -> String {
        let path = directory + "/" + file.sha256
        if FileSystem.exists(path) { return path }
        return try await loads.load(file.sha256) { [self] in
            if FileSystem.exists(path) { return path }
            guard let bytes = try await storage.bundleFile(sha256: file.sha256) else {
                throw PublishingError(.failed, "bundle-file-missing", "the bundle file \(file.name) (\(file.sha256.prefix(16))) is not in the database")
            }
            guard Secrets.sha256(bytes) == file.sha256 else {
                throw PublishingError(.failed, "bundle-file-damaged", "the database's copy of \(file.name) does not have its SHA-256")
            }
            try write(bytes, to: path)
            return path
        }
    }

    /// Removes the cached files `kept` does not name (files being written, with
    /// a suffix, are left alone). A request streaming one keeps its open file.
    func remove(except kept: Set<String>) {
        for name in FileSystem.names(in: directory) where name.utf8.count == 64 && !name.contains(".") && !kept.contains(name) {
            FileSystem.remove(directory + "/" + name)
        }
    }

    /// Puts bytes the publisher has at hand in the cache (nothing when they are there).
    func put(_ file: PublishedFile, _ bytes: [UInt8]) {
        let path = directory + "/" + file.sha256
        guard !FileSystem.exists(path) else { return }
        // A failure here only costs a read from the database later.
        try? write(bytes, to: path)
    }

    private func write(_ bytes: [UInt8], to path: String) throws {
        try FileSystem.makeDirectories(directory, mode: 0o750)
        // Written beside its final name and renamed: a request never streams half a file.
        let temporary = path + "." + Secrets.randomBase32(count: 8)
        try AtomicFile.write(bytes, to: temporary, mode: 0o640)
        try FileSystem.rename(temporary, to: path)
    }

    /// One read from the database per file, however many ask at once.
    private actor Loads {
        private var running: [String: Task<String, any Error>] = [:]

        func load(_ key: String, _ body: @escaping @Sendable () async throws -> String) async throws -> String {
            if let task = running[key] { return try await task.value }
            let task = Task { try await body() }
            running[key] = task
            defer { running[key] = nil }
            return try await task.value
        }
    }
}
