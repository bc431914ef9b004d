// swift-tools-version:6.2
import Foundation
import PackageDescription

/// The revision the build names (see the CBuildInfo target); only characters that are safe in a C
/// string literal are kept.
let buildRevision = { (given: String) in given.isEmpty ? "unknown" : given }(String(
    (ProcessInfo.processInfo.environment["PIPELINECTL_REVISION"] ?? "").filter { $0.isLetter || $0.isNumber || "-._+".contains($0) }.prefix(64)))

let package = Package(
    name: "PipelineKit",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "PipelineKit", targets: ["PipelineKit"]),
        .library(name: "MagickKit", targets: ["MagickKit"]),
        .library(name: "Plugins", targets: ["Plugins"]),
        .library(name: "PipelineCtl", targets: ["PipelineCtl"]),
        // Served pipelines mounted on a Hummingbird app's own Router (what `pipelinectl serve` runs).
        .library(name: "PipelineHummingbird", targets: ["PipelineHummingbird"]),
        // The same on a Vapor 4 app (a RouteCollection and a multipart upload helper); with the
        // `Vapor` trait: `.package(url: ..., from: "0.4.0", traits: ["Vapor"])`.
        .library(name: "PipelineVapor", targets: ["PipelineVapor"]),
        .executable(name: "pipelinectl", targets: ["pipelinectl"]),
    ],
    // Off by default: a build without it neither resolves nor compiles Vapor.
    traits: [
        .trait(name: "Vapor", description: "The PipelineVapor product: served pipelines and uploads on a Vapor 4 app."),
        // Off by default: swift-otel's exporter, with async-http-client and swift-nio-ssl under it,
        // more than doubles a cold release build (docs/PERFORMANCE.md#build-time). The .deb, the
        // image and `make install` are built with it; `make run` and a plain `swift build` without.
        .trait(name: "OTLP", description: "The OTLP/HTTP trace exporter of pipelinectl (swift-otel): traces set up by the OTEL_* variables."),
    ],
    dependencies: [
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/swhitty/FlyingFox.git", from: "0.27.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        // The HTTP server of `pipelinectl serve`.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // Its graceful shutdown: `serve` drains on SIGTERM.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.0.0"),
        // Spans of each item's stages through the process's tracer (a no-op unless one is set up).
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.2.0"),
        // The OTLP/HTTP exporter of those spans, with the `OTLP` trait only (no gRPC: its packages
        // are most of swift-otel's build).
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0",
                 traits: [.trait(name: "OTLPHTTP", condition: .when(traits: ["OTLP"]))]),
        // With it, a TCP probe of the exporter's endpoint at exit (already in the graph: Hummingbird's).
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        // PipelineVapor's framework and its multipart parser, with the `Vapor` trait only.
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
        .package(url: "https://github.com/vapor/multipart-kit.git", from: "4.7.1"),
    ],
    targets: [
        // C libraries, found through pkg-config. `make` installs the Debian packages named here.
        .systemLibrary(
            name: "CMagickWand",
            pkgConfig: "MagickWand",
            providers: [.apt(["libmagickwand-6.q16-dev"])]
        ),
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // The PostgreSQL queue of `pipelinectl work` and `pipelinectl queue`: libpq, PostgreSQL's own
        // client (LISTEN/NOTIFY, COPY), a few hundred KB and no build time, where postgres-nio
        // would bring swift-nio-ssl's BoringSSL into every cold build.
        .systemLibrary(
            name: "CPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        // libxml2's reader, for the XMP packets marked regions are read from (``XMPRegions``):
        // Foundation's XMLParser leaks its error objects (about 160 bytes a malformed packet).
        .systemLibrary(
            name: "CXML2",
            pkgConfig: "libxml-2.0",
            providers: [.apt(["libxml2-dev"])]
        ),
        // libavif 0.11: animated AVIF written by Sources/Plugins/Formats/HEIF.
        .systemLibrary(
            name: "CAVIF",
            pkgConfig: "libavif",
            providers: [.apt(["libavif-dev"])]
        ),
        // libjxl 0.7: JPEG XL read and written by Sources/Plugins/Formats/JXL.
        .systemLibrary(
            name: "CJXL",
            pkgConfig: "libjxl",
            providers: [.apt(["libjxl-dev"])]
        ),
        .systemLibrary(
            name: "CPNG",
            pkgConfig: "libpng",
            providers: [.apt(["libpng-dev"])]
        ),
        .systemLibrary(
            name: "CJPEG",
            pkgConfig: "libjpeg",
            providers: [.apt(["libjpeg-dev"])]
        ),
        // libheif is opened with dlopen on the first HEIC or AVIF file, not linked (see
        // Sources/CHeif/heif_loader.c): a C target of our own calling it through a table, so
        // libheif and its codecs cost nothing at start-up. Its header is in the default include path.
        .target(
            name: "CHeif",
            path: "Sources/CHeif"
        ),
        // The resampler's inner loops, in C for an AVX2 version chosen at run time (Swift builds
        // for the baseline x86-64 and has no per-function targets).
        .target(
            name: "CResample",
            path: "Sources/CResample"
        ),
        // libjpeg's large blocks from a few kept ones instead of fresh pages (see
        // Sources/CJPEGMemory/jpeg_memory.c): its two functions replace libjpeg's own.
        .target(
            name: "CJPEGMemory",
            path: "Sources/CJPEGMemory"
        ),
        // A baseline JPEG at 1/8 with its Huffman decoding shared between threads (see
        // Sources/CJPEGEighth/jpeg_eighth.c); libjpeg's header is in the default include path.
        .target(
            name: "CJPEGEighth",
            path: "Sources/CJPEGEighth",
            linkerSettings: [.linkedLibrary("jpeg")]
        ),
        // A PNG's zlib stream inflated in parts by several threads (see
        // Sources/CPNGParts/png_parts.c); zlib for the CRC-32 of the IDAT chunks.
        .target(
            name: "CPNGParts",
            path: "Sources/CPNGParts",
            linkerSettings: [.linkedLibrary("z")]
        ),
        // A PNG's rows filtered and compressed whole by libdeflate, for the PNG writer (see
        // Sources/CPNGImageData/png_image_data.c).
        .target(
            name: "CPNGImageData",
            path: "Sources/CPNGImageData",
            linkerSettings: [.linkedLibrary("deflate")]
        ),
        // dlib 19.24's HOG frontal-face detector behind a C function (see
        // Sources/CFaceDetect/face_detect.cpp). Linked from Debian's static libdlib.a by file name:
        // the detector's model is compiled in, and the binary needs no dlib, BLAS or LAPACK at run
        // time (the shared libdlib would bring Debian's 97 MB of dlib models with it). Optimised in
        // debug builds too: dlib's templates are instantiated here, and at -O0 a scan is about 20
        // times slower (the face tests' time).
        .target(
            name: "CFaceDetect",
            path: "Sources/CFaceDetect",
            cxxSettings: [.unsafeFlags(["-O2"])],
            linkerSettings: [.linkedLibrary(":libdlib.a")]
        ),
        // Poster frames from video through libavformat, libavcodec and libswscale 5.1 (see
        // Sources/CVideo/video_shim.c): our own I/O only, allowed demuxers and codecs only.
        .target(
            name: "CVideo",
            path: "Sources/CVideo",
            linkerSettings: [.linkedLibrary("avformat"), .linkedLibrary("avcodec"), .linkedLibrary("swscale"), .linkedLibrary("avutil")]
        ),
        .systemLibrary(
            name: "CTIFF",
            pkgConfig: "libtiff-4",
            providers: [.apt(["libtiff-dev"])]
        ),
        .systemLibrary(
            name: "CGIF",
            providers: [.apt(["libgif-dev"])]
        ),
        // Linux calls Glibc's Swift module leaves out: extended attributes (output fingerprints)
        // and mallinfo2 (heap counts in tests).
        .systemLibrary(name: "CLinux"),
        .systemLibrary(
            name: "CWebP",
            pkgConfig: "libwebpdemux",
            providers: [.apt(["libwebp-dev"])]
        ),
        // The source revision `pipelinectl --version` and every report name: PIPELINECTL_REVISION
        // from the environment (the Makefile sets it from git), "unknown" without it. Changing it
        // recompiles one C file.
        .target(
            name: "CBuildInfo",
            cSettings: [.define("PIPELINECTL_REVISION", to: "\"\(buildRevision)\"")]
        ),
        // The vocabulary and the engine: no codec library.
        .target(
            name: "PipelineKit",
            dependencies: [
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                "CLinux",
            ]
        ),
        // ImageMagick behind Swift types (`Wand`, `PipelineImage` on MagickWand pixels), for the
        // stages that touch pixels. Re-exports PipelineKit: a custom processor imports MagickKit alone.
        .target(
            name: "MagickKit",
            dependencies: ["PipelineKit", "CMagickWand"]
        ),
        // Every built-in stage, registered through PipelineKit's public API.
        .target(
            name: "Plugins",
            dependencies: ["PipelineKit", "MagickKit", "CMagickWand", "CCurl", "CPQ", "CPNG", "CJPEG", "CWebP", "CHeif", "CTIFF", "CGIF", "CLinux", "CResample", "CJPEGMemory", "CJPEGEighth", "CPNGParts", "CPNGImageData", "CFaceDetect", "CXML2", "CJXL", "CAVIF", "CVideo",
                           .product(name: "Crypto", package: "swift-crypto"), .product(name: "Tracing", package: "swift-distributed-tracing")]
        ),
        // The service apart from any HTTP framework: signatures, params, the source boundary,
        // admission, ETag/304, negotiation, problem answers, the access log and the metrics.
        .target(
            name: "PipelineService",
            dependencies: [
                "PipelineKit",
                "CBuildInfo",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The service on Hummingbird: signed image routes (signatures, params, ETag/304, Accept
        // negotiation, admission with 429, access log, metrics) and the operations routes, for
        // `pipelinectl serve` and `work` and for apps that mount pipelines on their own Router.
        .target(
            name: "PipelineHummingbird",
            dependencies: [
                "PipelineKit",
                "PipelineService",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The service on Vapor 4 (the `Vapor` trait; without it the module is empty).
        .target(
            name: "PipelineVapor",
            dependencies: [
                "PipelineKit",
                "PipelineService",
                .product(name: "Vapor", package: "vapor", condition: .when(traits: ["Vapor"])),
                .product(name: "MultipartKit", package: "multipart-kit", condition: .when(traits: ["Vapor"])),
            ]
        ),
        // The controller: every subcommand, callable by custom builds with their own plugins.
        .target(
            name: "PipelineCtl",
            dependencies: [
                "PipelineKit",
                "PipelineHummingbird",
                "PipelineService",
                "MagickKit",
                "CBuildInfo",
                "CLinux",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "OTel", package: "swift-otel", condition: .when(traits: ["OTLP"])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(traits: ["OTLP"])),
            ]
        ),
        // The command line: a ten-line main, the same a custom build writes.
        .executableTarget(
            name: "pipelinectl",
            dependencies: ["PipelineCtl", "Plugins"]
        ),
        // Shared by the test targets: the scripted stages and fakes the engine's tests run on, a
        // real HTTP server on loopback, the servers the backends' tests start, helpers. No codec.
        .target(
            name: "TestSupport",
            dependencies: [
                "PipelineKit",
                .product(name: "FlyingFox", package: "FlyingFox"),
            ],
            path: "Tests/TestSupport",
            exclude: ["moto-server.py", "moto-setup.py", "slurm-cluster.sh"]  // run by MotoServer and SlurmCluster
        ),
        // Images made by ImageMagick for the tests of codecs, plugins, the service and the binary
        // (re-exports TestSupport).
        .target(
            name: "TestImages",
            dependencies: ["PipelineKit", "MagickKit", "TestSupport"],
            path: "Tests/TestImages"
        ),
        .testTarget(
            name: "PipelineKitTests",
            // The engine, the pipeline file and the registry on scripted stages and fakes: neither
            // Plugins nor MagickKit (no codec, no HTTP client), so a change to a plugin never
            // rebuilds these, and they say what the engine does apart from any plugin.
            dependencies: ["PipelineKit", "TestSupport", .product(name: "InMemoryTracing", package: "swift-distributed-tracing")]
        ),
        // The service's logic and routes, the library API and the controller, on the built-in
        // plugins and real ImageMagick.
        .testTarget(
            name: "ServiceTests",
            dependencies: ["PipelineKit", "MagickKit", "Plugins", "TestImages", "PipelineCtl", "PipelineHummingbird", "PipelineService",
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "HummingbirdTesting", package: "hummingbird"),
                           .product(name: "InMemoryTracing", package: "swift-distributed-tracing")]
        ),
        .testTarget(
            name: "PluginsTests",
            dependencies: [
                "PipelineKit", "MagickKit", "Plugins", "TestImages", "CLinux", "CJPEGMemory", "CPNG",
                .product(name: "FlyingFox", package: "FlyingFox"),
            ],
            exclude: ["Fixtures"]  // SigV4 golden vectors, fuzz findings and broken pipelines, read as files
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "PipelineKit", "TestImages",
                .product(name: "FlyingFox", package: "FlyingFox"),
            ],
            exclude: ["Fixtures"]  // KEDA's CRD schemas, read as files
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The libFuzzer harness for the parsers of untrusted bytes we own (`make fuzz`; Fuzz/run.sh).
// Declared only when PIPELINEKIT_FUZZ is set: it links libFuzzer's main (`-sanitize=fuzzer`),
// which no other build wants.
if ProcessInfo.processInfo.environment["PIPELINEKIT_FUZZ"] != nil {
    package.targets.append(.executableTarget(name: "pipelinekit-fuzz", dependencies: ["Plugins"], path: "Fuzz/Harness"))
    package.products.append(.executable(name: "pipelinekit-fuzz", targets: ["pipelinekit-fuzz"]))
}

// Our own targets build without a warning, and a new one fails the build (and CI): a warning is a
// problem a newcomer cannot tell from a real one. Only this package's targets: SwiftPM applies
// these settings to the root package (and local ones, such as examples/CustomPlugins' use of it),
// never to a dependency fetched from its URL.
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + [.treatAllWarnings(as: .error)]
    target.cSettings = (target.cSettings ?? []) + [.treatAllWarnings(as: .error)]
}
