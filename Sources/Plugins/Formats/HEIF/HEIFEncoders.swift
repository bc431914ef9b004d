import Foundation
import PipelineKit

/// `avif` and `heic`: HEIF containers with AV1 or HEVC pictures, through ImageMagick's libheif
/// delegate. A pipeline naming one fails validation when this build has no such delegate.
///
/// ImageMagick 6's heic coder takes a quality but exposes no speed or effort setting, so there is
/// no `speed` option: one that did nothing would mislead.
public struct HEIFEncoder: ImageEncoding {
    static func spec(_ name: String, _ format: String, quality: Int) -> PluginSpec {
        PluginSpec(
            name: name,
            summary: "Writes \(format) (\(name == "avif" ? "AV1" : "HEVC") in a HEIF container) through libheif; keeps transparency.",
            options: [
                QualityTarget.option(default: quality, doc: "\(format) quality."),
                MagickEncoding.maxBytesOption,
            ], retired: MagickEncoding.retired)
    }

    public static let avifPlugin = Plugin.encoder(spec("avif", "AVIF", quality: 50),
                                                  make: { options in try HEIFEncoder(format: "AVIF", options: options) })
    public static let heicPlugin = Plugin.encoder(spec("heic", "HEIC", quality: 60),
                                                  make: { options in try HEIFEncoder(format: "HEIC", options: options) })

    let encoding: MagickEncoding
    public let fileExtension: String
    public let identifier: String

    init(format: String, options: PluginOptions) throws {
        try MagickEncoding.requireWriter(format, delegate: "libheif")
        encoding = MagickEncoding(format: format, quality: options.int("quality"),
                                  maxBytes: options.int("max_bytes"), target: try QualityTarget.from(options))
        fileExtension = format.lowercased()
        identifier = "\(fileExtension)(\(options.canonical))"
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoding.encode(image) }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        let (data, facts) = try encoding.encoded(image)
        return EncodedImage(data: data, fileExtension: fileExtension, facts: facts)
    }
}
