import Foundation
import MagickKit
import PipelineKit

/// HEIC and AVIF: libheif opens the file once (it reads the boxes only; a broken file fails here
/// with libheif's reason), and the same open file gives the size, the decode (to 8 bits, averaged
/// before ImageMagick sees it) and the metadata. Kept animations go to ImageMagick.
struct HEIFReader: FormatReader {
    let format: ImageFormat
    let data: Data
    let size: PixelSize
    let file: HEIFReducer.File

    init(_ format: ImageFormat, _ data: Data) throws {
        self.format = format
        self.data = data
        file = try HEIFReducer.File(data)
        size = file.size
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        guard settings.maxFrames == 1 else { return ReadPlan(estimatedMemory: magickMemory()) }
        let factor = settings.block(size, hint: hint, headroom: settings.headroom) ?? 1
        let file = self.file
        return ReadPlan(reduced: {
            guard let wand = try HEIFReducer.decode(file, factor: factor, limits: (settings.maxWidth, settings.maxHeight, settings.maxPixels))
            else { return nil }
            if settings.toSRGB { try wand.convertToSRGB() }
            return (.wand(wand), nil)
        }, estimatedMemory: HEIFReducer.estimatedMemory(size, factor: factor) + data.count)
    }

    /// The metadata from the file libheif opened (ImageMagick 6 would decode it to ping); no
    /// facts beyond the decode's.
    func headerFacts(facts: Bool, metadata: Bool, upright: (Int) -> Bool) -> HeaderFacts {
        HeaderFacts(metadata: metadata ? HEIFFormat.metadata(file) : nil)
    }
}
