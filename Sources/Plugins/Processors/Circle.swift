import Foundation
import MagickKit
import PipelineKit

/// `circle`: crops to the central square and keeps the inscribed circle (transparent outside),
/// with an optional ring.
public struct Circle: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "circle",
            summary: "Crops to the central square and keeps the inscribed circle; transparent outside, optional ring.",
            options: [
                .int("border_width", default: 0, range: 0...1024, doc: "Ring width in pixels; 0 for none."),
                .color("border_color", default: "white", doc: "Ring colour."),
            ]),
        make: { options in Circle(options: options) })

    let borderWidth: Int, borderColor: String
    public let identifier: String

    init(options: PluginOptions) {
        borderWidth = options.int("border_width")!
        borderColor = options.string("border_color")!
        identifier = "circle(\(options.canonical))"
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { wand in
            let side = min(wand.width, wand.height)
            if wand.width != side || wand.height != side {
                try wand.crop(x: (wand.width - side) / 2, y: (wand.height - side) / 2, width: side, height: side)
            }
            let centre = Double(side) / 2 - 0.5, radius = Double(side) / 2
            let mask = try Wand.canvas(width: side, height: side, color: "none")
            try mask.draw(.circle(centreX: centre, centreY: centre, radius: radius), fill: "white")
            try wand.mask(with: mask)
            if borderWidth > 0 {
                try wand.draw(.circle(centreX: centre, centreY: centre, radius: max(0, radius - Double(borderWidth) / 2)),
                              fill: "none", stroke: borderColor, strokeWidth: Double(borderWidth))
            }
        }
    }
}
