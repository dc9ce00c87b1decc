import Crypto
import Foundation
import SharedStore
import Testing

/// A class, so that the bundle folders it writes go when each test is done with them.
@Suite final class BundleTests {
    let key = BundleSigningKey()
    let now: Int64 = 1_795_000_000
    private var folders: [URL] = []

    deinit { for folder in folders { try? FileManager.default.removeItem(at: folder) } }

    /// Writes a signed bundle into a new temporary folder and returns the folder.
    func makeBundle(
        version: UInt64 = 3, issued: Int64? = nil, expires: Int64? = nil, manifestText: String? = nil,
        signer: BundleSigningKey? = nil
    ) throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-bundle-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        folders.append(folder)
        let store = try sampleStore()
        let manifest = BundleSigner.manifest(
            files: [(BundleManifest.storeFileName, store)], version: version, issuedAt: issued ?? now - 60,
            expiresAt: expires ?? now + 86_400)
        let bytes = manifestText.map { Array($0.utf8) } ?? manifest.encoded
        try Data(store).write(to: folder.appendingPathComponent(BundleManifest.storeFileName))
        try Data(bytes).write(to: folder.appendingPathComponent(BundleManifest.fileName))
        try Data((signer ?? key).signatureFile(for: bytes)).write(to: folder.appendingPathComponent(BundleManifest.signatureFileName))
        return folder.path
    }

    func verify(_ folder: String, keys: [BundlePublicKey]? = nil) throws(BundleError) -> VerifiedBundle {
        try BundleVerifier(signatures: .trusted(keys ?? [key.publicKey]), now: now).verify(directory: folder)
    }

    func replaceFile(_ folder: String, _ name: String, _ transform: ([UInt8]) -> [UInt8]) throws {
        let url = URL(fileURLWithPath: folder).appendingPathComponent(name)
        try Data(transform([UInt8](try Data(contentsOf: url)))).write(to: url)
    }

    @Test func aGoodBundleVerifies() throws {
        let folder = try makeBundle()
        let bundle = try verify(folder)
        #expect(bundle.manifest.version == 3)
        #expect(bundle.signerKeyID == key.publicKey.keyID)
        #expect(try RuleStore(path: bundle.path(of: BundleManifest.storeFileName)).version == 7)
    }

    @Test func keyRotationAcceptsAnyTrustedKey() throws {
        let folder = try makeBundle()
        #expect(try verify(folder, keys: [BundleSigningKey().publicKey, key.publicKey]).manifest.version == 3)
    }

    @Test func tamperedManifest() throws {
        let folder = try makeBundle()
        try replaceFile(folder, BundleManifest.fileName) { bytes in
            Array(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "version 3", with: "version 4").utf8)
        }
        #expect(throws: BundleError.badSignature(keyID: key.publicKey.keyID)) { try verify(folder) }
    }

    @Test func tamperedFile() throws {
        let folder = try makeBundle()
        try replaceFile(folder, BundleManifest.storeFileName) { bytes in
            var copy = bytes
            copy[100] ^= 1
            return copy
        }
        #expect(throws: BundleError.hashMismatch(name: BundleManifest.storeFileName)) { try verify(folder) }
    }

    @Test func truncatedFile() throws {
        let folder = try makeBundle()
        var original = 0
        try replaceFile(folder, BundleManifest.storeFileName) { bytes in
            original = bytes.count
            return Array(bytes.prefix(bytes.count / 2))
        }
        #expect(throws: BundleError.sizeMismatch(name: BundleManifest.storeFileName, expected: UInt64(original), actual: UInt64(original / 2))) {
            try verify(folder)
        }
    }

    @Test func wrongKey() throws {
        let stranger = BundleSigningKey()
        let folder = try makeBundle(signer: stranger)
        #expect(throws: BundleError.unknownKey(keyID: stranger.publicKey.keyID)) { try verify(folder) }
    }

    @Test func expiredAndFutureBundles() throws {
        #expect(throws: BundleError.expired(at: now - 1)) { try verify(try makeBundle(issued: now - 100, expires: now - 1)) }
        #expect(throws: BundleError.notYetValid(issuedAt: now + 2 * 86_400)) {
            try verify(try makeBundle(issued: now + 2 * 86_400, expires: now + 3 * 86_400))
        }
    }

    @Test(arguments: ["../escape", "/etc/passwd", "a/b", ".hidden", "manifest", "..", "x y"])
    func namesThatEscapeTheFolderAreRefused(name: String) throws {
        let sha = String(repeating: "0", count: 64)
        let text = "hallpass-bundle 1\nversion 1\nissued 2026-11-01T00:00:00Z\nexpires 2027-01-01T00:00:00Z\nfile \(name) 10 \(sha)\n"
        let folder = try makeBundle(manifestText: text)
        if name == "x y" {
            #expect(throws: BundleError.self) { try verify(folder) }
        } else {
            #expect(throws: BundleError.unsafeFileName(name)) { try verify(folder) }
        }
    }

    @Test func missingPieces() throws {
        let folder = try makeBundle()
        try FileManager.default.removeItem(atPath: folder + "/" + BundleManifest.storeFileName)
        #expect(throws: BundleError.missingFile(name: BundleManifest.storeFileName)) { try verify(folder) }
        try FileManager.default.removeItem(atPath: folder + "/" + BundleManifest.signatureFileName)
        #expect(throws: BundleError.missingSignature(path: folder + "/" + BundleManifest.signatureFileName)) { try verify(folder) }
        #expect(throws: BundleError.missingManifest(path: "/nonexistent/manifest")) { try verify("/nonexistent") }
    }

    @Test func symbolicLinksAreNotFollowed() throws {
        let folder = try makeBundle()
        let store = folder + "/" + BundleManifest.storeFileName
        try FileManager.default.moveItem(atPath: store, toPath: folder + "/real")
        try FileManager.default.createSymbolicLink(atPath: store, withDestinationPath: folder + "/real")
        #expect(throws: BundleError.self) { try verify(folder) }
    }

    @Test(arguments: [
        "", "hallpass-bundle 2\n", "hallpass-bundle 1\nversion 0\n", "hallpass-bundle 1\nversion x\n",
        "hallpass-bundle 1\nversion 1\nversion 2\n", "hallpass-bundle 1\nversion 1\nissued 2026-02-30T00:00:00Z\n",
        "hallpass-bundle 1\nversion 1\nissued 2026-11-01T00:00:00Z\nexpires 2026-10-01T00:00:00Z\nfile a 1 \(String(repeating: "0", count: 64))\n",
        "hallpass-bundle 1\nversion 1\nissued 2026-11-01T00:00:00Z\nexpires 2027-01-01T00:00:00Z\n",
        "hallpass-bundle 1\nversion 1\nissued 2026-11-01T00:00:00Z\nexpires 2027-01-01T00:00:00Z\nfile a 1 ABC\n",
        "hallpass-bundle 1\nversion 1\nsurprise 1\n",
    ])
    func malformedSignedManifestsAreRefused(text: String) throws {
        let folder = try makeBundle(manifestText: text)
        #expect(throws: BundleError.self) { try verify(folder) }
        do {
            _ = try verify(folder)
        } catch {
            if case .malformedManifest = error {} else { Issue.record("expected malformedManifest, got \(error)") }
        }
    }

    @Test func signatureFilesOfAnyShapeAreRefusedCleanly() throws {
        let folder = try makeBundle()
        for junk in ["", "ed25519", "ed25519 abc", "ed25519 abc !!!", "rsa x y", String(repeating: "A", count: 5000)] {
            try Data(junk.utf8).write(to: URL(fileURLWithPath: folder + "/" + BundleManifest.signatureFileName))
            #expect(throws: BundleError.self) { try verify(folder) }
        }
    }

    @Test func keysRoundTripThroughTheirTextForms() throws {
        let copy = try BundleSigningKey(pem: key.pem)
        #expect(copy.publicKey == key.publicKey)
        #expect(try BundlePublicKey(key.publicKey.description) == key.publicKey)
        #expect(throws: BundleError.self) { try BundlePublicKey("ed25519:AAAA") }
        #expect(throws: BundleError.self) { try BundlePublicKey("rsa:AAAA") }
        #expect(throws: BundleError.self) { try BundleSigningKey(pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n") }
    }

    @Test func timesRoundTrip() {
        for seconds: Int64 in [0, 951_782_400, 1_795_000_000, 4_102_444_799] {
            #expect(UTCTime.parse(UTCTime.format(seconds)) == seconds)
        }
        #expect(UTCTime.format(951_782_400) == "2000-02-29T00:00:00Z")
        #expect(UTCTime.parse("2026-13-01T00:00:00Z") == nil)
    }
}
