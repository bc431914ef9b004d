import Foundation
import PipelineKit

/// HEIC and AVIF (the HEIF container, read by libheif): their rows in ``FormatTable``, their
/// metadata, and their fuzz target.
enum HEIFFormat {
    static let heic = FormatEntry(name: "heic", formats: [.heic], reader: open, encoders: [HEIFEncoder.heicPlugin],
                                  fuzzTargets: ["heif": fuzz])
    static let avif = FormatEntry(name: "avif", formats: [.avif], reader: open, encoders: [HEIFEncoder.avifPlugin])

    @Sendable static func open(_ format: ImageFormat, _ loaded: LoadedData, _ settings: DecodeSettings) throws -> any FormatReader {
        try HEIFReader(format, try loaded.wholeData())
    }

    /// The metadata of an open HEIF file, from libheif's metadata blocks (EXIF and XMP). Its
    /// pixels are always upright: libheif applies the file's rotation and mirroring itself.
    static func metadata(_ file: HEIFReducer.File) -> ImageMetadata {
        let exif = file.metadataBlock(type: "Exif").flatMap(SourceFacts.exifAfterOffset)
        return ImageMetadata(exif: exif, xmp: file.metadataBlock(type: "mime", contentType: "application/rdf+xml"),
                             orientation: 1, upright: true)
    }

    /// The HEIF/AVIF path: our reference check and libheif's boxes through our file wrapper, then
    /// an 8-bit decode averaged down.
    @Sendable static func fuzz(_ data: Data) {
        guard let file = try? HEIFReducer.File(data), FuzzTargets.fits(file.size) else { return }
        _ = try? HEIFReducer.decode(file, factor: 1 + data.count % 3, limits: (4096, 4096, FuzzTargets.maxPixels))
    }
}
