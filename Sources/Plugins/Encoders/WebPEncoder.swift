import Foundation
import PipelineKit

/// `webp`: writes WebP, lossy or lossless, keeping alpha.
public struct WebPEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "webp",
            summary: "Writes WebP (lossy or lossless), keeping transparency.",
            options: [
                .int("quality", default: 80, range: 1...100, doc: "WebP quality."),
                .bool("lossless", default: false, doc: "Lossless compression."),
                .bool("strip", default: true, doc: "Remove metadata."),
            ]),
        make: { options in try WebPEncoder(options: options) })

    let encoding: MagickEncoding
    public var fileExtension: String { "webp" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("WEBP")
        encoding = MagickEncoding(format: "WEBP", quality: options.int("quality")!, strip: options.bool("strip")!,
                                  flattenOnto: nil,
                                  coderOptions: ["webp:lossless": options.bool("lossless")! ? "true" : "false"])
        identifier = "webp(\(options.canonical))"
    }

    public func encode(_ image: Image) throws -> Data { try encoding.encode(image) }
}
