import Foundation
import MagickKit
import PipelineKit

/// `negate`: inverts the colours.
public struct Negate: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(name: "negate", summary: "Inverts the colours (a negative); alpha is kept.", options: []),
        make: { _ in Negate() })

    public var identifier: String { "negate" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.negate() }
    }
}
