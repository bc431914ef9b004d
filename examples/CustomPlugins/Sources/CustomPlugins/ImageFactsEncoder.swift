import Foundation
import MagickKit

/// `image-facts`: writes a small JSON document instead of an image: width, height and dominant
/// colour. Used as a variant beside an image variant, it gives every image a JSON sidecar.
public struct ImageFactsEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "image-facts",
            summary: "Writes the image's width, height and dominant colour as JSON (a sidecar when used as a variant).",
            options: [
                .bool("pretty", default: true, doc: "Indent the JSON."),
            ])
    ) { options in ImageFactsEncoder(pretty: options.bool("pretty")!) }

    let pretty: Bool
    public var fileExtension: String { "json" }
    public var identifier: String { "image-facts(pretty=\(pretty))" }

    struct Facts: Codable {
        let width: Int
        let height: Int
        let dominantColor: String
    }

    public func encode(_ image: PipelineImage) throws -> Data {
        // The mean colour: the image scaled down to one pixel.
        let mean = try image.withCopy { wand -> String in
            try wand.resize(width: 1, height: 1)
            let p = try wand.pixel(x: 0, y: 0)
            func hex(_ v: Double) -> String { String(format: "%02x", Int((v * 255).rounded())) }
            return "#" + hex(p.red) + hex(p.green) + hex(p.blue)
        }
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys] : [.sortedKeys]
        return try encoder.encode(Facts(width: image.width, height: image.height, dominantColor: mean))
    }
}
