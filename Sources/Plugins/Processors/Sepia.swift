import Foundation
import MagickKit
import PipelineKit

/// `sepia`: sepia tone.
public struct Sepia: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "sepia",
            summary: "Sepia tone, as if developed in a darkroom.",
            options: [
                .number("threshold", default: 80, range: 0...100, doc: "Percent of the range where the toning is strongest (80 is a classic look)."),
            ]),
        make: { options in Sepia(threshold: options.number("threshold")!) })

    let threshold: Double
    public var identifier: String { "sepia(\(threshold))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.sepia(threshold: threshold / 100) }
    }
}
