import Foundation
import PipelineKit

/// `tiff`: writes TIFF (archival and print workflows), keeping alpha.
public struct TIFFEncoder: ImageEncoding {
    static let compressions = ["none": "None", "lzw": "LZW", "zip": "ZIP", "jpeg": "JPEG"]

    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "tiff",
            summary: "Writes TIFF, keeping transparency; lossless (LZW, ZIP) or JPEG-compressed.",
            options: [
                .oneOf("compression", compressions.keys.sorted(), default: "lzw", doc: "Compression inside the TIFF."),
                .int("quality", default: 90, range: 1...100, doc: "JPEG quality, when compression is jpeg."),
            ], retired: MagickEncoding.retired),
        make: { options in try TIFFEncoder(options: options) })

    let encoding: MagickEncoding
    public var fileExtension: String { "tiff" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("TIFF")
        let compression = options.string("compression") ?? "lzw"
        encoding = MagickEncoding(format: "TIFF", quality: compression == "jpeg" ? options.int("quality") : nil,
                                  flattenOnto: compression == "jpeg" ? "white" : nil,
                                  coderOptions: ["tiff:compression": Self.compressions[compression]!])
        identifier = "tiff(\(options.canonical))"
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoding.encode(image) }
}
