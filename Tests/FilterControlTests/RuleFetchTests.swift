import FilterControl
import Foundation
import SharedStore
import Testing
import VerdictCore

/// Rule updates from a real nginx over HTTPS on 127.0.0.1, under a test CA
/// made by openssl. Each test starts its own nginx (stopped by pid, also
/// when the test fails), installs a first bundle, then checks one case; every
/// refusal must leave `current` exactly as it was.
@Suite struct RuleFetchTests {
    let factory = BundleFactory()

    /// A server, a rule folder and an updater for it.
    final class Fixture {
        let server: RuleServer
        let local: TemporaryFolder
        var rules: String { local.sub("rules") }

        /// How many times a bundle was published: each manifest gets a later
        /// modification time, so nginx's ETag (time and size) always changes.
        private var publications = 0

        init() throws {
            server = try RuleServer()
            local = try TemporaryFolder("fetch")
        }

        /// Moves the manifest's modification time past every earlier one.
        func freshenManifest() {
            publications += 1
            try? server.touch(BundleManifest.fileName, secondsAhead: 1000 * publications)
        }

        deinit { server.stop() }

        func settings(_ factory: BundleFactory, source: String? = nil, pins: [String] = [], caFile: String?? = .none)
            -> RuleUpdater.Settings
        {
            var settings = RuleUpdater.Settings(
                directory: rules, source: source ?? server.source, trustedKeys: [factory.key.publicKey],
                caFile: caFile ?? server.caFile, pins: pins)
            // Generous: the suite runs beside the server's tests (bcrypt, PostgreSQL clusters) on
            // two cores, and a pin test that timed out its TLS handshake there failed for no fault of its own.
            settings.connectTimeout = .seconds(20)
            settings.requestTimeout = .seconds(20)
            settings.retry = RetryPolicy(attempts: 3, firstDelay: .milliseconds(10), maximumDelay: .milliseconds(40))
            return settings
        }

        func updater(_ factory: BundleFactory, source: String? = nil, pins: [String] = [], caFile: String?? = .none) -> RuleUpdater {
            RuleUpdater(settings: settings(factory, source: source, pins: pins, caFile: caFile))
        }

        /// Publishes a signed bundle of `version` in the served folder.
        func publish(
            _ factory: BundleFactory, version: UInt64, issued: Int64? = nil, expires: Int64? = nil, signer: BundleSigningKey? = nil,
            padding: Int = 0
        ) throws {
            try factory.write(
                version: version, to: server.bundleFolder, issued: issued, expires: expires, signer: signer, padding: padding)
            freshenManifest()
        }

        /// Publishes and installs version 1; returns the folder as it is then.
        func installFirst(_ factory: BundleFactory) async throws -> RuleFolderSnapshot {
            try publish(factory, version: 1)
            let outcome = await updater(factory).update()
            try #require(outcome == .installed(version: 1, previous: nil), "\(outcome)")
            return RuleFolderSnapshot(rules)
        }
    }

    /// Runs `spoil` on the served bundle after a first install, updates, and
    /// checks the refusal code and that nothing installed changed.
    func expectRefusal(
        _ code: String, messageContains: String? = nil, pins: [String] = [], source: ((RuleServer) -> String)? = nil,
        caFile: String?? = .none, spoil: (Fixture) throws -> Void = { _ in }
    ) async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        let before = try await fixture.installFirst(factory)
        try spoil(fixture)
        fixture.freshenManifest()
        let outcome = await fixture.updater(factory, source: source?(fixture.server), pins: pins, caFile: caFile).update()
        #expect(outcome.code == code, "\(outcome)")
        if let messageContains { #expect(outcome.message.contains(messageContains), "\(outcome.message)") }
        #expect(RuleFolderSnapshot(fixture.rules) == before)
        let state = RuleState.load(directory: fixture.rules)
        #expect(state.installedVersion == 1)
        #expect(state.lastResult == .refused)
        #expect(state.lastCode == code)
        let names = try FileManager.default.contentsOfDirectory(atPath: fixture.rules)
        #expect(!names.contains { $0.hasPrefix("incoming-") })
    }

    // MARK: - Good paths

    @Test func firstInstallOverHTTPS() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        try fixture.publish(factory, version: 1)
        let updater = fixture.updater(factory)
        #expect(await updater.update() == .installed(version: 1, previous: nil))
        let installed = try #require(updater.installed())
        #expect(try RuleStore(path: installed.storePath).version == 1)
        let state = updater.state()
        #expect(state.installedFrom == fixture.server.source)
        #expect(state.etag?.isEmpty == false)
        #expect(fixture.server.requests.contains { $0.hasSuffix("GET /bundle/rules.hpstore 200 -") })
    }

    @Test func anUnchangedManifestAnswers304() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        _ = try await fixture.installFirst(factory)
        let etag = try #require(RuleState.load(directory: fixture.rules).etag)
        // A new updater: the ETag comes from the state file.
        #expect(await fixture.updater(factory).update() == .alreadyCurrent(version: 1))
        let last = try #require(fixture.server.requests.last)
        // nginx writes the quotes of the ETag as \x22.
        #expect(last == "\(fixture.server.goodPort) GET /bundle/manifest 304 \(etag.replacingOccurrences(of: "\"", with: "\\x22"))")
        #expect(RuleState.load(directory: fixture.rules).lastResult == .alreadyCurrent)
    }

    @Test func aNewerVersionIsInstalled() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        _ = try await fixture.installFirst(factory)
        try fixture.publish(factory, version: 2)
        let updater = fixture.updater(factory)
        #expect(await updater.update() == .installed(version: 2, previous: 1))
        #expect(try RuleStore(path: fixture.rules + "/current/rules.hpstore").version == 2)
        #expect(RuleFolderSnapshot(fixture.rules).versions == ["1", "2"])
        // And then it is current.
        #expect(await updater.update() == .alreadyCurrent(version: 2))
    }

    @Test func aPinOnTheCAOrTheLeafIsAccepted() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        try fixture.publish(factory, version: 1)
        let caPin = try fixture.server.pin(ofCertificate: "ca")
        let leafPin = try fixture.server.pin(ofCertificate: "localhost")
        let decoy = "sha256/" + Data(repeating: 7, count: 32).base64EncodedString()
        #expect(await fixture.updater(factory, pins: [decoy, caPin]).update() == .installed(version: 1, previous: nil))
        try fixture.publish(factory, version: 2)
        #expect(await fixture.updater(factory, pins: [leafPin]).update() == .installed(version: 2, previous: 1))
    }

    @Test func anAddressSourceChecksTheAddressInTheCertificate() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        try fixture.publish(factory, version: 1)
        let source = "https://127.0.0.1:\(fixture.server.goodPort)/bundle/"
        #expect(await fixture.updater(factory, source: source).update() == .installed(version: 1, previous: nil))
    }

    // MARK: - Refusals: the bundle

    @Test func badSignature() async throws {
        try await expectRefusal("bundle.bad-signature", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            try BundleFactory.rewrite(fixture.server.bundleFolder, BundleManifest.fileName) { bytes in
                Array(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "version 2", with: "version 3").utf8)
            }
        })
    }

    @Test func unknownKey() async throws {
        try await expectRefusal("bundle.unknown-key", messageContains: "rules.trustedKeys", spoil: { fixture in
            try fixture.publish(factory, version: 2, signer: BundleSigningKey())
        })
    }

    @Test func fileHashDiffers() async throws {
        try await expectRefusal("bundle.file-hash", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            try BundleFactory.rewrite(fixture.server.bundleFolder, BundleManifest.storeFileName) { bytes in
                var copy = bytes
                copy[copy.count / 3] ^= 0x01
                return copy
            }
        })
    }

    @Test func truncatedDownload() async throws {
        try await expectRefusal("bundle.file-size", messageContains: "truncated", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            try BundleFactory.rewrite(fixture.server.bundleFolder, BundleManifest.storeFileName) { Array($0.prefix($0.count - 100)) }
        })
    }

    @Test func oversizedDownload() async throws {
        try await expectRefusal("fetch.too-large", messageContains: "rules.hpstore", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            try BundleFactory.rewrite(fixture.server.bundleFolder, BundleManifest.storeFileName) { $0 + [UInt8](repeating: 0, count: 5000) }
        })
    }

    @Test func oversizedManifest() async throws {
        try await expectRefusal("fetch.too-large", messageContains: "manifest", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            let huge = [UInt8](repeating: UInt8(ascii: "#"), count: 70_000)
            try factory.writeManifest(huge, to: fixture.server.bundleFolder)
        })
    }

    @Test func bundleOverTheConfiguredCap() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        let before = try await fixture.installFirst(factory)
        try fixture.publish(factory, version: 2, padding: 3000)
        var settings = fixture.settings(factory)
        settings.maxBundleBytes = 20_000
        let outcome = await RuleUpdater(settings: settings).update()
        #expect(outcome.code == "fetch.too-large")
        #expect(outcome.message.contains("rules.maxBundleBytes"))
        #expect(RuleFolderSnapshot(fixture.rules) == before)
        // Refused from the manifest alone: the store was never requested.
        #expect(fixture.server.requests.filter { $0.contains("/bundle/rules.hpstore") }.count == 1)
    }

    @Test func expiredBundle() async throws {
        try await expectRefusal("bundle.expired", spoil: { fixture in
            try fixture.publish(factory, version: 2, issued: BundleFactory.now - 7200, expires: BundleFactory.now - 3600)
        })
    }

    @Test func olderVersionIsARollback() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        try fixture.publish(factory, version: 5)
        #expect(await fixture.updater(factory).update() == .installed(version: 5, previous: nil))
        let before = RuleFolderSnapshot(fixture.rules)
        try fixture.publish(factory, version: 4)
        let outcome = await fixture.updater(factory).update()
        #expect(outcome.code == "install.rollback")
        #expect(RuleFolderSnapshot(fixture.rules) == before)
        // The store of the old bundle was never downloaded.
        #expect(fixture.server.requests.filter { $0.contains("/bundle/rules.hpstore") }.count == 1)
    }

    @Test func malformedManifest() async throws {
        try await expectRefusal("bundle.manifest-malformed", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            try factory.writeManifest(Array("hallpass-bundle 1\nversion two\n".utf8), to: fixture.server.bundleFolder)
        })
    }

    @Test func manifestNamingAPathOutsideTheBundle() async throws {
        try await expectRefusal("bundle.path-escape", messageContains: "../state", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            let text = """
                hallpass-bundle 1
                version 2
                issued \(UTCTime.format(BundleFactory.now - 60))
                expires \(UTCTime.format(BundleFactory.now + 3600))
                file ../state 10 \(String(repeating: "0", count: 64))

                """
            try factory.writeManifest(Array(text.utf8), to: fixture.server.bundleFolder)
        })
    }

    @Test func missingSignatureFile() async throws {
        try await expectRefusal("fetch.http-status", messageContains: "HTTP 404", spoil: { fixture in
            try fixture.publish(factory, version: 2)
            try FileManager.default.removeItem(atPath: fixture.server.bundleFolder + "/" + BundleManifest.signatureFileName)
        })
    }

    // MARK: - Refusals: the server and the connection

    @Test func serverDown() async throws {
        // A port nothing listens on: every try is refused at once, and tried again.
        try await expectRefusal("fetch.unreachable", messageContains: "refused", source: { _ in
            "https://localhost:\(RuleFetchTests.closedPort())/bundle/"
        })
    }

    @Test func serverErrorsAreRetriedThenRefused() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        let before = try await fixture.installFirst(factory)
        let source = "https://localhost:\(fixture.server.goodPort)/broken/"
        let outcome = await fixture.updater(factory, source: source).update()
        #expect(outcome.code == "fetch.http-status")
        #expect(outcome.message.contains("503"))
        // Three tries in all (the retry policy of the fixture), then the refusal.
        #expect(fixture.server.requests.filter { $0.contains("GET /broken/manifest 503") }.count == 3)
        #expect(RuleFolderSnapshot(fixture.rules) == before)
    }

    @Test func certificateForAnotherName() async throws {
        try await expectRefusal("fetch.tls-name", messageContains: "not valid for that name", source: { server in
            "https://localhost:\(server.otherNamePort)/bundle/"
        })
    }

    @Test func certificateFromAnUntrustedCA() async throws {
        try await expectRefusal("fetch.tls-untrusted", messageContains: "not trusted", source: { server in
            "https://localhost:\(server.untrustedPort)/bundle/"
        })
    }

    @Test func withoutTheCAFileTheTestCAIsNotTrusted() async throws {
        try await expectRefusal("fetch.tls-untrusted", caFile: .some(nil))
    }

    @Test func pinMismatch() async throws {
        let decoy = "sha256/" + Data(repeating: 9, count: 32).base64EncodedString()
        try await expectRefusal("fetch.pin-mismatch", messageContains: "rules.pins", pins: [decoy])
    }

    /// Rules from the school's server (school.bundleKeys, no rules.source): the
    /// certificate is taken by its pinned key alone, as for check-ins, though
    /// no root vouches for it; another key is refused in the school's words.
    @Test func theSchoolsServerKeyIsTheWholeCheck() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        try fixture.publish(factory, version: 1)
        func hex(_ pin: String) throws -> String {
            try #require(Data(base64Encoded: String(pin.dropFirst("sha256/".count)))).map { String(format: "%02x", $0) }.joined()
        }
        let rogue = try hex(fixture.server.pin(ofCertificate: "rogue"))
        let yaml = """
            rules:
              directory: \(fixture.rules)
            school:
              server: https://localhost:\(fixture.server.untrustedPort)/
              fingerprint: \(rogue)
              bundleKeys: [ "\(factory.key.publicKey)" ]
            """
        var settings = RuleUpdater.Settings(try Configuration(yaml: yaml))
        settings.connectTimeout = .seconds(5)
        settings.requestTimeout = .seconds(20)
        #expect(settings.serverKey?.description == rogue && settings.caFile == nil)
        let outcome = await RuleUpdater(settings: settings).update()
        #expect(outcome == .installed(version: 1, previous: nil), "\(outcome)")

        // The same configuration against the server whose key is another: refused, nothing sent.
        let good = try hex(fixture.server.pin(ofCertificate: "localhost"))
        let otherKey = try Configuration(yaml: yaml.replacingOccurrences(of: rogue, with: good))
        let requests = fixture.server.requests.count
        let refused = await RuleUpdater(settings: RuleUpdater.Settings(otherKey)).update()
        #expect(refused.code == "fetch.pin-mismatch", "\(refused)")
        #expect("\(refused)".contains("school.fingerprint \(good)") && "\(refused)".contains("it has \(rogue)"))
        #expect(fixture.server.requests.count == requests, "the handshake ended before a request")
    }

    @Test func plainHTTPSource() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        let before = try await fixture.installFirst(factory)
        let requestsBefore = fixture.server.requests.count
        let outcome = await fixture.updater(factory, source: "http://localhost:\(fixture.server.plainPort)/bundle/").update()
        #expect(outcome.code == "fetch.plain-http")
        #expect(outcome.message.contains("rules.source"))
        // Refused without a request, although the server would have answered.
        #expect(fixture.server.requests.count == requestsBefore)
        #expect(RuleFolderSnapshot(fixture.rules) == before)
    }

    @Test func aConnectionCutMidDownload() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        let before = try await fixture.installFirst(factory)
        // The status line promises 5000 bytes; 18 arrive, then the connection drops.
        let response = Array("HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\nhallpass-bundle 1\n".utf8)
        let (cutter, port) = try fixture.server.startCuttingServer(response: response)
        defer { cutter.stop() }
        var settings = fixture.settings(factory, source: "https://localhost:\(port)/bundle/")
        settings.retry = RetryPolicy(attempts: 1)
        let outcome = await RuleUpdater(settings: settings).update()
        #expect(outcome.code == "fetch.truncated", "\(outcome)")
        #expect(outcome.message.contains("manifest"))
        #expect(RuleFolderSnapshot(fixture.rules) == before)
    }

    @Test func aServerThatNeverAnswersTimesOut() async throws {
        let fixture = try Fixture()
        defer { fixture.server.stop() }
        let before = try await fixture.installFirst(factory)
        // A socket that listens (the kernel completes the connection) but never reads.
        let (descriptor, port) = try RuleFetchTests.silentListener()
        defer { close(descriptor) }
        var settings = fixture.settings(factory, source: "https://localhost:\(port)/bundle/")
        settings.requestTimeout = .seconds(1)
        settings.retry = RetryPolicy(attempts: 1)
        let outcome = await RuleUpdater(settings: settings).update()
        #expect(outcome.code == "fetch.timeout")
        #expect(RuleFolderSnapshot(fixture.rules) == before)
    }

    @Test func aLookupFileInPiecesIsReadWholeAndAMissingOneIsUnknown() async throws {
        let server = try RuleServer()
        defer { server.stop() }
        let folder = server.bundleFolder + "/lookup"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // 40 KB of comments before the answer: the body comes in more than one piece (TLS records hold 16 KB at most).
        let comments = String(repeating: "# " + String(repeating: "x", count: 198) + "\n", count: 200)
        try (comments + "gambling\nttl 600\n").write(toFile: folder + "/casino.test", atomically: true, encoding: .utf8)
        let lookup = try HTTPSLookup(host: "localhost", port: server.goodPort, path: "/bundle/", caFile: server.caFile, pins: [],
            // Filter-control's 3 s would fail this test on a machine busy with other suites; the limit is not what it checks.
            connectTimeout: .seconds(30), requestTimeout: .seconds(30))
        #expect(await lookup.lookUp(try HostName("casino.test")) == .categories(["gambling"], timeToLive: 600))
        #expect(await lookup.lookUp(try HostName("school.test")) == .categories([], timeToLive: LookupResult.unknownTimeToLive))
        #expect(server.requests.count == 2)
    }

    // MARK: - Helpers

    /// A port on 127.0.0.1 that nothing listens on (bound, then released).
    static func closedPort() -> Int {
        let (descriptor, port) = (try? silentListener(listening: false)) ?? (-1, 1)
        close(descriptor)
        return port
    }

    /// A TCP socket bound to a free port of 127.0.0.1, listening when asked.
    static func silentListener(listening: Bool = true) throws -> (Int32, Int) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw RuleServerError("socket failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
            }
        }
        guard ok, !listening || listen(descriptor, 8) == 0 else {
            close(descriptor)
            throw RuleServerError("bind/listen failed")
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }
}
