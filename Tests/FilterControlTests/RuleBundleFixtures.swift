import FilterControl
import Foundation
import SharedStore
import Testing
import VerdictCore

/// Signed bundles made on the spot, the way `filterctl bundle build` makes
/// them, plus the ways a test spoils them.
struct BundleFactory {
    let key = BundleSigningKey()
    /// The test clock: every bundle is valid around this time unless told otherwise.
    static let now: Int64 = BundleVerifier.currentTime()

    /// A rule store whose one rule names the version, so a test can tell versions apart.
    static func store(version: UInt64, padding: Int = 0) throws -> [UInt8] {
        var builder = RuleStoreBuilder()
        let category = try builder.category(named: "gambling")
        builder.add(try RulePattern("v\(version).casino.example"), category: category)
        for index in 0..<padding {
            builder.add(try RulePattern("pad\(index).example"), category: category)
        }
        builder.setMetadata("bundle-version", String(version))
        return try builder.build(version: version).bytes
    }

    /// Writes a signed bundle into `folder` (created) and returns the folder.
    @discardableResult
    func write(
        version: UInt64, to folder: String, issued: Int64? = nil, expires: Int64? = nil, signer: BundleSigningKey? = nil,
        padding: Int = 0, extraFiles: [(String, [UInt8])] = []
    ) throws -> String {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let store = try BundleFactory.store(version: version, padding: padding)
        let files = [(BundleManifest.storeFileName, store)] + extraFiles
        let manifest = BundleSigner.manifest(
            files: files, version: version, issuedAt: issued ?? BundleFactory.now - 60,
            expiresAt: expires ?? BundleFactory.now + 86_400)
        for (name, bytes) in files {
            try Data(bytes).write(to: URL(fileURLWithPath: folder + "/" + name))
        }
        try writeManifest(manifest.encoded, to: folder, signer: signer)
        return folder
    }

    /// Writes `manifest` and its signature (by `signer`, or this factory's key).
    func writeManifest(_ bytes: [UInt8], to folder: String, signer: BundleSigningKey? = nil) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: folder + "/" + BundleManifest.fileName))
        try Data((signer ?? key).signatureFile(for: bytes)).write(
            to: URL(fileURLWithPath: folder + "/" + BundleManifest.signatureFileName))
    }

    /// Changes a file of a bundle in place.
    static func rewrite(_ folder: String, _ name: String, _ transform: ([UInt8]) -> [UInt8]) throws {
        let url = URL(fileURLWithPath: folder + "/" + name)
        try Data(transform([UInt8](try Data(contentsOf: url)))).write(to: url)
    }
}

/// A temporary folder removed when the test is done with it.
final class TemporaryFolder {
    let path: String

    init(_ label: String = "rules") throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-\(label)-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func sub(_ name: String) -> String { path + "/" + name }
}

/// What a test checks about the rule folder after an update.
struct RuleFolderSnapshot: Equatable {
    var current: String?
    var versions: [String]
    var storeBytes: Data?

    init(_ directory: String) {
        current = try? FileManager.default.destinationOfSymbolicLink(atPath: directory + "/current")
        versions = ((try? FileManager.default.contentsOfDirectory(atPath: directory + "/versions")) ?? []).sorted()
        storeBytes = FileManager.default.contents(atPath: directory + "/current/" + BundleManifest.storeFileName)
    }
}

extension UpdateOutcome {
    var code: String? {
        if case .refused(let code, _) = self { return code }
        return nil
    }

    var message: String {
        if case .refused(_, let message) = self { return message }
        return description
    }
}
