import Foundation
import MagickKit
import PipelineKit

/// TIFF (and BigTIFF): the first directory's size read in place; the first page is read by
/// libtiff's RGBA interface and averaged before ImageMagick sees it (``TIFFReducer``), or, for
/// what that path leaves (grey, CMYK, kept pages...), by ImageMagick.
struct TIFFReader: FormatReader {
    var format: ImageFormat { .tiff }
    let data: Data
    let size: PixelSize

    init(_ data: Data) throws {
        self.data = data
        size = try ImageMagickDecoder.headerSize(data, format: .tiff)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        guard settings.shrinkOnLoad else { return ReadPlan(estimatedMemory: magickMemory()) }
        let data = self.data
        return ReadPlan(reduced: {
            guard let wand = try TIFFReducer.decode(data, hint: hint, headroom: settings.headroom, keepsPages: settings.maxFrames > 1)
            else { return nil }
            if settings.toSRGB { try wand.convertToSRGB() }
            return (wand, nil)
        }, estimatedMemory: magickMemory())
    }
}
