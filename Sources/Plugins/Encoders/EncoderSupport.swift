import Foundation
import MagickKit
import PipelineKit

/// What every ImageMagick-backed encoder does: work on a copy, flatten alpha where the format has
/// none, strip metadata (keeping the ICC profile), write 8 bits per channel with an explicit coder,
/// write every frame of an animation where the format has them, and step quality down until the
/// output fits `maxBytes`.
struct MagickEncoding: Sendable {
    let format: String
    var quality: Int?
    var strip: Bool = true
    /// The colour alpha is flattened onto, for formats without alpha; `nil` keeps alpha.
    var flattenOnto: String?
    var coderOptions: [String: String] = [:]
    /// Progressive (interlaced) output; `false` writes baseline even from a progressive source.
    var progressive: Bool = false
    /// Reduce to at most this many colours (palette PNG, GIF).
    var paletteColors: Int?
    var dither: Bool = true
    /// Whether the format stores animations (GIF, WebP): all frames are written.
    var animates: Bool = false
    /// The largest output accepted; `nil` for no limit.
    var maxBytes: Int?

    /// The encoder options every ImageMagick encoder shares.
    static let stripOption = OptionSpec.bool("strip", default: true, doc: "Remove metadata (EXIF, XMP, comments), keeping the ICC profile.")
    static let maxBytesOption = OptionSpec.size("max_bytes", min: "1KB", max: "1GB",
                                                doc: "Largest output: quality is lowered step by step until it fits; fails as too_large when even the lowest does not.")

    func encode(_ image: PipelineImage) throws -> Data {
        try image.withCopy { wand in
            if image.frameCount > 1, !animates { try wand.keepFirstFrame() }
            try wand.eachFrame { frame in
                if let flattenOnto { try frame.flatten(onto: flattenOnto) }
                if strip { try frame.strip(keepICC: true) }
                if let paletteColors { try frame.quantize(colors: paletteColors, dither: dither) }
            }
            wand.setProgressive(progressive)
            var data = try write(wand, quality: quality)
            guard let maxBytes, data.count > maxBytes else { return data }
            guard var current = quality else {
                throw PipelineError(.tooLarge, "the \(format) output is \(Units.formatSize(data.count)), over max_bytes "
                    + "\(Units.formatSize(maxBytes)), and \(format) has no quality to lower")
            }
            // imgproxy-style: lower the quality step by step until the output fits.
            while current > 10 {
                current = max(10, current - max(5, current / 10))
                data = try write(wand, quality: current)
                if data.count <= maxBytes { return data }
            }
            throw PipelineError(.tooLarge, "the \(format) output is \(Units.formatSize(data.count)) even at quality 10, "
                + "over max_bytes \(Units.formatSize(maxBytes))")
        }
    }

    private func write(_ wand: Wand, quality: Int?) throws -> Data {
        try wand.encode(format: format, quality: quality, depth: 8, options: coderOptions, allFrames: animates)
    }

    /// Throws at validation time when this ImageMagick cannot write `format`.
    static func requireWriter(_ format: String, delegate: String? = nil) throws {
        guard Magick.canWrite(format) else {
            throw PipelineError(.unsupportedFormat, "this ImageMagick build cannot write \(format)"
                + (delegate.map { " (it needs the \($0) delegate)" } ?? ""))
        }
    }
}
