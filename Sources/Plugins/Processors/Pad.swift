import Foundation
import MagickKit
import PipelineKit

/// `pad` (also `extend`): places the image on a larger canvas, to a size or by margins.
public struct Pad: ImageProcessing {
    static func spec(_ name: String) -> PluginSpec {
        PluginSpec(
            name: name,
            summary: name == "pad"
                ? "Places the image on a larger canvas of a colour: to a size (placed by gravity) or by margins."
                : "The same as `pad`: places the image on a larger canvas, to a size or by margins.",
            options: [
                .int("width", range: 1...65535, doc: "Canvas width; an image already wider keeps its width."),
                .int("height", range: 1...65535, doc: "Canvas height; an image already taller keeps its height."),
                .oneOf("gravity", Gravity.placementNames, default: "centre", doc: "Where the image sits on a canvas given by size."),
                .int("top", default: 0, range: 0...65535, doc: "Margin above, in pixels (added after any size padding)."),
                .int("right", default: 0, range: 0...65535, doc: "Margin on the right, in pixels."),
                .int("bottom", default: 0, range: 0...65535, doc: "Margin below, in pixels."),
                .int("left", default: 0, range: 0...65535, doc: "Margin on the left, in pixels."),
                .color("background", default: "none", doc: "Canvas colour; none is transparent (encoders without alpha flatten it onto their background)."),
            ])
    }

    public static let plugin = Plugin.processor(spec("pad"), make: { options in try Pad(options: options) })
    public static let extendPlugin = Plugin.processor(spec("extend"), make: { options in try Pad(options: options) })

    let width: Int?, height: Int?
    let gravity: Gravity
    let top: Int, right: Int, bottom: Int, left: Int
    let background: String
    public let identifier: String

    init(options: PluginOptions) throws {
        width = options.int("width")
        height = options.int("height")
        gravity = Gravity(rawValue: options.string("gravity")!)!
        top = options.int("top")!
        right = options.int("right")!
        bottom = options.int("bottom")!
        left = options.int("left")!
        background = options.string("background")!
        guard width != nil || height != nil || top + right + bottom + left > 0 else {
            throw PipelineError(.invalidOption, "set 'width' and/or 'height', or a margin ('top', 'right', 'bottom', 'left')")
        }
        identifier = "pad(\(options.canonical))"
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { wand in
            let size = PixelSize(width: wand.width, height: wand.height)
            let canvas = PixelSize(width: max(size.width, width ?? 0), height: max(size.height, height ?? 0))
            let (x, y) = gravity.offset(inner: size, outer: canvas)
            try wand.extent(width: canvas.width + left + right, height: canvas.height + top + bottom,
                            x: x + left, y: y + top, background: background)
        }
    }
}
