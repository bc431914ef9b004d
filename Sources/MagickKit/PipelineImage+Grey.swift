import CMagickWand
import Foundation

extension PipelineImage {
    /// The first frame as 8-bit grey (luma), scaled to `width` x `height`: averaged when smaller,
    /// interpolated when larger. The whole image is never copied first: a wand's image is scaled
    /// into a new one (ImageMagick's `ScaleImage` or `ResizeImage` on the image as it is), and 8-
    /// or 16-bit pixels are averaged into grey rows directly. What a face detector scans.
    public func greyScaled(width: Int, height: Int) throws -> [UInt8] {
        precondition(width > 0 && height > 0)
        if let pixels = storage as? MagickPixels { return try pixels.wand.greyScaled(width: width, height: height) }
        if let pixels = storage as? RGB8Pixels {
            let n = pixels.channels
            let grey = GreyPlane(width: pixels.width, height: pixels.height) { i in
                let r = Int(pixels.bytes[i * n]), g = Int(pixels.bytes[i * n + 1]), b = Int(pixels.bytes[i * n + 2])
                return UInt8((r * 77 + g * 150 + b * 29 + 128) >> 8)
            }
            return grey.scaled(width: width, height: height)
        }
        if let pixels = storage as? RGB16Pixels {
            let n = pixels.hasAlpha ? 4 : 3
            let grey = GreyPlane(width: pixels.width, height: pixels.height) { i in
                let r = Int(pixels.samples[i * n]), g = Int(pixels.samples[i * n + 1]), b = Int(pixels.samples[i * n + 2])
                return UInt8(((r * 77 + g * 150 + b * 29) >> 8) / 257)
            }
            return grey.scaled(width: width, height: height)
        }
        throw PipelineError(.processFailed, "this image is held by \(type(of: storage)), not by ImageMagick")
    }
}

extension Wand {
    /// The current image as 8-bit grey, scaled to `width` x `height` into a new image (this one is
    /// only read).
    func greyScaled(width: Int, height: Int) throws -> [UInt8] {
        guard let image = GetImageFromMagickWand(pointer) else { throw PipelineError(.processFailed, "no image to scan") }
        let exception = AcquireExceptionInfo()
        defer { _ = DestroyExceptionInfo(exception) }
        let same = width == self.width && height == self.height
        let scaled = same ? CloneImage(image, 0, 0, MagickTrue, exception)
            : width < self.width ? ScaleImage(image, width, height, exception)
            : ResizeImage(image, width, height, TriangleFilter, 1.0, exception)
        guard let scaled, let copy = NewMagickWandFromImage(scaled) else {
            if let scaled { _ = DestroyImage(scaled) }
            throw PipelineError(.processFailed, "scaling a copy to scan failed")
        }
        _ = DestroyImage(scaled)
        let wand = Wand(taking: copy)
        return try wand.bytes(channels: "I")
    }
}

/// 8-bit grey pixels, for scaling without ImageMagick.
private struct GreyPlane {
    let width: Int, height: Int
    var values: [UInt8]

    init(width: Int, height: Int, value: (Int) -> UInt8) {
        self.width = width
        self.height = height
        values = (0..<(width * height)).map(value)
    }

    private init(width: Int, height: Int, values: [UInt8]) {
        self.width = width
        self.height = height
        self.values = values
    }

    /// Averaged by whole blocks while that keeps it at least the target's size, then bilinear.
    func scaled(width target: Int, height targetHeight: Int) -> [UInt8] {
        let block = max(1, min(width / target, height / targetHeight))
        let reduced = block > 1 ? averaged(block) : self
        return reduced.bilinear(width: target, height: targetHeight)
    }

    func averaged(_ block: Int) -> GreyPlane {
        let w = width / block, h = height / block
        var out = [UInt8](repeating: 0, count: w * h)
        let area = block * block
        for y in 0..<h {
            for x in 0..<w {
                var sum = 0
                for dy in 0..<block {
                    let row = (y * block + dy) * width + x * block
                    for dx in 0..<block { sum += Int(values[row + dx]) }
                }
                out[y * w + x] = UInt8(sum / area)
            }
        }
        return GreyPlane(width: w, height: h, values: out)
    }

    func bilinear(width target: Int, height targetHeight: Int) -> [UInt8] {
        if target == width && targetHeight == height { return values }
        var out = [UInt8](repeating: 0, count: target * targetHeight)
        let sx = Double(width) / Double(target), sy = Double(height) / Double(targetHeight)
        for y in 0..<targetHeight {
            let fy = max(0, (Double(y) + 0.5) * sy - 0.5)
            let y0 = min(height - 1, Int(fy)), y1 = min(height - 1, y0 + 1), wy = fy - Double(y0)
            for x in 0..<target {
                let fx = max(0, (Double(x) + 0.5) * sx - 0.5)
                let x0 = min(width - 1, Int(fx)), x1 = min(width - 1, x0 + 1), wx = fx - Double(x0)
                let top = Double(values[y0 * width + x0]) * (1 - wx) + Double(values[y0 * width + x1]) * wx
                let bottom = Double(values[y1 * width + x0]) * (1 - wx) + Double(values[y1 * width + x1]) * wx
                out[y * target + x] = UInt8((top * (1 - wy) + bottom * wy).rounded())
            }
        }
        return out
    }
}
