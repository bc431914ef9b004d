import Foundation
import PipelineKit

/// `webp`: writes WebP, lossy or lossless, keeping alpha and animation.
public struct WebPEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "webp",
            summary: "Writes WebP (lossy or lossless), keeping transparency; animated when the decoder keeps frames.",
            options: [
                QualityTarget.option(default: 80, doc: "WebP quality (for lossless: effort)."),
                .bool("lossless", default: false, doc: "Lossless compression."),
                .int("method", default: 4, range: 0...6, doc: "Compression effort: 0 fastest, 6 smallest."),
                MagickEncoding.maxBytesOption,
            ], retired: MagickEncoding.retired),
        make: { options in try WebPEncoder(options: options) })

    let encoding: MagickEncoding
    public var fileExtension: String { "webp" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("WEBP")
        let target = try QualityTarget.from(options)
        if target != nil, options.bool("lossless") == true {
            throw PipelineError(.invalidOption, "a quality target needs lossy WebP: lossless output is always identical")
        }
        encoding = MagickEncoding(format: "WEBP", quality: options.int("quality"),
                                  flattenOnto: nil,
                                  coderOptions: ["webp:lossless": options.bool("lossless")! ? "true" : "false",
                                                 "webp:method": String(options.int("method") ?? 4)],
                                  animates: true, maxBytes: options.int("max_bytes"), target: target)
        identifier = "webp(\(options.canonical))"
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoding.encode(image) }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        let (data, facts) = try encoding.encoded(image)
        return EncodedImage(data: data, fileExtension: fileExtension, facts: facts)
    }
}
