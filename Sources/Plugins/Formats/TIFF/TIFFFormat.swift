import Foundation
import PipelineKit

/// TIFF (and BigTIFF): its row in ``FormatTable``, its header probe, and its fuzz target.
enum TIFFFormat {
    static let entry = FormatEntry(
        name: "tiff", formats: [.tiff],
        // A local file is read in place: libtiff reads the directories, then the strips or tiles it decodes.
        reader: { _, loaded, _ in
            if let file = loaded.file { return try TIFFReader(.file(file)) }
            return try TIFFReader(.memory(try loaded.wholeData()))
        },
        dimensions: dimensions,
        encoders: [TIFFEncoder.plugin],
        fuzzTargets: ["tiff": fuzz])

    /// Width and height from a TIFF's first directory, classic or BigTIFF (version 43), in either
    /// byte order; the directory may be anywhere in the file, every offset is checked.
    @Sendable static func dimensions(_ data: Data) -> PixelSize? {
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

    /// The TIFF path: libtiff's RGBA interface through our shim, classic and BigTIFF.
    @Sendable static func fuzz(_ data: Data) {
        guard FuzzTargets.fits(dimensions(data)) else { return }
        _ = try? TIFFReducer.decode(.memory(data), hint: FuzzTargets.hint(data), headroom: 2, keepsPages: data.count % 2 == 0)
    }
}
