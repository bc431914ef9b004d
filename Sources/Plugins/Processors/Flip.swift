import Foundation
import MagickKit
import PipelineKit

/// `flip`: mirrors top to bottom.
public struct Flip: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(name: "flip", summary: "Mirrors the image top to bottom.", options: []),
        make: { _ in Flip() })

    public var identifier: String { "flip" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        var out = try image.transformed { try $0.flip() }
        MarkedRegions.carry(from: image, to: &out, orientation: 4)
        return out
    }
}
