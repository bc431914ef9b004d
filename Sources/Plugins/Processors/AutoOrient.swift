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
        var out = try image.transformed { try $0.autoOrient() }
        if let metadata = image.metadata, !metadata.upright {
            // The pixels are upright now: outputs say orientation 1, and marked regions turn with them.
            out.metadata?.upright = true
            MarkedRegions.carry(from: image, to: &out, orientation: metadata.orientation)
        }
        return out
    }
}
