// swift-tools-version:6.0
// A custom build of pipelinectl with three plugins of our own, using PipelineKit exactly as the
// built-in plugins do. Build and run from this folder:
//   swift build
//   .build/debug/custom-pipelinectl run catalog.yaml skus.txt
import PackageDescription

let package = Package(
    name: "CustomPlugins",
    platforms: [.macOS(.v13)],
    dependencies: [
        // PipelineKit by path (the name, because a path dependency is otherwise known by its folder
        // name). Outside this repository: .package(url: "https://github.com/OWNER/pipelinekit.git", from: "0.1.0").
        .package(name: "PipelineKit", path: "../.."),
    ],
    targets: [
        .target(
            name: "CustomPlugins",
            dependencies: [
                .product(name: "PipelineKit", package: "PipelineKit"),
                // For the stages that touch pixels (duotone, facts); re-exports PipelineKit.
                .product(name: "MagickKit", package: "PipelineKit"),
            ]
        ),
        .executableTarget(
            name: "custom-pipelinectl",
            dependencies: [
                "CustomPlugins",
                .product(name: "PipelineCtl", package: "PipelineKit"),
                .product(name: "Plugins", package: "PipelineKit"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
