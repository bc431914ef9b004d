import Foundation
import MagickKit
import PipelineKit

/// `background`: lays the image over a colour, removing transparency.
public struct Background: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "background",
            summary: "Flattens transparency onto a colour.",
            options: [.color("color", default: "white", doc: "The colour under transparent areas.")]),
        make: { options in Background(color: options.string("color")!) })

    let color: String
    public var identifier: String { "background(\(color))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        guard image.hasAlpha else { return image }
        return try image.transformed { try $0.flatten(onto: color) }
    }
}
