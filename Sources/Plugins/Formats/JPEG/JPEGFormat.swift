import Foundation
import PipelineKit

/// JPEG: its row in ``FormatTable``, its frame header, and its fuzz target.
enum JPEGFormat {
    static let entry = FormatEntry(
        name: "jpeg", formats: [.jpeg],
        // A local file is read whole when it decodes (on a CPU worker, in pieces when the pool has idle threads).
        reader: { _, loaded, _ in
            if let file = loaded.file { return try JPEGReader(.file(file), head: loaded.data) }
            let data = try loaded.wholeData()
            return try JPEGReader(.memory(data), head: data)
        },
        dimensions: { frame($0)?.size },
        encoders: [JPEGEncoder.plugin],
        fuzzTargets: ["jpeg": fuzz])

    /// A JPEG's frame header (the first start-of-frame marker within the first 256 KB): size,
    /// colour components (3 for YCbCr or RGB, 1 for grey, 4 for CMYK or YCCK), and whether it is
    /// progressive (SOF2). Read in place, once, for the size check and the memory estimate alike.
    struct Frame: Equatable {
        let size: PixelSize
        let components: Int
        let progressive: Bool
    }

    static func frame(_ data: Data) -> Frame? {
        data.withUnsafeBytes { raw -> Frame? in
            let b = raw.bindMemory(to: UInt8.self)
            let end = min(b.count, 262_144)
            func be16(_ i: Int) -> Int { Int(b[i]) << 8 | Int(b[i + 1]) }
            var i = 2
            while i + 9 < end {
                guard b[i] == 0xFF else { return nil }
                let marker = b[i + 1]
                if marker == 0xFF { i += 1; continue }
                if (0xC0...0xCF).contains(marker), ![0xC4, 0xC8, 0xCC].contains(marker) {
                    return Frame(size: PixelSize(width: be16(i + 7), height: be16(i + 5)), components: Int(b[i + 9]),
                                 progressive: marker == 0xC2)
                }
                if marker == 0xD8 || (0xD0...0xD7).contains(marker) { i += 2; continue }
                i += 2 + be16(i + 2)
            }
            return nil
        }
    }

    /// The JPEG reduce-on-load reader (libjpeg-turbo through our shim: DCT scaling, block
    /// averaging, ICC and metadata markers, EXIF orientation).
    @Sendable static func fuzz(_ data: Data) {
        guard let size = frame(data)?.size, FuzzTargets.fits(size),
              let plan = JPEGReducer.plan(size, hint: FuzzTargets.hint(data), headroom: 1 + data.count % 2) else { return }
        _ = try? JPEGReducer.decode(data, plan: plan, toSRGB: data.count % 2 == 0, autoOrient: true,
                                    failOn: FailOn.allCases[data.count % 4])
    }
}
