import Foundation
import MagickKit
import PipelineKit

/// `rounded_corners`: transparent outside a rounded rectangle, with an optional border.
public struct RoundedCorners: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "rounded_corners",
            summary: "Rounds the corners: transparent outside, with an optional border along the edge.",
            options: [
                .int("radius", default: 16, range: 1...8192, doc: "Corner radius in pixels (at most half the shorter side)."),
                .int("border_width", default: 0, range: 0...1024, doc: "Border width in pixels; 0 for none."),
                .color("border_color", default: "white", doc: "Border colour."),
            ]),
        make: { options in RoundedCorners(options: options) })

    let radius: Int, borderWidth: Int, borderColor: String
    public let identifier: String

    init(options: PluginOptions) {
        radius = options.int("radius")!
        borderWidth = options.int("border_width")!
        borderColor = options.string("border_color")!
        identifier = "rounded_corners(\(options.canonical))"
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { wand in
            let w = Double(wand.width), h = Double(wand.height)
            let r = min(Double(radius), min(w, h) / 2)
            let mask = try Wand.canvas(width: wand.width, height: wand.height, color: "none")
            try mask.draw(.roundedRectangle(x0: 0, y0: 0, x1: w - 1, y1: h - 1, radius: r), fill: "white")
            try wand.mask(with: mask)
            if borderWidth > 0 {
                let inset = Double(borderWidth) / 2
                try wand.draw(.roundedRectangle(x0: inset - 0.5, y0: inset - 0.5, x1: w - inset - 0.5, y1: h - inset - 0.5,
                                                radius: max(0, r - inset)),
                              fill: "none", stroke: borderColor, strokeWidth: Double(borderWidth))
            }
        }
    }
}
