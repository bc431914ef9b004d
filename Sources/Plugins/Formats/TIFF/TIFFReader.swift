import Foundation
import MagickKit
import PipelineKit

/// TIFF (and BigTIFF): the first directory's size read in place; the first page is read by
/// libtiff's RGBA interface and averaged before ImageMagick sees it (``TIFFReducer``), or, for
/// what that path leaves (grey, CMYK, kept pages...), by ImageMagick.
///
/// A large local file is read in place (``LoadedData/file``): libtiff reads the directories and
/// then the strips or tiles as they are decoded, so memory is a band and the output, not the file.
/// ImageMagick's path, when it is taken, reads the file whole.
struct TIFFReader: FormatReader {
    var format: ImageFormat { .tiff }
    let input: TIFFReducer.Input
    let size: PixelSize

    init(_ input: TIFFReducer.Input) throws {
        self.input = input
        switch input {
        case .memory(let data): size = try ImageMagickDecoder.headerSize(data, format: .tiff)
        case .file: size = try TIFFReducer.size(input)
        }
    }

    var data: Data { input.data }
    var byteCount: Int { input.byteCount }
    /// A TIFF's EXIF is its own first directory.
    var exifBesideProfiles: Data? { ExifRewriter.fromTIFF(data) }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        guard settings.shrinkOnLoad else { return ReadPlan(estimatedMemory: magickMemory()) }
        let input = self.input
        // The reduced read's own peak (bands and the output, with the bytes when they are in
        // memory), or ImageMagick's when that path will read the file.
        let reduced = TIFFReducer.estimatedMemory(input, hint: hint, headroom: settings.headroom, keepsPages: settings.maxFrames > 1)
        let held = if case .memory(let data) = input { data.count } else { 0 }
        return ReadPlan(reduced: {
            guard let decoded = try TIFFReducer.decode(input, hint: hint, headroom: settings.headroom, keepsPages: settings.maxFrames > 1)
            else { return nil }
            if settings.toSRGB, case .wand(let wand) = decoded { try wand.convertToSRGB() }
            return (decoded, nil)
        }, estimatedMemory: reduced.map { $0 + held } ?? magickMemory())
    }
}
