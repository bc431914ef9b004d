import Foundation
import PipelineKit

/// `jpeg`: writes JPEG (baseline or progressive); alpha is flattened onto `background`.
public struct JPEGEncoder: ImageEncoding {
    static let samplingFactors = ["4:2:0": "2x2,1x1,1x1", "4:2:2": "2x1,1x1,1x1", "4:4:4": "1x1,1x1,1x1"]

    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "jpeg",
            summary: "Writes JPEG, baseline or progressive; transparent areas are flattened onto a background colour.",
            options: [
                QualityTarget.option(default: 82, doc: "JPEG quality."),
                .bool("progressive", default: false, doc: "Progressive (interlaced) JPEG: shows early when loading, often a little smaller."),
                .oneOf("subsampling", samplingFactors.keys.sorted(), default: "4:2:0",
                       doc: "Chroma subsampling: 4:2:0 is smallest; 4:4:4 keeps fine colour detail (text, red edges)."),
                .bool("optimize", default: true, doc: "Optimised Huffman tables: a few percent smaller, same pixels."),
                .color("background", default: "white", doc: "Colour under transparent areas."),
                MagickEncoding.maxBytesOption,
            ], retired: MagickEncoding.retired),
        make: { options in try JPEGEncoder(options: options) })

    let encoding: MagickEncoding
    public var fileExtension: String { "jpg" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("JPEG")
        encoding = MagickEncoding(
            format: "JPEG", quality: options.int("quality"),
            flattenOnto: options.string("background")!,
            coderOptions: ["jpeg:sampling-factor": Self.samplingFactors[options.string("subsampling") ?? "4:2:0"]!,
                           "jpeg:optimize-coding": options.bool("optimize") ?? true ? "true" : "false"],
            progressive: options.bool("progressive") ?? false, maxBytes: options.int("max_bytes"),
            target: try QualityTarget.from(options))
        identifier = "jpeg(\(options.canonical))"
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoding.encode(image) }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        let (data, facts) = try encoding.encoded(image)
        return EncodedImage(data: data, fileExtension: fileExtension, facts: facts)
    }
}
