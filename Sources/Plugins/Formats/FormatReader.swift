import Foundation
import MagickKit
import PipelineKit
import Synchronization

/// What a decode needs of the `imagemagick` decoder's options.
struct DecodeSettings: Sendable {
    let shrink: ImageMagickDecoder.ShrinkOnLoad
    let maxFrames: Int
    let toSRGB: Bool
    let autoOrient: Bool
    let failOn: FailOn
    let maxWidth: Int
    let maxHeight: Int
    let maxPixels: Int
    /// Which frame of a video becomes the image, and the video's limits.
    var video = VideoSettings()

    var shrinkOnLoad: Bool { shrink != .off }
    /// How many times the target a reduced decode keeps, at least.
    var headroom: Int { shrink == .fast ? 1 : 2 }

    /// How many times the target a PNG's block averages keep, at least: three by default
    /// (``Resize/boxHeadroom`` says what two cost), one under `fast`. GIF's, HEIF's, TIFF's and
    /// JPEG's past its DCT scales keep ``headroom``.
    var boxHeadroom: Int { shrink == .fast ? 1 : Resize.boxHeadroom }

    /// The block size the averaging paths (PNG, HEIF, GIF) reduce a `size` image by under `hint`,
    /// keeping `headroom` times the target, or `nil` when shrink-on-load is off or there is
    /// nothing to reduce.
    func block(_ size: PixelSize, hint: DecodeHint, headroom: Int) -> Int? {
        guard shrinkOnLoad, let shrink = hint.maxShrink(from: size) else { return nil }
        return BoxReducer.blockSize(for: size, shrink: shrink, headroom: headroom)
    }
}

/// What a reader's own decode made: a wand, or 8- or 16-bit pixels kept out of ImageMagick
/// (upright, sRGB, no profile: see ``RGB8Pixels`` and ``RGB16Pixels``).
enum Decoded {
    case wand(Wand)
    case pixels(RGB8Pixels)
    case pixels16(RGB16Pixels)

    /// A wand of the pixels (the wand itself, or one made from the pixels).
    func wand() throws -> Wand {
        switch self {
        case .wand(let wand): return wand
        case .pixels(let pixels): return try pixels.wand()
        case .pixels16(let pixels): return try pixels.wand()
        }
    }
}

/// How one file will be decoded under one hint, and the memory that takes at its peak, both from
/// one reading of its header (so the estimate and the decode cannot disagree).
struct ReadPlan: Sendable {
    /// The reader's own decode, which reduces while it decodes (see the reducers), when it takes
    /// the file; it may still return `nil` to leave the file to ImageMagick.
    var reduced: (@Sendable () throws -> (pixels: Decoded, damage: Damage?)?)?
    /// For ImageMagick's path: the `jpeg:size` to ask libjpeg for.
    var jpegSize: String?
    /// Peak memory of the decode, in bytes: of the reduced path when there is one, else of
    /// ImageMagick's, with the compressed bytes.
    var estimatedMemory: Int
}

/// One format family's reading of one file, as libvips has one loader per format: the header is
/// read once, when the reader is made; the size check, the memory estimate and the choice of path
/// all come from that reading.
protocol FormatReader: Sendable {
    var format: ImageFormat { get }
    /// The whole file (read from disk now when the reader reads a local file in place).
    var data: Data { get }
    /// The file's size in bytes. Default: `data`'s.
    var byteCount: Int { get }
    /// The size the header gives.
    var size: PixelSize { get }
    /// The way to decode under `hint`.
    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan
    /// What this reader can still make of a file ImageMagick's coder gave up on or found damaged,
    /// as `fail_on` allows; `nil` when nothing. Default: nothing.
    func salvage(_ settings: DecodeSettings) throws -> (wand: Wand, damage: Damage?)?
    /// ImageMagick's read of the file into `wand` (at most `maxFrames` frames, all when `nil`), and
    /// the damage its coder recorded. Default: the sniffed format's coder on ``data``, its damage
    /// from `Wand.readProblem()`.
    func magickRead(into wand: Wand, maxFrames: Int?) throws -> Damage?
    /// The source's own facts (`analyze`, when `facts`) and metadata (`metadata:`, when
    /// `metadata`) from the header, no pixel decoded; `upright` says, for an EXIF orientation,
    /// whether the decode turns the pixels upright. Default: one ImageMagick ping for both
    /// (``SourceFacts``), with ``exifBesideProfiles`` and ``xmpBesideProfiles``.
    func headerFacts(facts: Bool, metadata: Bool, upright: (Int) -> Bool) -> HeaderFacts
    /// EXIF that ImageMagick 6's ping does not find where the format keeps it. Default: none.
    var exifBesideProfiles: Data? { get }
    /// Facts the decode itself found (a video's poster: which frame, when), added to the image's
    /// facts. Default: none.
    var decodedFacts: ImageFacts { get }
    /// XMP that ImageMagick 6's ping does not find where the format keeps it. Default: none.
    var xmpBesideProfiles: Data? { get }
}

/// What a reader reads of the source from its header: the facts `analyze` reports and the
/// metadata a pipeline's `metadata:` keeps.
struct HeaderFacts {
    var facts: ImageFacts = [:]
    var metadata: ImageMetadata?
}

extension FormatReader {
    func salvage(_ settings: DecodeSettings) throws -> (wand: Wand, damage: Damage?)? { nil }

    func magickRead(into wand: Wand, maxFrames: Int?) throws -> Damage? {
        try wand.read(data, format: format.coder, maxFrames: maxFrames)
        return wand.readProblem()
    }

    func headerFacts(facts: Bool, metadata: Bool, upright: (Int) -> Bool) -> HeaderFacts {
        guard let pinged = SourceFacts.ping(data, format: format) else { return HeaderFacts() }
        return HeaderFacts(facts: facts ? SourceFacts.read(pinged) : [:],
                           metadata: metadata ? SourceFacts.metadata(pinged, exifBesideProfiles: { exifBesideProfiles },
                                                                                xmpBesideProfiles: { xmpBesideProfiles }, upright: upright) : nil)
    }

    var exifBesideProfiles: Data? { nil }

    var decodedFacts: ImageFacts { [:] }

    var xmpBesideProfiles: Data? { nil }

    var byteCount: Int { data.count }

    /// ImageMagick's path's peak memory for a decode at `decoded` size: 16-bit pixels (8 bytes
    /// each), the coder's own copy (a row set for JPEG, up to an 8-bit image for the others), extra
    /// (a progressive JPEG's coefficients), and the compressed bytes.
    func magickMemory(decoded: PixelSize? = nil, codecBytesPerPixel: Int = 4, extra: Int = 0) -> Int {
        let pixels = (decoded ?? size).width * (decoded ?? size).height
        return pixels * 8 + pixels * codecBytesPerPixel + extra + byteCount
    }
}

/// Header reads so far in this process (for the test that counts one per decoded item).
enum HeaderReads {
    static let count = Atomic<Int>(0)
    static func add() { count.add(1, ordering: .relaxed) }
}

extension ImageMagickDecoder {
    /// The reader of `format` for `loaded` (its folder's, from ``FormatTable``, or ImageMagick's):
    /// its header read now. Throws for a header too broken to give a size (`decode_failed`, with
    /// the codec's reason where it gives one).
    static func reader(_ format: ImageFormat, _ loaded: LoadedData, settings: DecodeSettings) throws -> any FormatReader {
        HeaderReads.add()
        if let open = FormatTable.entry(for: format)?.reader { return try open(format, loaded, settings) }
        return try MagickReader(format, try loaded.wholeData())
    }

    /// The size in `data`'s header: parsed in place where the format's folder has a header probe
    /// (``FormatEntry/dimensions``), else read by ImageMagick (a ping: no pixel decoded).
    static func headerSize(_ data: Data, format: ImageFormat) throws -> PixelSize {
        try FormatTable.entry(for: format)?.dimensions?(data) ?? pingedSize(data, format: format)
    }

    /// The size ImageMagick reads from the header of `data` as `format` (a ping: no pixel decoded).
    static func pingedSize(_ data: Data, format: ImageFormat) throws -> PixelSize {
        let header = Wand()
        try header.ping(data, format: format.coder)
        return PixelSize(width: header.width, height: header.height)
    }
}
