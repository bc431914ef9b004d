import Foundation
import MagickKit
import PipelineKit

/// Chooses a crop window by where the detail is, like libvips' `attention` crop.
///
/// The image is sampled down to at most 256 pixels on its long side. Each sample's *interest* is
/// its edge energy (the magnitude of the Sobel gradient of luma) plus half its saturation (max
/// minus min of R, G, B), so textured and colourful regions count, flat sky and plain backgrounds
/// do not. A summed-area table gives the total interest of every window position in constant time;
/// the window with the most wins, and among near-equal windows (within 1%) the one nearest the
/// centre, so a uniform image crops like `centre`. Deterministic: the same image always gives the
/// same window.
public enum SmartCrop {
    /// The long side, in pixels, of the sample the interest map is computed on.
    static let sampleSide = 256

    /// The top-left corner of the `window`-sized region of `image` with the most detail.
    static func origin(of window: PixelSize, in image: Wand) throws -> (x: Int, y: Int) {
        let width = image.width, height = image.height
        guard window.width < width || window.height < height else { return (0, 0) }
        let scale = min(1, Double(sampleSide) / Double(max(width, height)))
        let sample = image.clone()
        let sw = max(3, Int((Double(width) * scale).rounded())), sh = max(3, Int((Double(height) * scale).rounded()))
        if sw != width || sh != height { try sample.scale(width: sw, height: sh) }
        let interest = try interestMap(sample.rgbBytes(), width: sw, height: sh)
        let ww = min(sw, max(1, Int((Double(window.width) * Double(sw) / Double(width)).rounded())))
        let wh = min(sh, max(1, Int((Double(window.height) * Double(sh) / Double(height)).rounded())))
        let (bx, by) = bestWindow(interest, width: sw, height: sh, window: (ww, wh))
        // Back to full-size coordinates, kept inside the image.
        let x = min(width - window.width, max(0, Int((Double(bx) / Double(sw) * Double(width)).rounded())))
        let y = min(height - window.height, max(0, Int((Double(by) / Double(sh) * Double(height)).rounded())))
        return (x, y)
    }

    /// Edge energy plus half the saturation, per pixel of an RGB sample.
    static func interestMap(_ rgb: [UInt8], width: Int, height: Int) -> [Double] {
        var luma = [Double](repeating: 0, count: width * height)
        var interest = [Double](repeating: 0, count: width * height)
        for i in 0..<(width * height) {
            let r = Double(rgb[3 * i]), g = Double(rgb[3 * i + 1]), b = Double(rgb[3 * i + 2])
            luma[i] = 0.299 * r + 0.587 * g + 0.114 * b
            interest[i] = 0.5 * (max(r, g, b) - min(r, g, b))
        }
        for y in 1..<(height - 1) {
            for x in 1..<(width - 1) {
                func l(_ dx: Int, _ dy: Int) -> Double { luma[(y + dy) * width + x + dx] }
                let gx = l(1, -1) + 2 * l(1, 0) + l(1, 1) - l(-1, -1) - 2 * l(-1, 0) - l(-1, 1)
                let gy = l(-1, 1) + 2 * l(0, 1) + l(1, 1) - l(-1, -1) - 2 * l(0, -1) - l(1, -1)
                interest[y * width + x] += (gx * gx + gy * gy).squareRoot()
            }
        }
        return interest
    }

    /// The window position with the largest total interest; near-ties go to the most central.
    static func bestWindow(_ interest: [Double], width: Int, height: Int, window: (Int, Int)) -> (Int, Int) {
        // Summed-area table with a zero row and column in front.
        var table = [Double](repeating: 0, count: (width + 1) * (height + 1))
        for y in 0..<height {
            var row = 0.0
            for x in 0..<width {
                row += interest[y * width + x]
                table[(y + 1) * (width + 1) + x + 1] = table[y * (width + 1) + x + 1] + row
            }
        }
        func sum(_ x: Int, _ y: Int) -> Double {
            let x1 = x + window.0, y1 = y + window.1, stride = width + 1
            return table[y1 * stride + x1] - table[y * stride + x1] - table[y1 * stride + x] + table[y * stride + x]
        }
        let maxX = width - window.0, maxY = height - window.1
        var best = -1.0
        for y in 0...maxY { for x in 0...maxX { best = max(best, sum(x, y)) } }
        let centre = (Double(maxX) / 2, Double(maxY) / 2)
        var chosen = (maxX / 2, maxY / 2), distance = Double.infinity
        for y in 0...maxY {
            for x in 0...maxX where sum(x, y) >= best * 0.99 {
                let d = (Double(x) - centre.0) * (Double(x) - centre.0) + (Double(y) - centre.1) * (Double(y) - centre.1)
                if d < distance { distance = d; chosen = (x, y) }
            }
        }
        return chosen
    }
}
