import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// `imagemagick`: decodes with ImageMagick, safely.
///
/// The format comes from the first bytes (``FormatSniffer``), never from the URL or from
/// ImageMagick's own guess, and the image is read with that explicit coder. Width, height and
/// pixel count are checked from the header before any pixel is decoded. When the processor chain
/// needs less than the full size, each format is reduced while it is decoded by its own library
/// (``JPEGReducer``, ``PNGReducer``, ``WebPReducer``, ``HEIFReducer``, ``TIFFReducer``,
/// ``GIFReducer``), keeping at least twice what the chain needs, three times where a PNG's
/// pixels are averaged in blocks; ImageMagick then receives only the reduced image, and decodes
/// whatever those paths leave to it.
public struct ImageMagickDecoder: ImageDecoding {
    /// The `shrink_on_load` option: how far a decode may reduce ahead of the resize.
    public enum ShrinkOnLoad: String, Sendable, CaseIterable {
        /// Reduce while decoding, keeping at least twice the target for the resize filter (three
        /// times where a PNG's pixels are averaged in blocks) (the default).
        case on = "true"
        /// Decode every pixel.
        case off = "false"
        /// Reduce down to the target itself: quicker, softer on fine detail.
        case fast
    }

    /// The names the `formats` option takes, each with the ImageMagick coders it allows (as
    /// ``FormatSniffer`` names what it recognises), in the format table's order. Every one is
    /// recognised by its content; a coder that runs another program or reads other files
    /// (PostScript, PDF, MVG, MSL, TXT, URL...) is none of them and can never be allowed.
    public static var formatNames: [(name: String, formats: [ImageFormat])] { FormatTable.names }

    /// The names the `formats` option takes, each with the ImageMagick coders it allows.
    @available(*, deprecated, message: "Use formatNames, read from the format table (this list does not grow with it).")
    public static let formatCoders: KeyValuePairs<String, [ImageFormat]> = [
        "jpeg": [.jpeg], "png": [.png], "gif": [.gif], "webp": [.webp], "tiff": [.tiff], "bmp": [.bmp],
        "ico": [.ico, .cur], "heic": [.heic], "avif": [.avif],
        "jp2": [.jp2, .j2k], "pnm": [.pnm], "tga": [.tga], "pcx": [.pcx, .dcx], "psd": [.psd, .psb],
        "sgi": [.sgi], "sun": [.sun], "dds": [.dds], "fits": [.fits], "xbm": [.xbm], "xpm": [.xpm],
    ]

    /// The `formats` accepted unless a pipeline says otherwise: the web's raster formats, whose
    /// coders are the most used and the most fuzzed.
    public static let defaultFormats = FormatTable.entries.filter(\.byDefault).compactMap(\.name)

    /// The `formats` name that allows `format` (`J2K` → `jp2`).
    public static func formatName(of format: ImageFormat) -> String? {
        FormatTable.entry(for: format)?.name
    }

    public static let plugin = Plugin.decoder(
        PluginSpec(
            name: "imagemagick",
            summary: "Decodes JPEG, PNG, GIF, WebP, TIFF, BMP, ICO (and HEIC/AVIF with libheif, JPEG XL with libjxl, video posters with libavcodec when listed) with ImageMagick and its own readers; format from the first bytes, limits checked before decoding.",
            options: [
                .pixels("max_pixels", default: "50MP", max: "1000MP", doc: "Largest width x height accepted (checked from the header); larger fails as too_large.")
                    .example("24MP"),
                .int("max_width", default: 16384, range: 1...65535, doc: "Largest width accepted."),
                .int("max_height", default: 16384, range: 1...65535, doc: "Largest height accepted."),
                .int("max_frames", default: 1, range: 1...1000,
                     doc: "Frames kept from an animation: 1 keeps the first frame only; more keeps the animation (coalesced, every processor runs on each frame) and fails as too_large beyond it."),
                .bool("auto_orient", default: true, doc: "Apply the EXIF orientation."),
                .bool("to_srgb", default: true,
                      doc: "Convert CMYK and ICC-profiled images to sRGB (through the embedded profile with lcms) and drop the profile; false keeps the colour space and profile as they are."),
                .oneOf("shrink_on_load", ShrinkOnLoad.allCases.map(\.rawValue), default: "true",
                       doc: "Reduce while decoding when the output needs much less (JPEG by DCT scaling, PNG and WebP while read), always keeping at least twice the output size for the resize filter (three times for PNG, which is reduced by averaging pixel blocks); fast keeps only the output size (quicker, visibly softer on fine detail); false decodes every pixel."),
                .list("formats", of: .oneOf(formatNames.map(\.name)), default: defaultFormats.map { .string($0) },
                      doc: "The formats accepted, each recognised from the content, never from the name: jpeg, png, gif, webp, tiff (BigTIFF too), bmp, ico, heic, avif by default; jp2 (JPEG 2000), pnm (netpbm: PBM, PGM, PPM, PAM, PFM), tga, pcx (and DCX), psd (and PSB), sgi, sun, dds, fits, xbm and xpm when listed; video (MP4, QuickTime, WebM and Matroska with H.264, HEVC, VP8, VP9 or AV1: a poster frame, see frame) when listed. Another recognised format fails as unsupported_format naming the entry to add.")
                    .example("[jpeg, png, webp, tga, pnm]"),
                .oneOf("fail_on", FailOn.allCases.map(\.rawValue), default: "warning",
                       doc: "How much damage fails an image, as libvips's fail_on: warning fails on any sign of damage; error lets the codec's warnings through (extraneous bytes, a bad Huffman code); truncated fails only a file that ends early; none decodes whatever can be decoded. An image decoded despite damage is ok, marked degraded with the reason in the report, and never cached. Only data the image is made from is checked: a progressive JPEG read at 1/8 skips the AC scans that cannot change the result, and damage inside them."),
                .bool("allow_svg", default: false,
                      doc: "Accept SVG (rendered by ImageMagick); only self-contained documents: entities, external references, scripts and style imports are refused."),
            ] + VideoFormat.options),
        make: { options in
            _ = try VideoSettings(options: options)  // frame: names one way
            return ImageMagickDecoder(options: options)
        })

    let settings: DecodeSettings
    let allowSVG: Bool
    /// The formats the `formats` option allows.
    let allowed: Set<ImageFormat>
    /// Whether `format` is allowed and this ImageMagick can read it under its policy. Asked when a
    /// format is first met, not at start-up: asking loads the coder's module and its libraries
    /// (HEIC's pulls libheif and its codecs), and the answer is kept for the process.
    func canRead(_ format: ImageFormat) -> Bool {
        allowed.contains(format) && (FormatTable.entry(for: format)?.readsItself == true || Magick.canRead(format.coder))
    }

    init(options: PluginOptions) {
        let names = options.list("formats")?.map(\.description) ?? Self.defaultFormats
        allowed = Set(names.flatMap { name in Self.formatNames.first { $0.name == name }?.formats ?? [] })
        let shrink = options.string("shrink_on_load").flatMap(ShrinkOnLoad.init(rawValue:))
            ?? (options.bool("shrink_on_load") == false ? .off : .on)
        var settings = DecodeSettings(shrink: shrink, maxFrames: options.int("max_frames") ?? 1, toSRGB: options.bool("to_srgb") ?? true,
                                      autoOrient: options.bool("auto_orient")!,
                                      failOn: options.string("fail_on").flatMap(FailOn.init(rawValue:)) ?? .warning,
                                      maxWidth: options.int("max_width")!, maxHeight: options.int("max_height")!,
                                      maxPixels: options.int("max_pixels")!)
        settings.video = (try? VideoSettings(options: options)) ?? VideoSettings()
        self.settings = settings
        allowSVG = options.bool("allow_svg") ?? false
    }

    /// The format from the first bytes (the loader's look when it took one), the header read once
    /// by that format's reader, the limits checked, and the decode planned: the memory it takes
    /// and the work, run later on a CPU worker.
    public func prepare(_ loaded: LoadedData, hint: DecodeHint) throws -> PreparedDecode {
        guard loaded.byteCount > 0 else { throw PipelineError(.decodeFailed, "empty input (0 bytes)") }
        let format = try self.format(of: loaded)
        // Only a video is read by range; any other body the loader left so is fetched whole.
        let loaded = loaded.ranged != nil && !format.isVideo ? try loaded.whole() : loaded
        let reader: any FormatReader
        do { reader = try Self.reader(format, loaded, settings: settings) } catch {
            throw Self.named(error, format)
        }
        try checkLimits(reader.size)
        let plan = reader.plan(hint, settings)
        return PreparedDecode(estimatedMemory: plan.estimatedMemory, header: { [self] in headerFacts(reader) }) { [self] in
            do { return try decode(reader, plan: plan, hint: hint) } catch { throw Self.named(error, format) }
        }
    }

    /// Peak memory of the decode of `loaded` under `hint`, from its reader's plan (`nil` for a
    /// file this decoder refuses).
    public func estimatedMemory(_ loaded: LoadedData, hint: DecodeHint) -> Int? {
        (try? prepare(loaded, hint: hint))?.estimatedMemory
    }

    public func decode(_ loaded: LoadedData, hint: DecodeHint) throws -> PipelineImage {
        try prepare(loaded, hint: hint).decode()
    }

    /// TIFF and PNG are read from a local file in place, JPEG whole when it decodes; the other formats
    /// read it whole with the header.
    public var readsLocalFiles: Bool { true }

    /// A video is read by range (its header, then the parts of its stream a poster needs); any
    /// other format's body is fetched whole first.
    public var readsRanges: Bool { true }

    /// A decode failure named by the format the content was read as (libheif names HEIF for both of its).
    static func named(_ error: any Error, _ format: ImageFormat) -> any Error {
        guard let failure = error as? PipelineError, failure.kind == .decodeFailed else { return error }
        let prefix = failure.message.prefix { $0 != ":" }.lowercased()
        return [format.coder.lowercased(), "heif"].contains(prefix) ? failure : PipelineError(.decodeFailed, "\(format.coder): \(failure.message)")
    }

    /// Refuses a size over the limits before any pixel is decoded.
    func checkLimits(_ size: PixelSize) throws {
        guard size.width > 0, size.height > 0 else { throw PipelineError(.decodeFailed, "the header gives no size") }
        if size.width > settings.maxWidth || size.height > settings.maxHeight || size.width * size.height > settings.maxPixels {
            throw PipelineError(.tooLarge, "\(size.width)x\(size.height) exceeds the limits (max_pixels \(settings.maxPixels), "
                + "max_width \(settings.maxWidth), max_height \(settings.maxHeight))")
        }
    }

    /// The format of `loaded`, from its first bytes, or the error that refuses it.
    func format(of loaded: LoadedData) throws -> ImageFormat {
        let served = loaded.contentType.map { " (served as \($0))" } ?? ""
        var sniffed = loaded.sniffed ?? FormatSniffer.sniff(loaded.data, tga: allowed.contains(.tga))
        // The loader looked without TGA's header rules; this decoder accepts TGA.
        if sniffed == .unknown, loaded.sniffed != nil, allowed.contains(.tga) { sniffed = FormatSniffer.sniff(loaded.data, tga: true) }
        switch sniffed {
        case .image(.svg) where allowSVG:
            try SVGScreen.check(try loaded.wholeData())
            return .svg  // ImageMagick's own renderer: the SVG coder would hand the file to an external program.
        case .image(.svg):
            throw PipelineError(.unsupportedFormat, "the content is SVG, which this decoder does not accept" + served
                + "; set the decoder's allow_svg: true to render self-contained SVG")
        case .image(let format):
            let name = Self.formatName(of: format) ?? format.coder.lowercased()
            guard allowed.contains(format) else {
                throw PipelineError(.unsupportedFormat, "the content is \(format.coder), an image format this decoder does not accept"
                    + served + "; add \(name) to the decoder's 'formats' to accept it")
            }
            guard canRead(format) else {
                throw PipelineError(.unsupportedFormat, "the content is \(format.coder); 'formats' allows \(name), but this "
                    + "ImageMagick cannot read it (its policy.xml refuses the coder, or the delegate library is missing)")
            }
            return format
        case .other(let name) where ["HTML", "XML", "JSON", "text"].contains(name):
            throw PipelineError(.notAnImage, "the content is \(name), not an image" + served)
        case .other(let name) where ["PostScript", "PDF", "MVG", "MSL"].contains(name):
            // PostScript and PDF run Ghostscript; MVG and MSL read and write other files.
            throw PipelineError(.unsupportedFormat, "the content is \(name), which is never decoded (its ImageMagick coder "
                + "runs another program or reads other files)" + served)
        case .other(let name):
            throw PipelineError(.unsupportedFormat, "the content is \(name), an image format this decoder cannot read" + served)
        case .unknown:
            throw PipelineError(.notAnImage, "the content is not a recognised image format" + served)
        }
    }

    /// The decode the plan chose, then the source's facts and metadata when the chain asks.
    func decode(_ reader: any FormatReader, plan: ReadPlan, hint: DecodeHint) throws -> PipelineImage {
        var image = try pixels(reader, plan: plan)
        image.sourceSize = reader.size
        image.facts.merge(reader.decodedFacts) { _, new in new }
        if hint.wantsSourceFacts || hint.wantsMetadata { addFacts(&image, reader, hint: hint) }
        return image
    }

    /// The reader's own reduced decode first; when it declines, or refuses damage that `fail_on`
    /// lets through, ImageMagick's coder decodes what it can (and is held to `fail_on` in turn).
    func pixels(_ reader: any FormatReader, plan: ReadPlan) throws -> PipelineImage {
        var refused: PipelineError?
        do {
            if let reduced = try plan.reduced?() {
                var image: PipelineImage
                switch reduced.pixels {
                case .wand(let wand): return self.image(wand, reader.format, reduced.damage)
                case .pixels(let pixels): image = PipelineImage(pixels: pixels, sourceFormat: reader.format.coder)
                case .pixels16(let pixels): image = PipelineImage(pixels: pixels, sourceFormat: reader.format.coder)
                }
                image.degraded = reduced.damage?.message
                return image
            }
        } catch let error as PipelineError where error.kind == .decodeFailed && !settings.failOn.stops(Damage.level(of: error.message)) {
            refused = error
        }
        return try magickDecode(reader, jpegSize: plan.jpegSize, refused: refused)
    }

    /// The source's own facts (`analyze`) and metadata (`metadata:`), as its reader reads them
    /// from the header (``FormatReader/headerFacts(facts:metadata:upright:)``).
    func addFacts(_ image: inout PipelineImage, _ reader: any FormatReader, hint: DecodeHint) {
        let format = reader.format
        let upright = { [settings] (orientation: Int) in settings.autoOrient || !format.hasEXIFOrientation || orientation <= 1 }
        let read = reader.headerFacts(facts: hint.wantsSourceFacts, metadata: hint.wantsMetadata, upright: upright)
        image.facts.merge(read.facts) { _, new in new }
        if hint.wantsMetadata, let metadata = read.metadata { image.metadata = metadata }
    }

    /// What the header says, as `analyze` names it: the format, the size the header gives
    /// (`orientation` says whether it is turned), colour space, ICC, EXIF.
    func headerFacts(_ reader: any FormatReader) -> ImageFacts {
        let format = reader.format
        let upright = { [settings] (orientation: Int) in settings.autoOrient || !format.hasEXIFOrientation || orientation <= 1 }
        var facts = reader.headerFacts(facts: true, metadata: false, upright: upright).facts
        let size = reader.size
        facts["format"] = .string(format.coder)
        facts["width"] = .int(size.width)
        facts["height"] = .int(size.height)
        return facts
    }

    /// `wand` as the decoded image, marked degraded by `damage`.
    func image(_ wand: Wand, _ format: ImageFormat, _ damage: Damage? = nil) -> PipelineImage {
        var image = PipelineImage(taking: wand, sourceFormat: format.coder)
        image.degraded = damage?.message
        return image
    }
}

