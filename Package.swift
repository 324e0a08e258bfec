// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "Concierge",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "concierge", targets: ["concierge"]),
        .executable(name: "concierge-sample-api", targets: ["concierge-sample-api"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-http-structured-headers.git", from: "1.7.0"),
        // OpenTelemetry traces over OTLP/HTTP protobuf only: the OTLPGRPC trait (on by default) would
        // build grpc-swift and its transport for a transport the exporter can do without.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        /// Pure logic: config schema and validation, endpoint matching, cache keys,
        /// envelope reading, signing. No sockets.
        .target(
            name: "ConciergeCore",
            dependencies: [
                .product(name: "Yams", package: "Yams"),
                .product(name: "Crypto", package: "swift-crypto"),
                // Value types only (ByteBuffer, HTTPHeaders): NIOCore and NIOHTTP1 open no sockets.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // RFC 9651 structured fields (`CDN-Cache-Control`).
                .product(name: "RawStructuredFieldValues", package: "swift-http-structured-headers"),
            ]
        ),
        // PCRE2 (Debian: libpcre2-dev): invalidation patterns with match, depth and heap limits.
        .systemLibrary(name: "CPCRE2", path: "Sources/CPCRE2", pkgConfig: "libpcre2-8", providers: [.apt(["libpcre2-dev"])]),
        /// SQLite (GRDB) cache and session stores, the in-memory hot tier, and the fleet's
        /// PostgreSQL (postgres-nio).
        .target(
            name: "ConciergeStorage",
            dependencies: [
                "ConciergeCore",
                "CPCRE2",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        /// Listeners and I/O: the NIO proxy listener, the pipeline, the upstream client,
        /// the admin API, sd_notify and the service group.
        .target(
            name: "ConciergeServer",
            dependencies: [
                "ConciergeCore",
                "ConciergeStorage",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            resources: [.embedInCode("Admin/openapi.yaml")]  // a link to docs/openapi.yaml
        ),
        /// The sample business API speaking the JSON envelope (demo, tests, benchmarks).
        .target(
            name: "ConciergeSampleAPI",
            dependencies: [
                "ConciergeCore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "concierge",
            dependencies: [
                "ConciergeCore",
                "ConciergeServer",
                "ConciergeSampleAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "concierge-sample-api",
            dependencies: [
                "ConciergeSampleAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        /// Starts a sample API and a proxy on free loopback ports for integration tests.
        .target(
            name: "ConciergeTestSupport",
            dependencies: [
                "ConciergeCore",
                "ConciergeStorage",
                "ConciergeServer",
                "ConciergeSampleAPI",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        /// Fuzz targets over the parsers hostile input reaches (config loader, batch/chain
        /// bodies with templates, cache-key canonicalisation). `scripts/fuzz.sh` builds
        /// `concierge-fuzz` with libFuzzer (`-sanitize=fuzzer -DFUZZING`); built normally it
        /// replays corpus files, and the unit tests replay `Fuzz/corpus/`.
        .target(
            name: "ConciergeFuzzing",
            dependencies: [
                "ConciergeCore", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            path: "Fuzz/ConciergeFuzzing"
        ),
        /// Fuzz targets over the request path (ConciergeServer): the loop miss against the
        /// awaited miss. It imports ConciergeServer `@testable` (the pipeline's plan is internal):
        /// debug builds enable testing, and `scripts/fuzz.sh` passes `-enable-testing`.
        .target(
            name: "ConciergeServerFuzzing",
            dependencies: [
                "ConciergeCore", "ConciergeStorage", "ConciergeServer",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
            ],
            path: "Fuzz/ConciergeServerFuzzing"
        ),
        .target(name: "CFuzzDriver", path: "Fuzz/CFuzzDriver"),
        /// The floor for a hit in Benchmarks/profile.sh (FLOOR=1): a bare SwiftNIO server writing ready bytes.
        .executableTarget(
            name: "nio-floor",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Benchmarks/nio-floor"
        ),
        .executableTarget(name: "concierge-fuzz", dependencies: ["ConciergeFuzzing", "ConciergeServerFuzzing", "CFuzzDriver"], path: "Fuzz/concierge-fuzz"),
        .testTarget(name: "ConciergeCoreTests", dependencies: ["ConciergeCore", "ConciergeFuzzing"]),
        .testTarget(name: "ConciergeStorageTests", dependencies: ["ConciergeStorage"]),
        .testTarget(
            name: "ConciergeServerTests",
            dependencies: [
                "ConciergeServer", "ConciergeTestSupport", "ConciergeSampleAPI",
                // The fuzz targets' checks, shared with the tests that compare readers, and the
                // pipeline over a scripted upstream (ScriptedPipeline) the stage tests build on.
                "ConciergeFuzzing", "ConciergeServerFuzzing",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                // A test CA and server certificate for the https upstream tests.
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
