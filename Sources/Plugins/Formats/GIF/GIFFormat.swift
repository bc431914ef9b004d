import Foundation
import PipelineKit

/// GIF: its row in ``FormatTable``, its header probe, and its fuzz target.
enum GIFFormat {
    static let entry = FormatEntry(
        name: "gif", formats: [.gif],
        reader: { _, loaded, _ in try GIFReader(try loaded.wholeData()) },
        dimensions: dimensions,
        encoders: [GIFEncoder.plugin],
        fuzzTargets: ["gif": fuzz])

    /// The logical screen's size.
    @Sendable static func dimensions(_ data: Data) -> PixelSize? {
        let head = HeadBytes(data)
        guard head.count >= 10 else { return nil }
        return PixelSize(width: head.le16(6), height: head.le16(8))
    }

    /// The GIF path: giflib's first image through our reader.
    @Sendable static func fuzz(_ data: Data) {
        guard FuzzTargets.fits(dimensions(data)) else { return }
        _ = try? GIFReducer.decode(data, factor: 1 + data.count % 4)
    }
}
