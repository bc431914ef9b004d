import Foundation

/// A raster image format, as ``FormatSniffer`` recognises it from the content. Everything after
/// the sniffer branches on this type, never on a name.
public enum ImageFormat: String, Sendable, CaseIterable, Hashable {
    case jpeg = "JPEG", png = "PNG", gif = "GIF", webp = "WEBP", tiff = "TIFF", bmp = "BMP", ico = "ICO", cur = "CUR"
    case heic = "HEIC", avif = "AVIF", jp2 = "JP2", j2k = "J2K", psd = "PSD", psb = "PSB", pnm = "PNM", pcx = "PCX"
    case dcx = "DCX", sgi = "SGI", sun = "SUN", dds = "DDS", fits = "FITS", tga = "TGA", xpm = "XPM", xbm = "XBM"
    /// JPEG XL (a bare codestream or the ISO BMFF container), read by libjxl: ImageMagick 6 has no coder for it.
    case jxl = "JXL"
    /// SVG, rendered by ImageMagick's own renderer (MSVG) when a decoder allows it.
    case svg = "MSVG"
    /// Video, whose poster frame is the image (read by libavformat, never by ImageMagick): MP4
    /// (ISO BMFF), QuickTime, WebM and Matroska.
    case mp4 = "MP4", mov = "MOV", webm = "WEBM", mkv = "MKV"

    /// ImageMagick's name for the coder that reads it (also ``PipelineImage/sourceFormat``).
    public var coder: String { rawValue }

    /// HEIC or AVIF: the HEIF container, read by libheif.
    public var isHEIF: Bool { self == .heic || self == .avif }

    /// Whether a file of this format may hold several frames or pages.
    public var mayHoldFrames: Bool { [.gif, .webp, .tiff, .ico, .cur, .heic, .avif, .psd, .psb, .dcx, .dds].contains(self) }

    /// A video container: the image is one of its frames.
    public var isVideo: Bool { [.mp4, .mov, .webm, .mkv].contains(self) }

    /// Whether its orientation is EXIF's (or TIFF's tag), which `auto_orient` applies.
    public var hasEXIFOrientation: Bool { [.jpeg, .png, .tiff, .webp, .heic, .avif].contains(self) }
}
