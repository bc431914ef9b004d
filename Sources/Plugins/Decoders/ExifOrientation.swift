import Foundation
import MagickKit

/// The orientation tag (0x0112) of an EXIF block (a TIFF structure: byte order, IFD0 offset,
/// entries), read with every offset checked, for the decode paths that make pixels without
/// ImageMagick's coders. 1 (as stored) when the block has no valid tag.
enum ExifOrientation {
    static func read(_ exif: UnsafeRawBufferPointer) -> Int {
        let bytes = exif.bindMemory(to: UInt8.self)
        guard bytes.count >= 8 else { return 1 }
        let little: Bool
        switch (bytes[0], bytes[1]) {
        case (0x49, 0x49): little = true
        case (0x4D, 0x4D): little = false
        default: return 1
        }
        func u16(_ i: Int) -> Int? {
            guard i >= 0, i + 1 < bytes.count else { return nil }
            return little ? Int(bytes[i]) | Int(bytes[i + 1]) << 8 : Int(bytes[i]) << 8 | Int(bytes[i + 1])
        }
        func u32(_ i: Int) -> Int? {
            guard let a = u16(i), let b = u16(i + 2) else { return nil }
            return little ? a | b << 16 : a << 16 | b
        }
        guard u16(2) == 42, let ifd = u32(4), let count = u16(ifd) else { return 1 }
        for entry in 0..<min(count, 1000) {
            let at = ifd + 2 + entry * 12
            guard let tag = u16(at) else { return 1 }
            if tag == 0x0112 {
                guard u16(at + 2) == 3, let value = u16(at + 8), (1...8).contains(value) else { return 1 }
                return value
            }
        }
        return 1
    }
}

extension RGB8Pixels {
    /// These pixels turned upright from EXIF `orientation` (1...8), as ImageMagick's
    /// `AutoOrientImage` turns them: mirrored, rotated or transposed; `self` for 1 or a value out
    /// of range.
    func oriented(_ orientation: Int) -> RGB8Pixels {
        guard (2...8).contains(orientation) else { return self }
        let w = width, h = height, n = channels
        let swaps = orientation >= 5
        let outW = swaps ? h : w, outH = swaps ? w : h
        var out = [UInt8](repeating: 0, count: bytes.count)
        bytes.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                for oy in 0..<outH {
                    for ox in 0..<outW {
                        let (sx, sy): (Int, Int)
                        switch orientation {
                        case 2: (sx, sy) = (w - 1 - ox, oy)
                        case 3: (sx, sy) = (w - 1 - ox, h - 1 - oy)
                        case 4: (sx, sy) = (ox, h - 1 - oy)
                        case 5: (sx, sy) = (oy, ox)
                        case 6: (sx, sy) = (oy, h - 1 - ox)
                        case 7: (sx, sy) = (w - 1 - oy, h - 1 - ox)
                        default: (sx, sy) = (w - 1 - oy, ox)
                        }
                        let s = (sy * w + sx) * n, d = (oy * outW + ox) * n
                        for c in 0..<n { dst[d + c] = src[s + c] }
                    }
                }
            }
        }
        return RGB8Pixels(width: outW, height: outH, hasAlpha: hasAlpha, bytes: out)
    }
}
