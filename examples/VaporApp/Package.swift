// swift-tools-version:6.1
// A Vapor app that serves its own routes and, beside them, the pipelines in ../../pipelines:
// signed image URLs, and a multipart upload route that stores the derivatives with each
// pipeline's `output:`.
//   swift build && .build/debug/vapor-app --pipelines ../../pipelines
import PackageDescription

let package = Package(
    name: "VaporApp",
    platforms: [.macOS(.v13)],
    dependencies: [
        // PipelineKit by path, with its Vapor trait; outside this repository:
        // .package(url: "https://github.com/OWNER/pipelinekit.git", from: "0.4.0", traits: ["Vapor"]).
        .package(name: "PipelineKit", path: "../..", traits: ["Vapor"]),
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
    ],
    targets: [
        .executableTarget(
            name: "vapor-app",
            dependencies: [
                .product(name: "PipelineKit", package: "PipelineKit"),
                .product(name: "Plugins", package: "PipelineKit"),
                .product(name: "PipelineVapor", package: "PipelineKit"),
                .product(name: "Vapor", package: "vapor"),
            ],
            path: "Sources/VaporApp"
        ),
    ],
    swiftLanguageModes: [.v6]
)
