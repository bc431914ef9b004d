import Foundation
import MagickKit
import PipelineKit

/// `border`: a frame of a colour around the image.
public struct Border: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "border",
            summary: "Adds a border of a colour around the image.",
            options: [
                .int("width", default: 10, range: 0...4096, doc: "Border width in pixels, left and right (and top and bottom unless `height` is set)."),
                .int("height", range: 0...4096, doc: "Border height in pixels, top and bottom; defaults to `width`."),
                .color("color", default: "black", doc: "Border colour."),
            ]),
        make: { options in
            Border(width: options.int("width")!, height: options.int("height") ?? options.int("width")!, color: options.string("color")!)
        })

    let width: Int, height: Int, color: String
    public var identifier: String { "border(\(width)x\(height),\(color))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.border(color: color, width: width, height: height) }
    }
}
