import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// Lanczos-3 resampling of an ImageMagick image in single precision, two separable passes
/// streamed through a ring of rows: the same weights as ImageMagick's `ResizeImage` (window,
/// support widened by the shrink factor, clipped at the edges and renormalised), 2.7 ms of CPU
/// less than it per 512x320 image fitted to 256 (docs/PERFORMANCE.md).
///
/// ImageMagick 6 resizes in double precision on 16-bit pixels, one channel at a time, and a
/// profile of the per-format benchmark had its resize at a fifth to a quarter of all CPU time
/// (WebP, GIF). Here a pixel is four floats (one SIMD register), each source row is converted and
/// filtered horizontally once, and only as many filtered rows are kept as the vertical kernel
/// spans, so memory stays a few rows whatever the image's size.
///
/// Alpha is premultiplied while averaging (as ImageMagick weighs colour by alpha), so a
/// transparent pixel's colour never bleeds into its neighbours. Images this does not take
/// (CMYK and other colour spaces, more than one frame) go to ImageMagick's resize.
enum Resampler {
    /// One axis's weights: for each output index, the first source index and its taps.
    struct Axis: Equatable {
        let starts: [Int]
        let counts: [Int]
        /// Every output's weights, `maxCount` apart.
        let weights: [Float]
        let maxCount: Int

        /// Weights as ImageMagick's resize computes them for a windowed filter of `support`
        /// (3 for Lanczos): centre `(x + 0.5) / factor`, support times the shrink factor when
        /// shrinking, taps clipped to the image and normalised to sum to 1.
        init(source: Int, target: Int, support filterSupport: Double = 3, kernel: (Double) -> Double = Resampler.lanczos3) {
            let factor = Double(target) / Double(source)
            var scale = max(1 / factor, 1)
            var support = scale * filterSupport
            if support < 0.5 { support = 0.5; scale = 1 }
            let inverse = 1 / scale
            var starts = [Int](), counts = [Int]()
            starts.reserveCapacity(target); counts.reserveCapacity(target)
            let maxCount = min(source, Int((2 * support).rounded(.up)) + 2)
            var weights = [Float](repeating: 0, count: target * maxCount)
            for x in 0..<target {
                let bisect = (Double(x) + 0.5) / factor + 1e-12
                let start = min(source - 1, Int(max(bisect - support + 0.5, 0)))
                let stop = max(start + 1, min(Int(bisect + support + 0.5), source))
                let count = min(stop - start, maxCount)
                var taps = (0..<count).map { kernel(inverse * (Double(start + $0) - bisect + 0.5)) }
                let density = taps.reduce(0, +)
                if density != 0, density != 1 { taps = taps.map { $0 / density } }
                if density == 0 { taps = (0..<count).map { _ in 1 / Double(count) } }
                for (n, tap) in taps.enumerated() { weights[x * maxCount + n] = Float(tap) }
                starts.append(start)
                counts.append(count)
            }
            self.starts = starts
            self.counts = counts
            self.weights = weights
            self.maxCount = maxCount
        }
    }

    /// sinc(x) sinc(x/3) on |x| < 3: the Lanczos filter ImageMagick's `LanczosFilter` names.
    static func lanczos3(_ x: Double) -> Double {
        let x = abs(x)
        guard x < 3 else { return 0 }
        guard x > 1e-9 else { return 1 }
        let a = Double.pi * x, b = a / 3
        return (sin(a) / a) * (sin(b) / b)
    }

    /// Whether `wand` (one frame) can be resampled here: sRGB, linear RGB or grey pixels.
    static func accepts(_ wand: Wand) -> Bool {
        guard wand.frameCount == 1, wand.width > 0, wand.height > 0 else { return false }
        let space = wand.colorspace
        return space == sRGBColorspace || space == RGBColorspace || space == GRAYColorspace
    }

    /// Resamples `wand`'s image to `width` x `height` with Lanczos-3, in place (the image keeps
    /// its profiles, properties and orientation). Returns `false`, changing nothing, for an image
    /// this does not take (``accepts(_:)``); the caller then uses ImageMagick's resize.
    @discardableResult
    static func resize(_ wand: Wand, width: Int, height: Int) throws -> Bool {
        guard width > 0, height > 0, accepts(wand) else { return false }
        let alpha = wand.hasAlpha
        let map = alpha ? "RGBA" : "RGB"
        let channels = alpha ? 4 : 3
        let sourceWidth = wand.width, sourceHeight = wand.height
        let pixels = try resample(width: sourceWidth, height: sourceHeight, to: width, height, channels: channels) { y, row in
            try wand.exportRow(y, channels: map, into: &row)
        }
        try wand.replacePixels(width: width, height: height, channels: map, pixels: pixels)
        return true
    }

    /// The resampling itself, on 16-bit samples (`channels` 3 or 4, alpha last and not
    /// premultiplied): `row(y, buffer)` fills `buffer` with source row `y`, each row asked for
    /// once, in order. Returns the target's samples, rows back to back.
    ///
    /// The loops are written on plain floats through pointers, four per pixel, not on `SIMD4`:
    /// the optimiser turns both into the same vector code, but a debug build (the tests') runs
    /// generic SIMD operators as calls, 150 times slower, and plain float arithmetic inline.
    static func resample(width sourceWidth: Int, height sourceHeight: Int, to width: Int, _ height: Int, channels: Int,
                         row: (Int, inout [UInt16]) throws -> Void) rethrows -> [UInt16] {
        let horizontal = Axis(source: sourceWidth, target: width)
        let vertical = Axis(source: sourceHeight, target: height)
        let alpha = channels == 4
        let ringRows = vertical.maxCount
        let ring = UnsafeMutablePointer<Float>.allocate(capacity: ringRows * width * 4)
        let converted = UnsafeMutablePointer<Float>.allocate(capacity: sourceWidth * 4)
        let sum = UnsafeMutablePointer<Float>.allocate(capacity: width * 4)
        let rows = UnsafeMutablePointer<UnsafeMutablePointer<Float>>.allocate(capacity: ringRows)
        defer { ring.deallocate(); converted.deallocate(); sum.deallocate(); rows.deallocate() }
        var sourceRow = [UInt16](repeating: 0, count: sourceWidth * channels)
        var output = [UInt16](repeating: 0, count: width * height * channels)
        var next = 0
        let scale: Float = 1 / 65535

        try horizontal.weights.withUnsafeBufferPointer { hWeights in
            try vertical.weights.withUnsafeBufferPointer { vWeights in
                for y in 0..<height {
                    let start = vertical.starts[y], count = vertical.counts[y]
                    if next < start { next = start }
                    while next < start + count {
                        try row(next, &sourceRow)
                        sourceRow.withUnsafeBufferPointer { samples in
                            convert(samples.baseAddress!, width: sourceWidth, alpha: alpha, scale: scale, into: converted)
                        }
                        filter(converted, axis: horizontal, weights: hWeights.baseAddress!, into: ring + (next % ringRows) * width * 4,
                               width: width)
                        next += 1
                    }
                    for k in 0..<count { rows[k] = ring + ((start + k) % ringRows) * width * 4 }
                    combine(rows, weights: vWeights.baseAddress! + y * vertical.maxCount, count: count, width: width, into: sum)
                    output.withUnsafeMutableBufferPointer { out in
                        store(sum, width: width, alpha: alpha, into: out.baseAddress! + y * width * channels)
                    }
                }
            }
        }
        return output
    }

    /// One source row as four floats a pixel in 0...1, colour premultiplied by alpha (alpha 1
    /// for RGB).
    static func convert(_ samples: UnsafePointer<UInt16>, width: Int, alpha: Bool, scale: Float,
                        into pixels: UnsafeMutablePointer<Float>) {
        var x = 0
        if alpha {
            while x < width {
                let s = samples + x * 4, p = pixels + x * 4
                let a = Float(s[3]) * scale
                let f = a * scale
                p[0] = Float(s[0]) * f; p[1] = Float(s[1]) * f; p[2] = Float(s[2]) * f; p[3] = a
                x += 1
            }
        } else {
            while x < width {
                let s = samples + x * 3, p = pixels + x * 4
                p[0] = Float(s[0]) * scale; p[1] = Float(s[1]) * scale; p[2] = Float(s[2]) * scale; p[3] = 1
                x += 1
            }
        }
    }

    /// The horizontal pass over one row: each output pixel the weighted sum of its taps, with two
    /// sets of running sums (one would wait on each addition's latency).
    static func filter(_ pixels: UnsafeMutablePointer<Float>, axis: Axis, weights: UnsafePointer<Float>,
                       into out: UnsafeMutablePointer<Float>, width: Int) {
        axis.starts.withUnsafeBufferPointer { starts in
            axis.counts.withUnsafeBufferPointer { counts in
                var x = 0
                while x < width {
                    let taps = counts[x]
                    let w = weights + x * axis.maxCount
                    var q = UnsafePointer(pixels + starts[x] * 4)
                    var r0: Float = 0, g0: Float = 0, b0: Float = 0, a0: Float = 0
                    var r1: Float = 0, g1: Float = 0, b1: Float = 0, a1: Float = 0
                    var k = 0
                    while k + 2 <= taps {
                        let w0 = w[k], w1 = w[k + 1]
                        r0 += w0 * q[0]; g0 += w0 * q[1]; b0 += w0 * q[2]; a0 += w0 * q[3]
                        r1 += w1 * q[4]; g1 += w1 * q[5]; b1 += w1 * q[6]; a1 += w1 * q[7]
                        q += 8
                        k += 2
                    }
                    if k < taps {
                        let w0 = w[k]
                        r0 += w0 * q[0]; g0 += w0 * q[1]; b0 += w0 * q[2]; a0 += w0 * q[3]
                    }
                    let o = out + x * 4
                    o[0] = r0 + r1; o[1] = g0 + g1; o[2] = b0 + b1; o[3] = a0 + a1
                    x += 1
                }
            }
        }
    }

    /// The vertical pass for one output row: the weighted sum of `count` filtered rows.
    static func combine(_ rows: UnsafeMutablePointer<UnsafeMutablePointer<Float>>, weights: UnsafePointer<Float>, count: Int,
                        width: Int, into sum: UnsafeMutablePointer<Float>) {
        var x = 0
        let n = width * 4
        while x < n {
            var s0: Float = 0, s1: Float = 0, s2: Float = 0, s3: Float = 0
            var t0: Float = 0, t1: Float = 0, t2: Float = 0, t3: Float = 0
            var k = 0
            while k + 2 <= count {
                let w0 = weights[k], w1 = weights[k + 1]
                let p = rows[k] + x, q = rows[k + 1] + x
                s0 += w0 * p[0]; s1 += w0 * p[1]; s2 += w0 * p[2]; s3 += w0 * p[3]
                t0 += w1 * q[0]; t1 += w1 * q[1]; t2 += w1 * q[2]; t3 += w1 * q[3]
                k += 2
            }
            if k < count {
                let w0 = weights[k], p = rows[k] + x
                s0 += w0 * p[0]; s1 += w0 * p[1]; s2 += w0 * p[2]; s3 += w0 * p[3]
            }
            sum[x] = s0 + t0; sum[x + 1] = s1 + t1; sum[x + 2] = s2 + t2; sum[x + 3] = s3 + t3
            x += 4
        }
    }

    /// One output row as 16-bit samples: alpha divided out again, clamped to 0...1, rounded.
    static func store(_ sum: UnsafeMutablePointer<Float>, width: Int, alpha: Bool, into out: UnsafeMutablePointer<UInt16>) {
        @inline(__always) func sample(_ value: Float) -> UInt16 {
            UInt16(min(max(value, 0), 1) * 65535 + 0.5)
        }
        var x = 0
        if alpha {
            while x < width {
                let p = sum + x * 4, o = out + x * 4
                let a = min(max(p[3], 0), 1)
                let inverse: Float = a > 0 ? 1 / a : 0
                o[0] = sample(p[0] * inverse); o[1] = sample(p[1] * inverse); o[2] = sample(p[2] * inverse); o[3] = sample(a)
                x += 1
            }
        } else {
            while x < width {
                let p = sum + x * 4, o = out + x * 3
                o[0] = sample(p[0]); o[1] = sample(p[1]); o[2] = sample(p[2])
                x += 1
            }
        }
    }
}
