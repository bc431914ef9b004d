import Foundation
import MagickKit
import PipelineKit

/// `modulate`: brightness, saturation and hue.
public struct Modulate: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "modulate",
            summary: "Changes brightness, saturation and hue (percent; 100 leaves each as it is).",
            options: [
                .number("brightness", default: 100, range: 0...1000, doc: "Brightness in percent (50 is half as bright)."),
                .number("saturation", default: 100, range: 0...1000, doc: "Saturation in percent (0 is grey)."),
                .number("hue", default: 100, range: 0...200, doc: "Hue rotation: 100 none, 0 and 200 are -180 and +180 degrees."),
            ]),
        make: { options in
            Modulate(brightness: options.number("brightness")!, saturation: options.number("saturation")!, hue: options.number("hue")!)
        })

    let brightness: Double, saturation: Double, hue: Double
    public var identifier: String { "modulate(\(brightness),\(saturation),\(hue))" }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try $0.modulate(brightness: brightness, saturation: saturation, hue: hue) }
    }
}
