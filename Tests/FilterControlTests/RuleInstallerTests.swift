import FilterControl
import Foundation
import SharedStore
import Testing

/// The installer and updater against local bundle folders: layout, no
/// rollback, the state file, pruning, and that a refusal changes nothing.
@Suite struct RuleInstallerTests {
    let factory = BundleFactory()
    let folder: TemporaryFolder
    let rules: String

    init() throws {
        folder = try TemporaryFolder("installer")
        rules = folder.sub("rules")
    }

    func updater(source: String? = nil) -> RuleUpdater {
        RuleUpdater(settings: .init(directory: rules, source: source, trustedKeys: [factory.key.publicKey]))
    }

    func bundle(_ version: UInt64, _ name: String? = nil, expires: Int64? = nil, signer: BundleSigningKey? = nil) throws -> String {
        try factory.write(version: version, to: folder.sub(name ?? "bundle-\(version)"), expires: expires, signer: signer)
    }

    @Test func firstInstallLaysOutTheFolder() async throws {
        let outcome = await updater().install(fromDirectory: try bundle(5))
        #expect(outcome == .installed(version: 5, previous: nil))
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: rules + "/current") == "versions/5")
        let store = try RuleStore(path: rules + "/current/rules.hpstore")
        #expect(store.version == 5)
        let installed = try #require(RuleUpdater.installed(directory: rules))
        #expect(installed.version == 5)
        #expect(installed.storePath == rules + "/current/rules.hpstore")
        #expect(installed.versionStorePath == rules + "/versions/5/rules.hpstore")
        // Nothing left of the download.
        let names = try FileManager.default.contentsOfDirectory(atPath: rules)
        #expect(!names.contains { $0.hasPrefix("incoming-") })
    }

    @Test func aFileURLWorksForAFirstInstall() async throws {
        let outcome = await updater().install(fromDirectory: "file://" + (try bundle(5)) + "/")
        #expect(outcome == .installed(version: 5, previous: nil))
        #expect(await updater().install(fromDirectory: "file://relative").code == "config.invalid")
    }

    @Test func filesAreReadableByEveryone() async throws {
        _ = await updater().install(fromDirectory: try bundle(5))
        #expect(try mode(rules) == 0o755)
        #expect(try mode(rules + "/versions") == 0o755)
        #expect(try mode(rules + "/versions/5") == 0o755)
        for name in ["manifest", "manifest.sig", "rules.hpstore"] {
            #expect(try mode(rules + "/versions/5/" + name) == 0o644, "\(name)")
        }
        #expect(try mode(rules + "/state") == 0o644)
    }

    @Test func aNewerVersionReplacesTheCurrentOne() async throws {
        let updater = updater()
        _ = await updater.install(fromDirectory: try bundle(5))
        let outcome = await updater.install(fromDirectory: try bundle(6))
        #expect(outcome == .installed(version: 6, previous: 5))
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: rules + "/current") == "versions/6")
        #expect(try RuleStore(path: rules + "/current/rules.hpstore").version == 6)
        // The previous good version is kept.
        #expect(RuleFolderSnapshot(rules).versions == ["5", "6"])
    }

    @Test func olderVersionsArePrunedKeepingThePreviousOne() async throws {
        let updater = updater()
        var previous: UInt64? = nil
        for version: UInt64 in [3, 4, 7, 9] {
            #expect(await updater.install(fromDirectory: try bundle(version)) == .installed(version: version, previous: previous))
            previous = version
        }
        #expect(RuleFolderSnapshot(rules).versions == ["7", "9"])
    }

    @Test func anOlderVersionIsARollbackAndChangesNothing() async throws {
        let updater = updater()
        _ = await updater.install(fromDirectory: try bundle(8))
        let before = RuleFolderSnapshot(rules)
        let outcome = await updater.install(fromDirectory: try bundle(7))
        #expect(outcome.code == "install.rollback")
        #expect(outcome.message.contains("version 7"))
        #expect(outcome.message.contains("installed version 8"))
        #expect(RuleFolderSnapshot(rules) == before)
    }

    @Test func theSameVersionIsAlreadyCurrent() async throws {
        let updater = updater()
        _ = await updater.install(fromDirectory: try bundle(8))
        let before = RuleFolderSnapshot(rules)
        #expect(await updater.install(fromDirectory: try bundle(8, "again")) == .alreadyCurrent(version: 8))
        #expect(RuleFolderSnapshot(rules) == before)
        #expect(updater.state().lastResult == .alreadyCurrent)
    }

    @Test func noRollbackAfterARestart() async throws {
        _ = await updater().install(fromDirectory: try bundle(8))
        // A new updater (a restarted daemon) reads the floor from the state file.
        let restarted = updater()
        #expect(restarted.state().installedVersion == 8)
        #expect(await restarted.install(fromDirectory: try bundle(7)).code == "install.rollback")
        #expect(await restarted.install(fromDirectory: try bundle(9)) == .installed(version: 9, previous: 8))
    }

    @Test func noRollbackEvenWhenCurrentWasPointedBack() async throws {
        let updater = updater()
        _ = await updater.install(fromDirectory: try bundle(4))
        _ = await updater.install(fromDirectory: try bundle(5))
        // Someone points current back at 4 by hand: the state still remembers 5.
        try FileManager.default.removeItem(atPath: rules + "/current")
        try FileManager.default.createSymbolicLink(atPath: rules + "/current", withDestinationPath: "versions/4")
        #expect(await updater.install(fromDirectory: try bundle(5, "five-again")).code == "install.rollback")
    }

    @Test func aDamagedStateFileStillAllowsNoRollback() async throws {
        let updater = updater()
        _ = await updater.install(fromDirectory: try bundle(6))
        try Data("garbage\n".utf8).write(to: URL(fileURLWithPath: rules + "/state"))
        // The floor also comes from what current points to.
        #expect(await updater.install(fromDirectory: try bundle(5)).code == "install.rollback")
    }

    @Test func theStateRecordsEachAttempt() async throws {
        let updater = updater()
        let time: Int64 = BundleFactory.now
        _ = await updater.install(fromDirectory: try bundle(6), now: time)
        var state = updater.state()
        #expect(state.installedVersion == 6)
        #expect(state.installedAt == time)
        #expect(state.installedFrom == "file://" + folder.sub("bundle-6") + "/")
        #expect(state.lastResult == .installed)
        #expect(state.lastAttemptAt == time)

        _ = await updater.install(fromDirectory: try bundle(7, expires: time - 10), now: time + 5)
        state = updater.state()
        #expect(state.installedVersion == 6)
        #expect(state.lastAttemptAt == time + 5)
        #expect(state.lastResult == .refused)
        #expect(state.lastCode == "bundle.expired")
        #expect(state.lastMessage?.contains("expired") == true)

        // The file parses back to the same values.
        let bytes = try #require(FileManager.default.contents(atPath: rules + "/state"))
        #expect(RuleState(parsing: [UInt8](bytes)) == state)
    }

    @Test func aRefusalLeavesCurrentUntouched() async throws {
        let updater = updater()
        _ = await updater.install(fromDirectory: try bundle(5))
        let before = RuleFolderSnapshot(rules)

        let tampered = try bundle(6)
        try BundleFactory.rewrite(tampered, "rules.hpstore") { bytes in
            var copy = bytes
            copy[copy.count / 2] ^= 0x40
            return copy
        }
        #expect(await updater.install(fromDirectory: tampered).code == "bundle.file-hash")

        let truncated = try bundle(7)
        try BundleFactory.rewrite(truncated, "rules.hpstore") { Array($0.prefix($0.count - 10)) }
        #expect(await updater.install(fromDirectory: truncated).code == "bundle.file-size")

        let longer = try bundle(8)
        try BundleFactory.rewrite(longer, "rules.hpstore") { $0 + [1, 2, 3] }
        #expect(await updater.install(fromDirectory: longer).code == "fetch.too-large")

        let stranger = try bundle(9, signer: BundleSigningKey())
        #expect(await updater.install(fromDirectory: stranger).code == "bundle.unknown-key")

        let missing = folder.sub("nothing-here")
        #expect(await updater.install(fromDirectory: missing).code == "bundle.manifest-missing")

        #expect(RuleFolderSnapshot(rules) == before)
        let names = try FileManager.default.contentsOfDirectory(atPath: rules)
        #expect(!names.contains { $0.hasPrefix("incoming-") })
        #expect(updater.state().installedVersion == 5)
    }

    @Test func aManifestWithoutTheStoreIsRefused() async throws {
        let bundleFolder = folder.sub("no-store")
        try FileManager.default.createDirectory(atPath: bundleFolder, withIntermediateDirectories: true)
        let other: [UInt8] = Array("hello\n".utf8)
        try Data(other).write(to: URL(fileURLWithPath: bundleFolder + "/notes.txt"))
        let manifest = BundleSigner.manifest(
            files: [("notes.txt", other)], version: 3, issuedAt: BundleFactory.now - 60, expiresAt: BundleFactory.now + 600)
        try factory.writeManifest(manifest.encoded, to: bundleFolder)
        let outcome = await updater().install(fromDirectory: bundleFolder)
        #expect(outcome.code == "bundle.file-missing")
        #expect(RuleUpdater.installed(directory: rules) == nil)
    }

    @Test func aStoreThatIsNotAStoreIsRefused() async throws {
        let bundleFolder = folder.sub("bad-store")
        try FileManager.default.createDirectory(atPath: bundleFolder, withIntermediateDirectories: true)
        let junk = [UInt8](repeating: 7, count: 4096)
        try Data(junk).write(to: URL(fileURLWithPath: bundleFolder + "/rules.hpstore"))
        let manifest = BundleSigner.manifest(
            files: [("rules.hpstore", junk)], version: 3, issuedAt: BundleFactory.now - 60, expiresAt: BundleFactory.now + 600)
        try factory.writeManifest(manifest.encoded, to: bundleFolder)
        #expect(await updater().install(fromDirectory: bundleFolder).code == "store.magic")
        #expect(RuleUpdater.installed(directory: rules) == nil)
    }

    @Test func aBundleOverTheSizeCapIsRefusedBeforeCopying() async throws {
        var settings = RuleUpdater.Settings(directory: rules, source: nil, trustedKeys: [factory.key.publicKey])
        settings.maxBundleBytes = 10_000
        let big = try factory.write(version: 3, to: folder.sub("big"), padding: 2000)
        let outcome = await RuleUpdater(settings: settings).install(fromDirectory: big)
        #expect(outcome.code == "fetch.too-large")
        #expect(outcome.message.contains("rules.maxBundleBytes"))
    }

    @Test func aLeftoverFolderOfTheSameVersionIsReplaced() async throws {
        let updater = updater()
        _ = await updater.install(fromDirectory: try bundle(2))
        // A crash after the rename into versions/ but before the switch of current.
        try FileManager.default.createDirectory(atPath: rules + "/versions/3", withIntermediateDirectories: true)
        try Data("stale".utf8).write(to: URL(fileURLWithPath: rules + "/versions/3/rules.hpstore"))
        try FileManager.default.createDirectory(atPath: rules + "/incoming-dead", withIntermediateDirectories: true)
        #expect(await updater.install(fromDirectory: try bundle(3)) == .installed(version: 3, previous: 2))
        #expect(try RuleStore(path: rules + "/current/rules.hpstore").version == 3)
        #expect(!FileManager.default.fileExists(atPath: rules + "/incoming-dead"))
    }

    @Test func aCurrentThatIsNotALinkIsNeverReplaced() async throws {
        try FileManager.default.createDirectory(atPath: rules + "/current", withIntermediateDirectories: true)
        let outcome = await updater().install(fromDirectory: try bundle(3))
        #expect(outcome.code == "install.io")
        #expect(FileSystemProbe.isDirectory(rules + "/current"))
    }

    @Test func updateFromAFileSource() async throws {
        let source = try bundle(4, "published")
        let updater = updater(source: "file://" + source + "/")
        #expect(await updater.update() == .installed(version: 4, previous: nil))
        #expect(await updater.update() == .alreadyCurrent(version: 4))
        try factory.write(version: 5, to: source)
        #expect(await updater.update() == .installed(version: 5, previous: 4))
        #expect(updater.state().installedFrom == "file://" + source + "/")
    }

    @Test func updateWithoutASourceOrWithPlainHTTP() async throws {
        #expect(await updater().update().code == "fetch.no-source")
        let plain = await updater(source: "http://127.0.0.1:1/rules/").update()
        #expect(plain.code == "fetch.plain-http")
        #expect(plain.message.contains("rules.source"))
        #expect(await updater(source: "ftp://127.0.0.1/rules/").update().code == "config.invalid")
        #expect(RuleUpdater.installed(directory: rules) == nil)
    }

    @Test func anUnreadableCAFileIsRefusedBeforeAnyConnection() async throws {
        var settings = RuleUpdater.Settings(
            directory: rules, source: "https://127.0.0.1:1/rules/", trustedKeys: [factory.key.publicKey],
            caFile: folder.sub("no-such-ca.pem"))
        var outcome = await RuleUpdater(settings: settings).update()
        #expect(outcome.code == "fetch.ca-file")
        try Data("not a certificate\n".utf8).write(to: URL(fileURLWithPath: folder.sub("junk.pem")))
        settings.caFile = folder.sub("junk.pem")
        outcome = await RuleUpdater(settings: settings).update()
        #expect(outcome.code == "fetch.ca-file")
        #expect(outcome.message.contains("junk.pem"))
    }

    @Test func noTrustedKeysRefusesEverything() async throws {
        let updater = RuleUpdater(settings: .init(directory: rules, source: nil, trustedKeys: []))
        #expect(await updater.install(fromDirectory: try bundle(3)).code == "bundle.no-trusted-keys")
    }

    @Test func concurrentUpdatesRunOneAtATime() async throws {
        let source = try bundle(4, "published")
        let updater = updater(source: "file://" + source)
        async let first = updater.update()
        async let second = updater.update()
        let outcomes = await [first, second]
        // The second joins the first or runs after it; either way 4 is installed once.
        #expect(outcomes[0] == .installed(version: 4, previous: nil))
        #expect(outcomes[1] == .installed(version: 4, previous: nil) || outcomes[1] == .alreadyCurrent(version: 4))
        #expect(RuleFolderSnapshot(rules).versions == ["4"])
    }
}

func mode(_ path: String) throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue ?? -1
}

enum FileSystemProbe {
    static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}

@Suite struct RuleStateTests {
    @Test func roundTrip() {
        var state = RuleState()
        state.installedVersion = 42
        state.installedAt = 1_795_000_000
        state.installedFrom = "https://rules.example.org/hallpass/"
        state.previousVersion = 41
        state.etag = "\"5f1c-2a9b\""
        state.etagSource = "https://rules.example.org/hallpass/"
        state.lastAttemptAt = 1_795_000_100
        state.lastResult = .refused
        state.lastCode = "fetch.unreachable"
        state.lastMessage = "two\nlines"
        state.lastSuccessAt = 1_795_000_000
        var parsed = RuleState(parsing: state.encoded)
        #expect(parsed.lastMessage == "two lines")
        parsed.lastMessage = state.lastMessage
        #expect(parsed == state)
    }

    @Test func garbageGivesAnEmptyState() {
        #expect(RuleState(parsing: Array("not a state file\ninstalled-version 9\n".utf8)) == RuleState())
        #expect(RuleState(parsing: []) == RuleState())
        var partial = RuleState()
        partial.installedVersion = 3
        #expect(RuleState(parsing: Array("hallpass-rules-state 1\ninstalled-version 3\ninstalled-at nonsense\nfuture-key x\n".utf8)) == partial)
    }
}

@Suite struct RuleScheduleTests {
    @Test func refreshJitterStaysWithinTenPercent() {
        let scheduler = RuleRefreshScheduler(interval: .seconds(1800))
        #expect(scheduler.delay(random: 0) == .seconds(1620))
        #expect(scheduler.delay(random: 1) == .seconds(1980))
        #expect(scheduler.delay(random: 0.5) == .seconds(1800))
        for step in 0...20 {
            let delay = scheduler.delay(random: Double(step) / 20)
            #expect(delay >= .seconds(1620) && delay <= .seconds(1980))
        }
    }

    @Test func retryBackoffDoublesUpToTheCap() {
        let policy = RetryPolicy(attempts: 6, firstDelay: .seconds(2), maximumDelay: .seconds(10))
        #expect(policy.delay(after: 1, random: 1) == .seconds(2))
        #expect(policy.delay(after: 2, random: 1) == .seconds(4))
        #expect(policy.delay(after: 3, random: 1) == .seconds(8))
        #expect(policy.delay(after: 4, random: 1) == .seconds(10))
        #expect(policy.delay(after: 9, random: 1) == .seconds(10))
        #expect(policy.delay(after: 3, random: 0) == .seconds(4))
    }

    @Test func theSchedulerChecksAndStopsWhenCancelled() async throws {
        let folder = try TemporaryFolder("schedule")
        let factory = BundleFactory()
        let source = try factory.write(version: 2, to: folder.sub("published"))
        let updater = RuleUpdater(
            settings: .init(directory: folder.sub("rules"), source: "file://" + source, trustedKeys: [factory.key.publicKey]))
        let (stream, continuation) = AsyncStream<UpdateOutcome>.makeStream()
        let scheduler = RuleRefreshScheduler(interval: .milliseconds(20))
        let task = Task { await scheduler.run(updater: updater) { continuation.yield($0) } }
        var seen: [UpdateOutcome] = []
        for await outcome in stream {
            seen.append(outcome)
            if seen.count == 3 { break }
        }
        task.cancel()
        await task.value
        #expect(seen == [.installed(version: 2, previous: nil), .alreadyCurrent(version: 2), .alreadyCurrent(version: 2)])
    }
}

@Suite struct BundleSourceTests {
    @Test(arguments: [
        ("https://rules.example.org/hallpass/", "https://rules.example.org/hallpass/"),
        ("HTTPS://Rules.Example.org/hallpass", "https://rules.example.org/hallpass/"),
        ("https://rules.example.org", "https://rules.example.org/"),
        ("https://rules.example.org:8443/a/b/", "https://rules.example.org:8443/a/b/"),
        ("https://127.0.0.1:9443/x/", "https://127.0.0.1:9443/x/"),
        ("https://[::1]:9443/x/", "https://[::1]:9443/x/"),
        ("https://rules.example.org:443/", "https://rules.example.org/"),
        ("file:///srv/bundle/", "file:///srv/bundle/"),
        ("file:///srv/my%20bundle", "file:///srv/my bundle/"),
    ])
    func accepted(text: String, normal: String) throws {
        #expect(try BundleSource(parsing: text).description == normal)
    }

    @Test(arguments: [
        "http://rules.example.org/", "HTTP://rules.example.org/",
    ])
    func plainHTTPIsRefused(text: String) {
        #expect(throws: BundleSource.ParseError.self) { try BundleSource(parsing: text) }
        do {
            _ = try BundleSource(parsing: text)
        } catch {
            #expect(error.isPlainHTTP)
            #expect(error.description.contains("https://"))
        }
    }

    @Test(arguments: [
        "ftp://rules.example.org/", "rules.example.org/hallpass/", "https:///path/", "https://user:pw@rules.example.org/",
        "https://rules.example.org:0/", "https://rules.example.org:99999/", "https://rules.example.org/a?b=c",
        "https://rules.example.org/a#frag", "https://bad_host.example/", "https://rules.example.org/../etc/",
        "https://[::1/x/", "https://rules example.org/", "file://relative/path", "file:///a/../b", "file:///bad%zz",
        "https://-dash.example/",
    ])
    func refused(text: String) {
        #expect(throws: BundleSource.ParseError.self) { try BundleSource(parsing: text) }
    }
}
