// swift-tools-version:6.2
//
// hallpass: an on-host content filter for Linux lab machines.
// The layout (docs/architecture.md): pure decision logic (VerdictCore), the
// memory-mapped rule store and signed bundles (SharedStore), the system
// calls on swift-system that the others share (HallpassSystem), the sandboxed
// NFQUEUE data process (FilterData, and FilterDataKernel for its socket and
// sandbox), the control daemon and admin CLI
// (FilterControl), and the block page (BlockPage). Executables are thin
// `@main` wrappers so tests build the same object graph as production.
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    // Every unsafe construct must be marked `unsafe` (a warning, made an error here).
    // Where it may appear is enforced by scripts/check-unsafe.sh, which CI runs
    // (scripts/test.sh): only in the files of scripts/unsafe-allowlist.txt, those
    // that face the kernel or the mapped store (mostly HallpassSystem).
    .strictMemorySafety(),
    .treatWarning("StrictMemorySafety", as: .error),
    // The packet path crosses modules (FilterData -> VerdictCore's generic
    // engine -> SharedStore's store): without this the engine runs unspecialized.
    .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release)),
]

// How filter-control and filter-data are linked on Linux, for their resident
// memory (BENCHMARKS.md, "Memory"; measured on filter-control idle, the release
// build): lld's packed relative relocations (DT_RELR, glibc 2.36) instead of
// 2.9 MB of RELA entries that the loader reads at every start (-3.3 MB), and no
// dynamic symbol table of every public symbol (the Swift runtime's
// static-stdlib-args.lnk asks for -export-dynamic; nothing looks a symbol up
// in these programs, and the Swift backtracer reads .symtab, not .dynsym),
// whose lookups touched 2 MB and whose roots kept 0.4 MB of unused code (-2.6 MB).
// Still a position-independent executable (ASLR).
let daemonLinking: [LinkerSetting] = [
    .unsafeFlags(
        ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic"],
        .when(platforms: [.linux])),
]

let package = Package(
    name: "hallpass",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "filterctl", targets: ["filterctl"]),
        .executable(name: "filter-control", targets: ["FilterControlMain"]),
        .executable(name: "filter-data", targets: ["FilterDataMain"]),
        .executable(name: "hallpass-proxy", targets: ["HallpassProxyMain"]),
        .executable(name: "hallpass-bench", targets: ["HallpassBench"]),
        // The fuzz targets' entry points, for the libFuzzer package in Fuzz/ (docs/fuzzing.md).
        .library(name: "HallpassFuzzTargets", targets: ["HallpassFuzzTargets"]),
        // The school's server (issue 28): docs/server.md.
        .executable(name: "hallpass-server", targets: ["hallpass-server"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        // 1.16: LogEvent, which the handlers implement.
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        // 1.8: Stat, and pipe with options (close-on-exec from the start).
        .package(url: "https://github.com/apple/swift-system.git", from: "1.8.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.0.0"),
        .package(url: "https://github.com/swift-extras/swift-extras-base64.git", from: "1.0.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // hallpass-server: HTTP on Hummingbird 2 (no swift-configuration: its own server.yaml),
        // and its two storage engines.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // The console's sign-in with the school's OpenID provider: HTTPS to the provider, and
        // the ID token's signature against its key set (JWKS).
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        // The console's local accounts: bcrypt (HummingbirdBcrypt), cost 12.
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
    ],
    targets: [
        // MARK: C libraries (only FilterDataKernel imports these)
        .systemLibrary(
            name: "CNetfilterQueue",
            pkgConfig: "libnetfilter_queue libmnl",
            providers: [.apt(["libnetfilter-queue-dev", "libmnl-dev"])]
        ),
        .systemLibrary(
            name: "CSeccomp",
            pkgConfig: "libseccomp",
            providers: [.apt(["libseccomp-dev"])]
        ),
        // What Swift cannot import: variadic and GNU-only calls, function-like macros.
        .target(name: "CHallpassSys"),

        // MARK: System calls
        // The typed layer over the kernel that the other modules share, on
        // swift-system: files and folders, bounded reads, atomic writes, unix
        // sockets, spawning, user lookups, poll and the monotonic clock, with
        // EINTR retried in one place. Most of hallpass's unsafe code is here.
        .target(
            name: "HallpassSystem",
            dependencies: ["CHallpassSys", .product(name: "SystemPackage", package: "swift-system")],
            swiftSettings: strict
        ),

        // MARK: Configuration files
        // hallpass.yaml and server.yaml are read the same way: each key checked, each
        // complaint naming the key and its line.
        .target(name: "HallpassConfig", dependencies: [.product(name: "Yams", package: "Yams")], swiftSettings: strict),

        // MARK: Pure logic
        .target(name: "VerdictCore", swiftSettings: strict),

        // MARK: Bytes from the wire
        // The bounded reader every parser uses, and the DNS message format,
        // which filter-control reads too (its own SafeSearch lookups).
        .target(name: "HallpassWire", dependencies: ["VerdictCore"], swiftSettings: strict),

        // MARK: Between the two processes
        // Everything that crosses the socket pair between filter-control and
        // filter-data: the messages of each direction, the channel, flow
        // reports, the packet marks, the counters, the 5-tuple. Both sides
        // compile against it; neither links the other.
        .target(
            name: "HallpassIPC",
            dependencies: [
                "VerdictCore",
                "HallpassWire",
                "HallpassSystem",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),

        // MARK: Store and bundles
        .target(
            name: "SharedStore",
            dependencies: [
                "VerdictCore",
                "CHallpassSys",
                "HallpassSystem",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),

        // MARK: Bundle deltas
        // A bundle file as a zstd patch of its previous version (zstd --patch-from): filterctl
        // makes them, filter-control applies them. libzstd is linked only through this module;
        // filter-data never links it (scripts/check-links.sh checks).
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        .target(name: "BundleDelta", dependencies: ["CZstd", "SharedStore", "HallpassSystem"], swiftSettings: strict),
        // MARK: Making bundles
        // Lists into a store (RuleCompiler, with hallpass's own protection lists) and a
        // bundle folder written in two steps around its signature: `filterctl bundle build`
        // and hallpass-server's publisher share it. No daemon links it.
        .target(
            name: "BundleBuilder",
            dependencies: ["SharedStore", "VerdictCore", "BundleDelta", "HallpassSystem"],
            swiftSettings: strict
        ),

        // MARK: The sandboxed data path
        // The inspection and DataPath, over a PacketQueue: no C library, so
        // filterctl (its `replay`) and the unit tests use it without the kernel's.
        .target(
            name: "FilterData",
            dependencies: [
                "VerdictCore",
                "SharedStore",
                "HallpassWire",
                "HallpassIPC",
                "HallpassSystem",
                "CHallpassSys",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        // The sandbox (libseccomp) of filter-data and hallpass-proxy: one lock-down, a
        // profile each. scripts/check-links.sh checks that no other program links it.
        .target(
            name: "HallpassSandbox",
            dependencies: ["CSeccomp", "CHallpassSys", .product(name: "SystemPackage", package: "swift-system")],
            swiftSettings: strict
        ),
        // What only filter-data itself runs: the NFQUEUE socket (libnetfilter_queue,
        // libmnl). scripts/check-links.sh checks that no other program links those libraries.
        .target(
            name: "FilterDataKernel",
            dependencies: [
                "FilterData", "HallpassWire", "CNetfilterQueue", "HallpassSandbox", "CHallpassSys",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),

        // MARK: The inspection proxy (docs/inspection.md)
        // hallpass-proxy: where the kernel sends connections to the addresses of inspected
        // names. It reads the ClientHello with filter-data's parser and splices what is not
        // inspected as a plain byte relay (SwiftNIO); an inspected name is terminated (NIOSSL,
        // with leaves from the interception CA), its HTTP/1.1 requests decided one by one and
        // forwarded over TLS checked against the system's trust store, or answered with the
        // block page (BlockPage's renderer). Its own user and sandbox (HallpassSandbox's proxy profile).
        .target(
            name: "InspectionProxy",
            dependencies: [
                "FilterData", "VerdictCore", "SharedStore", "HallpassIPC", "HallpassWire", "HallpassSystem", "CHallpassSys", "BlockPage",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "HallpassProxyMain",
            dependencies: ["InspectionProxy", "HallpassSandbox", "FilterData", "HallpassIPC", "HallpassSystem", "CHallpassSys", "SharedStore", "VerdictCore", "BlockPage",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strict,
            linkerSettings: daemonLinking
        ),

        // MARK: Block page
        // Pure rendering so far: Mustache templates, localized strings, the request-access form.
        .target(
            name: "BlockPage",
            dependencies: [
                "SharedStore",
                "VerdictCore",
                // Bounded reads, atomic writes, the user database.
                "HallpassSystem",
                // The 5-tuple: who is asking is found by the connection's two addresses and ports.
                "HallpassIPC",
                .product(name: "Mustache", package: "swift-mustache"),
                // Serving: HTTP and HTTPS with certificates from the school's local CA.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),

        // MARK: Control daemon and admin tooling
        .target(
            name: "FilterControl",
            dependencies: [
                "VerdictCore",
                "SharedStore",
                // The control channel and its messages, not filter-data's code: filter-control
                // and filterctl link neither libnetfilter_queue nor libseccomp.
                "HallpassIPC",
                "HallpassWire",
                "HallpassSystem",
                "BlockPage",
                "CHallpassSys",
                "HallpassConfig",
                // Bundle files rebuilt from a delta and the version installed.
                "BundleDelta",
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
                // filter-control's long-running parts are services of one group.
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                // The Prometheus endpoint (metrics:): recorded through swift-metrics, kept by swift-prometheus.
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "SystemPackage", package: "swift-system"),
                // Rule downloads: a small HTTPS GET client with SPKI pins (Sources/FilterControl/Rules).
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
            ],
            swiftSettings: strict
        ),

        // MARK: Executables
        .executableTarget(
            name: "filterctl",
            dependencies: [
                "FilterControl",
                "BlockPage",
                // `filterctl replay`: captures through filter-data's inspector.
                "FilterData",
                "HallpassSystem",
                // Durations as the configuration files write them.
                "HallpassConfig",
                // `filterctl compile` and `bundle build`: the compiler, and the folder with its deltas.
                "BundleBuilder",
                "BundleDelta",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "FilterControlMain",
            dependencies: [
                "FilterControl", .product(name: "ArgumentParser", package: "swift-argument-parser"), .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict,
            linkerSettings: daemonLinking
        ),
        .executableTarget(
            name: "FilterDataMain",
            dependencies: [
                "FilterData", "FilterDataKernel", "HallpassSandbox", "HallpassIPC", "HallpassSystem", .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict,
            linkerSettings: daemonLinking
        ),
        .executableTarget(
            name: "HallpassBench",
            // FilterControl: `update`, one rule update as filter-control makes it.
            dependencies: ["VerdictCore", "SharedStore", "FilterData", "HallpassWire", "HallpassIPC", "HallpassSystem", "FilterControl"],
            path: "Benchmarks/HallpassBench",
            swiftSettings: strict
        ),

        // MARK: The school's server (docs/server.md)
        // What machines enrol with and report to: the HTTP API on Hummingbird, storage
        // behind one protocol on SQLite or PostgreSQL, the commands of hallpass-server.
        .target(
            name: "SchoolServer",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                // The console's local passwords (bcrypt).
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                // Atomic writes of the TLS key and certificate; the pipes of the alerts' sendmail.
                "HallpassSystem",
                .product(name: "SystemPackage", package: "swift-system"),
                // server.yaml, read as hallpass.yaml is.
                "HallpassConfig",
                // Publishing: the policy checked as machines read it (FilterControl's
                // SchoolPolicy(yaml:)), the store compiled and the bundle folder
                // written as `filterctl bundle build` does, signed with SharedStore's key.
                "FilterControl",
                "VerdictCore",
                "SharedStore",
                "BundleBuilder",
                "BundleDelta",
                // The console: its pages are Mustache templates, its strings files are read
                // and its language chosen as the block page's are.
                "BlockPage",
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                // Sign-in with the school's OpenID provider (Access/OpenID*.swift).
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "hallpass-server",
            dependencies: [
                "SchoolServer",
                // Durations on the command line, as in server.yaml.
                "HallpassConfig",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),

        // MARK: Fuzzing
        // The entry points only: the libFuzzer driver is the separate package in Fuzz/, so
        // the ordinary build never needs -sanitize=fuzzer. The regression test below replays
        // every crash input through these same functions.
        .target(
            name: "HallpassFuzzTargets",
            dependencies: [
                "FilterData",
                "SharedStore",
                "VerdictCore",
                "HallpassWire",
                "HallpassIPC",
                "FilterControl",
                "BlockPage",
                "BundleDelta",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            path: "Fuzz/Targets",
            swiftSettings: strict
        ),

        // MARK: Tests
        // What several test targets share: a deterministic generator and byte mutations.
        .target(name: "HallpassTestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "VerdictCoreTests", dependencies: ["VerdictCore"]),
        .testTarget(name: "HallpassSystemTests", dependencies: ["HallpassSystem", .product(name: "SystemPackage", package: "swift-system")]),
        .testTarget(name: "SharedStoreTests", dependencies: ["SharedStore", "VerdictCore"]),
        .testTarget(
            name: "InspectionProxyTests",
            dependencies: [
                "InspectionProxy", "FilterData", "VerdictCore", "HallpassIPC", "BlockPage", .product(name: "NIOCore", package: "swift-nio"),
                // The requests' heads (and their bytes, through NIO's codecs on embedded
                // channels), and TLS handshakes with the leaves on loopback.
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                // Certificates with names of the tests' choosing (CertificateChecksTests).
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(name: "HallpassIPCTests", dependencies: ["HallpassIPC", "HallpassWire", "VerdictCore", "HallpassTestSupport"]),
        .testTarget(
            name: "FilterDataTests",
            dependencies: [
                "FilterData", "VerdictCore", "SharedStore", "HallpassWire", "HallpassIPC", "HallpassTestSupport",
                // Sealing QUIC Initials in tests (FilterData links both already).
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "BlockPageTests",
            dependencies: [
                "BlockPage",
                // Addresses and connections in the local peer tests.
                "VerdictCore", "HallpassIPC",
                // The HTTPS certificate tests read certificates and make TLS handshakes on loopback.
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                // The interception CA's leaves are signed for keys the tests make.
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "FilterControlTests",
            dependencies: [
                "FilterControl", "VerdictCore", "SharedStore", "HallpassSystem", "BundleDelta", "BundleBuilder",
                // The metrics' tests make filter-data's reports; the resolver's read DNS answers.
                "HallpassIPC", "HallpassWire",
                // The audit log's tests: a logger for it, and a collector stand-in on loopback (TCP and TLS).
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The school server's stand-in (HTTPS on loopback), and the signature vectors.
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        // The storage suite on both engines (a PostgreSQL cluster of the test's own), and the
        // API over HTTPS on loopback with a small pinned client of the tests' own.
        .testTarget(
            name: "SchoolServerTests",
            dependencies: [
                "SchoolServer",
                "HallpassConfig",
                // Spawning initdb and pg_ctl for the tests' own PostgreSQL cluster.
                "HallpassSystem",
                // Signing a pending publication as the offline key's holder would, and checking bundles.
                "SharedStore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // ID tokens signed with keys of the tests' own.
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                // Probe routes behind the console's session middleware, and the console's routes behind
                // a middleware of the tests' own.
                .product(name: "Hummingbird", package: "hummingbird"),
            ]),
        // Every input a fuzzer crashed on, replayed in the ordinary debug build.
        // Read from the source tree (Regressions/TARGET/INPUT), not built or bundled.
        .testTarget(name: "FuzzRegressionTests", dependencies: ["HallpassFuzzTargets"], exclude: ["Regressions"]),
        // Root-only: real kernel queue, network namespaces, nginx and curl.
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "FilterControl", "FilterData", "FilterDataKernel", "HallpassSandbox", "InspectionProxy", "VerdictCore", "SharedStore", "CHallpassSys", "HallpassIPC", "HallpassWire", "HallpassSystem",
                // The console's OpenID client against a real provider (scripts/lib/oidc-provider).
                "SchoolServer",
                // The audit log sent to rsyslog from a test namespace (an event loop whose thread is in it).
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            // The Python peers the tests run (aioquic, the notice listener), read from the source tree.
            exclude: ["Helpers"]),
    ]
)
