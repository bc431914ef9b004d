import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// Lanczos-3 resampling of an ImageMagick image in single precision, two separable passes
/// streamed through a ring of rows: the same weights as ImageMagick's `ResizeImage` (window,
/// support widened by the shrink factor, clipped at the edges and renormalised), about a third of
/// its time.
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
    static func resample(width sourceWidth: Int, height sourceHeight: Int, to width: Int, _ height: Int, channels: Int,
                         row: (Int, inout [UInt16]) throws -> Void) rethrows -> [UInt16] {
        let horizontal = Axis(source: sourceWidth, target: width)
        let vertical = Axis(source: sourceHeight, target: height)
        let alpha = channels == 4
        let ringRows = vertical.maxCount
        var ring = [SIMD4<Float>](repeating: .zero, count: ringRows * width)
        var sourceRow = [UInt16](repeating: 0, count: sourceWidth * channels)
        var converted = [SIMD4<Float>](repeating: .zero, count: sourceWidth)
        var output = [UInt16](repeating: 0, count: width * height * channels)
        var accumulator = [SIMD4<Float>](repeating: .zero, count: width)
        var rows = [Int](repeating: 0, count: ringRows)
        var next = 0
        let scale: Float = 1 / 65535

        for y in 0..<height {
            let start = vertical.starts[y], count = vertical.counts[y]
            if next < start { next = start }
            while next < start + count {
                try row(next, &sourceRow)
                sourceRow.withUnsafeBufferPointer { samples in
                    converted.withUnsafeMutableBufferPointer { pixels in
                        if alpha {
                            for x in 0..<sourceWidth {
                                let i = x * 4
                                let a = Float(samples[i + 3]) * scale
                                pixels[x] = SIMD4(Float(samples[i]) * scale * a, Float(samples[i + 1]) * scale * a,
                                                  Float(samples[i + 2]) * scale * a, a)
                            }
                        } else {
                            for x in 0..<sourceWidth {
                                let i = x * 3
                                pixels[x] = SIMD4(Float(samples[i]), Float(samples[i + 1]), Float(samples[i + 2]), 65535) * scale
                            }
                        }
                    }
                }
                let slot = (next % ringRows) * width
                converted.withUnsafeBufferPointer { pixels in
                    ring.withUnsafeMutableBufferPointer { ring in
                        horizontal.weights.withUnsafeBufferPointer { weights in
                            for x in 0..<width {
                                let first = horizontal.starts[x], taps = horizontal.counts[x]
                                let w = x * horizontal.maxCount
                                // Four running sums: one would wait on each addition's latency.
                                var s0 = SIMD4<Float>.zero, s1 = s0, s2 = s0, s3 = s0
                                var k = 0
                                while k + 4 <= taps {
                                    s0 += weights[w + k] * pixels[first + k]
                                    s1 += weights[w + k + 1] * pixels[first + k + 1]
                                    s2 += weights[w + k + 2] * pixels[first + k + 2]
                                    s3 += weights[w + k + 3] * pixels[first + k + 3]
                                    k += 4
                                }
                                while k < taps {
                                    s0 += weights[w + k] * pixels[first + k]
                                    k += 1
                                }
                                ring[slot + x] = (s0 + s1) + (s2 + s3)
                            }
                        }
                    }
                }
                next += 1
            }

            for k in 0..<count { rows[k] = ((start + k) % ringRows) * width }
            accumulator.withUnsafeMutableBufferPointer { sum in
                ring.withUnsafeBufferPointer { ring in
                    rows.withUnsafeBufferPointer { rows in
                        vertical.weights.withUnsafeBufferPointer { weights in
                            let w = y * vertical.maxCount
                            for x in 0..<width {
                                var s0 = SIMD4<Float>.zero, s1 = s0, s2 = s0, s3 = s0
                                var k = 0
                                while k + 4 <= count {
                                    s0 += weights[w + k] * ring[rows[k] + x]
                                    s1 += weights[w + k + 1] * ring[rows[k + 1] + x]
                                    s2 += weights[w + k + 2] * ring[rows[k + 2] + x]
                                    s3 += weights[w + k + 3] * ring[rows[k + 3] + x]
                                    k += 4
                                }
                                while k < count {
                                    s0 += weights[w + k] * ring[rows[k] + x]
                                    k += 1
                                }
                                sum[x] = (s0 + s1) + (s2 + s3)
                            }
                        }
                    }
                }
                output.withUnsafeMutableBufferPointer { out in
                    let base = y * width * channels
                    for x in 0..<width {
                        var v = sum[x]
                        if alpha {
                            let a = min(max(v.w, 0), 1)
                            v = a > 0 ? v / a : .zero
                            v.w = a
                        }
                        v = v.clamped(lowerBound: .zero, upperBound: SIMD4(repeating: 1)) * 65535 + 0.5
                        let i = base + x * channels
                        out[i] = UInt16(v.x); out[i + 1] = UInt16(v.y); out[i + 2] = UInt16(v.z)
                        if alpha { out[i + 3] = UInt16(v.w) }
                    }
                }
            }
        }
        return output
    }
}
