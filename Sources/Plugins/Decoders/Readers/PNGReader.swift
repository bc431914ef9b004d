import Foundation
import MagickKit
import PipelineKit

/// PNG: the size from IHDR; when the output needs much less, whether the row-by-row reduced path
/// takes it (libpng's reading of the header chunks: colour, interlacing, profile). A damaged PNG that ImageMagick
/// gives up on is read whole by libpng as `fail_on` allows.
struct PNGReader: FormatReader {
    var format: ImageFormat { .png }
    let data: Data
    let size: PixelSize

    init(_ data: Data) throws {
        self.data = data
        size = try ImageMagickDecoder.headerSize(data, format: .png)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        // libpng reads the header chunks (colour, interlacing, profile) only when a reduction is wanted.
        guard let factor = settings.block(size, hint: hint), PNGReducer.takes(data, toSRGB: settings.toSRGB) else {
            return ReadPlan(estimatedMemory: magickMemory())
        }
        let data = self.data
        return ReadPlan(reduced: { try PNGReducer.decode(data, factor: factor, toSRGB: settings.toSRGB, failOn: settings.failOn) },
                        estimatedMemory: PNGReducer.estimatedMemory(size, factor: factor) + data.count)
    }

    func salvage(_ settings: DecodeSettings) throws -> (wand: Wand, damage: Damage?)? {
        guard let (wand, damage) = try PNGReducer.decodeWhole(data, failOn: settings.failOn) else { return nil }
        if settings.toSRGB { try wand.convertToSRGB() }
        return (wand, damage)
    }
}
