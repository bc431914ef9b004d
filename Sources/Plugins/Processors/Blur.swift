import Foundation
import MagickKit
import PipelineKit

/// `blur`: Gaussian blur.
public struct Blur: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "blur",
            summary: "Gaussian blur.",
            options: [
                .number("sigma", default: 2, range: 0.1...100, doc: "Standard deviation of the Gaussian, in pixels: the strength."),
                .number("radius", default: 0, range: 0...300, doc: "Kernel radius in pixels; 0 chooses it from sigma."),
            ]),
        make: { options in Blur(sigma: options.number("sigma")!, radius: options.number("radius")!) })

    let sigma: Double, radius: Double
    public var identifier: String { "blur(radius=\(radius),sigma=\(sigma))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.blur(radius: radius, sigma: sigma) }
    }
}
