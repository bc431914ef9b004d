import Foundation
import MagickKit
import PipelineKit

/// PNG: the size from IHDR; when the output needs much less, whether the row-by-row reduced path
/// takes it (libpng's reading of the header chunks: colour, interlacing, profile). A damaged PNG that ImageMagick
/// gives up on is read whole by libpng as `fail_on` allows.
///
/// A large local file is read in place (``LoadedData/file``) by the reduced path: libpng reads it
/// a megabyte at a time as rows are decoded. ImageMagick's path reads it whole.
struct PNGReader: FormatReader {
    var format: ImageFormat { .png }
    let input: EncodedInput
    let size: PixelSize

    /// `head`: the file's first bytes, which hold IHDR.
    init(_ input: EncodedInput, head: Data) throws {
        self.input = input
        size = try ImageMagickDecoder.headerSize(head, format: .png)
    }

    var data: Data { input.data }
    var byteCount: Int { input.byteCount }
    /// ImageMagick 6 does not see an eXIf chunk after the image data, where its own writer puts it.
    var exifBesideProfiles: Data? { PNGFormat.chunk("eXIf", in: data) }
    /// ImageMagick 6 reads an iTXt chunk as text, not as the XMP profile it is.
    var xmpBesideProfiles: Data? { PNGFormat.xmp(in: data) }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        // libpng reads the header chunks (colour, interlacing, profile) only when a reduction is wanted.
        guard let factor = settings.block(size, hint: hint, headroom: settings.boxHeadroom), PNGReducer.takes(input, toSRGB: settings.toSRGB) else {
            return ReadPlan(estimatedMemory: magickMemory())
        }
        let input = self.input
        // The bytes, or libpng's buffer (and the file's bytes, read for the inflated copy when small).
        let held = if case .memory(let data) = input { data.count } else {
            (2 << 20) + (input.byteCount <= PNGReducer.inflatedCopyFileLimit ? input.byteCount : 0)
        }
        return ReadPlan(reduced: { try PNGReducer.decode(input, factor: factor, toSRGB: settings.toSRGB, failOn: settings.failOn) },
                        estimatedMemory: PNGReducer.estimatedMemory(size, factor: factor) + held)
    }

    func salvage(_ settings: DecodeSettings) throws -> (wand: Wand, damage: Damage?)? {
        guard let (wand, damage) = try PNGReducer.decodeWhole(data, failOn: settings.failOn) else { return nil }
        if settings.toSRGB { try wand.convertToSRGB() }
        return (wand, damage)
    }
}
