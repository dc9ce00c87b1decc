import Foundation
import SchoolServer
import Testing

/// Schema step 3 on both engines: policy versions with their lists, and
/// publications with their files.
@Suite struct PublishingStorageTests {
    static let now: Int64 = 1_764_320_400

    static func content(_ text: String) -> ListContent {
        let bytes = Array(text.utf8)
        return ListContent(sha256: Secrets.sha256(bytes), names: Int64(text.split(separator: "\n").count), bytes: bytes)
    }

    @Test(arguments: Engine.allCases)
    func policyVersionsAreNumberedAndKeepEachListOnce(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            #expect(try await storage.latestPolicyVersion() == nil)
            let gambling = Self.content("casino.example\nbet.example\n")
            let first = try await storage.addPolicyVersion(
                NewPolicyVersion(
                    author: "cli:root", reason: "the first lists", policy: nil,
                    lists: [PolicyList(category: "gambling", sha256: gambling.sha256, names: 2)], contents: [gambling]),
                now: Self.now)
            #expect(first.version == 1)
            // The same list again in the next version: not stored twice.
            let second = try await storage.addPolicyVersion(
                NewPolicyVersion(
                    author: "token:abc", reason: "a policy", policy: "policy:\n  block: [gambling]\n",
                    lists: [PolicyList(category: "gambling", sha256: gambling.sha256, names: 2)], contents: [gambling]),
                now: Self.now + 60)
            #expect(second.version == 2)
            let latest = try #require(try await storage.latestPolicyVersion())
            #expect(latest == second)
            #expect(latest.lists == [PolicyList(category: "gambling", sha256: gambling.sha256, names: 2)])
            #expect(try await storage.policyVersion(1)?.policy == nil)
            #expect(try await storage.policyVersion(1)?.reason == "the first lists")
            #expect(try await storage.policyVersion(3) == nil)
            #expect(try await storage.listContent(sha256: gambling.sha256) == gambling.bytes)
            #expect(try await storage.listContent(sha256: String(repeating: "0", count: 64)) == nil)
            // Newest first, paged by `before`.
            #expect(try await storage.policyVersions(before: nil, limit: 10).map(\.version) == [2, 1])
            #expect(try await storage.policyVersions(before: nil, limit: 1).map(\.version) == [2])
            #expect(try await storage.policyVersions(before: 2, limit: 10).map(\.version) == [1])
        }
    }

    @Test(arguments: Engine.allCases)
    func changesAtOnceGetOneNumberEach(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let versions = try await withThrowingTaskGroup(of: Int64.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        try await storage.addPolicyVersion(
                            NewPolicyVersion(author: "t", reason: "change \(index)", policy: "# \(index)\n", lists: [], contents: []),
                            now: Self.now
                        ).version
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(versions.sorted() == Array(1...8))
        }
    }

    static func newPublication(_ store: String) -> NewPublication {
        let bytes = Array(store.utf8)
        return NewPublication(
            policyVersion: 1, author: "cli:root", reason: "publish",
            files: [(PublishedFile(name: "rules.hpstore", sha256: Secrets.sha256(bytes), size: Int64(bytes.count)), bytes)])
    }

    @Test(arguments: Engine.allCases)
    func theFilesOfOlderPublicationsAreRemovedButTheirNamesKept(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            _ = try await storage.addPolicyVersion(
                NewPolicyVersion(author: "t", reason: "r", policy: "# p\n", lists: [], contents: []), now: Self.now)
            var stores: [String] = []
            for index in 1...3 {
                let publication = try await storage.addPublication(Self.newPublication("store \(index)"), now: Self.now) {
                    SignedManifest(manifest: Array("m\($0)".utf8), signature: [1])
                }
                stores.append(try #require(publication.file(named: "rules.hpstore")).sha256)
            }
            let pending = try await storage.addPublication(Self.newPublication("store pending"), now: Self.now) {
                SignedManifest(manifest: Array("m\($0)".utf8), signature: nil)
            }
            // Kept: the two newest published and the pending one; the signature (the same bytes in all) stays with them.
            #expect(try await storage.pruneBundleFiles(keepingPublished: 2) == 2)
            #expect(try await storage.bundleFile(sha256: stores[0]) == nil)
            #expect(try await storage.bundleFile(sha256: Secrets.sha256(Array("m1".utf8))) == nil)
            #expect(try await storage.bundleFile(sha256: stores[1]) != nil)
            #expect(try await storage.bundleFile(sha256: stores[2]) != nil)
            #expect(try await storage.bundleFile(sha256: try #require(pending.file(named: "rules.hpstore")).sha256) != nil)
            // The history keeps the names and hashes.
            #expect(try await storage.publication(bundleVersion: 1)?.file(named: "rules.hpstore")?.sha256 == stores[0])
            #expect(try await storage.pruneBundleFiles(keepingPublished: 2) == 0)
        }
    }

    @Test(arguments: Engine.allCases)
    func publicationsIncreaseAndAPendingOneIsPublishedBySignature(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            _ = try await storage.addPolicyVersion(
                NewPolicyVersion(author: "t", reason: "r", policy: "# p\n", lists: [], contents: []), now: Self.now)
            #expect(try await storage.currentPublication() == nil)
            #expect(try await storage.publishedVersion() == 0)

            let first = try await storage.addPublication(Self.newPublication("store one"), now: Self.now) { version in
                SignedManifest(manifest: Array("manifest \(version)".utf8), signature: Array("signature \(version)".utf8))
            }
            #expect(first.bundleVersion == 1)
            #expect(first.state == .published)
            #expect(first.files.map(\.name) == ["manifest", "manifest.sig", "rules.hpstore"])
            #expect(try await storage.publishedVersion() == 1)

            // Pending: not served, not counted; a newer pending one replaces it.
            let pending = try await storage.addPublication(Self.newPublication("store two"), now: Self.now) { version in
                SignedManifest(manifest: Array("manifest \(version)".utf8), signature: nil)
            }
            #expect(pending.bundleVersion == 2)
            #expect(pending.state == .pending)
            #expect(try await storage.currentPublication()?.bundleVersion == 1)
            #expect(try await storage.publishedVersion() == 1)
            let newer = try await storage.addPublication(Self.newPublication("store two"), now: Self.now) { version in
                SignedManifest(manifest: Array("manifest \(version)".utf8), signature: nil)
            }
            #expect(newer.bundleVersion == 3)
            #expect(try await storage.publication(bundleVersion: 2) == nil)
            #expect(try await storage.pendingPublication()?.bundleVersion == 3)
            #expect(try await storage.completePublication(bundleVersion: 2, signature: [1], now: Self.now) == nil)

            let published = try #require(try await storage.completePublication(bundleVersion: 3, signature: Array("sig".utf8), now: Self.now + 5))
            #expect(published.state == .published)
            #expect(published.publishedAt == Self.now + 5)
            #expect(published.signature == Array("sig".utf8))
            #expect(published.file(named: "manifest.sig")?.sha256 == Secrets.sha256(Array("sig".utf8)))
            #expect(try await storage.currentPublication()?.bundleVersion == 3)
            #expect(try await storage.pendingPublication() == nil)
            #expect(try await storage.publishedVersion() == 3)
            #expect(try await storage.publications().map(\.bundleVersion) == [3, 1])

            // The files' bytes by hash, each once; binary bytes come back as they went in.
            let store = try #require(published.file(named: "rules.hpstore"))
            #expect(try await storage.bundleFile(sha256: store.sha256) == Array("store two".utf8))
            let binary: [UInt8] = [0, 255, 10, 13, 0, 128]
            let fourth = try await storage.addPublication(
                NewPublication(
                    policyVersion: 1, author: "t", reason: "r",
                    files: [(PublishedFile(name: "rules.hpstore", sha256: Secrets.sha256(binary), size: 6), binary)]), now: Self.now
            ) { SignedManifest(manifest: Array("m\($0)".utf8), signature: [0, 1, 2]) }
            #expect(fourth.bundleVersion == 4)
            #expect(try await storage.bundleFile(sha256: Secrets.sha256(binary)) == binary)
            #expect(try await storage.publication(bundleVersion: 4)?.signature == [0, 1, 2])

            // A floor set by the school (bundles it published before): the next is above it.
            try await storage.setPublishedVersion(40)
            #expect(try await storage.publishedVersion() == 40)
            let fifth = try await storage.addPublication(Self.newPublication("store five"), now: Self.now) {
                SignedManifest(manifest: Array("m\($0)".utf8), signature: [1])
            }
            #expect(fifth.bundleVersion == 41)
            #expect(try await storage.publishedVersion() == 41)
        }
    }
}
