public import BundleDelta
import Foundation
import HallpassSystem
public import SharedStore

/// Writes a bundle into its folder in two steps, so that the signature can be
/// made elsewhere (an offline key, `filterctl bundle sign`) between them:
///
/// 1. `stage` writes the files whose bytes changed and the store's deltas from
///    the kept earlier versions, and returns the manifest to sign. Machines
///    still see the old manifest and signature, which name only files that
///    are still there (a file that changed is replaced atomically, and the
///    old manifest's hash then refuses it: the machine tries again later).
/// 2. `seal` writes the signature, then the manifest, then removes the deltas
///    the new manifest no longer names.
///
/// `filterctl bundle build` and hallpass-server's publisher both write their
/// folders through it, so a school that moves from one to the other keeps
/// its folder and its deltas.
public struct BundleWriter: Sendable {
    public let folder: BundleFolder

    public init(folder: BundleFolder) { self.folder = folder }

    /// A staged bundle: the manifest to sign (its encoded bytes are what the
    /// signature covers) and what was done with the folder's files.
    public struct Staged: Sendable {
        public var manifest: BundleManifest
        public var report: BundleFolder.Report
        public var manifestBytes: [UInt8] { manifest.encoded }
    }

    /// Writes `files` (the store and the policy, as the manifest will name
    /// them) and the store's deltas. A policy file the folder holds from an
    /// earlier build and `files` lacks is removed: a folder must not keep a
    /// policy the new bundle does not sign.
    public func stage(
        files: [(name: String, contents: [UInt8])], version: UInt64, issuedAt: Int64, expiresAt: Int64
    ) throws -> Staged {
        var manifest = BundleSigner.manifest(files: files, version: version, issuedAt: issuedAt, expiresAt: expiresAt)
        try FileSystem.makeDirectories(folder.directory)
        var report = try folder.writeFiles(files, of: manifest)
        if !files.contains(where: { $0.name == BundleManifest.policyFileName }) {
            FileSystem.remove(folder.path(BundleManifest.policyFileName))
        }
        if let store = manifest.files.first(where: { $0.name == BundleManifest.storeFileName }) {
            manifest.deltas = try folder.writeDeltas(to: store, report: &report)
        }
        return Staged(manifest: manifest, report: report)
    }

    /// Puts the staged bundle in force: the signature first, then the manifest
    /// (a machine that reads the new manifest finds every file it names and
    /// the signature over it), then the old deltas go.
    public func seal(_ staged: Staged, signature: [UInt8]) throws {
        try AtomicFile.write(signature, to: folder.path(BundleManifest.signatureFileName), mode: 0o644)
        try AtomicFile.write(staged.manifestBytes, to: folder.path(BundleManifest.fileName), mode: 0o644)
        folder.removeDeltas(except: staged.manifest.deltas)
    }
}
