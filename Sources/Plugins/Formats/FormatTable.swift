import Foundation
import PipelineKit

/// One image format as this module reads and writes it: the row its folder under `Formats/`
/// registers in ``FormatTable``. A format that only ImageMagick reads is a row with nothing but
/// its name (``magick(_:_:byDefault:)``).
struct FormatEntry: Sendable {
    /// Opens a reader of one file (its header read now).
    typealias Open = @Sendable (ImageFormat, LoadedData, DecodeSettings) throws -> any FormatReader

    /// The name the `imagemagick` decoder's `formats` option gives it (`nil`: not listed there;
    /// SVG is allowed by `allow_svg`).
    let name: String?
    /// The sniffed formats that name allows (`ico` allows ICO and CUR).
    let formats: [ImageFormat]
    /// Whether `formats` accepts it unless a pipeline says otherwise.
    let byDefault: Bool
    /// Its reader; `nil`: ``MagickReader`` (ImageMagick's coder, the size from ``dimensions`` or a ping).
    let reader: Open?
    /// Width and height read in place from the first bytes (before anything is allocated for the
    /// image), or `nil` when the bytes do not give them; `nil` when the format has no probe (then
    /// ImageMagick pings the header).
    let dimensions: (@Sendable (Data) -> PixelSize?)?
    /// The encoder plugins that write it.
    let encoders: [Plugin]
    /// Its parsers of untrusted bytes, by the fuzz harness's name (``FuzzTargets``).
    let fuzzTargets: [String: @Sendable (Data) -> Void]
    /// Whether its reader decodes every file itself, with no ImageMagick coder (JPEG XL: ImageMagick
    /// 6 has none), so the decoder does not ask ImageMagick whether it can read the format.
    let readsItself: Bool

    init(name: String?, formats: [ImageFormat], byDefault: Bool = true, reader: Open? = nil,
         dimensions: (@Sendable (Data) -> PixelSize?)? = nil, encoders: [Plugin] = [],
         fuzzTargets: [String: @Sendable (Data) -> Void] = [:], readsItself: Bool = false) {
        self.name = name
        self.formats = formats
        self.byDefault = byDefault
        self.reader = reader
        self.dimensions = dimensions
        self.encoders = encoders
        self.fuzzTargets = fuzzTargets
        self.readsItself = readsItself
    }

    /// A format read by ImageMagick's coder alone, allowed by `name` in `formats`.
    static func magick(_ name: String, _ formats: [ImageFormat], byDefault: Bool = false) -> FormatEntry {
        FormatEntry(name: name, formats: formats, byDefault: byDefault)
    }
}

/// Every format, one row each (its folder's `entry`): the `imagemagick` decoder's readers, the
/// `formats` option's names and defaults, the header probes, the encoders and the fuzz targets
/// all come from here. A new format is a folder under `Formats/` and one row.
///
/// Which format a file is comes first, from its bytes, in PipelineKit (``FormatSniffer``, over
/// ``ImageFormat``): loaders and the engine look before any decoder does.
enum FormatTable {
    static let entries: [FormatEntry] = [
        JPEGFormat.entry, PNGFormat.entry, GIFFormat.entry, WebPFormat.entry, TIFFFormat.entry, BMPFormat.entry,
        .magick("ico", [.ico, .cur], byDefault: true), HEIFFormat.heic, HEIFFormat.avif, JXLFormat.entry,
        .magick("jp2", [.jp2, .j2k]), .magick("pnm", [.pnm]), .magick("tga", [.tga]), .magick("pcx", [.pcx, .dcx]),
        .magick("psd", [.psd, .psb]), .magick("sgi", [.sgi]), .magick("sun", [.sun]), .magick("dds", [.dds]),
        .magick("fits", [.fits]), .magick("xbm", [.xbm]), .magick("xpm", [.xpm]),
        SVGFormat.entry, VideoFormat.entry,
    ]

    static let byFormat: [ImageFormat: FormatEntry] = Dictionary(
        entries.flatMap { entry in entry.formats.map { ($0, entry) } }, uniquingKeysWith: { first, _ in first })

    /// The row of `format`, if it has one.
    static func entry(for format: ImageFormat) -> FormatEntry? { byFormat[format] }

    /// The `formats` option's names, in the table's order, each with what it allows.
    static var names: [(name: String, formats: [ImageFormat])] {
        entries.compactMap { entry in entry.name.map { ($0, entry.formats) } }
    }

    /// Every format's encoder plugins, in the table's order.
    static var encoders: [Plugin] { entries.flatMap(\.encoders) }
}
