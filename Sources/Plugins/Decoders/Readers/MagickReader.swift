import Foundation
import MagickKit
import PipelineKit

/// Every other accepted format (BMP, ICO, and the opt-in ones): the size from the header where
/// ``HeaderProbe`` parses it (BMP), else from ImageMagick's ping; decoded by ImageMagick.
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

/// SVG (when `allow_svg` accepts it, after ``SVGScreen`` refused anything that is not
/// self-contained): the size it declares; rendered by ImageMagick's own renderer.
struct SVGReader: FormatReader {
    var format: ImageFormat { .svg }
    let data: Data
    let size: PixelSize

    init(_ data: Data) {
        self.data = data
        size = SVGScreen.declaredSize(data)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan { ReadPlan(estimatedMemory: magickMemory()) }
}
