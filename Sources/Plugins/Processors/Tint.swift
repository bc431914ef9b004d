import Foundation
import MagickKit
import PipelineKit

/// `tint`: blends a colour over the image.
public struct Tint: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "tint",
            summary: "Blends a colour over every pixel by an amount.",
            options: [
                .color("color", default: "#704214", doc: "The tint colour."),
                .number("amount", default: 0.3, range: 0...1, doc: "How much of the colour: 0 none, 1 all colour."),
            ]),
        make: { options in Tint(color: options.string("color")!, amount: options.number("amount")!) })

    let color: String, amount: Double
    public var identifier: String { "tint(\(color),\(amount))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.colorize(color, amount: amount) }
    }
}
