import Crypto
import Foundation
import Logging
import NIOHTTP1
import SchoolServer
import SharedStore
import Synchronization
import Testing

/// A running server that publishes: its state folder (the publisher's
/// folder, the file cache, the signing key `init` would make) in a
/// temporary folder, and API tokens of both roles.
struct PublishingServer: Sendable {
    let server: RunningServer
    let configuration: ServerConfiguration
    let admin: String
    let auditor: String
    let folder: String

    var storage: SQLStorage { server.storage }

    func request(
        _ method: HTTPMethod, _ path: String, token: String? = nil, headers: [(String, String)] = [], body: String = ""
    ) async throws -> PinnedHTTPSClient.Answer {
        var all = headers
        if let token { all.append(("Authorization", "Bearer \(token)")) }
        return try await server.client.request(method, path, headers: all, body: Array(body.utf8))
    }

    func admin(_ method: HTTPMethod, _ path: String, _ body: String = "") async throws -> PinnedHTTPSClient.Answer {
        try await request(method, path, token: admin, body: body)
    }

    /// PUTs a list and returns the new policy version.
    @discardableResult
    func putList(_ category: String, _ names: [String], reason: String = "lists") async throws -> Int {
        let answer = try await admin(
            .PUT, "/api/v1/policy/lists/\(category)?reason=\(reason.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? reason)",
            names.map { $0 + "\n" }.joined())
        #expect(answer.status == 201, "\(answer.text)")
        return try Self.number(answer, "version")
    }

    @discardableResult
    func putPolicy(_ yaml: String?, reason: String = "policy") async throws -> PinnedHTTPSClient.Answer {
        let policy = yaml.map { try! String(decoding: JSONEncoder().encode($0), as: UTF8.self) } ?? "null"
        return try await admin(.PUT, "/api/v1/policy", #"{"policy":\#(policy),"reason":"\#(reason)"}"#)
    }

    /// Publishes and returns (bundle version, state).
    func publish(reason: String = "publish", policyVersion: Int? = nil) async throws -> (Int, String) {
        let extra = policyVersion.map { #","policyVersion":\#($0)"# } ?? ""
        let answer = try await admin(.POST, "/api/v1/policy/publish", #"{"reason":"\#(reason)"\#(extra)}"#)
        #expect(answer.status == 201, "\(answer.text)")
        let object = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any]
        return (object?["bundleVersion"] as? Int ?? -1, object?["state"] as? String ?? "")
    }

    static func number(_ answer: PinnedHTTPSClient.Answer, _ key: String) throws -> Int {
        let object = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any]
        return try #require(object?[key] as? Int, "\(answer.text)")
    }

    func bundle(_ name: String, ifNoneMatch: String? = nil, method: HTTPMethod = .GET) async throws -> PinnedHTTPSClient.Answer {
        try await request(method, "/bundle/\(name)", headers: ifNoneMatch.map { [("If-None-Match", $0)] } ?? [])
    }
}

final class ConfigurationBox: Sendable {
    private let value = Mutex<ServerConfiguration?>(nil)
    func set(_ configuration: ServerConfiguration) { value.withLock { $0 = configuration } }
    var configuration: ServerConfiguration { value.withLock { $0! } }
}

func withPublishingServer(
    _ engine: Engine, offlineKey: BundlePublicKey? = nil, copyTo: Bool = false, logger: Logger = testLogger, live: LiveChannel? = nil,
    _ body: @Sendable (PublishingServer) async throws -> Void
) async throws {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-publish-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let box = ConfigurationBox()
    try await withRunningServer(engine, logger: logger, live: live) { configuration in
        configuration.stateDirectoryOverride = folder + "/state"
        if let offlineKey {
            configuration.publishing.offline = true
            configuration.publishing.trustedKeys = [offlineKey]
        }
        if copyTo { configuration.publishing.copyTo = folder + "/www" }
        // What `init` does before the server starts.
        _ = try? ServerAdministration.makeSigningKey(configuration: configuration)
        box.set(configuration)
    } _: { server async throws in
        let admin = try await ServerAdministration.createAPIToken(storage: server.storage, role: .admin, createdBy: "t", now: 0)
        let auditor = try await ServerAdministration.createAPIToken(storage: server.storage, role: .auditor, createdBy: "t", now: 0)
        try await body(
            PublishingServer(server: server, configuration: box.configuration, admin: admin.token, auditor: auditor.token, folder: folder))
    }
}

/// The lines a logger was given, for the tests that read the server's log.
final class CapturedLog: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
    func append(_ line: String) { lines.withLock { $0.append(line) } }

    var logger: Logger {
        var logger = Logger(label: "hallpass-server-tests") { _ in Handler(log: self) }
        logger.logLevel = .info
        return logger
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .info
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            log.append("\(event.level) \(event.message)")
        }
    }
}

@Suite struct PublishingAPITests {
    static let policy = "policy:\n  block: [gambling]\n"

    @Test(arguments: Engine.allCases)
    func rolesDecideWhoReadsAndWhoChanges(engine: Engine) async throws {
        try await withPublishingServer(engine) { server async throws in
            try await server.putList("gambling", ["casino.example"])
            // An auditor reads, and may not change or publish.
            #expect(try await server.request(.GET, "/api/v1/policy", token: server.auditor).status == 200)
            #expect(try await server.request(.GET, "/api/v1/policy/versions", token: server.auditor).status == 200)
            #expect(try await server.request(.GET, "/api/v1/policy/versions/1", token: server.auditor).status == 200)
            let writes: [(HTTPMethod, String, String)] = [
                (.PUT, "/api/v1/policy", #"{"policy":null,"reason":"r"}"#), (.PUT, "/api/v1/policy/lists/games?reason=r", "game.example\n"),
                (.DELETE, "/api/v1/policy/lists/gambling?reason=r", ""), (.POST, "/api/v1/policy/rollback", #"{"version":1,"reason":"r"}"#),
                (.POST, "/api/v1/policy/publish", #"{"reason":"r"}"#), (.POST, "/api/v1/policy/pending/signature", "x"),
            ]
            for (method, path, body) in writes {
                let answer = try await server.request(method, path, token: server.auditor, body: body)
                #expect(answer.status == 403, "\(method) \(path)")
                #expect(answer.text.contains("role-forbidden"))
                // No token, or a machine's signature instead of one: refused before anything.
                #expect(try await server.request(method, path, body: body).status == 401, "\(method) \(path)")
            }
            let machine = try await server.server.enrol(TestMachine())
            let signed = try RequestSignature.headers(
                machine: machine.id, key: machine.key, method: "PUT", path: "/api/v1/policy", body: Array(#"{"policy":null,"reason":"r"}"#.utf8),
                now: server.server.clock.now)
            let bySignature = try await server.server.client.request(
                .PUT, "/api/v1/policy", headers: signed, body: Array(#"{"policy":null,"reason":"r"}"#.utf8))
            #expect(bySignature.status == 401)
            #expect(try await server.request(.GET, "/api/v1/policy").status == 401)
            #expect(try await server.storage.latestPolicyVersion()?.version == 1)
        }
    }

    @Test(arguments: Engine.allCases)
    func refusedChangesStoreNothing(engine: Engine) async throws {
        try await withPublishingServer(engine) { server async throws in
            // A policy machines would refuse, with the reason.
            let bad = try await server.putPolicy("policy:\n  blok: [gambling]\n")
            #expect(bad.status == 400)
            #expect(bad.text.contains("policy-invalid"))
            #expect(bad.text.contains("blok"))
            // No reason, an empty reason.
            let noReason = try await server.admin(.PUT, "/api/v1/policy", #"{"policy":null}"#)
            #expect(noReason.status == 400)
            // No policy key (it would remove the policy), an empty policy, an empty list.
            let noPolicyKey = try await server.admin(.PUT, "/api/v1/policy", #"{"reason":"r"}"#)
            #expect(noPolicyKey.status == 400)
            #expect(noPolicyKey.text.contains("policy"))
            #expect(try await server.putPolicy("  \n").text.contains("policy-invalid"))
            let emptyList = try await server.admin(.PUT, "/api/v1/policy/lists/games?reason=r")
            #expect(emptyList.status == 400)
            #expect(emptyList.text.contains("list-invalid"))
            let emptyReason = try await server.putPolicy(Self.policy, reason: "  ")
            #expect(emptyReason.status == 400)
            #expect(emptyReason.text.contains("reason-required"))
            #expect(try await server.admin(.PUT, "/api/v1/policy/lists/games", "game.example\n").text.contains("reason-required"))
            // A category RuleCompiler refuses, a list with no name in it.
            let category = try await server.admin(.PUT, "/api/v1/policy/lists/Bad%20Name?reason=r", "game.example\n")
            #expect(category.status == 400)
            #expect(category.text.contains("category-invalid"))
            let junk = try await server.admin(.PUT, "/api/v1/policy/lists/games?reason=r", "||not a name^$third-party\n@@||x\n")
            #expect(junk.status == 400, "\(junk.text)")
            #expect(junk.text.contains("list-invalid"))
            // Removing a list there is not.
            #expect(try await server.admin(.DELETE, "/api/v1/policy/lists/games?reason=r").status == 404)
            // Not JSON.
            #expect(try await server.admin(.PUT, "/api/v1/policy", "{").status == 400)
            // Publishing before there is a version, and a version that does not exist.
            let nothing = try await server.admin(.POST, "/api/v1/policy/publish", #"{"reason":"r"}"#)
            #expect(nothing.status == 409)
            #expect(try await server.storage.latestPolicyVersion() == nil)
            try await server.putList("games", ["game.example"])
            #expect(try await server.admin(.POST, "/api/v1/policy/publish", #"{"reason":"r","policyVersion":7}"#).status == 404)
            // The same content again is no version.
            let same = try await server.admin(.PUT, "/api/v1/policy/lists/games?reason=again", "game.example\n")
            #expect(same.status == 400)
            #expect(same.text.contains("no-change"))
            #expect(try await server.storage.latestPolicyVersion()?.version == 1)
        }
    }

    @Test(arguments: Engine.allCases)
    func aListLargerThanTheLimitIsRefused(engine: Engine) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-limit-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try await withRunningServer(engine) { configuration in
            configuration.stateDirectoryOverride = folder
            configuration.publishing.maxListBytes = 1024
        } _: { server async throws in
            let admin = try await ServerAdministration.createAPIToken(storage: server.storage, role: .admin, createdBy: "t", now: 0)
            let names = (0..<100).map { "site\($0).example\n" }.joined()
            let answer = try await server.client.request(
                .PUT, "/api/v1/policy/lists/games?reason=r", headers: [("Authorization", "Bearer \(admin.token)")], body: Array(names.utf8))
            #expect(answer.status == 413)
            #expect(try await server.storage.latestPolicyVersion() == nil)
        }
    }

    @Test(arguments: Engine.allCases)
    func publishedFilesAreServedWithTheirHashAsETag(engine: Engine) async throws {
        try await withPublishingServer(engine, copyTo: true) { server async throws in
            // Before any publication: nothing to serve, and machines are not behind.
            #expect(try await server.bundle("manifest").status == 404)
            try await server.putList("gambling", ["casino.example", "bet.example"])
            #expect(try await server.putPolicy(Self.policy).status == 201)
            let (version, state) = try await server.publish(reason: "first")
            #expect(version == 1)
            #expect(state == "published")

            // The enrol reply says where bundles are and which key signs them.
            let token = try await ServerAdministration.createEnrolmentToken(
                storage: server.storage, fingerprint: server.server.fingerprint, room: "lab2", uses: 1, expiresIn: 3600, createdBy: "t",
                now: server.server.clock.now)
            let enrolled = try await server.server.post("/api/v1/enrol", RunningServer.enrolBody(token: token, machine: TestMachine()))
            struct Enrolled: Decodable {
                struct Bundles: Decodable {
                    let path: String
                    let trustedKeys: [String]
                }
                let bundles: Bundles
            }
            let bundles = try JSONDecoder().decode(Enrolled.self, from: Data(enrolled.body)).bundles
            #expect(bundles.path == "/bundle/")
            let keys = try bundles.trustedKeys.map { try BundlePublicKey($0) }
            #expect(keys.count == 1)

            // What a machine fetches, checked as a machine checks it.
            let manifest = try await server.bundle("manifest")
            #expect(manifest.status == 200)
            #expect(manifest.header("Cache-Control") == "no-cache")
            let signature = try await server.bundle("manifest.sig")
            let (parsed, _) = try BundleVerifier(signatures: .trusted(keys), now: server.server.clock.now).verifyManifest(
                manifest.body, signature: signature.body)
            #expect(parsed.version == 1)
            #expect(parsed.files.map(\.name).sorted() == ["policy.yaml", "rules.hpstore"])
            for file in parsed.files {
                let answer = try await server.bundle(file.name)
                #expect(answer.status == 200)
                #expect(answer.body.count == Int(file.size))
                #expect(Secrets.sha256(answer.body) == file.sha256)
                #expect(answer.header("ETag") == "\"\(file.sha256)\"")
                // Asked again with the ETag: 304 and no body; a list of tags, a weak one, and `*` too.
                let again = try await server.bundle(file.name, ifNoneMatch: "\"\(file.sha256)\"")
                #expect(again.status == 304)
                #expect(again.body.isEmpty)
                #expect(try await server.bundle(file.name, ifNoneMatch: "\"abc\", W/\"\(file.sha256)\"").status == 304)
                #expect(try await server.bundle(file.name, ifNoneMatch: "*").status == 304)
                #expect(try await server.bundle(file.name, ifNoneMatch: "\"abc\"").status == 200)
                // HEAD: the headers without the body.
                let head = try await server.bundle(file.name, method: .HEAD)
                #expect(head.status == 200)
                #expect(head.body.isEmpty)
                #expect(head.header("ETag") == "\"\(file.sha256)\"")
            }
            #expect(try await server.bundle("policy.yaml").text == Self.policy)
            for name in ["nothing", ".previous", "manifest.pending", "lock"] {
                #expect(try await server.bundle(name).status == 404, "\(name)")
            }
            // The copy for a static server is the same bundle.
            let copied = try BundleVerifier(signatures: .trusted(keys), now: server.server.clock.now).verify(directory: server.folder + "/www")
            #expect(copied.manifest.version == 1)
        }
    }

    @Test(arguments: Engine.allCases)
    func aPolicyOnlyChangeKeepsTheStoreByteForByte(engine: Engine) async throws {
        try await withPublishingServer(engine, copyTo: true) { server async throws in
            try await server.putList("gambling", (0..<2000).map { "site\($0).example" })
            #expect(try await server.putPolicy(Self.policy).status == 201)
            #expect(try await server.publish().0 == 1)
            let store = try await server.bundle("rules.hpstore")
            let policy = try await server.bundle("policy.yaml")
            let manifest = try await server.bundle("manifest")

            #expect(try await server.putPolicy("policy:\n  block: [gambling, games]\n", reason: "games too").status == 201)
            // Later: nothing of the time may get into the store.
            server.server.clock.advance(3600)
            #expect(try await server.publish().0 == 2)
            // The store's ETag is the same: a machine's conditional GET costs a 304.
            let storeAfter = try await server.bundle("rules.hpstore", ifNoneMatch: store.header("ETag"))
            #expect(storeAfter.status == 304)
            #expect(try await server.bundle("rules.hpstore").body == store.body)
            #expect(try await server.bundle("policy.yaml", ifNoneMatch: policy.header("ETag")).status == 200)
            #expect(try await server.bundle("manifest", ifNoneMatch: manifest.header("ETag")).status == 200)

            // A list change: a new store, and a delta from the one before.
            try await server.putList("gambling", (0..<2001).map { "site\($0).example" })
            #expect(try await server.publish().0 == 3)
            let third = try BundleManifest(parsing: try await server.bundle("manifest").body)
            #expect(try await server.bundle("rules.hpstore", ifNoneMatch: store.header("ETag")).status == 200)
            let delta = try #require(third.deltas.first)
            #expect(delta.baseSHA256 == Secrets.sha256(store.body))
            let fetched = try await server.bundle(delta.name)
            #expect(fetched.status == 200)
            #expect(Secrets.sha256(fetched.body) == delta.sha256)
            // The copy carries the delta too.
            #expect(FileManager.default.fileExists(atPath: server.folder + "/www/" + delta.name))
        }
    }

    @Test(arguments: Engine.allCases)
    func aMachineIsBehindUntilItHasThePublishedVersion(engine: Engine) async throws {
        try await withPublishingServer(engine) { server async throws in
            let machine = try await server.server.enrol(TestMachine())
            func checkIn(rules: Int) async throws -> String {
                let json =
                    #"{"version":"1.0","rulesVersion":\#(rules),"rulesSince":"2025-11-28T08:00:00Z","filterData":"running","filterDataRestarts":0,"failMode":"open","queueDrops":0,"recordsWaiting":0,"recordsDropped":0,"users":[]}"#
                return try await server.server.post("/api/v1/machine/checkin", json, signedBy: machine).text
            }
            func state() async throws -> String {
                let answer = try await server.request(.GET, "/api/v1/machines", token: server.auditor)
                return answer.text.contains(#""state":"behind""#) ? "behind" : answer.text.contains(#""state":"ok""#) ? "ok" : answer.text
            }
            #expect(try await checkIn(rules: 0) == #"{"publishedVersion":0}"#)
            #expect(try await state() == "ok")
            try await server.putList("gambling", ["casino.example"])
            #expect(try await server.publish().0 == 1)
            #expect(try await state() == "behind")
            #expect(try await checkIn(rules: 0) == #"{"publishedVersion":1}"#)
            #expect(try await state() == "behind")
            #expect(try await checkIn(rules: 1) == #"{"publishedVersion":1}"#)
            #expect(try await state() == "ok")
        }
    }

    @Test(arguments: Engine.allCases)
    func anOfflineKeySignsWhatThePublisherPrepared(engine: Engine) async throws {
        let offline = BundleSigningKey()
        try await withPublishingServer(engine, offlineKey: offline.publicKey) { server async throws in
            try await server.putList("gambling", ["casino.example"])
            let (version, state) = try await server.publish(reason: "prepared")
            #expect(version == 1)
            #expect(state == "pending")
            // Nothing is served before the signature.
            #expect(try await server.bundle("manifest").status == 404)
            #expect(try await server.request(.GET, "/api/v1/policy/pending/manifest").status == 401)
            let pending = try await server.request(.GET, "/api/v1/policy/pending/manifest", token: server.auditor)
            #expect(pending.status == 200)
            #expect(try BundleManifest(parsing: pending.body).version == 1)
            // The file the command line points the offline key's holder to is the same manifest.
            #expect(FileManager.default.contents(atPath: server.configuration.stateDirectory + "/publish/pending-manifest").map(Array.init) == pending.body)

            // Signed by another key: refused, still pending.
            let wrong = try BundleSigningKey().signatureFile(for: pending.body)
            let refused = try await server.request(
                .POST, "/api/v1/policy/pending/signature", token: server.admin, body: String(decoding: wrong, as: UTF8.self))
            #expect(refused.status == 400)
            #expect(refused.text.contains("signature-invalid"))
            // A signature over other bytes by the right key: refused too.
            let other = try offline.signatureFile(for: Array("manifest of something else".utf8))
            #expect(
                try await server.request(.POST, "/api/v1/policy/pending/signature", token: server.admin, body: String(decoding: other, as: UTF8.self))
                    .status == 400)
            #expect(try await server.bundle("manifest").status == 404)

            let right = try offline.signatureFile(for: pending.body)
            let done = try await server.request(
                .POST, "/api/v1/policy/pending/signature", token: server.admin, body: String(decoding: right, as: UTF8.self))
            #expect(done.status == 200, "\(done.text)")
            #expect(done.text.contains(#""state":"published""#))
            #expect(try await server.bundle("manifest").body == pending.body)
            #expect(try await server.bundle("manifest.sig").body == right)
            let (parsed, signer) = try BundleVerifier(signatures: .trusted([offline.publicKey]), now: server.server.clock.now).verifyManifest(
                try await server.bundle("manifest").body, signature: try await server.bundle("manifest.sig").body)
            #expect(parsed.version == 1)
            #expect(signer == offline.publicKey.keyID)
            // Nothing pending any more.
            #expect(
                try await server.request(.POST, "/api/v1/policy/pending/signature", token: server.admin, body: String(decoding: right, as: UTF8.self))
                    .status == 409)
        }
    }

    @Test(arguments: Engine.allCases)
    func diffRollbackAndHistory(engine: Engine) async throws {
        try await withPublishingServer(engine) { server async throws in
            let first = try await server.putList("gambling", ["casino.example", "bet.example", "poker.example"], reason: "first")
            #expect(try await server.putPolicy(Self.policy, reason: "block").status == 201)
            let third = try await server.putList("gambling", ["casino.example", "poker.example", "slots.example", "lotto.example"], reason: "third")
            #expect(third == 3)
            let diff = try await server.request(.GET, "/api/v1/policy/diff?from=\(first)&to=\(third)", token: server.auditor)
            #expect(diff.status == 200, "\(diff.text)")
            let parsed = try JSONDecoder().decode(PolicyDiff.self, from: Data(diff.body))
            #expect(parsed.policy.contains("+  block: [gambling]"))
            #expect(parsed.lists.count == 1)
            #expect(parsed.lists[0].added == 2)
            #expect(parsed.lists[0].addedNames == ["slots.example", "lotto.example"])
            #expect(parsed.lists[0].removedNames == ["bet.example"])
            #expect(try await server.request(.GET, "/api/v1/policy/diff?from=1&to=9", token: server.auditor).status == 404)
            #expect(try await server.request(.GET, "/api/v1/policy/diff?from=1", token: server.auditor).status == 400)

            // Rollback: a new version with version 1's content.
            let rolled = try await server.admin(.POST, "/api/v1/policy/rollback", #"{"version":1,"reason":"back"}"#)
            #expect(rolled.status == 201)
            #expect(try PublishingServer.number(rolled, "version") == 4)
            let fourth = try #require(try await server.storage.policyVersion(4))
            let firstStored = try #require(try await server.storage.policyVersion(1))
            #expect(fourth.lists == firstStored.lists)
            #expect(fourth.policy == nil)
            #expect(fourth.reason == "back")
            #expect(fourth.author.hasPrefix("token:"))
            #expect(try await server.admin(.POST, "/api/v1/policy/rollback", #"{"version":99,"reason":"back"}"#).status == 404)

            // The versions, newest first, paged.
            let page = try await server.request(.GET, "/api/v1/policy/versions?limit=3", token: server.auditor)
            let versions = try JSONSerialization.jsonObject(with: Data(page.body)) as? [String: Any]
            #expect((versions?["versions"] as? [[String: Any]])?.compactMap { $0["version"] as? Int } == [4, 3, 2])
            #expect(versions?["next"] as? Int == 2)
            let rest = try await server.request(.GET, "/api/v1/policy/versions?limit=3&before=2", token: server.auditor)
            #expect(rest.text.contains(#""version":1"#))
            #expect(!rest.text.contains(#""next""#))
            let current = try await server.request(.GET, "/api/v1/policy", token: server.auditor)
            #expect(current.text.contains(#""version":4"#))
            #expect(current.text.contains(#""published":null"#))
            #expect(current.text.contains(#""pending":null"#))

            // Publishing an older version by number.
            #expect(try await server.publish(policyVersion: 2) == (1, "published"))
            #expect(try await server.bundle("policy.yaml").text == Self.policy)
            // Removing the list.
            #expect(try await server.admin(.DELETE, "/api/v1/policy/lists/gambling?reason=gone").status == 201)
            #expect(try await server.storage.latestPolicyVersion()?.lists == [])
        }
    }

    /// One info line per GET: what the integration test reads to see what an update cost.
    @Test(arguments: Engine.allCases)
    func eachBundleGETIsLoggedInOneLine(engine: Engine) async throws {
        let log = CapturedLog()
        try await withPublishingServer(engine, logger: log.logger) { server async throws in
            try await server.putList("gambling", ["casino.example"])
            #expect(try await server.putPolicy(Self.policy).status == 201)
            #expect(try await server.publish().0 == 1)
            let store = try await server.bundle("rules.hpstore")
            _ = try await server.bundle("rules.hpstore", ifNoneMatch: store.header("ETag"))
            _ = try await server.bundle("policy.yaml", method: .HEAD)
            _ = try await server.bundle("nothing")
            // A name that would write a line of its own is not written.
            _ = try await server.bundle("x%0Ainfo%20bundle%20GET%20forged")
            let lines = log.all.filter { $0.contains("bundle GET") }
            #expect(
                lines == [
                    "info bundle GET rules.hpstore 200 \(store.body.count) bytes to 127.0.0.1",
                    "info bundle GET rules.hpstore 304 0 bytes to 127.0.0.1",
                    "info bundle GET nothing 404 0 bytes to 127.0.0.1",
                    "info bundle GET (not a bundle file name) 404 0 bytes to 127.0.0.1",
                ])
        }
    }

    @Test(arguments: Engine.allCases)
    func twoPublishesAtOnceGetIncreasingVersions(engine: Engine) async throws {
        try await withPublishingServer(engine) { server async throws in
            try await server.putList("gambling", ["casino.example"])
            let versions = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<3 { group.addTask { try await server.publish().0 } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(versions.sorted() == [1, 2, 3])
            let manifest = try BundleManifest(parsing: try await server.bundle("manifest").body)
            #expect(manifest.version == 3)
        }
    }
}
