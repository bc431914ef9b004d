// swift-tools-version:6.0
// An app that serves its own routes and, beside them, the pipelines in ../../pipelines: signed
// image URLs, and an upload route that stores the derivatives with each pipeline's `output:`.
//   swift build && .build/debug/hummingbird-app --pipelines ../../pipelines
import PackageDescription

let package = Package(
    name: "HummingbirdApp",
    platforms: [.macOS(.v14)],
    dependencies: [
        // PipelineKit by path; outside this repository: .package(url: "https://github.com/OWNER/pipelinekit.git", from: "0.4.0").
        .package(name: "PipelineKit", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
    ],
    targets: [
        .executableTarget(
            name: "hummingbird-app",
            dependencies: [
                .product(name: "PipelineKit", package: "PipelineKit"),
                .product(name: "Plugins", package: "PipelineKit"),
                .product(name: "PipelineHummingbird", package: "PipelineKit"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            path: "Sources/HummingbirdApp"
        ),
    ],
    swiftLanguageModes: [.v6]
)
