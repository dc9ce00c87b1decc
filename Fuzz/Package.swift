// swift-tools-version:6.2
//
// The libFuzzer driver for hallpass's fuzz targets. A package of its own, so
// the main package's build (and CI's `swift build --build-tests`) never sees
// -sanitize=fuzzer: scripts/fuzz.sh builds this one with
//   swift build -c release --scratch-path .build-fuzz -Xswiftc -sanitize=fuzzer,address
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
        // libFuzzer's LLVMFuzzerRunDriver, declared for Swift.
        .target(name: "CLibFuzzer"),
        .executableTarget(
            name: "hallpass-fuzz",
            dependencies: ["CLibFuzzer", .product(name: "HallpassFuzzTargets", package: root.lastPathComponent.lowercased())],
            swiftSettings: [.strictMemorySafety(), .treatWarning("StrictMemorySafety", as: .error)],
            // The toolchain's lld: Debian's gold stops with an internal error on this link.
            linkerSettings: [.unsafeFlags(["-use-ld=lld"])]
        )
    ]
)
