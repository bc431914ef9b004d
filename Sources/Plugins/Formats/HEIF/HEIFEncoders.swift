import Foundation
import PipelineKit

/// `avif` and `heic`: HEIF containers with AV1 or HEVC pictures, through ImageMagick's libheif
/// delegate. A pipeline naming one fails validation when this build has no such delegate.
///
/// ImageMagick 6's heic coder takes a quality but exposes no speed or effort setting, so there is
/// no `speed` option: one that did nothing would mislead.
///
/// `avif` writes an animation (a decoder's `max_frames` above 1 keeps one) as an AVIF image
/// sequence through libavif (``AVIFSequence``): every frame with its duration and the loop count,
/// at the same quality scale. `animated: false` writes the first frame only, as `heic` always does.
public struct HEIFEncoder: ImageEncoding {
    static func spec(_ name: String, _ format: String, quality: Int, extra: [OptionSpec] = []) -> PluginSpec {
        PluginSpec(
            name: name,
            summary: "Writes \(format) (\(name == "avif" ? "AV1" : "HEVC") in a HEIF container) through libheif; keeps transparency."
                + (name == "avif" ? " Animations become AVIF sequences (libavif)." : ""),
            options: [
                QualityTarget.option(default: quality, doc: "\(format) quality."),
                MagickEncoding.maxBytesOption,
            ] + extra, retired: MagickEncoding.retired)
    }

    static let animatedOption = OptionSpec.bool(
        "animated", default: true,
        doc: "Write an animation as an AVIF sequence (every frame, its timing and loop count, through libavif); false writes its first frame. A quality target applies to still images; a sequence is written at `quality`, or the target's highest.")

    public static let avifPlugin = Plugin.encoder(spec("avif", "AVIF", quality: 50, extra: [animatedOption]),
                                                  make: { options in try HEIFEncoder(format: "AVIF", options: options) })
    public static let heicPlugin = Plugin.encoder(spec("heic", "HEIC", quality: 60),
                                                  make: { options in try HEIFEncoder(format: "HEIC", options: options) })

    let encoding: MagickEncoding
    /// Whether animations are written as AVIF sequences (`avif` only).
    let animates: Bool
    public let fileExtension: String
    public let identifier: String

    init(format: String, options: PluginOptions) throws {
        try MagickEncoding.requireWriter(format, delegate: "libheif")
        let target = try QualityTarget.from(options)
        encoding = MagickEncoding(format: format, quality: options.int("quality") ?? target?.max,
                                  maxBytes: options.int("max_bytes"), target: target)
        animates = format == "AVIF" && options.bool("animated") != false
        fileExtension = format.lowercased()
        identifier = "\(fileExtension)(\(options.canonical))"
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoded(image).data }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        if animates, image.frameCount > 1 {
            return EncodedImage(data: try Self.sequence(image, quality: encoding.quality ?? 50, maxBytes: encoding.maxBytes),
                                fileExtension: fileExtension, facts: ["frames": .int(image.frameCount)])
        }
        let (data, facts) = try encoding.encoded(image)
        return EncodedImage(data: data, fileExtension: fileExtension, facts: facts)
    }

    /// How many times browsers play an animation ImageMagick read with `iterations` (0: forever).
    /// A GIF's loop count says how often to repeat after the first play (browsers play a GIF with
    /// loop count 3 four times), and ImageMagick reads a GIF without one as 1: played once. A
    /// WebP's loop count is the number of plays.
    static func plays(_ sourceFormat: String, iterations: Int) -> Int {
        sourceFormat == "GIF" && iterations > 1 ? iterations + 1 : iterations
    }

    /// The animation `image` as an AVIF sequence at `quality`, lowered to fit `maxBytes` as stills are.
    static func sequence(_ image: PipelineImage, quality: Int, maxBytes: Int?) throws -> Data {
        try image.withCopy { wand in
            try wand.eachFrame { frame in
                try frame.convertToSRGB()
                try frame.strip(keepICC: false)
            }
            let durations = wand.frameDurations, plays = plays(image.sourceFormat, iterations: wand.iterations)
            let write = { (quality: Int) in try AVIFSequence(quality: quality).write(wand, durations: durations, plays: plays) }
            return try MagickEncoding(format: "AVIF", quality: quality, maxBytes: maxBytes)
                .fitted(try write(quality), facts: [:], chosen: quality, write: write).data
        }
    }
}
