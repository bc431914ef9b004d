import Foundation
import MagickKit
import PipelineKit

/// `grayscale`: luminance only (kept in sRGB so later colour operations still apply).
public struct Grayscale: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(name: "grayscale", summary: "Converts to shades of grey (luminance).", options: []),
        make: { _ in Grayscale() })

    public var identifier: String { "grayscale" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.grayscale() }
    }
}
