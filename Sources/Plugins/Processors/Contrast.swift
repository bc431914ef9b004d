import Foundation
import MagickKit
import PipelineKit

/// `contrast`: sigmoidal contrast around mid-grey (no clipping, unlike a linear stretch).
public struct Contrast: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "contrast",
            summary: "Increases (positive) or reduces (negative) contrast around mid-grey, without clipping.",
            options: [
                .number("amount", default: 3, range: -20...20, doc: "Strength: 3 is a visible boost, -3 a visible flattening, 0 nothing."),
            ]),
        make: { options in Contrast(amount: options.number("amount")!) })

    let amount: Double
    public var identifier: String { "contrast(\(amount))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.sigmoidalContrast(strength: amount) }
    }
}
