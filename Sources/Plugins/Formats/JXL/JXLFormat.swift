import Foundation
import PipelineKit

/// JPEG XL: its row in ``FormatTable`` (read by ``JXLReader``, written by ``JXLEncoder``), its
/// header probe and its fuzz target.
enum JXLFormat {
    static let entry = FormatEntry(name: "jxl", formats: [.jxl], reader: open, dimensions: { JXLCodec.header($0)?.size },
                                   encoders: [JXLEncoder.plugin], fuzzTargets: ["jxl": fuzz], readsItself: true)

    @Sendable static func open(_ format: ImageFormat, _ loaded: LoadedData, _ settings: DecodeSettings) throws -> any FormatReader {
        try JXLReader(format, try loaded.wholeData())
    }

    /// The header, the decode (8 and 16 bits) and the box reader, as the decoder enters them:
    /// after the header passed the size limits.
    @Sendable static func fuzz(_ data: Data) {
        guard let header = JXLCodec.header(data), FuzzTargets.fits(header.size) else { return }
        let limits = (4096, 4096, FuzzTargets.maxPixels)
        // As the reader plans it: 16 bits only unreduced.
        let factor = 1 + data.count % 3
        if let decoded = try? JXLCodec.decode(data, sixteen: factor == 1, limits: limits) {
            _ = try? JXLReader.wand(decoded, factor: factor)
        }
        _ = JXLCodec.metadataBoxes(data)
    }
}
