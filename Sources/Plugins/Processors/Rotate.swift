import Foundation
import MagickKit
import PipelineKit

/// `rotate`: rotates clockwise by any angle; the corners a non-right angle uncovers get `background`.
public struct Rotate: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "rotate",
            summary: "Rotates clockwise by an angle; uncovered corners are filled with a background colour.",
            options: [
                .number("degrees", default: 90, range: -360...360, doc: "Clockwise angle (negative turns anticlockwise)."),
                .color("background", default: "none", doc: "Colour of the corners a non-right angle uncovers (none = transparent)."),
            ]),
        make: { options in Rotate(degrees: options.number("degrees")!, background: options.string("background")!) })

    let degrees: Double, background: String
    public var identifier: String { "rotate(\(degrees),\(background))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        if degrees.truncatingRemainder(dividingBy: 360) == 0 { return image }
        var out = try image.transformed { try $0.rotate(degrees: degrees, background: background) }
        // Marked regions follow quarter turns; after any other angle they no longer fit (and say so).
        let turn = (degrees.truncatingRemainder(dividingBy: 360) + 360).truncatingRemainder(dividingBy: 360)
        if let orientation = [90.0: 6, 180: 3, 270: 8][turn] { MarkedRegions.carry(from: image, to: &out, orientation: orientation) }
        return out
    }
}
