import BundleDelta
import FilterControl
import Foundation
import SharedStore
import Testing
import VerdictCore

/// Updates that cost what changed, against a real nginx on 127.0.0.1 (as
/// RuleFetchTests): a file the machine has is not fetched again, a store
/// comes as a delta from the version installed, and a delta that fails in
/// any way gives way to the whole file. nginx's access log shows what was asked for.
@Suite struct RuleDeltaTests {
    let factory = BundleFactory()

    /// A store of `names` (category gambling) as `filterctl bundle build` makes it: version 0.
    static func store(_ names: [String]) throws -> [UInt8] {
        var builder = RuleStoreBuilder()
        let category = try builder.category(named: "gambling")
        for name in names { builder.add(try RulePattern(name), category: category) }
        return try builder.build(version: 0).bytes
    }

    static func names(_ count: Int, from first: Int = 0) -> [String] { (first..<(first + count)).map { "site\($0).casino.example" } }

    static func sha256(_ bytes: [UInt8]) -> String {
        BundleSigner.manifest(files: [("x", bytes)], version: 1, issuedAt: 0, expiresAt: 1).files[0].sha256
    }

    /// Writes `files` and `deltas` into the served folder with a signed manifest of `version`.
    func publish(
        _ fixture: RuleFetchTests.Fixture, version: UInt64, files: [(String, [UInt8])],
        deltas: [(name: String, bytes: [UInt8], target: String, base: [UInt8])] = []
    ) throws {
        let folder = fixture.server.bundleFolder
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            try FileManager.default.removeItem(atPath: folder + "/" + name)
        }
        var manifest = BundleSigner.manifest(
            files: files, version: version, issuedAt: BundleFactory.now - 60, expiresAt: BundleFactory.now + 86_400)
        for delta in deltas {
            manifest.deltas.append(
                .init(name: delta.name, size: UInt64(delta.bytes.count), sha256: Self.sha256(delta.bytes), target: delta.target, baseSHA256: Self.sha256(delta.base)))
        }
        for (name, bytes) in files + deltas.map({ ($0.name, $0.bytes) }) {
            try Data(bytes).write(to: URL(fileURLWithPath: folder + "/" + name))
        }
        try factory.writeManifest(manifest.encoded, to: folder)
        fixture.freshenManifest()
    }

    /// The paths asked for since `count` requests, e.g. `["manifest", "manifest.sig", "policy.yaml"]`.
    static func asked(_ fixture: RuleFetchTests.Fixture, since count: Int) -> [String] {
        fixture.server.requests.dropFirst(count).map { line in
            let fields = line.split(separator: " ")
            return String(fields[2].dropFirst("/bundle/".count)) + (fields[3] == "200" ? "" : " \(fields[3])")
        }
    }

    /// A delta made by the code `filterctl bundle build` uses.
    static func delta(from base: [UInt8], to target: [UInt8]) throws -> [UInt8] {
        let folder = try TemporaryFolder("delta")
        try Data(base).write(to: URL(fileURLWithPath: folder.sub("base")))
        try Data(target).write(to: URL(fileURLWithPath: folder.sub("target")))
        return try ZstdPatch.make(base: folder.sub("base"), target: folder.sub("target"))
    }

    @Test func aPolicyOnlyChangeFetchesOnlyThePolicyAndTheManifest() async throws {
        let fixture = try RuleFetchTests.Fixture()
        defer { fixture.server.stop() }
        let store = try Self.store(Self.names(2000))
        try publish(fixture, version: 1, files: [(BundleManifest.storeFileName, store), (BundleManifest.policyFileName, Array("timezone: UTC\n".utf8))])
        let updater = fixture.updater(factory)
        #expect(await updater.update() == .installed(version: 1, previous: nil))
        let before = fixture.server.requests.count

        try publish(fixture, version: 2, files: [(BundleManifest.storeFileName, store), (BundleManifest.policyFileName, Array("timezone: Europe/London\n".utf8))])
        #expect(await updater.update() == .installed(version: 2, previous: 1))
        #expect(Self.asked(fixture, since: before) == ["manifest", "manifest.sig", "policy.yaml"])
        let state = updater.state()
        #expect(state.lastFiles == "kept rules.hpstore; downloaded policy.yaml", "\(state.lastFiles ?? "-")")
        let manifestBytes = try Data(contentsOf: URL(fileURLWithPath: fixture.server.bundleFolder + "/manifest")).count
        let signatureBytes = try Data(contentsOf: URL(fileURLWithPath: fixture.server.bundleFolder + "/manifest.sig")).count
        #expect(state.lastDownloadBytes == UInt64(manifestBytes + signatureBytes + "timezone: Europe/London\n".utf8.count))
        // The store is the same file, called by its new bundle's version.
        let installed = try #require(updater.installed())
        #expect(try Data(contentsOf: URL(fileURLWithPath: installed.storePath)) == Data(store))
        #expect(try RuleStore(path: installed.storePath).version == 2)
    }

    @Test func aStoreComesAsADeltaFromTheInstalledVersion() async throws {
        let fixture = try RuleFetchTests.Fixture()
        defer { fixture.server.stop() }
        let first = try Self.store(Self.names(3000))
        let second = try Self.store(Self.names(2950) + Self.names(50, from: 10_000))
        try publish(fixture, version: 1, files: [(BundleManifest.storeFileName, first)])
        let updater = fixture.updater(factory)
        #expect(await updater.update() == .installed(version: 1, previous: nil))
        let before = fixture.server.requests.count

        let patch = try Self.delta(from: first, to: second)
        #expect(patch.count < second.count / 4)
        // A delta from a version this machine never had is not asked for.
        let unrelated = try Self.store(Self.names(10, from: 50_000))
        try publish(
            fixture, version: 2, files: [(BundleManifest.storeFileName, second)],
            deltas: [
                ("rules.hpstore.other.zst", try Self.delta(from: unrelated, to: second), BundleManifest.storeFileName, unrelated),
                ("rules.hpstore.1-2.zst", patch, BundleManifest.storeFileName, first),
            ])
        #expect(await updater.update() == .installed(version: 2, previous: 1))
        #expect(Self.asked(fixture, since: before) == ["manifest", "manifest.sig", "rules.hpstore.1-2.zst"])
        let installed = try #require(updater.installed())
        #expect(try Data(contentsOf: URL(fileURLWithPath: installed.storePath)) == Data(second))
        #expect(updater.state().lastFiles == "patched rules.hpstore")
        // Nothing of the delta stays in the installed version.
        #expect(try FileManager.default.contentsOfDirectory(atPath: installed.versionDirectory).sorted() == ["manifest", "manifest.sig", "rules.hpstore"])
    }

    @Test func aDeltaWhoseResultDoesNotMatchTheSignedHashIsRefusedAndTheWholeFileFetched() async throws {
        let fixture = try RuleFetchTests.Fixture()
        defer { fixture.server.stop() }
        let first = try Self.store(Self.names(3000))
        let second = try Self.store(Self.names(2950) + Self.names(50, from: 10_000))
        let other = try Self.store(Self.names(2950) + Self.names(50, from: 20_000))
        try publish(fixture, version: 1, files: [(BundleManifest.storeFileName, first)])
        let updater = fixture.updater(factory)
        #expect(await updater.update() == .installed(version: 1, previous: nil))
        let before = fixture.server.requests.count

        // Signed and whole, but it makes another store than the one the manifest names.
        try publish(
            fixture, version: 2, files: [(BundleManifest.storeFileName, second)],
            deltas: [("rules.hpstore.1-2.zst", try Self.delta(from: first, to: other), BundleManifest.storeFileName, first)])
        #expect(await updater.update() == .installed(version: 2, previous: 1))
        #expect(Self.asked(fixture, since: before) == ["manifest", "manifest.sig", "rules.hpstore.1-2.zst", "rules.hpstore"])
        let installed = try #require(updater.installed())
        #expect(try Data(contentsOf: URL(fileURLWithPath: installed.storePath)) == Data(second))
        let files = try #require(updater.state().lastFiles)
        #expect(files.hasPrefix("downloaded rules.hpstore; refused deltas: rules.hpstore.1-2.zst: the file it makes does not match"), "\(files)")
    }

    @Test(arguments: ["missing", "damaged", "not zstd"])
    func aDeltaThatCannotBeUsedGivesWayToTheWholeFile(_ spoil: String) async throws {
        let fixture = try RuleFetchTests.Fixture()
        defer { fixture.server.stop() }
        let first = try Self.store(Self.names(3000))
        let second = try Self.store(Self.names(2950) + Self.names(50, from: 10_000))
        try publish(fixture, version: 1, files: [(BundleManifest.storeFileName, first)])
        let updater = fixture.updater(factory)
        #expect(await updater.update() == .installed(version: 1, previous: nil))
        let before = fixture.server.requests.count

        var patch = try Self.delta(from: first, to: second)
        if spoil == "not zstd" { patch = Array(repeating: 0x55, count: 200) }
        try publish(fixture, version: 2, files: [(BundleManifest.storeFileName, second)], deltas: [("rules.hpstore.1-2.zst", patch, BundleManifest.storeFileName, first)])
        let deltaPath = fixture.server.bundleFolder + "/rules.hpstore.1-2.zst"
        if spoil == "missing" { try FileManager.default.removeItem(atPath: deltaPath) }
        if spoil == "damaged" { try BundleFactory.rewrite(fixture.server.bundleFolder, "rules.hpstore.1-2.zst") { $0.map { $0 ^ 0x20 } } }

        #expect(await updater.update() == .installed(version: 2, previous: 1))
        let asked = Self.asked(fixture, since: before)
        #expect(asked == ["manifest", "manifest.sig", "rules.hpstore.1-2.zst" + (spoil == "missing" ? " 404" : ""), "rules.hpstore"])
        let installed = try #require(updater.installed())
        #expect(try Data(contentsOf: URL(fileURLWithPath: installed.storePath)) == Data(second))
        #expect(updater.state().lastFiles?.contains("refused deltas: rules.hpstore.1-2.zst") == true)
    }

    @Test func anInstalledFileThatNoLongerMatchesIsFetchedAgain() async throws {
        let fixture = try RuleFetchTests.Fixture()
        defer { fixture.server.stop() }
        let store = try Self.store(Self.names(500))
        try publish(fixture, version: 1, files: [(BundleManifest.storeFileName, store)])
        let updater = fixture.updater(factory)
        #expect(await updater.update() == .installed(version: 1, previous: nil))
        // A damaged disk: the installed store's last byte changed.
        let installed = try #require(updater.installed())
        try BundleFactory.rewrite(installed.versionDirectory, BundleManifest.storeFileName) { bytes in bytes.dropLast() + [bytes.last! ^ 1] }
        let before = fixture.server.requests.count
        try publish(fixture, version: 2, files: [(BundleManifest.storeFileName, store), (BundleManifest.policyFileName, Array("timezone: UTC\n".utf8))])
        #expect(await updater.update() == .installed(version: 2, previous: 1))
        #expect(Self.asked(fixture, since: before) == ["manifest", "manifest.sig", "rules.hpstore", "policy.yaml"])
    }
}

/// The zstd patch itself, without a server.
@Suite struct ZstdPatchTests {
    @Test func aPatchRebuildsTheTargetExactly() throws {
        let folder = try TemporaryFolder("patch")
        let base = try RuleDeltaTests.store(RuleDeltaTests.names(4000))
        let target = try RuleDeltaTests.store(RuleDeltaTests.names(3900) + RuleDeltaTests.names(100, from: 9000))
        try Data(base).write(to: URL(fileURLWithPath: folder.sub("base")))
        try Data(target).write(to: URL(fileURLWithPath: folder.sub("target")))
        let patch = try ZstdPatch.make(base: folder.sub("base"), target: folder.sub("target"))
        try Data(patch).write(to: URL(fileURLWithPath: folder.sub("patch")))
        try ZstdPatch.apply(patch: folder.sub("patch"), base: folder.sub("base"), output: folder.sub("out"), size: UInt64(target.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: folder.sub("out"))) == Data(target))
        let mode = try FileManager.default.attributesOfItem(atPath: folder.sub("out"))[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o644)
    }

    @Test func aWrongSizeABadFrameOrAnExistingOutputIsRefusedAndLeavesNothing() throws {
        let folder = try TemporaryFolder("patch")
        let base = try RuleDeltaTests.store(RuleDeltaTests.names(400))
        let target = try RuleDeltaTests.store(RuleDeltaTests.names(390))
        try Data(base).write(to: URL(fileURLWithPath: folder.sub("base")))
        try Data(target).write(to: URL(fileURLWithPath: folder.sub("target")))
        let patch = try ZstdPatch.make(base: folder.sub("base"), target: folder.sub("target"))
        try Data(patch).write(to: URL(fileURLWithPath: folder.sub("patch")))
        #expect(throws: ZstdPatch.Failure.self) {
            try ZstdPatch.apply(patch: folder.sub("patch"), base: folder.sub("base"), output: folder.sub("out"), size: UInt64(target.count + 1))
        }
        #expect(!FileManager.default.fileExists(atPath: folder.sub("out")))
        // Cut short: the frame ends before its blocks do.
        try Data(patch.prefix(patch.count / 2)).write(to: URL(fileURLWithPath: folder.sub("short")))
        #expect(throws: ZstdPatch.Failure.self) {
            try ZstdPatch.apply(patch: folder.sub("short"), base: folder.sub("base"), output: folder.sub("out"), size: UInt64(target.count))
        }
        #expect(!FileManager.default.fileExists(atPath: folder.sub("out")))
        // The output is always a new file.
        try Data([1]).write(to: URL(fileURLWithPath: folder.sub("out")))
        #expect(throws: ZstdPatch.Failure.self) {
            try ZstdPatch.apply(patch: folder.sub("patch"), base: folder.sub("base"), output: folder.sub("out"), size: UInt64(target.count))
        }
    }
}
