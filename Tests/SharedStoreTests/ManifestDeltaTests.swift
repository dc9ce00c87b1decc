import SharedStore
import Testing

/// The manifest's `delta` lines: what they say, and every way one is refused.
@Suite struct ManifestDeltaTests {
    static let store = String(repeating: "a", count: 64)
    static let earlier = String(repeating: "b", count: 64)
    static let deltaHash = String(repeating: "c", count: 64)

    static func manifest(_ extra: [String]) -> [UInt8] {
        Array(
            ([
                "hallpass-bundle 1", "version 7", "issued 2026-11-22T08:00:00Z", "expires 2026-12-22T08:00:00Z",
                "file rules.hpstore 1000 \(store)", "file policy.yaml 20 \(String(repeating: "d", count: 64))",
            ] + extra).map { $0 + "\n" }.joined().utf8)
    }

    static var goodDelta: String { "delta rules.hpstore.b-a.zst 300 \(deltaHash) rules.hpstore \(earlier)" }

    @Test func aDeltaLineParsesAndEncodesBackToTheSameBytes() throws {
        let bytes = Self.manifest([Self.goodDelta])
        let manifest = try BundleManifest(parsing: bytes)
        #expect(manifest.deltas == [.init(name: "rules.hpstore.b-a.zst", size: 300, sha256: Self.deltaHash, target: "rules.hpstore", baseSHA256: Self.earlier)])
        #expect(manifest.encoded == bytes)
        let store = try #require(manifest.files.first)
        #expect(manifest.deltas(making: store, from: { $0 == Self.earlier }).count == 1)
        #expect(manifest.deltas(making: store, from: { _ in false }).isEmpty)
        #expect(manifest.deltas(making: manifest.files[1], from: { _ in true }).isEmpty)
    }

    @Test func aManifestWithoutDeltasIsTheSameAsBefore() throws {
        let bytes = Self.manifest([])
        let manifest = try BundleManifest(parsing: bytes)
        #expect(manifest.deltas.isEmpty)
        #expect(manifest.encoded == bytes)
    }

    @Test(arguments: [
        // shape
        ("delta rules.hpstore.b-a.zst 300 \(deltaHash) rules.hpstore", "expected 'delta NAME SIZE SHA256 TARGET FROM-SHA256'"),
        ("delta rules.hpstore.b-a.zst 300 \(deltaHash) rules.hpstore \(earlier) extra", "expected 'delta"),
        ("delta rules.hpstore.b-a.zst  300 \(deltaHash) rules.hpstore \(earlier)", "expected 'delta"),
        // sizes
        ("delta rules.hpstore.b-a.zst 0 \(deltaHash) rules.hpstore \(earlier)", "must be an integer of 1 to"),
        ("delta rules.hpstore.b-a.zst 1073741825 \(deltaHash) rules.hpstore \(earlier)", "must be an integer of 1 to"),
        ("delta rules.hpstore.b-a.zst -3 \(deltaHash) rules.hpstore \(earlier)", "must be an integer of 1 to"),
        ("delta rules.hpstore.b-a.zst ３00 \(deltaHash) rules.hpstore \(earlier)", "must be an integer of 1 to"),
        // hashes
        ("delta rules.hpstore.b-a.zst 300 \(deltaHash.uppercased()) rules.hpstore \(earlier)", "64 lower-case hex digits"),
        ("delta rules.hpstore.b-a.zst 300 \(deltaHash) rules.hpstore \(earlier.dropLast())", "64 lower-case hex digits"),
        // what it makes and from what
        ("delta rules.hpstore.b-a.zst 300 \(deltaHash) other.hpstore \(earlier)", "which is no file of the bundle"),
        ("delta rules.hpstore.b-a.zst 300 \(deltaHash) rules.hpstore \(store)", "starts from the file it makes"),
        // names
        ("delta rules.hpstore 300 \(deltaHash) rules.hpstore \(earlier)", "listed twice"),
        ("delta policy.yaml 300 \(deltaHash) rules.hpstore \(earlier)", "listed twice"),
    ])
    func malformedDeltaLinesAreRefused(_ line: String, _ reason: String) {
        #expect {
            try BundleManifest(parsing: Self.manifest([line]))
        } throws: { error in
            guard case .malformedManifest(_, let message) = error as? BundleError else { return false }
            return message.contains(reason)
        }
    }

    @Test func aDeltaNameOrTargetThatCouldLeaveTheFolderIsAPathEscape() {
        for line in [
            "delta ../x.zst 300 \(Self.deltaHash) rules.hpstore \(Self.earlier)",
            "delta .hidden 300 \(Self.deltaHash) rules.hpstore \(Self.earlier)",
            "delta manifest.sig 300 \(Self.deltaHash) rules.hpstore \(Self.earlier)",
            "delta x.zst 300 \(Self.deltaHash) ../rules.hpstore \(Self.earlier)",
        ] {
            #expect(throws: BundleError.self) { try BundleManifest(parsing: Self.manifest([line])) }
            do {
                _ = try BundleManifest(parsing: Self.manifest([line]))
            } catch {
                #expect(error.code == "bundle.path-escape", "\(line)")
            }
        }
    }

    @Test func twoDeltasFromTheSameVersionOrTooManyAreRefused() {
        let second = "delta rules.hpstore.b-a.2.zst 300 \(Self.deltaHash) rules.hpstore \(Self.earlier)"
        #expect(throws: BundleError.self) { try BundleManifest(parsing: Self.manifest([Self.goodDelta, second])) }
        let many = (0...BundleManifest.maximumDeltas).map { index in
            let base = String(index, radix: 16)
            return "delta d\(index).zst 300 \(Self.deltaHash) rules.hpstore \(String(repeating: "0", count: 64 - base.count) + base)"
        }
        #expect((try? BundleManifest(parsing: Self.manifest(Array(many.dropLast()))))?.deltas.count == BundleManifest.maximumDeltas)
        #expect {
            try BundleManifest(parsing: Self.manifest(many))
        } throws: { error in
            guard case .malformedManifest(_, let message) = error as? BundleError else { return false }
            return message.contains("more than \(BundleManifest.maximumDeltas) deltas")
        }
    }
}
