import Foundation
import PipelineKit

/// The parsers of untrusted bytes this module owns, each as one entry that takes any bytes and
/// must return without crashing, hanging or leaking: what the libFuzzer harnesses in `Fuzz/`
/// drive (`make fuzz`), and what the regression tests replay every crash they found through.
///
/// Each decode path is entered as ``ImageMagickDecoder`` enters it: after the header's size
/// passed the limits (here at most 16 MP, so that fuzzing stays fast), with options picked from
/// the input's length so that every `fail_on` level and reduce factor gets its share.
enum FuzzTargets {
    /// Every target by the name its harness and its regression fixtures use: these, and each
    /// format's own from ``FormatTable`` (`png`, `jpeg`, `webp`, `heif`, `tiff`, `gif`, `svg`).
    static let all: [String: @Sendable (Data) -> Void] = FormatTable.entries.reduce(
        ["sniffer": sniffer, "header-probe": headerProbe, "icc": icc, "exif": exif, "xmp-regions": xmpRegions]
    ) { targets, entry in targets.merging(entry.fuzzTargets) { first, _ in first } }

    static let maxPixels = 16_000_000

    /// Whether a header's size passes limits like the decoder's (sides first, so the product
    /// cannot overflow).
    static func fits(_ size: PixelSize?) -> Bool {
        guard let size else { return false }
        return size.width <= 16384 && size.height <= 16384 && size.width * size.height <= maxPixels
    }

    /// A small target box, picked from the input's length.
    static func hint(_ data: Data) -> DecodeHint {
        let side = [8, 16, 40][data.count % 3]
        return DecodeHint(targetSize: PixelSize(width: side, height: side))
    }

    /// ``FormatSniffer``, with and without TGA's header rules.
    @Sendable static func sniffer(_ data: Data) {
        _ = FormatSniffer.sniff(data)
        _ = FormatSniffer.sniff(data, tga: true)
    }

    /// Every header parser the decoder trusts for its limits: each format's header probe
    /// (``FormatEntry/dimensions``), the JPEG frame reader, and the WebP container plan.
    @Sendable static func headerProbe(_ data: Data) {
        for entry in FormatTable.entries { _ = entry.dimensions?(data) }
        _ = JPEGFormat.frame(data)
        _ = try? WebPReducer.plan(data, keepsFrames: false)
        _ = try? WebPReducer.plan(data, keepsFrames: true)
    }

    /// The ICC description reader (`analyze`'s `icc` fact), on any bytes as a profile.
    @Sendable static func icc(_ data: Data) {
        _ = ICCProfile.description(data)
    }

    /// The EXIF rewriter (`metadata:`), on any bytes as an EXIF block and as a TIFF file, keeping
    /// everything, then reading the rebuilt block again (it must be readable), and the PNG and
    /// WebP chunk walkers that find EXIF and XMP.
    @Sendable static func exif(_ data: Data) {
        let everything: (ExifRewriter.Directory, UInt16) -> Bool = { _, _ in true }
        if let rebuilt = ExifRewriter.filter(data, keep: everything, orientation: 1 + data.count % 8) {
            precondition(ExifRewriter.filter(rebuilt, keep: everything, orientation: nil) != nil, "a rebuilt block reads again")
            _ = ExifRewriter.resolution(rebuilt)
        }
        _ = ExifRewriter.fromTIFF(data)
        _ = PNGFormat.chunk("eXIf", in: data)
        _ = PNGFormat.xmp(in: data)
        _ = WebPFormat.metadata(data) { _ in true }
    }

    /// The marked-region reader (`gravity: regions`, `redact`) on any bytes as an XMP packet, for
    /// an orientation and a stored size picked from the input's length; every region it returns
    /// must lie inside the picture.
    @Sendable static func xmpRegions(_ data: Data) {
        let stored = [PixelSize(width: 600, height: 400), PixelSize(width: 1, height: 1), PixelSize(width: 400, height: 600)][data.count % 3]
        let read = XMPRegions.read(data, orientation: 1 + data.count % 8, stored: data.count % 5 == 0 ? nil : stored)
        for region in read.regions {
            precondition(region.x >= 0 && region.y >= 0 && region.x + region.width <= 1.000001 && region.y + region.height <= 1.000001,
                         "a region inside the picture")
        }
    }
}
