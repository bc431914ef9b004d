import Foundation
import PipelineKit

/// `flop`: mirrors left to right.
public struct Flop: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(name: "flop", summary: "Mirrors the image left to right.", options: []),
        make: { _ in Flop() })

    public var identifier: String { "flop" }

    public func process(_ image: Image) throws -> Image {
        try image.transformed { try $0.flop() }
    }
}
