import Foundation
import MagickKit
import PipelineKit

/// `trim`: removes borders of the same colour as the corners.
public struct Trim: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "trim",
            summary: "Removes uniform borders (the colour of the corners), within a fuzz tolerance.",
            options: [
                .number("fuzz", default: 10, range: 0...100, doc: "How different (percent of the full range) a pixel may be and still count as border."),
            ]),
        make: { options in Trim(fuzz: options.number("fuzz")!) })

    let fuzz: Double
    public var identifier: String { "trim(fuzz=\(fuzz))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.trim(fuzz: fuzz / 100) }
    }
}
