import Foundation

/// Structural similarity (Wang, Bovik, Sheikh and Simoncelli, 2004) between two grey pictures of
/// the same size, computed as scikit-image's `structural_similarity` does with
/// `gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=255`: local means,
/// variances and covariance under an 11x11 Gaussian window (σ 1.5, cut at 3.5σ), edges mirrored
/// as scipy's `reflect` mode does, and the mean of the SSIM map without the 5 pixels at each
/// border. 1 is identical; JPEG at quality 90 usually gives about 0.98 on photos.
///
/// A ``Reference`` holds what only depends on the original, so comparing several encodes of the
/// same picture filters each candidate three times, not five.
public enum SSIM {
    /// A grey picture, values 0...255, row by row.
    public struct Plane: Sendable {
        public let width: Int
        public let height: Int
        public var values: [Float]

        public init(width: Int, height: Int, values: [Float]) {
            precondition(values.count == width * height, "a plane holds width x height values")
            self.width = width
            self.height = height
            self.values = values
        }

        /// The luma (BT.601: 0.299 R + 0.587 G + 0.114 B) of opaque 8-bit RGB pixels.
        public init(rgb: [UInt8], width: Int, height: Int) {
            precondition(rgb.count == width * height * 3, "RGB holds 3 bytes per pixel")
            var values = [Float](repeating: 0, count: width * height)
            rgb.withUnsafeBufferPointer { p in
                for i in 0..<(width * height) {
                    values[i] = 0.299 * Float(p[i * 3]) + 0.587 * Float(p[i * 3 + 1]) + 0.114 * Float(p[i * 3 + 2])
                }
            }
            self.init(width: width, height: height, values: values)
        }

        /// The luma (BT.601: 0.299 R + 0.587 G + 0.114 B) of 8-bit RGBA pixels composited over
        /// white: what a viewer shows of a transparent picture on a white page.
        public init(rgba: [UInt8], width: Int, height: Int) {
            precondition(rgba.count == width * height * 4, "RGBA holds 4 bytes per pixel")
            var values = [Float](repeating: 0, count: width * height)
            rgba.withUnsafeBufferPointer { p in
                for i in 0..<(width * height) {
                    let a = Float(p[i * 4 + 3]) / 255, white = 255 * (1 - a)
                    let r = Float(p[i * 4]) * a + white, g = Float(p[i * 4 + 1]) * a + white, b = Float(p[i * 4 + 2]) * a + white
                    values[i] = 0.299 * r + 0.587 * g + 0.114 * b
                }
            }
            self.init(width: width, height: height, values: values)
        }
    }

    /// The original's plane with its local means and mean squares.
    public struct Reference: Sendable {
        public let plane: Plane
        let mean: [Float]
        let meanSquare: [Float]

        public init(_ plane: Plane) {
            self.plane = plane
            let filter = Filter(width: plane.width, height: plane.height)
            mean = filter.apply(plane.values)
            meanSquare = filter.apply(plane.values.map { $0 * $0 })
        }
    }

    /// The mean SSIM of `candidate` against `reference`; `nil` when their sizes differ.
    public static func score(_ reference: Reference, _ candidate: Plane) -> Double? {
        let width = reference.plane.width, height = reference.plane.height
        guard candidate.width == width, candidate.height == height, width > 0, height > 0 else { return nil }
        let filter = Filter(width: width, height: height)
        let x = reference.plane.values, y = candidate.values
        let meanY = filter.apply(y)
        let meanYY = filter.apply(y.map { $0 * $0 })
        let meanXY = filter.apply(zip(x, y).map { $0 * $1 })
        let c1: Float = (0.01 * 255) * (0.01 * 255), c2: Float = (0.03 * 255) * (0.03 * 255)
        // The border a window does not fit in is left out, as scikit-image crops it.
        let pad = width > 2 * Filter.radius && height > 2 * Filter.radius ? Filter.radius : 0
        var sum = 0.0
        for row in pad..<(height - pad) {
            var rowSum: Float = 0
            for column in pad..<(width - pad) {
                let i = row * width + column
                let ux = reference.mean[i], uy = meanY[i]
                let vx = reference.meanSquare[i] - ux * ux, vy = meanYY[i] - uy * uy, vxy = meanXY[i] - ux * uy
                rowSum += ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
            }
            sum += Double(rowSum)
        }
        return sum / Double((width - 2 * pad) * (height - 2 * pad))
    }

    /// The separable Gaussian filter with mirrored edges.
    struct Filter {
        static let radius = 5
        static let weights: [Float] = {
            let w = (-radius...radius).map { exp(-Double($0 * $0) / (2 * 1.5 * 1.5)) }
            let total = w.reduce(0, +)
            return w.map { Float($0 / total) }
        }()

        let width: Int, height: Int
        /// For each position of a row padded by the radius on both sides, the column it copies.
        let columns: [Int]
        /// For each row, the rows its window reads, edges mirrored.
        let rows: [Int]

        init(width: Int, height: Int) {
            self.width = width
            self.height = height
            columns = (-Self.radius..<(width + Self.radius)).map { Self.mirror($0, width) }
            rows = (0..<height).flatMap { y in (-Self.radius...Self.radius).map { Self.mirror(y + $0, height) } }
        }

        /// scipy's `reflect`: d c b a | a b c d | d c b a, repeated for a window wider than the picture.
        static func mirror(_ index: Int, _ count: Int) -> Int {
            var j = index
            while j < 0 || j >= count { j = j < 0 ? -j - 1 : 2 * count - j - 1 }
            return j
        }

        /// `input` filtered: across each row (copied with its mirrored edges), then down each
        /// column, eight outputs at a time, each summed over the window in registers.
        func apply(_ input: [Float]) -> [Float] {
            let taps = 2 * Self.radius + 1
            var across = [Float](repeating: 0, count: input.count)
            var out = [Float](repeating: 0, count: input.count)
            var padded = [Float](repeating: 0, count: columns.count + 8)
            let w = Self.weights
            input.withUnsafeBufferPointer { source in
                across.withUnsafeMutableBufferPointer { target in
                    padded.withUnsafeMutableBufferPointer { row in
                        for y in 0..<height {
                            let base = y * width
                            for k in 0..<columns.count { row[k] = source[base + columns[k]] }
                            let from = UnsafePointer(row.baseAddress!)
                            Self.sum(taps: taps, weights: w, count: width, into: target.baseAddress! + base) { k, x in from + x + k }
                        }
                    }
                }
            }
            across.withUnsafeBufferPointer { source in
                out.withUnsafeMutableBufferPointer { target in
                    let from = source.baseAddress!
                    for y in 0..<height {
                        let rowsRead = (0..<taps).map { rows[y * taps + $0] * width }
                        Self.sum(taps: taps, weights: w, count: width, into: target.baseAddress! + y * width) { k, x in from + rowsRead[k] + x }
                    }
                }
            }
            return out
        }

        /// `target[x] = Σ weights[k] * at(k, x)[0]` for `x` in `0..<count`, eight at a time.
        @inline(__always)
        static func sum(taps: Int, weights: [Float], count: Int, into target: UnsafeMutablePointer<Float>,
                        _ at: (Int, Int) -> UnsafePointer<Float>) {
            var x = 0
            while x + 8 <= count {
                var acc = SIMD8<Float>(repeating: 0)
                for k in 0..<taps { acc += weights[k] * UnsafeRawPointer(at(k, x)).loadUnaligned(as: SIMD8<Float>.self) }
                UnsafeMutableRawPointer(target + x).storeBytes(of: acc, as: SIMD8<Float>.self)
                x += 8
            }
            while x < count {
                var acc: Float = 0
                for k in 0..<taps { acc += weights[k] * at(k, x)[0] }
                target[x] = acc
                x += 1
            }
        }
    }
}
