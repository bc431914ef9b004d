import Foundation

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
