import Foundation
import MagickKit
import PipelineKit

/// `quality: { target_ssim: 0.98, min: 40, max: 95 }`: the lowest quality whose output is at least
/// `ssim` similar to the processed image (``SSIM``, on luma), searched between `min` and `max`.
struct QualityTarget: Sendable, Equatable {
    let ssim: Double
    let min: Int
    let max: Int

    /// The fields of the map form of `quality`.
    static let fields: [OptionSpec] = [
        OptionSpec(name: "target_ssim", kind: .number, required: true, range: 0.5...0.9999,
                   doc: "The SSIM (on luma, against the processed image) the output must reach: 0.98 is close to invisible on photos."),
        .int("min", default: 30, range: 1...100, doc: "The lowest quality tried."),
        .int("max", default: 95, range: 1...100, doc: "The highest quality tried; used when even it misses the target."),
    ]

    /// The `quality` option of a lossy encoder: a number, or a target as a map of ``fields``.
    static func option(default quality: Int, doc: String) -> OptionSpec {
        OptionSpec(name: "quality", kind: .either(.int, .record(fields)), defaultValue: .int(quality), range: 1...100,
                   doc: doc + " Or a visual target, { target_ssim: 0.98, min: 40, max: 95 }: the lowest quality from min (default 30) "
                    + "to max (default 95) whose output's SSIM reaches target_ssim; max when none does.")
            .example("{ target_ssim: 0.98, min: 40, max: 95 }")
    }

    /// The target `options` sets, or `nil` for a fixed quality; throws when `min` exceeds `max`.
    static func from(_ options: PluginOptions) throws -> QualityTarget? {
        guard let map = options.map("quality") else { return nil }
        let fields = PluginOptions(map)
        let target = QualityTarget(ssim: fields.number("target_ssim") ?? 0.98, min: fields.int("min") ?? 30,
                                   max: fields.int("max") ?? 95)
        guard target.min <= target.max else {
            throw PipelineError(.invalidOption, "quality: min \(target.min) is above max \(target.max)")
        }
        return target
    }

    /// What one search found.
    struct Found {
        var data: Data
        var quality: Int
        var score: Double
        var encodes: Int
        /// Whether `score` reaches the target (it may not even at `max`).
        var met: Bool

        var facts: ImageFacts {
            ["quality": .int(quality), "ssim": .number((score * 10000).rounded() / 10000), "encodes": .int(encodes),
             "target_met": .bool(met)]
        }
    }

    /// The lowest quality in `min...max` whose output reaches the target, by bisection (the score
    /// grows with quality), each candidate written by `write` and read back by ImageMagick as
    /// `format`. Measured on the first frame of an animation.
    func search(_ wand: Wand, format: String, write: (Int) throws -> Data) throws -> Found {
        let alpha = wand.hasAlpha
        let reference = SSIM.Reference(try Self.plane(wand, alpha: alpha))
        var encodes = 0
        func attempt(_ quality: Int) throws -> Found {
            let data = try write(quality)
            encodes += 1
            let decoded = Wand()
            try decoded.read(data, format: format, maxFrames: 1)
            try decoded.toSRGB()  // ImageMagick 6 reads AVIF and HEIC as YCbCr
            let score = SSIM.score(reference, try Self.plane(decoded, alpha: alpha)) ?? 0
            return Found(data: data, quality: quality, score: score, encodes: encodes, met: score >= ssim)
        }
        // The best quality first: when even it misses the target there is nothing to search.
        var best = try attempt(max)
        guard best.met else { return best }
        var low = min, high = max
        while low < high {
            let middle = (low + high) / 2
            let found = try attempt(middle)
            if found.met { best = found; high = middle } else { low = middle + 1 }
        }
        best.encodes = encodes
        return best
    }

    /// The luma of `wand`'s pixels, composited over white when `alpha` (the original has
    /// transparency); otherwise its alpha is not read (ImageMagick's HEIF reader can report one
    /// that holds nothing).
    static func plane(_ wand: Wand, alpha: Bool) throws -> SSIM.Plane {
        if alpha { return SSIM.Plane(rgba: try wand.rgbaBytes(), width: wand.width, height: wand.height) }
        let rgb = try wand.rgbBytes()
        var rgba = [UInt8](repeating: 255, count: wand.width * wand.height * 4)
        for i in 0..<(wand.width * wand.height) { rgba[i * 4] = rgb[i * 3]; rgba[i * 4 + 1] = rgb[i * 3 + 1]; rgba[i * 4 + 2] = rgb[i * 3 + 2] }
        return SSIM.Plane(rgba: rgba, width: wand.width, height: wand.height)
    }
}
