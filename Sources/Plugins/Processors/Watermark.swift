import Foundation
import MagickKit
import PipelineKit

/// `watermark`: draws an image file over the image, placed by gravity, with opacity and scale.
///
/// The file is read and decoded once, when the pipeline is loaded (by the same safe decoder as the
/// sources), so a missing or broken watermark is a validation error, not a failure per item. Its
/// content is part of the identifier: replacing the file changes cache keys.
public struct Watermark: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "watermark",
            summary: "Overlays an image file (a logo) placed by gravity, with margin, opacity and scale.",
            options: [
                .path("file", required: true, access: .readableFile,
                      doc: "The overlay image (PNG with transparency is usual), relative to the pipeline file; read once at load.")
                    .example("examples/watermark.png"),
                .oneOf("gravity", Gravity.placementNames, default: "southeast", doc: "Where the overlay sits."),
                .int("margin", default: 10, range: 0...4096, doc: "Distance in pixels from the edges it is placed against."),
                .number("opacity", default: 0.5, range: 0...1, doc: "Opacity of the overlay: 0 invisible, 1 as drawn."),
                .number("scale", default: 0, range: 0...1, doc: "Overlay width as a fraction of the image's width; 0 keeps its own size (shrunk only to fit)."),
            ]),
        make: { options in try Watermark(options: options) })

    let overlay: PipelineImage
    let gravity: Gravity
    let margin: Int, opacity: Double, scale: Double
    public let identifier: String

    init(options: PluginOptions) throws {
        let file = options.string("file")!
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
            throw PipelineError(.invalidOption, "cannot read the watermark file '\(file)': \(error.localizedDescription)")
        }
        let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)
        do { overlay = try decoder.decode(LoadedData(data: data), hint: DecodeHint()) } catch let error as PipelineError {
            throw PipelineError(.invalidOption, "the watermark file '\(file)' is not usable: \(error.kind): \(error.message)")
        }
        gravity = Gravity(rawValue: options.string("gravity")!)!
        margin = options.int("margin")!
        opacity = options.number("opacity")!
        scale = options.number("scale")!
        identifier = "watermark(\(Hashing.sha256Hex(data).prefix(16)),\(gravity.rawValue),\(margin),\(opacity),\(scale))"
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        guard opacity > 0 else { return image }
        return try image.transformed { wand in
            try overlay.withCopy { mark in
                // Scaled to a fraction of the width, or shrunk to fit inside the margins.
                let room = PixelSize(width: max(1, wand.width - 2 * margin), height: max(1, wand.height - 2 * margin))
                var factor = scale > 0 ? Double(wand.width) * scale / Double(mark.width) : 1
                factor = min(factor, Double(room.width) / Double(mark.width), Double(room.height) / Double(mark.height))
                if abs(factor - 1) > 0.001 {
                    try mark.resize(width: max(1, Int((Double(mark.width) * factor).rounded())),
                                    height: max(1, Int((Double(mark.height) * factor).rounded())))
                }
                if opacity < 1 { try mark.multiplyAlpha(opacity) }
                let (x, y) = gravity.offset(inner: PixelSize(width: mark.width, height: mark.height),
                                            outer: PixelSize(width: wand.width, height: wand.height), margin: margin)
                try wand.composite(mark, x: x, y: y)
            }
        }
    }
}
