import Foundation
import Logging
import SchoolServer
import SharedStore
import Testing

/// The `policy` and `publish` commands' code (ServerAdministration and the
/// Publisher, as hallpass-server's subcommands call them), on both engines.
@Suite struct PublishingCommandTests {
    static let now: Int64 = 1_764_320_400

    /// Storage on `engine`, a state folder, and the configuration of both.
    static func withPublishing(
        _ engine: Engine, offline: BundlePublicKey? = nil,
        _ body: @Sendable (SQLStorage, ServerConfiguration, String) async throws -> Void
    ) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-commands-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var configuration = ServerConfiguration()
        configuration.stateDirectoryOverride = folder + "/state"
        if let offline {
            configuration.publishing.offline = true
            configuration.publishing.trustedKeys = [offline]
        }
        let made = try ServerAdministration.makeSigningKey(configuration: configuration)
        #expect((made == nil) == (offline != nil))
        if let path = configuration.signingKeyPath {
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            // Never overwritten.
            let before = FileManager.default.contents(atPath: path)
            #expect(try ServerAdministration.makeSigningKey(configuration: configuration) == nil)
            #expect(FileManager.default.contents(atPath: path) == before)
        }
        let settings = configuration
        try await withTestStorage(engine) { storage async throws in try await body(storage, settings, folder) }
    }

    static func write(_ text: String, _ path: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    @Test(arguments: Engine.allCases)
    func setShowPublishHistoryAndDiff(engine: Engine) async throws {
        try await Self.withPublishing(engine) { storage, configuration, folder async throws in
            // A UT1 folder: a category of domains and urls, and one of domains; and a single file.
            try Self.write("casino.example\nbet.example\n", folder + "/ut1/gambling/domains")
            try Self.write("casino.example/poker\n", folder + "/ut1/gambling/urls")
            try Self.write("game.example\n", folder + "/ut1/games/domains")
            try Self.write("# school's own\nbad.example\n", folder + "/extra.txt")
            let lists = try ServerAdministration.readListSources(
                [folder + "/ut1", "local=" + folder + "/extra.txt"], maxBytes: configuration.publishing.maxListBytes)
            #expect(lists.map(\.category) == ["gambling", "games", "local"])
            #expect(String(decoding: lists[0].bytes, as: UTF8.self) == "casino.example\nbet.example\ncasino.example/poker\n")

            let editor = PolicyEditor(storage: storage, configuration: configuration)
            let first = try await editor.change(policy: .keep, lists: lists, removing: [], reason: "the UT1 lists", author: "cli:alice", now: Self.now)
            #expect(first.version == 1)
            #expect(first.lists.map(\.names) == [3, 1, 1])
            let shown = ServerAdministration.policyText(first)
            #expect(shown.contains("policy version 1, 2025-11-28T09:00:00Z by cli:alice: the UT1 lists"))
            #expect(shown.contains("gambling"))
            #expect(shown.contains("policy file: none"))

            // A list RuleCompiler refuses, a policy SchoolPolicy refuses: refused with the reason, nothing stored.
            await #expect(throws: PublishingError.self) {
                try await editor.change(
                    policy: .set("groups: [x]\n"), lists: [], removing: [], reason: "bad", author: "cli:alice", now: Self.now)
            }
            await #expect(throws: PublishingError.self) {
                try await editor.change(
                    policy: .keep, lists: [.init(category: "BAD NAME", bytes: Array("x.example\n".utf8))], removing: [], reason: "bad",
                    author: "cli:alice", now: Self.now)
            }
            await #expect(throws: PublishingError.self) {
                try await editor.change(policy: .set("policy: {}\n"), lists: [], removing: [], reason: "", author: "cli:alice", now: Self.now)
            }
            #expect(try await storage.latestPolicyVersion()?.version == 1)

            let publisher = try Publisher.load(configuration: configuration, storage: storage, logger: testLogger)
            let published = try await publisher.publish(reason: "first publish", policyVersion: nil, author: "cli:alice", now: Self.now)
            let text = ServerAdministration.publishText(published, publisher: publisher)
            #expect(text.hasPrefix("published bundle version 1 (policy version 1): first publish"))
            #expect(text.contains("rules.hpstore"))
            #expect(text.contains("new"))
            // The publisher's folder is a bundle machines would take.
            let key = try #require(publisher.signingKey)
            let bundle = try BundleVerifier(signatures: .trusted([key.publicKey]), now: Self.now).verify(
                directory: configuration.stateDirectory + "/publish/bundle")
            #expect(bundle.manifest.version == 1)
            // hallpass's own lists are in the store.
            let store = try RuleStore(path: bundle.path(of: BundleManifest.storeFileName), verification: .full)
            #expect(store.categoryNames.contains("doh"))
            #expect(store.categoryNames.contains("games"))

            let second = try await editor.change(
                policy: .set("policy:\n  block: [gambling]\n"), lists: [], removing: ["local"], reason: "block gambling", author: "cli:bob",
                now: Self.now + 60)
            #expect(second.version == 2)
            let policyOnly = try await publisher.publish(reason: "policy", policyVersion: nil, author: "cli:bob", now: Self.now + 60)
            let policyText = ServerAdministration.publishText(policyOnly, publisher: publisher)
            #expect(policyText.hasPrefix("published bundle version 2 (policy version 2)"))
            #expect(policyText.contains("policy.yaml") && policyText.contains("new"))

            let third = try await editor.change(
                policy: .set("policy:\n  block: [gambling, games]\n"), lists: [], removing: [], reason: "games", author: "cli:bob",
                now: Self.now + 120)
            let unchanged = try await publisher.publish(reason: "games", policyVersion: third.version, author: "cli:bob", now: Self.now + 120)
            let unchangedText = ServerAdministration.publishText(unchanged, publisher: publisher)
            #expect(unchangedText.contains("unchanged"), "\(unchangedText)")
            #expect(unchanged.report.unchanged.contains(BundleManifest.storeFileName))

            let history = try await ServerAdministration.historyText(storage: storage)
            let lines = history.split(separator: "\n")
            #expect(lines.count == 4)
            #expect(lines[1].hasPrefix("3 "))
            #expect(lines[1].contains("(published as bundle 3)"))
            #expect(lines[3].contains("the UT1 lists"))

            let diff = try await ServerAdministration.diffText(storage: storage, from: 1, to: 3)
            #expect(diff.contains("+++ policy version 3"))
            #expect(diff.contains("+  block: [gambling, games]"))
            #expect(diff.contains("list local (removed): 0 added, 1 removed"))
            #expect(diff.contains("  - bad.example"))

            let status = try await ServerAdministration.statusText(storage: storage, publisher: publisher)
            #expect(status.contains("published: bundle version 3 (policy version 3)"))
            #expect(status.contains(key.publicKey.description))
        }
    }

    /// Two instances on one database, each with its own state folder: the
    /// second serves the first's files (read once from the database) and, when
    /// it publishes, writes a delta from the store machines have.
    @Test(arguments: Engine.allCases)
    func aSecondInstanceServesTheSameFilesAndMakesDeltasFromThem(engine: Engine) async throws {
        try await Self.withPublishing(engine) { storage, configuration, folder async throws in
            let editor = PolicyEditor(storage: storage, configuration: configuration)
            let names = (0..<500).map { "site\($0).example" }
            _ = try await editor.change(
                policy: .keep, lists: [.init(category: "games", bytes: Array(names.joined(separator: "\n").utf8))], removing: [],
                reason: "first", author: "cli:alice", now: Self.now)
            let first = try Publisher.load(configuration: configuration, storage: storage, logger: testLogger)
            let published = try await first.publish(reason: "first", policyVersion: nil, author: "cli:alice", now: Self.now).publication
            let store = try #require(published.file(named: BundleManifest.storeFileName))

            var other = configuration
            other.stateDirectoryOverride = folder + "/other"
            other.publishing.signingKey = configuration.signingKeyPath
            let second = try Publisher.load(configuration: other, storage: storage, logger: testLogger)
            let cached = try await second.cache.path(for: store)
            #expect(cached.hasPrefix(folder + "/other/bundle-cache/"))
            #expect(Secrets.sha256(Array(try #require(FileManager.default.contents(atPath: cached)))) == store.sha256)

            _ = try await editor.change(
                policy: .keep, lists: [.init(category: "games", bytes: Array((names + ["new.example"]).joined(separator: "\n").utf8))],
                removing: [], reason: "one more", author: "cli:bob", now: Self.now + 60)
            let outcome = try await second.publish(reason: "one more", policyVersion: nil, author: "cli:bob", now: Self.now + 60)
            #expect(outcome.publication.bundleVersion == 2)
            #expect(outcome.manifest.deltas.map(\.baseSHA256) == [store.sha256])
            #expect(outcome.publication.file(named: outcome.manifest.deltas[0].name) != nil)
        }
    }

    /// With keepVersions 0 the two newest publications keep their files; an
    /// older store goes from the database and from the cache.
    @Test(arguments: Engine.allCases)
    func olderPublicationsFilesAreRemoved(engine: Engine) async throws {
        try await Self.withPublishing(engine) { storage, configuration, folder async throws in
            var settings = configuration
            settings.publishing.keepVersions = 0
            let editor = PolicyEditor(storage: storage, configuration: settings)
            let publisher = try Publisher.load(configuration: settings, storage: storage, logger: testLogger)
            var stores: [PublishedFile] = []
            for index in 1...3 {
                _ = try await editor.change(
                    policy: .keep, lists: [.init(category: "games", bytes: Array("game\(index).example\n".utf8))], removing: [],
                    reason: "list \(index)", author: "cli:alice", now: Self.now + Int64(index))
                let publication = try await publisher.publish(reason: "r", policyVersion: nil, author: "cli:alice", now: Self.now + Int64(index))
                stores.append(try #require(publication.publication.file(named: BundleManifest.storeFileName)))
            }
            #expect(Set(stores.map(\.sha256)).count == 3)
            #expect(try await storage.bundleFile(sha256: stores[0].sha256) == nil)
            #expect(!FileManager.default.fileExists(atPath: publisher.cache.directory + "/" + stores[0].sha256))
            for store in stores.dropFirst() {
                #expect(try await storage.bundleFile(sha256: store.sha256) != nil)
                #expect(FileManager.default.fileExists(atPath: try await publisher.cache.path(for: store)))
            }
        }
    }

    @Test(arguments: Engine.allCases)
    func theOfflineFlowChecksTheSignatureAgainstTheTrustedKeys(engine: Engine) async throws {
        let offline = BundleSigningKey()
        try await Self.withPublishing(engine, offline: offline.publicKey) { storage, configuration, folder async throws in
            try Self.write("casino.example\n", folder + "/gambling.txt")
            _ = try await PolicyEditor(storage: storage, configuration: configuration).change(
                policy: .keep, lists: try ServerAdministration.readListSources([folder + "/gambling.txt"], maxBytes: 1 << 20), removing: [],
                reason: "r", author: "cli:alice", now: Self.now)
            let publisher = try Publisher.load(configuration: configuration, storage: storage, logger: testLogger)
            #expect(publisher.signingKey == nil)
            #expect(publisher.trustedKeys == [offline.publicKey])
            let outcome = try await publisher.publish(reason: "prepare", policyVersion: nil, author: "cli:alice", now: Self.now)
            let text = ServerAdministration.publishText(outcome, publisher: publisher)
            #expect(
                text == "prepared bundle version 1; sign \(publisher.pendingManifestPath) with: filterctl bundle sign --key KEY "
                    + "\(publisher.pendingManifestPath) --out manifest.sig; then: hallpass-server publish complete manifest.sig")
            let manifest = try #require(FileManager.default.contents(atPath: publisher.pendingManifestPath))
            let status = try await ServerAdministration.statusText(storage: storage, publisher: publisher)
            #expect(status.contains("published: none"))
            #expect(status.contains("pending (waiting for the offline key's signature): bundle version 1"))

            await #expect(throws: PublishingError.self) {
                try await publisher.complete(signature: try BundleSigningKey().signatureFile(for: Array(manifest)), now: Self.now)
            }
            #expect(try await storage.currentPublication() == nil)
            let published = try await publisher.complete(signature: try offline.signatureFile(for: Array(manifest)), now: Self.now)
            #expect(published.bundleVersion == 1)
            #expect(!FileManager.default.fileExists(atPath: publisher.pendingManifestPath))
            // The publisher's folder is sealed with the offline signature.
            let bundle = try BundleVerifier(signatures: .trusted([offline.publicKey]), now: Self.now).verify(
                directory: configuration.stateDirectory + "/publish/bundle")
            #expect(bundle.manifest.version == 1)
        }
    }
}
