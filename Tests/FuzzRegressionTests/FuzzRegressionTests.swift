// Replays every input a fuzzer found a crash with (Regressions/<target>/,
// one file per input) through the same entry point the fuzzer called, and
// the built-in seeds of every target, in the ordinary debug build. A crash
// here is a regression of a fixed bug. See docs/fuzzing.md.
import Foundation
import HallpassFuzzTargets
import Testing

@Suite struct FuzzRegressionTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Regressions")

    /// Every folder is named after a target.
    @Test func everyFolderNamesATarget() throws {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: Self.folder.path)) ?? []
        for name in names where !name.hasPrefix(".") {
            #expect(FuzzTarget(rawValue: name) != nil, "Regressions/\(name) is not a fuzz target")
        }
    }

    @Test(arguments: FuzzTarget.allCases) func crashInputsRunCleanly(_ target: FuzzTarget) throws {
        let folder = Self.folder.appendingPathComponent(target.rawValue)
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
        for name in names {
            target.run([UInt8](try Data(contentsOf: folder.appendingPathComponent(name))))
        }
    }

    /// The seeds that need no test data run cleanly too (they are the fuzzers' starting points).
    @Test(arguments: FuzzTarget.allCases) func builtInSeedsRunCleanly(_ target: FuzzTarget) {
        for seed in target.seeds(testdata: nil) { target.run(seed) }
    }

    /// `$HALLPASS_TESTDATA`, else `../shared/testdata` beside the package root, when it is there.
    static let testdata: String? = {
        let environment = ProcessInfo.processInfo.environment["HALLPASS_TESTDATA"] ?? ""
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let path = environment.isEmpty ? packageRoot.deletingLastPathComponent().appendingPathComponent("shared/testdata").path : environment
        return FileManager.default.fileExists(atPath: path + "/ndpi-bypass/pcap") ? path : nil
    }()

    /// The bypass parsers' seeds from the shared captures (tunnels, proxies and encrypted DNS
    /// from ndpi-bypass, Google QUIC and DNS from ndpi) run cleanly as well.
    @Test(.enabled(if: testdata != nil), arguments: [FuzzTarget.tunnel, .gquic, .dnsbypass])
    func captureSeedsOfTheBypassParsersRunCleanly(_ target: FuzzTarget) {
        let seeds = target.seeds(testdata: Self.testdata)
        #expect(seeds.count > target.seeds(testdata: nil).count, "no seeds from the captures")
        for seed in seeds { target.run(seed) }
    }
}
