import Foundation
import PipelineKit

/// `png`: writes PNG, keeping alpha; optionally as a palette image.
public struct PNGEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "png",
            summary: "Writes PNG, keeping transparency; optionally quantised to a palette (much smaller for graphics).",
            options: [
                .int("compression", default: PNGWriter.defaultLevel, range: 0...9, doc: "Compression level, on zlib's scale (0 none, 1 fastest, 9 smallest), by libdeflate (by zlib for images whose pixels take over 32 MiB). 5 by default: on photos' 512 px thumbnails, half the time of zlib at 5 and 0.8% larger (median); 6 for 1.0% smaller files than zlib at 5 in two thirds of its time."),
                .oneOf("filter", PNGWriter.Filter.allCases.map(\.rawValue), default: PNGWriter.defaultFilter.rawValue,
                       doc: "libpng's row filter: adaptive picks one per row (smallest files, as ImageMagick writes them); none is fastest to write, usually larger; sub, up, average, paeth use that one filter."),
                .bool("palette", default: false, doc: "Quantise to a palette of at most `colors` colours (8-bit indexed PNG)."),
                .int("colors", default: 256, range: 2...256, doc: "Palette size when `palette` is true."),
                .bool("dither", default: true, doc: "Dither when quantising to a palette."),
                MagickEncoding.maxBytesOption,
            ], retired: MagickEncoding.retired),
        make: { options in try PNGEncoder(options: options) })

    let encoding: MagickEncoding
    /// libpng writes the output unless it is a palette PNG or must fit `max_bytes` (``PNGWriter``).
    let direct: (level: Int, filter: PNGWriter.Filter)?
    public var fileExtension: String { "png" }
    public let identifier: String

    init(options: PluginOptions) throws {
        try MagickEncoding.requireWriter("PNG")
        let palette = options.bool("palette") ?? false
        var coder = ["png:compression-level": String(options.int("compression")!)]
        if palette { coder["png:format"] = "png8" }
        encoding = MagickEncoding(format: "PNG", quality: nil, flattenOnto: nil,
                                  coderOptions: coder, paletteColors: palette ? options.int("colors") ?? 256 : nil,
                                  dither: options.bool("dither") ?? true, maxBytes: options.int("max_bytes"))
        identifier = "png(\(options.canonical))"
        let filter = options.string("filter").flatMap(PNGWriter.Filter.init(rawValue:)) ?? PNGWriter.defaultFilter
        direct = palette || options.int("max_bytes") != nil ? nil : (options.int("compression")!, filter)
    }

    public func encode(_ image: PipelineImage) throws -> Data {
        if let direct, let png = try PNGWriter.write(image, level: direct.level, filter: direct.filter) { return png }
        return try encoding.encode(image)
    }
}
