import Foundation
import MagickKit
import PipelineKit

/// GIF: the logical screen's size from the header; the first image is decoded by giflib and
/// averaged before ImageMagick sees it (``GIFReducer``) when one frame is kept.
struct GIFReader: FormatReader {
    var format: ImageFormat { .gif }
    let data: Data
    let size: PixelSize

    init(_ data: Data) throws {
        self.data = data
        size = try ImageMagickDecoder.headerSize(data, format: .gif)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        guard settings.maxFrames == 1, let factor = settings.block(size, hint: hint, headroom: settings.headroom) else { return ReadPlan(estimatedMemory: magickMemory()) }
        let data = self.data
        return ReadPlan(reduced: { try GIFReducer.decode(data, factor: factor).map { (.wand($0), nil) } },
                        estimatedMemory: GIFReducer.estimatedMemory(size, factor: factor) + data.count)
    }
}
