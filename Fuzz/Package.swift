// swift-tools-version:6.2
//
// The libFuzzer driver for hallpass's fuzz targets. A package of its own, so
// the main package's build (and CI's `swift build --build-tests`) never sees
// -sanitize=fuzzer: scripts/fuzz.sh builds this one with
//   swift build -c release --scratch-path .build-fuzz \
//     -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
// and the entry points live in the main package (Fuzz/Targets), where the
// regression test replays crash inputs through them. See docs/fuzzing.md.
import Foundation
import PackageDescription

// A path dependency is known by its folder's name; the checkout may have any name.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()

let package = Package(
    name: "hallpass-fuzz",
    dependencies: [.package(path: "..")],
    targets: [
        .executableTarget(
            name: "hallpass-fuzz",
            dependencies: [.product(name: "HallpassFuzzTargets", package: root.lastPathComponent.lowercased())],
            swiftSettings: [.strictMemorySafety(), .treatWarning("StrictMemorySafety", as: .error)]
        )
    ]
)
