import Foundation
import PipelineKit

/// `jpeg`: writes baseline JPEG; alpha is flattened onto `background`.
public struct JPEGEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "jpeg",
            summary: "Writes JPEG; transparent areas are flattened onto a background colour.",
            options: [
                .int("quality", default: 82, range: 1...100, doc: "JPEG quality."),
                .color("background", default: "white", doc: "Colour under transparent areas."),
                .bool("strip", default: true, doc: "Remove metadata (EXIF, comments, profiles)."),
            ]),
        make: { options in try JPEGEncoder(options: options) })

    let encoding: MagickEncoding
    public var fileExtension: String { "jpg" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("JPEG")
        encoding = MagickEncoding(format: "JPEG", quality: options.int("quality")!, strip: options.bool("strip")!,
                                  flattenOnto: options.string("background")!, coderOptions: [:])
        identifier = "jpeg(\(options.canonical))"
    }

    public func encode(_ image: Image) throws -> Data { try encoding.encode(image) }
}
