import Foundation
import MagickKit
import PipelineKit

/// `sharpen`: Gaussian sharpening.
public struct Sharpen: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "sharpen",
            summary: "Sharpens with a Gaussian operator.",
            options: [
                .number("sigma", default: 1, range: 0.1...50, doc: "Standard deviation of the Gaussian, in pixels."),
                .number("radius", default: 0, range: 0...100, doc: "Kernel radius in pixels; 0 chooses it from sigma."),
            ]),
        make: { options in Sharpen(sigma: options.number("sigma")!, radius: options.number("radius")!) })

    let sigma: Double, radius: Double
    public var identifier: String { "sharpen(radius=\(radius),sigma=\(sigma))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.sharpen(radius: radius, sigma: sigma) }
    }
}
