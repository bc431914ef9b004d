import Foundation
import PipelineKit

/// Reads width and height straight from a file's header bytes, before ImageMagick sees the data,
/// so a file that claims 100000x100000 is refused without allocating anything. Returns `nil` for
/// formats it does not parse (the decoder then pings with ImageMagick).
enum HeaderProbe {
    /// Width and height from a TIFF's first directory, classic or BigTIFF (version 43), in either
    /// byte order; the directory may be anywhere in the file, every offset is checked.
    static func tiffDimensions(_ data: Data) -> PixelSize? {
        data.withUnsafeBytes { raw -> PixelSize? in
            let b = raw.bindMemory(to: UInt8.self)
            guard b.count >= 16 else { return nil }
            let little: Bool
            switch (b[0], b[1]) {
            case (0x49, 0x49): little = true
            case (0x4D, 0x4D): little = false
            default: return nil
            }
            func read(_ at: Int, _ size: Int) -> Int? {
                guard at >= 0, size <= 8, at <= b.count - size else { return nil }
                var value: UInt64 = 0
                for k in 0..<size {
                    let byte = UInt64(b[at + (little ? size - 1 - k : k)])
                    value = value << 8 | byte
                }
                return value > UInt64(Int.max) ? nil : Int(value)
            }
            guard let version = read(2, 2) else { return nil }
            let big = version == 43
            guard version == 42 || big, let ifd = big ? read(8, 8) : read(4, 4),
                  let count = big ? read(ifd, 8) : read(ifd, 2) else { return nil }
            var width: Int?, height: Int?
            let first = ifd + (big ? 8 : 2), entrySize = big ? 20 : 12
            for entry in 0..<min(count, 4096) {
                let at = first + entry * entrySize
                guard let tag = read(at, 2), let type = read(at + 2, 2) else { return nil }
                guard tag == 256 || tag == 257 else { continue }
                let valueAt = at + (big ? 12 : 8)
                let value: Int? = switch type {
                case 3: read(valueAt, 2)  // SHORT
                case 4: read(valueAt, 4)  // LONG
                case 16 where big: read(valueAt, 8)  // LONG8
                default: nil
                }
                if tag == 256 { width = value } else { height = value }
            }
            guard let width, let height else { return nil }
            return PixelSize(width: width, height: height)
        }
    }

    /// A JPEG's frame header (the first start-of-frame marker within the first 256 KB): size,
    /// colour components (3 for YCbCr or RGB, 1 for grey, 4 for CMYK or YCCK), and whether it is
    /// progressive (SOF2). Read in place, once, for the size check and the memory estimate alike.
    struct JPEGFrame: Equatable {
        let size: PixelSize
        let components: Int
        let progressive: Bool
    }

    static func jpegFrame(_ data: Data) -> JPEGFrame? {
        data.withUnsafeBytes { raw -> JPEGFrame? in
            let b = raw.bindMemory(to: UInt8.self)
            let end = min(b.count, 262_144)
            func be16(_ i: Int) -> Int { Int(b[i]) << 8 | Int(b[i + 1]) }
            var i = 2
            while i + 9 < end {
                guard b[i] == 0xFF else { return nil }
                let marker = b[i + 1]
                if marker == 0xFF { i += 1; continue }
                if (0xC0...0xCF).contains(marker), ![0xC4, 0xC8, 0xCC].contains(marker) {
                    return JPEGFrame(size: PixelSize(width: be16(i + 7), height: be16(i + 5)), components: Int(b[i + 9]),
                                     progressive: marker == 0xC2)
                }
                if marker == 0xD8 || (0xD0...0xD7).contains(marker) { i += 2; continue }
                i += 2 + be16(i + 2)
            }
            return nil
        }
    }

    static func dimensions(_ data: Data, format: ImageFormat) -> PixelSize? {
        if format == .tiff { return tiffDimensions(data) }
        let b = [UInt8](data.prefix(64))
        func be16(_ i: Int) -> Int { i + 1 < b.count ? Int(b[i]) << 8 | Int(b[i + 1]) : 0 }
        func le16(_ i: Int) -> Int { i + 1 < b.count ? Int(b[i + 1]) << 8 | Int(b[i]) : 0 }
        func be32(_ i: Int) -> Int { be16(i) << 16 | be16(i + 2) }
        func le32(_ i: Int) -> Int { le16(i + 2) << 16 | le16(i) }
        func le24(_ i: Int) -> Int { i + 2 < b.count ? Int(b[i + 2]) << 16 | Int(b[i + 1]) << 8 | Int(b[i]) : 0 }
        switch format {
        case .png:  // signature, IHDR length and type, then width and height
            guard b.count >= 24, String(decoding: b[12..<16], as: UTF8.self) == "IHDR" else { return nil }
            return PixelSize(width: be32(16), height: be32(20))
        case .gif:  // logical screen size
            guard b.count >= 10 else { return nil }
            return PixelSize(width: le16(6), height: le16(8))
        case .bmp:
            guard b.count >= 26 else { return nil }
            let header = le32(14)
            if header == 12 { return PixelSize(width: le16(18), height: le16(20)) }
            let height = Int(Int32(bitPattern: UInt32(le32(22))))
            return PixelSize(width: Int(Int32(bitPattern: UInt32(le32(18)))), height: abs(height))
        case .webp:
            guard b.count >= 30 else { return nil }
            switch String(decoding: b[12..<16], as: UTF8.self) {
            case "VP8 ": return PixelSize(width: le16(26) & 0x3FFF, height: le16(28) & 0x3FFF)
            case "VP8L":
                let bits = le32(21)
                return PixelSize(width: (bits & 0x3FFF) + 1, height: ((bits >> 14) & 0x3FFF) + 1)
            case "VP8X": return PixelSize(width: le24(24) + 1, height: le24(27) + 1)
            default: return nil
            }
        case .jpeg:
            return jpegFrame(data)?.size
        default:
            return nil
        }
    }
}
