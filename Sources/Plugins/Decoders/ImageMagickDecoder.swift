import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// `imagemagick`: decodes with ImageMagick, safely.
///
/// The format comes from the first bytes (``FormatSniffer``), never from the URL or from
/// ImageMagick's own guess, and the image is read with that explicit coder. Width, height and
/// pixel count are checked from the header before any pixel is decoded. When the processor chain
/// needs less than the full size, each format is reduced while it is decoded, keeping at least
/// twice what the chain needs, by its own library in 8 bits (``JPEGReducer``, ``PNGReducer``,
/// ``WebPReducer``, ``HEIFReducer``, ``TIFFReducer``, ``GIFReducer``); ImageMagick then receives
/// only the reduced image, and decodes whatever those paths leave to it.
public struct ImageMagickDecoder: ImageDecoding {
    /// The `shrink_on_load` option: how far a decode may reduce ahead of the resize.
    public enum ShrinkOnLoad: String, Sendable, CaseIterable {
        /// Reduce while decoding, keeping at least twice the target for the resize filter (the default).
        case on = "true"
        /// Decode every pixel.
        case off = "false"
        /// Reduce down to the target itself: quicker, softer on fine detail.
        case fast
    }

    /// The names the `formats` option takes, each with the ImageMagick coders it allows (as
    /// ``FormatSniffer`` names what it recognises). Every one is recognised by its content; a
    /// coder that runs another program or reads other files (PostScript, PDF, MVG, MSL, TXT, URL...)
    /// is none of them and can never be allowed.
    public static let formatCoders: KeyValuePairs<String, [String]> = [
        "jpeg": ["JPEG"], "png": ["PNG"], "gif": ["GIF"], "webp": ["WEBP"], "tiff": ["TIFF"], "bmp": ["BMP"],
        "ico": ["ICO", "CUR"], "heic": ["HEIC"], "avif": ["AVIF"],
        "jp2": ["JP2", "J2K"], "pnm": ["PNM"], "tga": ["TGA"], "pcx": ["PCX", "DCX"], "psd": ["PSD", "PSB"],
        "sgi": ["SGI"], "sun": ["SUN"], "dds": ["DDS"], "fits": ["FITS"], "xbm": ["XBM"], "xpm": ["XPM"],
    ]

    /// The `formats` accepted unless a pipeline says otherwise: the web's raster formats, whose
    /// coders are the most used and the most fuzzed.
    public static let defaultFormats = ["jpeg", "png", "gif", "webp", "tiff", "bmp", "ico", "heic", "avif"]

    /// The coders whose orientation is an EXIF orientation (or TIFF's tag), applied by `auto_orient`.
    static let orientedFormats: Set<String> = ["JPEG", "PNG", "TIFF", "WEBP", "HEIC", "AVIF"]

    /// The `formats` name that allows `coder` (`J2K` → `jp2`).
    public static func formatName(of coder: String) -> String? {
        formatCoders.first { $0.value.contains(coder) }?.key
    }

    public static let plugin = Plugin.decoder(
        PluginSpec(
            name: "imagemagick",
            summary: "Decodes JPEG, PNG, GIF, WebP, TIFF, BMP, ICO (and HEIC/AVIF with libheif) with ImageMagick; format from the first bytes, limits checked before decoding.",
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
                       doc: "Reduce while decoding when the output needs much less (JPEG by DCT scaling, PNG and WebP while read), always keeping at least twice the output size for the resize filter; fast keeps only the output size (quicker, visibly softer on fine detail); false decodes every pixel."),
                .list("formats", of: .oneOf(formatCoders.map(\.key)), default: defaultFormats.map { .string($0) },
                      doc: "The formats accepted, each recognised from the content, never from the name: jpeg, png, gif, webp, tiff (BigTIFF too), bmp, ico, heic, avif by default; jp2 (JPEG 2000), pnm (netpbm: PBM, PGM, PPM, PAM, PFM), tga, pcx (and DCX), psd (and PSB), sgi, sun, dds, fits, xbm and xpm when listed. Another recognised format fails as unsupported_format naming the entry to add.")
                    .example("[jpeg, png, webp, tga, pnm]"),
                .oneOf("fail_on", FailOn.allCases.map(\.rawValue), default: "warning",
                       doc: "How much damage fails an image, as libvips's fail_on: warning fails on any sign of damage; error lets the codec's warnings through (extraneous bytes, a bad Huffman code); truncated fails only a file that ends early; none decodes whatever can be decoded. An image decoded despite damage is ok, marked degraded with the reason in the report, and never cached."),
                .bool("allow_svg", default: false,
                      doc: "Accept SVG (rendered by ImageMagick); only self-contained documents: entities, external references, scripts and style imports are refused."),
            ]),
        make: { options in ImageMagickDecoder(options: options) })

    let maxPixels: Int
    let maxWidth: Int
    let maxHeight: Int
    let maxFrames: Int
    let autoOrient: Bool
    let toSRGB: Bool
    let shrinkMode: ShrinkOnLoad
    var shrinkOnLoad: Bool { shrinkMode != .off }
    /// How many times the target a reduced decode keeps, at least.
    var headroom: Int { shrinkMode == .fast ? 1 : 2 }

    /// The block size the averaging paths (PNG, HEIF, GIF) reduce a `size` image by under `hint`,
    /// or `nil` when shrink-on-load is off or there is nothing to reduce (see
    /// ``BoxReducer/blockSize(for:shrink:headroom:)``).
    func block(_ size: PixelSize, hint: DecodeHint) -> Int? {
        guard shrinkOnLoad, let shrink = hint.maxShrink(from: size) else { return nil }
        return BoxReducer.blockSize(for: size, shrink: shrink, headroom: headroom)
    }
    let allowSVG: Bool
    let failOn: FailOn
    /// The ImageMagick coders the `formats` option allows.
    let allowedCoders: Set<String>
    /// Whether `coder` is allowed and this ImageMagick can read it under its policy. Asked when a
    /// format is first met, not at start-up: asking loads the coder's module and its libraries
    /// (HEIC's pulls libheif and its codecs), and the answer is kept for the process.
    func canRead(_ coder: String) -> Bool { allowedCoders.contains(coder) && Magick.canRead(coder) }

    init(options: PluginOptions) {
        let names = options.list("formats")?.map(\.description) ?? Self.defaultFormats
        allowedCoders = Set(names.flatMap { name in Self.formatCoders.first { $0.key == name }?.value ?? [] })
        maxPixels = options.int("max_pixels")!
        maxWidth = options.int("max_width")!
        maxHeight = options.int("max_height")!
        maxFrames = options.int("max_frames") ?? 1
        autoOrient = options.bool("auto_orient")!
        toSRGB = options.bool("to_srgb") ?? true
        shrinkMode = options.string("shrink_on_load").flatMap(ShrinkOnLoad.init(rawValue:))
            ?? (options.bool("shrink_on_load") == false ? .off : .on)
        allowSVG = options.bool("allow_svg") ?? false
        failOn = options.string("fail_on").flatMap(FailOn.init(rawValue:)) ?? .warning
    }

    /// From the header: pixels as decoded (after JPEG scaling) at 8 bytes each (ImageMagick Q16),
    /// plus the codec's own buffers (a row-set for JPEG, up to a full 8-bit copy for the others),
    /// plus the compressed bytes.
    public func estimatedMemory(_ loaded: LoadedData, hint: DecodeHint) -> Int? {
        guard case .image(let format) = FormatSniffer.sniff(loaded.data, tga: allowedCoders.contains("TGA")) else { return nil }
        let heif = ["HEIC", "AVIF"].contains(format)
            ? (try? HEIFReducer.File(loaded.data))?.size : nil
        guard let size = heif ?? HeaderProbe.dimensions(loaded.data, format: format) ?? pingedSize(loaded.data, format: format),
              size.width > 0, size.height > 0 else { return nil }
        var width = size.width, height = size.height
        let frame = format == "JPEG" ? HeaderProbe.jpegFrame(loaded.data) : nil
        if let frame, shrinkOnLoad, frame.components == 3, let plan = JPEGReducer.plan(size, hint: hint, headroom: headroom) {
            return JPEGReducer.estimatedMemory(size, plan: plan, progressive: frame.progressive) + loaded.data.count
        }
        if format == "JPEG", let scaled = jpegScaled(size, hint: hint) {
            width = scaled.decoded.width
            height = scaled.decoded.height
        }
        if format == "PNG", let factor = block(size, hint: hint) {
            // Reduced while read, unless it is one that goes through ImageMagick instead.
            if PNGReducer.takes(loaded.data, toSRGB: toSRGB) {
                return PNGReducer.estimatedMemory(size, factor: factor) + loaded.data.count
            }
        }
        if format == "WEBP", shrinkOnLoad, let plan = (try? WebPReducer.plan(loaded.data, keepsFrames: maxFrames > 1)) ?? nil,
           let scaled = WebPReducer.scaledSize(plan, hint: hint, headroom: headroom) {
            return WebPReducer.estimatedMemory(plan, scaled: scaled) + loaded.data.count
        }
        if ["HEIC", "AVIF"].contains(format), maxFrames == 1 {
            return HEIFReducer.estimatedMemory(size, factor: block(size, hint: hint) ?? 1) + loaded.data.count
        }
        if format == "GIF", maxFrames == 1, let factor = block(size, hint: hint) {
            return GIFReducer.estimatedMemory(size, factor: factor) + loaded.data.count
        }
        let pixels = width * height
        // A progressive JPEG keeps every DCT coefficient of the full-size image until the end.
        let coefficients = frame?.progressive == true ? size.width * size.height * 3 : 0
        return pixels * 8 + pixels * (format == "JPEG" ? 1 : 4) + coefficients + loaded.data.count
    }

    /// The size ImageMagick reads from the header of an allowed format that ``HeaderProbe`` does
    /// not parse (the opt-in formats), so that its decode counts in the memory budget; `nil` for
    /// a format not allowed or a header ImageMagick cannot read.
    func pingedSize(_ data: Data, format: String) -> PixelSize? {
        guard canRead(format) else { return nil }
        let wand = Wand()
        guard (try? wand.ping(data, format: format)) != nil else { return nil }
        return PixelSize(width: wand.width, height: wand.height)
    }

    /// The `jpeg:size` this decoder asks of ImageMagick and the size libjpeg-turbo then decodes,
    /// or `nil` when the JPEG is decoded at full size.
    ///
    /// The scale is 1/2, 1/4 or 1/8, the largest that keeps at least twice the target (as libvips
    /// chooses its JPEG shrink-on-load): at 1x the DCT scaling has already aliased a photo's fine
    /// detail and no filter after it brings that back (a 1680x1050 q100 photo of grass fitted to
    /// 256x160 came out at 33.5 dB against a full decode). The scales in between that libjpeg-turbo
    /// offers (3/8, 5/8...) blur more than 1/2 followed by the filter, so they are never asked for.
    ///
    /// ImageMagick turns `jpeg:size` into `scale_denom` = the smaller of width/asked width and
    /// height/asked height, rounded down, and libjpeg-turbo decodes at N/8 with N the smallest
    /// that reaches 1/`scale_denom`; asking for width/d x height/d gives exactly 1/d.
    func jpegScaled(_ size: PixelSize, hint: DecodeHint) -> (ask: String, decoded: PixelSize)? {
        // The same scale as the libjpeg path's (JPEGReducer.plan), without its block averaging.
        guard shrinkOnLoad, let d = JPEGReducer.plan(size, hint: hint, headroom: headroom)?.denominator else { return nil }
        return ("\(size.width / d)x\(size.height / d)",
                PixelSize(width: (size.width + d - 1) / d, height: (size.height + d - 1) / d))
    }

    /// The coder for `loaded`, from its first bytes, or the error that refuses it.
    func format(of loaded: LoadedData) throws -> String {
        let served = loaded.contentType.map { " (served as \($0))" } ?? ""
        switch FormatSniffer.sniff(loaded.data, tga: allowedCoders.contains("TGA")) {
        case .image(let coder):
            let name = Self.formatName(of: coder) ?? coder.lowercased()
            guard allowedCoders.contains(coder) else {
                throw PipelineError(.unsupportedFormat, "the content is \(coder), an image format this decoder does not accept"
                    + served + "; add \(name) to the decoder's 'formats' to accept it")
            }
            guard canRead(coder) else {
                throw PipelineError(.unsupportedFormat, "the content is \(coder); 'formats' allows \(name), but this "
                    + "ImageMagick cannot read it (its policy.xml refuses the coder, or the delegate library is missing)")
            }
            return coder
        case .other("SVG") where allowSVG:
            try SVGScreen.check(loaded.data)
            // ImageMagick's own renderer: the SVG coder would hand the file to an external program.
            return "MSVG"
        case .other("SVG"):
            throw PipelineError(.unsupportedFormat, "the content is SVG, which this decoder does not accept" + served
                + "; set the decoder's allow_svg: true to render self-contained SVG")
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

    public func decode(_ loaded: LoadedData, hint: DecodeHint) throws -> PipelineImage {
        let data = loaded.data
        guard !data.isEmpty else { throw PipelineError(.decodeFailed, "empty input (0 bytes)") }
        let format = try format(of: loaded)
        do {
            return try decode(data, format: format, hint: hint)
        } catch let error as PipelineError where error.kind == .decodeFailed {
            // Every failure names the format the content was read as (libheif's name HEIF for both of its).
            let named = [format.lowercased(), "heif"].contains(error.message.prefix { $0 != ":" }.lowercased())
            throw named ? error : PipelineError(.decodeFailed, "\(format): \(error.message)")
        }
    }

    /// ``decode(_:hint:)`` once the content is known to be `format`.
    func decode(_ data: Data, format: String, hint: DecodeHint) throws -> PipelineImage {
        // Header first: refuse huge images before ImageMagick allocates or decodes anything.
        let (size, heif) = try header(data, format: format)
        var image = try decode(data, format: format, size: size, heif: heif, hint: hint)
        image.sourceSize = size
        // WebP's facts and metadata are read from its chunks: ImageMagick decodes the whole picture to ping one.
        let pinged = (hint.wantsSourceFacts || hint.wantsMetadata) && format != "WEBP" ? SourceFacts.ping(data, format: format) : nil
        if hint.wantsSourceFacts {
            let facts = format == "WEBP" ? SourceFacts.webPFacts(data) : pinged.map(SourceFacts.read) ?? [:]
            image.facts.merge(facts) { _, new in new }
        }
        if hint.wantsMetadata {
            let upright = { (orientation: Int) in autoOrient || !Self.orientedFormats.contains(format) || orientation <= 1 }
            if let file = heif ?? (["HEIC", "AVIF"].contains(format) ? try? HEIFReducer.File(data) : nil) {
                image.metadata = SourceFacts.metadata(file)
            } else if format == "WEBP" {
                image.metadata = SourceFacts.webPMetadata(data, upright: upright)
            } else if let pinged {
                image.metadata = SourceFacts.metadata(pinged, data: data, format: format, upright: upright)
            }
        }
        return image
    }

    /// The size the header of `data` gives (HEIF's from libheif, which reads only the boxes; the
    /// open file is returned to be decoded).
    func header(_ data: Data, format: String) throws -> (PixelSize, HEIFReducer.File?) {
        let size: PixelSize
        var heif: HEIFReducer.File?
        if let parsed = HeaderProbe.dimensions(data, format: format) {
            size = parsed
        } else if ["HEIC", "AVIF"].contains(format) {
            // libheif reads the boxes only ('ispe' gives the size); a broken file fails here with its
            // reason. The open file is decoded below.
            let file = try HEIFReducer.File(data)
            heif = file
            size = file.size
        } else if format == "MSVG" {
            size = SVGScreen.declaredSize(data)
        } else {
            let header = Wand()
            try header.ping(data, format: format)
            size = PixelSize(width: header.width, height: header.height)
        }
        return (size, heif)
    }

    /// The decode of `data`, whose header gave `size`.
    func decode(_ data: Data, format: String, size: PixelSize, heif: HEIFReducer.File?, hint: DecodeHint) throws -> PipelineImage {
        let width = size.width, height = size.height
        guard width > 0, height > 0 else { throw PipelineError(.decodeFailed, "the header gives no size") }
        if width > maxWidth || height > maxHeight || width * height > maxPixels {
            throw PipelineError(.tooLarge, "\(width)x\(height) exceeds the limits (max_pixels \(maxPixels), "
                + "max_width \(maxWidth), max_height \(maxHeight))")
        }

        // A path of our own first; when it refuses damage that fail_on lets through, ImageMagick's
        // coder decodes what it can (and is held to fail_on in turn).
        var refused: PipelineError?
        do {
            if let image = try reducedDecode(data, format: format, size: size, heif: heif, hint: hint) { return image }
        } catch let error as PipelineError where error.kind == .decodeFailed && !failOn.stops(Damage.level(of: error.message)) {
            refused = error
        }

        var wand = Wand()
        var damage: Damage?
        if format == "JPEG", let scaled = jpegScaled(size, hint: hint) {
            wand.setOption("jpeg:size", scaled.ask)
        }
        // One frame more than allowed is enough to know there are too many; the rest is never decoded.
        let multiFrame = ["GIF", "WEBP", "TIFF", "ICO", "CUR", "HEIC", "AVIF", "PSD", "PSB", "DCX", "DDS"].contains(format)
        if format == "MSVG" {
            try SVGScreen.render(data, into: wand)
        } else {
            do {
                try wand.read(data, format: format, maxFrames: multiFrame ? (maxFrames == 1 ? 1 : maxFrames + 1) : nil)
            } catch let error as PipelineError {
                if format == "PNG", let salvaged = try salvagedPNG(data) { return salvaged }
                if format == "WEBP", !failOn.stops(.truncated), let plan = try? WebPReducer.plan(data, keepsFrames: false),
                   let decoded = try? WebPReducer.decode(data, plan: plan, size: PixelSize(width: plan.width, height: plan.height), failOn: failOn) {
                    if toSRGB { try decoded.wand.convertToSRGB() }
                    return image(decoded.wand, format, decoded.damage)
                }
                // A frame larger than the header said (a GIF's image descriptor, say) meets
                // ImageMagick's resource limits: the image is too large, not broken.
                let exhausted = ["memory allocation failed", "cache resources exhausted", "width or height exceeds limit",
                                 "too much memory"]
                if refused == nil, exhausted.contains(where: error.message.lowercased().contains) {
                    throw PipelineError(.tooLarge, "\(format): \(error.message) (the image holds more than its header declares)")
                }
                throw refused ?? error  // nothing decoded: our own path's reason is the more precise
            }
            if var problem = wand.readProblem() {
                if format == "PNG", let salvaged = try salvagedPNG(data) { return salvaged }
                problem = Damage(level: problem.level, message: format + ": " + problem.message)
                if failOn.stops(problem.level) { throw PipelineError(.decodeFailed, refused?.message ?? problem.message) }
                damage = refused.map { Damage(level: Damage.level(of: $0.message), message: $0.message) } ?? problem
            } else if let refused {
                damage = Damage(level: Damage.level(of: refused.message), message: refused.message)
            }
        }
        if wand.frameCount > maxFrames {
            if maxFrames > 1 {
                throw PipelineError(.tooLarge, "the animation has more than \(maxFrames) frames (max_frames \(maxFrames))")
            }
            try wand.keepFirstFrame()
        }
        if wand.frameCount > 1 {
            if wand.frameCount * width * height > maxPixels * maxFrames {
                throw PipelineError(.tooLarge, "\(wand.frameCount) frames of \(width)x\(height) exceed the limits")
            }
            wand = try wand.coalesced()
        }
        for frame in wand.frameCount > 1 ? wand.frames() : [wand] {
            // Orientation means EXIF's (or TIFF's tag). ImageMagick's TGA coder, for one, already
            // stores the rows top down and still reports the file's bottom-left origin.
            if Self.orientedFormats.contains(format) {
                if autoOrient { try frame.autoOrient() }
            } else {
                frame.orientation = 1
            }
            if toSRGB { try frame.convertToSRGB() }
        }
        return image(wand, format, damage)
    }

    /// The image decoded by one of the paths of this decoder's own that reduce while decoding
    /// (see the reducers), or `nil` when none takes `data`.
    func reducedDecode(_ data: Data, format: String, size: PixelSize, heif: HEIFReducer.File?,
                       hint: DecodeHint) throws -> PipelineImage? {
        // PNGs are reduced while they are read when the output needs much less (see PNGReducer).
        if format == "PNG", let factor = block(size, hint: hint),
           let reduced = try PNGReducer.decode(data, factor: factor, toSRGB: toSRGB, failOn: failOn) {
            return image(reduced.wand, format, reduced.damage)
        }

        // JPEGs are scaled by libjpeg and averaged while read (see JPEGReducer).
        if format == "JPEG", shrinkOnLoad, let plan = JPEGReducer.plan(size, hint: hint, headroom: headroom),
           let reduced = try JPEGReducer.decode(data, plan: plan, toSRGB: toSRGB, autoOrient: autoOrient, failOn: failOn) {
            if toSRGB { try reduced.wand.convertToSRGB() }
            return image(reduced.wand, format, reduced.damage)
        }
        // AVIF and HEIC: libheif to 8 bits, averaged before ImageMagick sees them (see HEIFReducer).
        if let heif, maxFrames == 1,
           let wand = try HEIFReducer.decode(heif, factor: block(size, hint: hint) ?? 1, limits: (maxWidth, maxHeight, maxPixels)) {
            if toSRGB { try wand.convertToSRGB() }
            return PipelineImage(taking: wand, sourceFormat: format)
        }
        // GIFs: the first image by giflib, averaged before ImageMagick sees it (see GIFReducer).
        if format == "GIF", maxFrames == 1, let factor = block(size, hint: hint),
           let wand = try GIFReducer.decode(data, factor: factor) {
            return PipelineImage(taking: wand, sourceFormat: format)
        }
        // TIFFs: libtiff's RGBA interface, averaged before ImageMagick sees them (see TIFFReducer).
        if format == "TIFF", shrinkOnLoad, let wand = try TIFFReducer.decode(data, hint: hint, headroom: headroom, keepsPages: maxFrames > 1) {
            if toSRGB { try wand.convertToSRGB() }
            return PipelineImage(taking: wand, sourceFormat: format)
        }
        // WebPs are decoded by libwebp straight to a reduced size (see WebPReducer).
        if format == "WEBP", shrinkOnLoad, let plan = try WebPReducer.plan(data, keepsFrames: maxFrames > 1),
           let scaled = WebPReducer.scaledSize(plan, hint: hint, headroom: headroom) {
            let decoded = try WebPReducer.decode(data, plan: plan, size: scaled, failOn: failOn)
            if toSRGB { try decoded.wand.convertToSRGB() }
            return image(decoded.wand, format, decoded.damage)
        }
        return nil
    }

    /// A damaged PNG that ImageMagick's coder gave up on or complained about, read by libpng as
    /// `fail_on` allows (see ``PNGReducer/decodeWhole(_:failOn:)``): libpng's precise reason when
    /// the damage stops it.
    func salvagedPNG(_ data: Data) throws -> PipelineImage? {
        guard let (wand, damage) = try PNGReducer.decodeWhole(data, failOn: failOn) else { return nil }
        if toSRGB { try wand.convertToSRGB() }
        return image(wand, "PNG", damage)
    }

    /// `wand` as the decoded image, marked degraded by `damage`.
    func image(_ wand: Wand, _ format: String, _ damage: Damage? = nil) -> PipelineImage {
        var image = PipelineImage(taking: wand, sourceFormat: format)
        image.degraded = damage?.message
        return image
    }

}

extension Wand {
    /// An sRGB ICC profile from the system (Ghostscript's, package libgs-common), for converting
    /// profiled images with lcms; without one, colour spaces are converted by formula.
    static let sRGBProfile: Data? = [
        "/usr/share/color/icc/ghostscript/srgb.icc", "/usr/share/color/icc/sRGB.icc", "/usr/share/color/icc/colord/sRGB.icc",
    ].lazy.compactMap { FileManager.default.contents(atPath: $0) }.first

    /// Whether an ICC profile describes sRGB (its description names it, in ASCII or UTF-16).
    static func isSRGB(_ profile: Data) -> Bool {
        let bytes = [UInt8](profile.prefix(4096))
        let ascii = Array("sRGB".utf8), utf16 = [0, 0x73, 0, 0x52, 0, 0x47, 0, 0x42] as [UInt8]
        func contains(_ needle: [UInt8]) -> Bool {
            guard bytes.count >= needle.count else { return false }
            return (0...(bytes.count - needle.count)).contains { Array(bytes[$0..<$0 + needle.count]) == needle }
        }
        return contains(ascii) || contains(utf16)
    }

    /// CMYK and ICC-profiled images to sRGB: through the embedded profile with lcms when there is
    /// one, by formula otherwise; the profile is then dropped (sRGB is what viewers assume).
    func convertToSRGB() throws {
        let space = colorspace
        if let profile = iccProfile {
            if space != GRAYColorspace, !Self.isSRGB(profile), let sRGB = Self.sRGBProfile {
                try convert(toProfile: sRGB)
            }
            removeICCProfile()
        }
        try toSRGB()
    }

    /// The damage the last read met and decoded past (a truncated or corrupt file that ImageMagick
    /// decoded anyway, filling the rest with grey), or `nil`: the worst of an error, a corrupt-image
    /// warning, or a message that says the data is incomplete. Other warnings (an unknown TIFF tag,
    /// a PNG's edited sRGB profile) are not damage.
    func readProblem() -> Damage? {
        let found = [pendingException(), imageException()].compactMap { $0 }
        let incomplete = ["corrupt image", "improper image header", "damaged", "crc error", "unsupported marker"]
        var worst: Damage?
        for (severity, message) in found {
            var level = Damage.level(of: message)
            if level != .truncated {
                if severity.rawValue >= ErrorException.rawValue {
                    level = .error
                } else if severity == CorruptImageWarning || incomplete.contains(where: message.lowercased().contains) {
                    level = .warning
                } else {
                    continue
                }
            }
            if level > (worst?.level ?? .warning) || worst == nil { worst = Damage(level: level, message: message) }
        }
        return worst
    }
}
