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
    /// Every target by the name its harness and its regression fixtures use.
    static let all: [String: @Sendable (Data) -> Void] = [
        "sniffer": sniffer, "header-probe": headerProbe, "png": png, "jpeg": jpeg, "webp": webp,
        "heif": heif, "tiff": tiff, "gif": gif, "svg": svg, "icc": icc, "exif": exif,
    ]

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

    /// Every header parser the decoder trusts for its limits: ``HeaderProbe`` as each format, and
    /// the WebP container plan.
    @Sendable static func headerProbe(_ data: Data) {
        for format in [ImageFormat.jpeg, .png, .gif, .webp, .tiff, .bmp, .ico, .pnm, .psd, .pcx, .tga] {
            _ = HeaderProbe.dimensions(data, format: format)
        }
        _ = HeaderProbe.jpegFrame(data)
        _ = HeaderProbe.tiffDimensions(data)
        _ = try? WebPReducer.plan(data, keepsFrames: false)
        _ = try? WebPReducer.plan(data, keepsFrames: true)
    }

    /// The PNG reduce-on-load reader (libpng on the file, or on the copy libdeflate inflated, every
    /// other input each; and the zlib stream inflated in parts: small parts, so that guesses and
    /// joins are exercised), and the whole-image reader (libpng through our shim).
    @Sendable static func png(_ data: Data) {
        guard fits(HeaderProbe.dimensions(data, format: .png)) else { return }
        let failOn = FailOn.allCases[data.count % 4]
        _ = try? PNGReducer.decode(.memory(data), factor: 1 + data.count % 3, toSRGB: data.count % 2 == 0, failOn: failOn,
                                   inflating: data.count / 2 % 2 == 0)
        _ = PNGParts.rows(.memory(data), partBytes: 1024 << (data.count % 4)) { _ in }
        _ = try? PNGReducer.decodeWhole(data, failOn: failOn)
    }

    /// The JPEG reduce-on-load reader (libjpeg-turbo through our shim: DCT scaling, block
    /// averaging, ICC and metadata markers, EXIF orientation).
    @Sendable static func jpeg(_ data: Data) {
        guard let size = HeaderProbe.dimensions(data, format: .jpeg), fits(size),
              let plan = JPEGReducer.plan(size, hint: hint(data), headroom: 1 + data.count % 2) else { return }
        _ = try? JPEGReducer.decode(data, plan: plan, toSRGB: data.count % 2 == 0, autoOrient: true,
                                    failOn: FailOn.allCases[data.count % 4])
    }

    /// The WebP path: our container plan, libwebp's scaled decode, libwebpdemux for animations.
    @Sendable static func webp(_ data: Data) {
        guard fits(HeaderProbe.dimensions(data, format: .webp)),
              let plan = (try? WebPReducer.plan(data, keepsFrames: data.count % 2 == 0)) ?? nil,
              let scaled = WebPReducer.scaledSize(plan, hint: hint(data), headroom: 2) else { return }
        _ = try? WebPReducer.decode(data, plan: plan, size: scaled, failOn: FailOn.allCases[data.count % 4])
    }

    /// The HEIF/AVIF path: our reference check and libheif's boxes through our file wrapper, then
    /// an 8-bit decode averaged down.
    @Sendable static func heif(_ data: Data) {
        guard let file = try? HEIFReducer.File(data), fits(file.size) else { return }
        _ = try? HEIFReducer.decode(file, factor: 1 + data.count % 3, limits: (4096, 4096, maxPixels))
    }

    /// The TIFF path: libtiff's RGBA interface through our shim, classic and BigTIFF.
    @Sendable static func tiff(_ data: Data) {
        guard fits(HeaderProbe.tiffDimensions(data)) else { return }
        _ = try? TIFFReducer.decode(.memory(data), hint: hint(data), headroom: 2, keepsPages: data.count % 2 == 0)
    }

    /// The GIF path: giflib's first image through our reader.
    @Sendable static func gif(_ data: Data) {
        guard fits(HeaderProbe.dimensions(data, format: .gif)) else { return }
        _ = try? GIFReducer.decode(data, factor: 1 + data.count % 4)
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
        _ = SourceFacts.pngChunk("eXIf", in: data)
        _ = SourceFacts.webPMetadata(data) { _ in true }
    }

    /// The SVG screen (what an allowed SVG must not contain) and its size reader; the rendering
    /// itself is ImageMagick's.
    @Sendable static func svg(_ data: Data) {
        _ = try? SVGScreen.check(data)
        _ = SVGScreen.declaredSize(data)
    }
}
