import FilterControl
import Foundation
import SharedStore
import Testing
import VerdictCore

/// Updates that cost what changed, against a real nginx on 127.0.0.1 (as
/// RuleFetchTests): a file the machine has is not fetched again. nginx's
/// access log shows what was asked for.
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

    /// Writes `files` into the served folder with a signed manifest of `version`.
    func publish(_ fixture: RuleFetchTests.Fixture, version: UInt64, files: [(String, [UInt8])]) throws {
        let folder = fixture.server.bundleFolder
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            try FileManager.default.removeItem(atPath: folder + "/" + name)
        }
        let manifest = BundleSigner.manifest(
            files: files, version: version, issuedAt: BundleFactory.now - 60, expiresAt: BundleFactory.now + 86_400)
        for (name, bytes) in files {
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
