import CMagickWand
import CResample
import Foundation
import MagickKit
import PipelineKit

/// Lanczos-3 resampling of an ImageMagick image or of 8-bit pixels in single precision, two
/// separable passes over rows as they arrive: the same weights as ImageMagick's `ResizeImage` (window,
/// support widened by the shrink factor, clipped at the edges and renormalised), 2.7 ms of CPU
/// less than it per 512x320 image fitted to 256 (bench/NOTEBOOK.md).
///
/// ImageMagick 6 resizes in double precision on 16-bit pixels, one channel at a time, and a
/// profile of the per-format benchmark had its resize at a fifth to a quarter of all CPU time
/// (WebP, GIF). Here a pixel is four floats (one SIMD register); each source row is converted
/// once and added into the output rows its vertical taps reach, and each output row is filtered
/// horizontally once it is complete, so memory stays a few rows whatever the image's size.
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
        /// `starts` and `counts` for C, and each weight four times (one per channel of a pixel).
        let starts32: [Int32], counts32: [Int32], weights4: [Float]

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
            starts32 = starts.map { Int32($0) }
            counts32 = counts.map { Int32($0) }
            weights4 = weights.flatMap { [$0, $0, $0, $0] }
        }

        /// The most outputs open at once when sources arrive in order: an output opens at its
        /// first tap and is finished, in order, once its last tap (and every earlier output's) is in.
        var rowsInFlight: Int {
            var most = 1, done = 0, opened = 0
            let ends = zip(starts, counts).map { $0 + $1 }
            for source in (starts.first ?? 0)..<(ends.max() ?? 0) {
                while opened < starts.count, starts[opened] <= source { opened += 1 }
                most = max(most, opened - done)
                while done < starts.count, ends[done] <= source + 1 { done += 1 }
            }
            return most
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

    /// Resamples 8-bit pixels to `width` x `height` with Lanczos-3: the same weights and passes as
    /// ``resize(_:width:height:)``, read from and written to 8-bit rows, with no wand on the way.
    static func resize(_ pixels: RGB8Pixels, width: Int, height: Int) -> RGB8Pixels {
        let out = resample(pixels.bytes, width: pixels.width, height: pixels.height, channels: pixels.channels, to: width, height)
        return RGB8Pixels(width: width, height: height, hasAlpha: pixels.hasAlpha, bytes: out)
    }

    /// Resamples 16-bit pixels to 8-bit ones at `width` x `height` with Lanczos-3: the same weights
    /// and passes, rounded to 8 bits once, at the end.
    static func resize(_ pixels: RGB16Pixels, width: Int, height: Int) -> RGB8Pixels {
        let out = resample(pixels.samples, width: pixels.width, height: pixels.height, channels: pixels.channels, to: width, height)
        return RGB8Pixels(rounding: out, width: width, height: height, hasAlpha: pixels.hasAlpha)
    }

    /// ``resample(width:height:to:_:channels:row:)`` of samples in memory (rows back to back).
    static func resample<Sample: FixedWidthInteger & UnsignedInteger>(
        _ samples: [Sample], width sourceWidth: Int, height sourceHeight: Int, channels: Int, to width: Int, _ height: Int) -> [Sample] {
        let rowLength = sourceWidth * channels
        return samples.withUnsafeBufferPointer { source in
            resample(width: sourceWidth, height: sourceHeight, to: width, height, channels: channels) { (y, row: inout [Sample]) in
                row.withUnsafeMutableBufferPointer { row in
                    row.baseAddress!.update(from: source.baseAddress! + y * rowLength, count: rowLength)
                }
            }
        }
    }

    /// The resampling itself, on 8- or 16-bit samples (`channels` 3 or 4, alpha last and not
    /// premultiplied): `row(y, buffer)` fills `buffer` with source row `y`, each row asked for
    /// once, in order. Returns the target's samples, rows back to back.
    ///
    /// The loops are written on plain floats through pointers, four per pixel, not on `SIMD4`:
    /// the optimiser turns both into the same vector code, but a debug build (the tests') runs
    /// generic SIMD operators as calls, 150 times slower, and plain float arithmetic inline.
    static func resample<Sample: FixedWidthInteger & UnsignedInteger>(
        width sourceWidth: Int, height sourceHeight: Int, to width: Int, _ height: Int, channels: Int,
        row: (Int, inout [Sample]) throws -> Void) rethrows -> [Sample] {
        let horizontal = Axis(source: sourceWidth, target: width)
        let vertical = Axis(source: sourceHeight, target: height)
        let alpha = channels == 4
        // Vertical pass first, as each source row arrives: the row is added, with its weight, into
        // every output row whose taps reach it (a contiguous multiply-add over the row, which the
        // compiler vectorises); an output row whose last tap has arrived is filtered horizontally
        // and stored. The per-pixel horizontal taps so run on output rows only, not on every
        // source row, and only the output rows in flight are kept (``Axis/rowsInFlight``).
        let open = vertical.rowsInFlight
        let rowLength = sourceWidth * 4
        let accumulators = UnsafeMutablePointer<Float>.allocate(capacity: open * rowLength)
        let converted = UnsafeMutablePointer<Float>.allocate(capacity: rowLength)
        let sum = UnsafeMutablePointer<Float>.allocate(capacity: width * 4)
        defer { accumulators.deallocate(); converted.deallocate(); sum.deallocate() }
        var sourceRow = [Sample](repeating: 0, count: sourceWidth * channels)
        var output = [Sample](repeating: 0, count: width * height * channels)
        let scale: Float = 1 / Float(Sample.max)

        try vertical.weights.withUnsafeBufferPointer { vWeights in
            try output.withUnsafeMutableBufferPointer { out in
                var done = 0  // output rows stored
                var first = 0  // the lowest output row whose taps may still reach the next source row
                let last = (0..<height).map { vertical.starts[$0] + vertical.counts[$0] }.max() ?? 0
                for r in vertical.starts[0]..<last {
                    try row(r, &sourceRow)
                    sourceRow.withUnsafeBufferPointer { samples in
                        convert(samples.baseAddress!, width: sourceWidth, alpha: alpha, scale: scale, into: converted)
                    }
                    while first < height, vertical.starts[first] + vertical.counts[first] <= r { first += 1 }
                    var y = first
                    while y < height, vertical.starts[y] <= r {
                        let k = r - vertical.starts[y]
                        if k < vertical.counts[y] {
                            accumulate(converted, weight: vWeights[y * vertical.maxCount + k], first: k == 0,
                                       into: accumulators + (y % open) * rowLength, count: rowLength)
                        }
                        y += 1
                    }
                    // Rows complete once their last tap is in, stored in order.
                    while done < height, vertical.starts[done] + vertical.counts[done] <= r + 1 {
                        filter(accumulators + (done % open) * rowLength, axis: horizontal, into: sum, width: width)
                        store(sum, width: width, alpha: alpha, into: out.baseAddress! + done * width * channels)
                        done += 1
                    }
                }
            }
        }
        return output
    }

    /// `into[i] = weight * row[i]` for the first tap of an output row, else `into[i] += weight * row[i]`.
    static func accumulate(_ row: UnsafePointer<Float>, weight: Float, first: Bool, into sum: UnsafeMutablePointer<Float>, count: Int) {
        pk_resample_accumulate(row, weight, first ? 1 : 0, sum, count)
    }

    /// One source row as four floats a pixel in 0...1, colour premultiplied by alpha (alpha 1
    /// for RGB).
    static func convert<Sample: FixedWidthInteger & UnsignedInteger>(_ samples: UnsafePointer<Sample>, width: Int, alpha: Bool, scale: Float,
                        into pixels: UnsafeMutablePointer<Float>) {
        if Sample.self == UInt8.self, !alpha {
            // The same floats in C, with an AVX2 version (the loop below spent most of its time
            // moving samples between lanes).
            pk_resample_convert_rgb8(UnsafeRawPointer(samples).assumingMemoryBound(to: UInt8.self), scale, pixels, width)
            return
        }
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

    /// The horizontal pass over one row: each output pixel the weighted sum of its taps, even and
    /// odd taps summed apart (one sum would wait on each addition's latency), in C
    /// (`pk_resample_filter`, AVX2 where the CPU has it, the same floats either way).
    static func filter(_ pixels: UnsafeMutablePointer<Float>, axis: Axis, into out: UnsafeMutablePointer<Float>, width: Int) {
        axis.starts32.withUnsafeBufferPointer { starts in
            axis.counts32.withUnsafeBufferPointer { counts in
                axis.weights4.withUnsafeBufferPointer { weights in
                    pk_resample_filter(pixels, starts.baseAddress, counts.baseAddress, weights.baseAddress, Int32(axis.maxCount), out,
                                       Int32(width))
                }
            }
        }
    }

    /// One output row as 8- or 16-bit samples: alpha divided out again, clamped to 0...1, rounded.
    static func store<Sample: FixedWidthInteger & UnsignedInteger>(_ sum: UnsafeMutablePointer<Float>, width: Int, alpha: Bool,
                                                                   into out: UnsafeMutablePointer<Sample>) {
        let top = Float(Sample.max)
        // Through Int32: the generic Sample(Float) is a library call per sample, not one instruction.
        @inline(__always) func sample(_ value: Float) -> Sample {
            Sample(truncatingIfNeeded: Int32(min(max(value, 0), 1) * top + 0.5))
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
