import Foundation
import MagickKit
import PipelineKit

/// Every accepted format without a reader of its own (BMP, ICO, and the opt-in ones): the size
/// from its folder's header probe where it has one (BMP), else from ImageMagick's ping; decoded by
/// ImageMagick.
struct MagickReader: FormatReader {
    let format: ImageFormat
    let data: Data
    let size: PixelSize

    init(_ format: ImageFormat, _ data: Data) throws {
        self.format = format
        self.data = data
        size = try ImageMagickDecoder.headerSize(data, format: format)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan { ReadPlan(estimatedMemory: magickMemory()) }
}
