import Foundation
import MagickKit
import PipelineKit

/// `flop`: mirrors left to right.
public struct Flop: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(name: "flop", summary: "Mirrors the image left to right.", options: []),
        make: { _ in Flop() })

    public var identifier: String { "flop" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        var out = try image.transformed { try $0.flop() }
        MarkedRegions.carry(from: image, to: &out, orientation: 2)
        return out
    }
}
