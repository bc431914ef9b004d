import Foundation
import PipelineKit

/// `gif`: writes GIF (a palette of up to 256 colours, one-bit transparency), animated when the
/// decoder keeps frames (`max_frames` > 1).
public struct GIFEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "gif",
            summary: "Writes GIF (at most 256 colours); animated when the decoder keeps frames.",
            options: [
                .int("colors", default: 256, range: 2...256, doc: "Palette size."),
                .bool("dither", default: true, doc: "Dither when reducing to the palette."),
            ], retired: MagickEncoding.retired),
        make: { options in try GIFEncoder(options: options) })

    let encoding: MagickEncoding
    public var fileExtension: String { "gif" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("GIF")
        encoding = MagickEncoding(format: "GIF", quality: nil,
                                  paletteColors: options.int("colors")!, dither: options.bool("dither")!, animates: true)
        identifier = "gif(\(options.canonical))"
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoding.encode(image) }
}
