import Foundation
import MagickKit
import PipelineKit

/// `auto_orient`: applies the EXIF orientation (for pipelines whose decoder has `auto_orient: false`).
public struct AutoOrient: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(name: "auto_orient", summary: "Turns the image upright by its EXIF orientation, then resets it.", options: []),
        make: { _ in AutoOrient() })

    public var identifier: String { "auto_orient" }
    public var onlyReorients: Bool { true }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        // 8- and 16-bit pixels are held upright only (the decoder turned them, or kept a wand).
        if image.rgb8 != nil || image.rgb16 != nil { return image }
        return try image.transformed { try $0.autoOrient() }
    }
}
