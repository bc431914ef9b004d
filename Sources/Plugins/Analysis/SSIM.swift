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
        /// For each column (row), the indices its window reads, edges mirrored.
        let columns: [Int], rows: [Int]

        init(width: Int, height: Int) {
            self.width = width
            self.height = height
            columns = Self.indices(width)
            rows = Self.indices(height)
        }

        /// scipy's `reflect`: d c b a | a b c d | d c b a, repeated for a window wider than the picture.
        static func indices(_ count: Int) -> [Int] {
            var out = [Int]()
            out.reserveCapacity(count * (2 * radius + 1))
            for i in 0..<count {
                for k in -radius...radius {
                    var j = i + k
                    while j < 0 || j >= count { j = j < 0 ? -j - 1 : 2 * count - j - 1 }
                    out.append(j)
                }
            }
            return out
        }

        func apply(_ input: [Float]) -> [Float] {
            let taps = 2 * Self.radius + 1
            var across = [Float](repeating: 0, count: input.count)
            var out = [Float](repeating: 0, count: input.count)
            Self.weights.withUnsafeBufferPointer { w in
                input.withUnsafeBufferPointer { source in
                    across.withUnsafeMutableBufferPointer { target in
                        columns.withUnsafeBufferPointer { index in
                            for row in 0..<height {
                                let base = row * width
                                for column in 0..<width {
                                    var acc: Float = 0
                                    let at = column * taps
                                    for k in 0..<taps { acc += w[k] * source[base + index[at + k]] }
                                    target[base + column] = acc
                                }
                            }
                        }
                    }
                }
                across.withUnsafeBufferPointer { source in
                    out.withUnsafeMutableBufferPointer { target in
                        rows.withUnsafeBufferPointer { index in
                            for row in 0..<height {
                                let base = row * width
                                for k in 0..<taps {
                                    let from = index[row * taps + k] * width, weight = w[k]
                                    for column in 0..<width { target[base + column] += weight * source[from + column] }
                                }
                            }
                        }
                    }
                }
            }
            return out
        }
    }
}
