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
}
