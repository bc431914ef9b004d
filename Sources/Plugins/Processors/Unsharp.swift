import Foundation
import MagickKit
import PipelineKit

/// `unsharp`: unsharp mask, the usual sharpening after a downscale.
public struct Unsharp: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "unsharp",
            summary: "Unsharp mask: adds back the difference from a blurred copy.",
            options: [
                .number("radius", default: 0, range: 0...100, doc: "Kernel radius in pixels; 0 chooses it from sigma."),
                .number("sigma", default: 1, range: 0.1...50, doc: "Standard deviation of the blur, in pixels."),
                .number("amount", default: 1, range: 0...10, doc: "How much of the difference is added (1 = 100%)."),
                .number("threshold", default: 0.05, range: 0...1, doc: "Smallest difference (fraction of the range) that is sharpened."),
            ]),
        make: { options in
            Unsharp(radius: options.number("radius")!, sigma: options.number("sigma")!,
                    amount: options.number("amount")!, threshold: options.number("threshold")!)
        })

    let radius: Double, sigma: Double, amount: Double, threshold: Double
    public var identifier: String { "unsharp(\(radius),\(sigma),\(amount),\(threshold))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.unsharpMask(radius: radius, sigma: sigma, amount: amount, threshold: threshold) }
    }
}
