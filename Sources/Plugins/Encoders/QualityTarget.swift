import CJPEG
import CWebP
import Foundation
import MagickKit
import PipelineKit

/// `quality: { target_ssim: 0.98, min: 40, max: 95 }`: the lowest quality whose output is at least
/// `ssim` similar to the processed image (``SSIM``, on luma), searched between `min` and `max`.
struct QualityTarget: Sendable, Equatable {
    let ssim: Double
    let min: Int
    let max: Int

    /// The search's bounds when the map does not give them.
    static let defaultMin = 40, defaultMax = 95

    /// The fields of the map form of `quality`.
    static let fields: [OptionSpec] = [
        OptionSpec(name: "target_ssim", kind: .number, required: true, range: 0.5...0.9999,
                   doc: "The SSIM (on luma, against the processed image) the output must reach: 0.98 is close to invisible on photos."),
        .int("min", default: defaultMin, range: 1...100, doc: "The lowest quality tried: a floor, since SSIM on luma misses some artefacts of very low qualities (banding, colour)."),
        .int("max", default: defaultMax, range: 1...100, doc: "The highest quality tried; used when even it misses the target."),
    ]

    /// The `quality` option of a lossy encoder: a number, or a target as a map of ``fields``.
    static func option(default quality: Int, doc: String) -> OptionSpec {
        OptionSpec(name: "quality", kind: .either(.int, .record(fields)), defaultValue: .int(quality), range: 1...100,
                   doc: doc + " Or a visual target, { target_ssim: 0.98, min: 40, max: 95 }: the lowest quality from min (default \(defaultMin)) "
                    + "to max (default \(defaultMax)) whose output's SSIM reaches target_ssim; max when none does.")
            .example("{ target_ssim: 0.98, min: 40, max: 95 }")
    }

    /// The target `options` sets, or `nil` for a fixed quality; throws when `min` exceeds `max`.
    static func from(_ options: PluginOptions) throws -> QualityTarget? {
        guard let map = options.map("quality") else { return nil }
        let fields = PluginOptions(map)
        let target = QualityTarget(ssim: fields.number("target_ssim") ?? 0.98, min: fields.int("min") ?? defaultMin,
                                   max: fields.int("max") ?? defaultMax)
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

    /// The lowest quality in `min...max` whose output reaches the target, each candidate written
    /// by `write` and read back by ImageMagick as `format`; measured on the first frame of an
    /// animation.
    ///
    /// `max` is tried first (when even it misses the target there is nothing to search), then `min`
    /// (smooth pictures often meet it), then the bracket between the highest quality that missed
    /// and the lowest that met is narrowed to one step. Each step guesses where the target lies,
    /// taking 1 − SSIM to fall about exponentially with quality, and a step that does not halve
    /// the bracket is followed by a plain bisection, so the search never takes more steps than
    /// twice a bisection's (16 encodes from 30 to 95) and usually fewer than one.
    func search(_ wand: Wand, format: String, write: (Int) throws -> Data) throws -> Found {
        let alpha = wand.hasAlpha
        let reference = SSIM.Reference(try Self.plane(wand, alpha: alpha))
        var tried: [Int: Found] = [:]
        func attempt(_ quality: Int) throws -> Found {
            if let found = tried[quality] { return found }
            let data = try write(quality)
            let score = SSIM.score(reference, try Self.decodedPlane(data, format: format, alpha: alpha)) ?? 0
            let found = Found(data: data, quality: quality, score: score, encodes: tried.count + 1, met: score >= ssim)
            tried[quality] = found
            return found
        }
        func finished(_ found: Found) -> Found {
            var found = found
            found.encodes = tried.count
            return found
        }
        let top = try attempt(max)
        guard top.met, min < max else { return finished(top) }
        let bottom = try attempt(min)
        if bottom.met { return finished(bottom) }
        var low = min, high = max  // low misses the target, high meets it
        var bisect = false
        while high - low > 1 {
            var next = (low + high) / 2
            if !bisect, let lowScore = tried[low]?.score, let highScore = tried[high]?.score, highScore > lowScore {
                func log1m(_ value: Double) -> Double { Foundation.log(Swift.max(1e-6, 1 - value)) }
                let fraction = (log1m(lowScore) - log1m(ssim)) / (log1m(lowScore) - log1m(highScore))
                if fraction.isFinite { next = low + Int((fraction * Double(high - low)).rounded(.up)) }
            }
            next = Swift.min(high - 1, Swift.max(low + 1, next))
            let width = high - low
            if try attempt(next).met { high = next } else { low = next }
            bisect = !bisect && (high - low) * 2 > width
        }
        return finished(tried[high]!)
    }

    /// The luma of an encoded candidate, decoded as browsers decode it where we hold the codec:
    /// libjpeg-turbo for 3-component JPEG, libwebp for still WebP; ImageMagick for the rest (its
    /// HEIF reader hands back YCbCr, converted first).
    static func decodedPlane(_ data: Data, format: String, alpha: Bool) throws -> SSIM.Plane {
        if format == "JPEG", let plane = jpegPlane(data) { return plane }
        if format == "WEBP", let plane = webPPlane(data, alpha: alpha) { return plane }
        let decoded = Wand()
        try decoded.read(data, format: format, maxFrames: 1)
        try decoded.toSRGB()
        return try plane(decoded, alpha: alpha)
    }

    /// A JPEG's luma through libjpeg-turbo (RGB out, accurate DCT), or `nil` to leave it to
    /// ImageMagick (not three components, or damaged).
    static func jpegPlane(_ data: Data) -> SSIM.Plane? {
        data.withUnsafeBytes { raw -> SSIM.Plane? in
            var ok: Int32 = 0
            guard let reader = pk_jpeg_open(raw.baseAddress, raw.count, FailOn.warning.failLevel, &ok) else { return nil }
            defer { pk_jpeg_close(reader) }
            var width: Int32 = 0, height: Int32 = 0, components: Int32 = 0, space: Int32 = 0, progressive: Int32 = 0
            pk_jpeg_header(reader, &width, &height, &components, &space, &progressive)
            guard ok != 0, components == 3, pk_jpeg_start(reader, 1, &width, &height) != 0 else { return nil }
            let rowBytes = Int(width) * 3
            var rgb = [UInt8](repeating: 0, count: rowBytes * Int(height))
            let read = rgb.withUnsafeMutableBufferPointer { pk_jpeg_read_rows(reader, $0.baseAddress, rowBytes, height) }
            guard read == height, pk_jpeg_finish(reader) != 0 else { return nil }
            return SSIM.Plane(rgb: rgb, width: Int(width), height: Int(height))
        }
    }

    /// A still WebP's luma through libwebp, or `nil` to leave it to ImageMagick (an animation).
    static func webPPlane(_ data: Data, alpha: Bool) -> SSIM.Plane? {
        var width: Int32 = 0, height: Int32 = 0
        let pixels = data.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self).baseAddress
            return alpha ? WebPDecodeRGBA(bytes, raw.count, &width, &height) : WebPDecodeRGB(bytes, raw.count, &width, &height)
        }
        guard let pixels else { return nil }
        defer { WebPFree(pixels) }
        let count = Int(width) * Int(height) * (alpha ? 4 : 3)
        let bytes = Array(UnsafeBufferPointer(start: pixels, count: count))
        return alpha ? SSIM.Plane(rgba: bytes, width: Int(width), height: Int(height))
            : SSIM.Plane(rgb: bytes, width: Int(width), height: Int(height))
    }

    /// The luma of `wand`'s pixels, composited over white when `alpha` (the original has
    /// transparency); otherwise its alpha is not read (ImageMagick's HEIF reader can report one
    /// that holds nothing).
    static func plane(_ wand: Wand, alpha: Bool) throws -> SSIM.Plane {
        alpha ? SSIM.Plane(rgba: try wand.rgbaBytes(), width: wand.width, height: wand.height)
            : SSIM.Plane(rgb: try wand.rgbBytes(), width: wand.width, height: wand.height)
    }
}
