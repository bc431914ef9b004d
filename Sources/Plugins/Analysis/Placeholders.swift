import Foundation

/// 8-bit RGBA pixels, row by row: what the image facts are computed from (a small image, already
/// reduced on load).
public struct RGBAPixels: Sendable, Equatable {
    public let width: Int
    public let height: Int
    /// `width * height * 4` bytes: red, green, blue, alpha (not premultiplied).
    public let bytes: [UInt8]

    public init(width: Int, height: Int, bytes: [UInt8]) {
        precondition(bytes.count == width * height * 4, "\(bytes.count) bytes for \(width)x\(height) RGBA")
        self.width = width
        self.height = height
        self.bytes = bytes
    }
}

/// BlurHash (woltapp/blurhash): a placeholder of a few DCT components in 20-30 characters.
///
/// Computed as the reference implementations do, in double precision, so that the same pixels
/// give the same string as the PyPI `blurhash` package (which a test checks). Alpha is ignored, as
/// there.
public enum BlurHash {
    static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz#$%*+,-.:;=?@[]^_{|}~")

    /// The hash of `pixels` with `x` by `y` components (each 1...9).
    public static func encode(_ pixels: RGBAPixels, x componentsX: Int = 4, y componentsY: Int = 3) -> String {
        precondition((1...9).contains(componentsX) && (1...9).contains(componentsY), "BlurHash components are 1 to 9")
        let width = pixels.width, height = pixels.height
        // Linear values once per pixel, then per component a sum of basis x value.
        var linear = [Double](repeating: 0, count: width * height * 3)
        for i in 0..<(width * height) {
            for c in 0..<3 { linear[i * 3 + c] = sRGBToLinear(pixels.bytes[i * 4 + c]) }
        }
        var components: [(Double, Double, Double)] = []
        var maxAC = 0.0
        for j in 0..<componentsY {
            for i in 0..<componentsX {
                let norm = i == 0 && j == 0 ? 1.0 : 2.0
                var r = 0.0, g = 0.0, b = 0.0
                for py in 0..<height {
                    for px in 0..<width {
                        let basis = norm * cos(Double.pi * Double(i) * Double(px) / Double(width))
                            * cos(Double.pi * Double(j) * Double(py) / Double(height))
                        let k = (py * width + px) * 3
                        r += basis * linear[k]; g += basis * linear[k + 1]; b += basis * linear[k + 2]
                    }
                }
                let area = Double(width) * Double(height)
                let component = (r / area, g / area, b / area)
                components.append(component)
                if i != 0 || j != 0 { maxAC = max(maxAC, abs(component.0), abs(component.1), abs(component.2)) }
            }
        }
        let dc = components[0]
        let dcValue = (linearToSRGB(dc.0) << 16) + (linearToSRGB(dc.1) << 8) + linearToSRGB(dc.2)
        let quantisedMax = Int(max(0, min(82, (maxAC * 166 - 0.5).rounded(.down))))
        let acNorm = Double(quantisedMax + 1) / 166
        func quantise(_ value: Double) -> Int {
            Int(max(0, min(18, (signPow(value / acNorm, 0.5) * 9 + 9.5).rounded(.down))))
        }
        var hash = base83(componentsX - 1 + (componentsY - 1) * 9, length: 1) + base83(quantisedMax, length: 1)
            + base83(dcValue, length: 4)
        for component in components.dropFirst() {
            hash += base83(quantise(component.0) * 19 * 19 + quantise(component.1) * 19 + quantise(component.2), length: 2)
        }
        return hash
    }

    static func base83(_ value: Int, length: Int) -> String {
        var digits: [Character] = []
        var divisor = 1
        for _ in 1..<max(1, length) { divisor *= 83 }
        for _ in 0..<length {
            digits.append(alphabet[(value / divisor) % 83])
            divisor = max(1, divisor / 83)
        }
        return String(digits)
    }

    static func sRGBToLinear(_ byte: UInt8) -> Double {
        let v = Double(byte) / 255
        return v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4)
    }

    static func linearToSRGB(_ value: Double) -> Int {
        let v = max(0, min(1, value))
        return v <= 0.0031308 ? Int(v * 12.92 * 255 + 0.5) : Int((1.055 * pow(v, 1 / 2.4) - 0.055) * 255 + 0.5)
    }

    static func signPow(_ value: Double, _ exponent: Double) -> Double {
        value < 0 ? -pow(-value, exponent) : pow(value, exponent)
    }
}

/// ThumbHash (evanw/thumbhash): a placeholder with alpha and aspect ratio in about 25 bytes.
///
/// The reference algorithm, in double precision, on an image of at most 100x100. Rounding is
/// half away from zero, as JavaScript's `Math.round` on these non-negative values.
public enum ThumbHash {
    /// The hash bytes of `pixels` (at most 100x100).
    public static func encode(_ pixels: RGBAPixels) -> [UInt8] {
        let w = pixels.width, h = pixels.height
        precondition(w <= 100 && h <= 100, "ThumbHash takes at most 100x100, got \(w)x\(h)")
        let channels = Channels(pixels)
        let lLimit = channels.hasAlpha ? 5.0 : 7.0
        let lx = max(1, Int(round(lLimit * Double(w) / Double(max(w, h)))))
        let ly = max(1, Int(round(lLimit * Double(h) / Double(max(w, h)))))
        let l = encodeChannel(channels.l, w, h, max(3, lx), max(3, ly))
        let p = encodeChannel(channels.p, w, h, 3, 3)
        let q = encodeChannel(channels.q, w, h, 3, 3)
        let a = channels.hasAlpha ? encodeChannel(channels.a, w, h, 5, 5) : Encoded(dc: 1.0, ac: [], scale: 1.0)
        let isLandscape = w > h
        let header24 = r(63 * l.dc) | (r(31.5 + 31.5 * p.dc) << 6) | (r(31.5 + 31.5 * q.dc) << 12)
            | (r(31 * l.scale) << 18) | ((channels.hasAlpha ? 1 : 0) << 23)
        let header16 = (isLandscape ? ly : lx) | (r(63 * p.scale) << 3) | (r(63 * q.scale) << 9) | ((isLandscape ? 1 : 0) << 15)
        var hash: [UInt8] = [UInt8(header24 & 255), UInt8((header24 >> 8) & 255), UInt8(header24 >> 16),
                             UInt8(header16 & 255), UInt8(header16 >> 8)]
        if channels.hasAlpha { hash.append(UInt8(r(15 * a.dc) | (r(15 * a.scale) << 4))) }
        var isOdd = false
        for ac in [l.ac, p.ac, q.ac] + (channels.hasAlpha ? [a.ac] : []) {
            for f in ac {
                let u = UInt8(r(15 * f))
                if isOdd { hash[hash.count - 1] |= u << 4 } else { hash.append(u) }
                isOdd.toggle()
            }
        }
        return hash
    }

    /// Halves to even, as the reference on PyPI rounds (Python's round); the JavaScript original
    /// rounds halves up. They differ only on exact halves, which small flat pictures reach.
    static func r(_ value: Double) -> Int { Int(value.rounded(.toNearestOrEven)) }

    /// The picture as ThumbHash's four channels (luminance, two colour differences, alpha), each
    /// pixel laid over the average colour by its alpha.
    struct Channels {
        var l: [Double] = [], p: [Double] = [], q: [Double] = [], a: [Double] = []
        let hasAlpha: Bool

        init(_ pixels: RGBAPixels) {
            let rgba = pixels.bytes, count = pixels.width * pixels.height
            var avgR = 0.0, avgG = 0.0, avgB = 0.0, avgA = 0.0
            for i in 0..<count {
                let alpha = Double(rgba[i * 4 + 3]) / 255
                avgR += alpha / 255 * Double(rgba[i * 4])
                avgG += alpha / 255 * Double(rgba[i * 4 + 1])
                avgB += alpha / 255 * Double(rgba[i * 4 + 2])
                avgA += alpha
            }
            if avgA > 0 { avgR /= avgA; avgG /= avgA; avgB /= avgA }
            hasAlpha = avgA < Double(count)
            for i in 0..<count {
                let alpha = Double(rgba[i * 4 + 3]) / 255
                let r = avgR * (1 - alpha) + alpha / 255 * Double(rgba[i * 4])
                let g = avgG * (1 - alpha) + alpha / 255 * Double(rgba[i * 4 + 1])
                let b = avgB * (1 - alpha) + alpha / 255 * Double(rgba[i * 4 + 2])
                l.append((r + g + b) / 3)
                p.append((r + g) / 2 - b)
                q.append(r - g)
                a.append(alpha)
            }
        }
    }

    /// One channel's DCT: its DC, its AC coefficients scaled to 0...1, and their scale.
    struct Encoded {
        var dc: Double
        var ac: [Double]
        var scale: Double
    }

    static func encodeChannel(_ channel: [Double], _ w: Int, _ h: Int, _ nx: Int, _ ny: Int) -> Encoded {
        var dc = 0.0, scale = 0.0
        var ac: [Double] = []
        var fx = [Double](repeating: 0, count: w)
        for cy in 0..<ny {
            var cx = 0
            while cx * ny < nx * (ny - cy) {
                var f = 0.0
                for x in 0..<w { fx[x] = cos(Double.pi / Double(w) * Double(cx) * (Double(x) + 0.5)) }
                for y in 0..<h {
                    let fy = cos(Double.pi / Double(h) * Double(cy) * (Double(y) + 0.5))
                    for x in 0..<w { f += channel[x + y * w] * fx[x] * fy }
                }
                f /= Double(w * h)
                if cx > 0 || cy > 0 {
                    ac.append(f)
                    scale = max(scale, abs(f))
                } else {
                    dc = f
                }
                cx += 1
            }
        }
        if scale > 0 { ac = ac.map { 0.5 + 0.5 / scale * $0 } }
        return Encoded(dc: dc, ac: ac, scale: scale)
    }
}

/// A perceptual hash for finding near-duplicates: dHash (the brightness gradient between
/// neighbours of a 9x8 grey thumbnail), 64 bits. Two pictures of the same scene differ in a few
/// bits (resized, recompressed, lightly edited); unrelated pictures in about half.
public enum DifferenceHash {
    /// The hash, as 16 hexadecimal digits.
    public static func encode(_ pixels: RGBAPixels) -> String {
        let grey = areaAverage(pixels, width: 9, height: 8)
        var bits: UInt64 = 0
        for y in 0..<8 {
            for x in 0..<8 {
                bits <<= 1
                if grey[y * 9 + x] < grey[y * 9 + x + 1] { bits |= 1 }
            }
        }
        return String(format: "%016llx", bits)
    }

    /// Bits that differ between two hashes (0 to 64).
    public static func distance(_ a: String, _ b: String) -> Int? {
        guard let x = UInt64(a, radix: 16), let y = UInt64(b, radix: 16) else { return nil }
        return (x ^ y).nonzeroBitCount
    }

    /// Luma (Rec. 601, alpha composited on white) averaged over `width` x `height` areas.
    static func areaAverage(_ pixels: RGBAPixels, width: Int, height: Int) -> [Double] {
        var sums = [Double](repeating: 0, count: width * height), counts = sums
        for y in 0..<pixels.height {
            let cy = min(height - 1, y * height / pixels.height)
            for x in 0..<pixels.width {
                let cx = min(width - 1, x * width / pixels.width), i = (y * pixels.width + x) * 4
                let a = Double(pixels.bytes[i + 3]) / 255
                let luma = 0.299 * Double(pixels.bytes[i]) + 0.587 * Double(pixels.bytes[i + 1]) + 0.114 * Double(pixels.bytes[i + 2])
                sums[cy * width + cx] += luma * a + 255 * (1 - a)
                counts[cy * width + cx] += 1
            }
        }
        return zip(sums, counts).map { $1 > 0 ? $0 / $1 : 0 }
    }
}

/// The dominant colour and a small palette, by median cut over the opaque pixels: the colour
/// space is split at the median of its widest channel until there are as many boxes as colours
/// asked for; each box's mean is a colour, weighted by the pixels it holds.
public enum Palette {
    /// A palette colour: `#rrggbb` and the share of the (opaque) pixels it stands for.
    public struct Swatch: Sendable, Equatable {
        public let hex: String
        public let share: Double
    }

    /// Up to `count` colours, the most common first (the first is the dominant colour); empty
    /// when every pixel is transparent.
    public static func swatches(_ pixels: RGBAPixels, count: Int = 5) -> [Swatch] {
        var colours: [(UInt8, UInt8, UInt8)] = []
        colours.reserveCapacity(pixels.width * pixels.height)
        for i in 0..<(pixels.width * pixels.height) where pixels.bytes[i * 4 + 3] >= 128 {
            colours.append((pixels.bytes[i * 4], pixels.bytes[i * 4 + 1], pixels.bytes[i * 4 + 2]))
        }
        guard !colours.isEmpty else { return [] }
        func channel(_ c: (UInt8, UInt8, UInt8), _ k: Int) -> UInt8 { k == 0 ? c.0 : k == 1 ? c.1 : c.2 }
        func widest(_ box: ArraySlice<(UInt8, UInt8, UInt8)>) -> (channel: Int, range: Int) {
            var low: (UInt8, UInt8, UInt8) = (255, 255, 255), high: (UInt8, UInt8, UInt8) = (0, 0, 0)
            for c in box {
                low = (min(low.0, c.0), min(low.1, c.1), min(low.2, c.2))
                high = (max(high.0, c.0), max(high.1, c.1), max(high.2, c.2))
            }
            let ranges = [Int(high.0) - Int(low.0), Int(high.1) - Int(low.1), Int(high.2) - Int(low.2)]
            let k = ranges.firstIndex(of: ranges.max()!)!
            return (k, ranges[k])
        }
        var boxes: [ArraySlice<(UInt8, UInt8, UInt8)>] = [colours[...]]
        var spans = [widest(colours[...])]
        while boxes.count < count {
            // Split the box with the widest channel range (ties: the fuller one).
            guard let index = boxes.indices.max(by: { (spans[$0].range, boxes[$0].count) < (spans[$1].range, boxes[$1].count) })
            else { break }
            let (k, range) = spans[index]
            guard range > 0 else { break }
            let sorted = boxes[index].sorted { channel($0, k) < channel($1, k) }
            // At the median, moved to where the value changes, so one colour never ends in two boxes.
            let median = channel(sorted[sorted.count / 2], k)
            var middle = sorted.firstIndex { channel($0, k) == median }!
            if middle == sorted.startIndex { middle = sorted.firstIndex { channel($0, k) > median }! }
            boxes[index] = sorted[..<middle]
            boxes.append(sorted[middle...])
            spans[index] = widest(boxes[index])
            spans.append(widest(boxes[boxes.count - 1]))
        }
        let total = Double(colours.count)
        return boxes.map { box -> (Swatch, Int) in
            var r = 0, g = 0, b = 0
            for c in box { r += Int(c.0); g += Int(c.1); b += Int(c.2) }
            let n = box.count
            let hex = String(format: "#%02x%02x%02x", (r + n / 2) / n, (g + n / 2) / n, (b + n / 2) / n)
            return (Swatch(hex: hex, share: (Double(n) / total * 1000).rounded() / 1000), n)
        }
        .sorted { $0.1 > $1.1 }
        .map(\.0)
    }
}
