import Foundation
import MagickKit
import PipelineKit

/// `auto`: keeps the source's format where it is a web format this build writes (JPEG, PNG, WebP,
/// GIF, AVIF, HEIC), otherwise JPEG, or PNG when the image has transparency (also when a JPEG
/// source gained transparency, for example from `circle`). The output's extension follows.
public struct AutoEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "auto",
            summary: "Keeps the source format where it can (JPEG, PNG, WebP, GIF, AVIF, HEIC); otherwise JPEG, or PNG with transparency.",
            options: [
                .int("quality", default: 82, range: 1...100, doc: "Quality for the lossy formats (JPEG, WebP, AVIF, HEIC)."),
                MagickEncoding.maxBytesOption,
            ], retired: MagickEncoding.retired),
        make: { options in try AutoEncoder(options: options) })

    static let kept = ["JPEG", "PNG", "WEBP", "GIF", "AVIF", "HEIC"]
    let quality: Int, maxBytes: Int?
    public var fileExtension: String { "auto" }
    public let identifier: String

    init(options: PluginOptions) throws {
        quality = options.int("quality")!
                maxBytes = options.int("max_bytes")
        identifier = "auto(\(options.canonical))"
    }

    /// The format `image` is written in.
    func format(for image: PipelineImage) -> String {
        let source = image.sourceFormat
        if Self.kept.contains(source), !(source == "JPEG" && image.hasAlpha), Magick.canWrite(source) { return source }
        return image.hasAlpha ? "PNG" : "JPEG"
    }

    public func fileExtension(for image: PipelineImage) -> String {
        switch format(for: image) {
        case "JPEG": return "jpg"
        case let other: return other.lowercased()
        }
    }

    public func encode(_ image: PipelineImage) throws -> Data {
        let format = format(for: image)
        var encoding = MagickEncoding(format: format, quality: ["JPEG", "WEBP", "AVIF", "HEIC"].contains(format) ? quality : nil,
                                      maxBytes: maxBytes)
        switch format {
        case "JPEG": encoding.flattenOnto = "white"; encoding.coderOptions = ["jpeg:sampling-factor": "2x2,1x1,1x1"]
        case "GIF": encoding.paletteColors = 256; encoding.animates = true
        case "WEBP": encoding.animates = true
        default: break
        }
        return try encoding.encode(image)
    }
}
