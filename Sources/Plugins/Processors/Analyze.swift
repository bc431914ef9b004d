import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// `analyze`: adds facts about the image to the item's report without changing a pixel: the
/// source's format and size, alpha, frames, placeholders (BlurHash, ThumbHash, the dominant colour
/// and a palette) and a perceptual hash for finding near-duplicates.
///
/// Put first in `processors`, it sees the image as decoded, already reduced on load (so its cost
/// does not grow with the source); it works on a copy of at most 100x100 pixels. Later processors
/// keep the facts; every variant's facts are reported, the first variant's winning a name clash.
public struct Analyze: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "analyze",
            summary: "Adds facts to the report without changing the image: source format and size, alpha, frames, BlurHash, ThumbHash, dominant colour, palette, dHash.",
            options: [
                .string("blurhash", default: "4x3",
                        doc: "BlurHash components as XxY (each 1 to 9), or none."),
                .bool("thumbhash", default: true, doc: "Add the ThumbHash (base64)."),
                .int("palette", default: 5, range: 0...16,
                     doc: "Colours in the palette, the dominant one first (median cut over opaque pixels); 0 for none (and no dominant colour)."),
                .bool("dhash", default: true, doc: "Add a 64-bit difference hash (16 hex digits) for finding near-duplicates."),
            ]),
        make: { options in try Analyze(options: options) })

    /// BlurHash components, or `nil` for none.
    public let blurHash: (x: Int, y: Int)?
    public let thumbHash: Bool
    public let paletteSize: Int
    public let differenceHash: Bool

    init(options: PluginOptions) throws {
        let text = options.string("blurhash") ?? "4x3"
        if text == "none" {
            blurHash = nil
        } else {
            let parts = text.split(separator: "x").compactMap { Int($0) }
            guard parts.count == 2, parts.allSatisfy({ (1...9).contains($0) }) else {
                throw PipelineError(.invalidOption, "'blurhash' must be XxY with each from 1 to 9 (such as 4x3), or none; got '\(text)'")
            }
            blurHash = (parts[0], parts[1])
        }
        thumbHash = options.bool("thumbhash") ?? true
        paletteSize = options.int("palette") ?? 5
        differenceHash = options.bool("dhash") ?? true
    }

    /// Only reads: the resize after it still sets how far the decoder may reduce.
    public var onlyReads: Bool { true }

    /// The decoder adds the source's orientation, colour space, ICC description and EXIF.
    public var wantsSourceFacts: Bool { true }

    public var identifier: String {
        "analyze(\(blurHash.map { "\($0.x)x\($0.y)" } ?? "none"),\(thumbHash),\(paletteSize),\(differenceHash))"
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        var facts: ImageFacts = [
            "format": .string(image.sourceFormat),
            "width": .int(image.sourceSize?.width ?? image.width),
            "height": .int(image.sourceSize?.height ?? image.height),
            "frames": .int(image.frameCount),
            "alpha": .bool(image.hasAlpha),
        ]
        let pixels = try image.withCopy { wand -> RGBAPixels in
            if wand.frameCount > 1 { try wand.keepFirstFrame() }
            // At most 100x100 (ThumbHash's limit; plenty for the rest), by averaging.
            let scale = min(1, 100 / Double(max(wand.width, wand.height)))
            if scale < 1 {
                try wand.resize(width: max(1, Int((Double(wand.width) * scale).rounded())),
                                height: max(1, Int((Double(wand.height) * scale).rounded())), filter: TriangleFilter)
            }
            return RGBAPixels(width: wand.width, height: wand.height, bytes: try wand.rgbaBytes())
        }
        if let blurHash { facts["blurhash"] = .string(BlurHash.encode(pixels, x: blurHash.x, y: blurHash.y)) }
        if thumbHash { facts["thumbhash"] = .string(Data(ThumbHash.encode(pixels)).base64EncodedString()) }
        if paletteSize > 0 {
            let swatches = Palette.swatches(pixels, count: paletteSize)
            if let dominant = swatches.first { facts["dominant_color"] = .string(dominant.hex) }
            facts["palette"] = .list(swatches.map { .object(["color": .string($0.hex), "share": .number($0.share)]) })
        }
        if differenceHash { facts["dhash"] = .string(DifferenceHash.encode(pixels)) }
        var analysed = image
        analysed.facts.merge(facts) { _, new in new }
        return analysed
    }
}
