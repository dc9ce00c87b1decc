import HallpassSystem
import SharedStore

/// The layout of `rules.directory` and the steps that change it.
///
/// ```
/// /var/lib/hallpass/
///   current -> versions/42      the rules in force (a relative symbolic link)
///   versions/42/                manifest, manifest.sig, rules.hpstore (0755 / 0644)
///   versions/41/                the previous good version, kept
///   state                       see RuleState
///   .lock                       flock: one installer at a time
///   incoming-1a2b3c4d/          a download in progress (0700), removed on failure
/// ```
///
/// A bundle is downloaded into an `incoming-` folder inside the rule folder
/// (the same file system), verified there, then renamed to
/// `versions/<version>`; `current` is switched by making a new link and
/// renaming it over the old one, so a reader sees the old or the new version,
/// never a mix. Every file and folder is flushed to disk before the switch,
/// and the rule folder after it.
public struct RuleInstaller: Sendable {
    public let directory: String

    public init(directory: String) {
        self.directory = directory
    }

    public var currentLink: String { directory + "/current" }
    public var versionsDirectory: String { directory + "/versions" }

    public func versionDirectory(_ version: UInt64) -> String { versionsDirectory + "/\(version)" }

    /// The version `current` points to, or nil when nothing is installed.
    public func currentVersion() -> UInt64? {
        guard let target = FileSystem.linkTarget(currentLink), target.hasPrefix("versions/") else { return nil }
        return UInt64(target.dropFirst("versions/".count))
    }

    /// The files of the installed versions (`current` and the one kept before it),
    /// by SHA-256 as their manifests give it: what an update need not download
    /// again, and what a delta can start from. The manifests were verified when
    /// their versions were installed; a file's bytes are checked again before use.
    func installedFiles() -> [String: InstalledFile] {
        var files: [String: InstalledFile] = [:]
        for name in FileSystem.names(in: versionsDirectory).sorted() {
            guard let version = UInt64(name) else { continue }
            let folder = versionDirectory(version)
            guard let bytes = try? BoundedFile.read(folder + "/" + BundleManifest.fileName, limit: UInt64(BundleManifest.maximumManifestBytes)),
                let manifest = try? BundleManifest(parsing: bytes)
            else { continue }
            for file in manifest.files where files[file.sha256] == nil {
                files[file.sha256] = InstalledFile(path: folder + "/" + file.name, size: file.size)
            }
        }
        return files
    }

    /// Creates the rule folder and `versions/` if needed.
    func prepare() throws(RuleUpdateError) {
        try inRuleFolder { () throws(FileError) in try FileSystem.makeDirectories(versionsDirectory) }
        if FileSystem.exists(currentLink) && FileSystem.linkTarget(currentLink) == nil {
            throw .io(path: currentLink, reason: "exists and is not a symbolic link; move it away so hallpass can manage the rules")
        }
    }

    /// Takes the installer lock; nil when another process holds it.
    func lock() throws(RuleUpdateError) -> FileLock? {
        try inRuleFolder { () throws(FileError) in try FileLock(directory + "/.lock") }
    }

    /// A new, empty, private folder for a download.
    func makeStaging() throws(RuleUpdateError) -> String {
        for _ in 0..<8 {
            let path = directory + "/incoming-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
            do {
                try FileSystem.makeDirectory(path)
                return path
            } catch {
                if FileSystem.exists(path) { continue }
                throw RuleUpdateError(error)
            }
        }
        throw .io(path: directory, reason: "cannot find a free name for a download folder")
    }

    /// Removes downloads left behind by a crash or a refusal.
    func removeStaging() {
        for name in FileSystem.names(in: directory) where name.hasPrefix("incoming-") {
            FileSystem.removeTree(directory + "/" + name)
        }
    }

    /// Moves a verified staging folder into place as `versions/<version>`,
    /// switches `current` to it, and removes versions older than the previous
    /// one. Returns the version that was current before.
    ///
    /// Until the rename of `current`, a failure leaves the installed rules
    /// exactly as they were.
    @discardableResult
    func install(staging: String, version: UInt64) throws(RuleUpdateError) -> UInt64? {
        let previous = currentVersion()
        guard previous != version else {
            throw .io(path: versionDirectory(version), reason: "version \(version) is already the current one")
        }
        try inRuleFolder { () throws(FileError) in
            try FileSystem.setMode(staging, 0o755)
            try FileSystem.sync(staging, directory: true)

            let target = versionDirectory(version)
            // A folder of this version that is not current is what a crash left: replace it.
            FileSystem.removeTree(target)
            try FileSystem.rename(staging, to: target)
            try FileSystem.sync(versionsDirectory, directory: true)
            try FileSystem.sync(directory, directory: true)

            let link = directory + "/current.new"
            FileSystem.remove(link)
            try FileSystem.symlink(target: "versions/\(version)", at: link)
            do throws(FileError) {
                try FileSystem.rename(link, to: currentLink)
            } catch {
                FileSystem.remove(link)
                throw error
            }
            try FileSystem.sync(directory, directory: true)
        }

        prune(keeping: [version, previous].compactMap { $0 })
        return previous
    }

    /// Removes every version folder but `keeping`.
    func prune(keeping: [UInt64]) {
        for name in FileSystem.names(in: versionsDirectory) {
            if let version = UInt64(name), keeping.contains(version) { continue }
            FileSystem.removeTree(versionsDirectory + "/" + name)
        }
        try? FileSystem.sync(versionsDirectory, directory: true)
    }
}

/// A file of an installed version.
struct InstalledFile: Sendable, Hashable {
    var path: String
    var size: UInt64
}
