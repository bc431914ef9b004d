import Foundation
import PipelineKit

/// `png`: writes PNG, keeping alpha.
public struct PNGEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "png",
            summary: "Writes PNG, keeping transparency.",
            options: [
                .int("compression", default: 6, range: 0...9, doc: "zlib compression level (0 fastest, 9 smallest)."),
                .bool("strip", default: true, doc: "Remove metadata."),
            ]),
        make: { options in try PNGEncoder(options: options) })

    let encoding: MagickEncoding
    public var fileExtension: String { "png" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("PNG")
        encoding = MagickEncoding(format: "PNG", quality: nil, strip: options.bool("strip")!, flattenOnto: nil,
                                  coderOptions: ["png:compression-level": String(options.int("compression")!)])
        identifier = "png(\(options.canonical))"
    }

    public func encode(_ image: Image) throws -> Data { try encoding.encode(image) }
}
