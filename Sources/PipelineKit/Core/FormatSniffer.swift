import Foundation
import Synchronization

/// Identifies a format from its first bytes, so ImageMagick never guesses from content.
public enum FormatSniffer {
    /// Sniffs so far in this process (for the test that counts one per decoded item).
    package static let count = Atomic<Int>(0)

    /// What the first bytes say.
    public enum Sniffed: Equatable, Sendable {
        /// An image format (SVG included: what allows it is the decoder's business).
        case image(ImageFormat)
        /// Something recognisably not a raster image (HTML, SVG, PostScript, ...), with a name.
        case other(String)
        case unknown
    }

    /// Whether `bytes` are valid UTF-8 without control characters other than whitespace.
    static func isText(_ bytes: Data) -> Bool {
        guard !bytes.isEmpty else { return false }
        var bytes = bytes
        // A multi-byte character cut at the end of the prefix is still text.
        while let last = bytes.last, last & 0xC0 == 0x80 || last >= 0xC0 { bytes.removeLast(); if bytes.count < 2 { break } }
        guard let text = String(bytes: bytes, encoding: .utf8) else { return false }
        return text.unicodeScalars.allSatisfy { $0.value >= 0x20 || $0 == "\n" || $0 == "\r" || $0 == "\t" || $0 == "\u{0C}" }
    }

    /// What `data` is, from its first bytes (and, for a TGA 2.0 file, its footer).
    ///
    /// - Parameter tga: also recognise a TGA file that has no TGA 2.0 footer. TGA has no magic
    ///   number: its header rules alone match some files that are not TGA at all, so they are
    ///   applied only when the caller accepts TGA (`formats: [tga]`); otherwise such a file is
    ///   ``Sniffed/unknown``.
    public static func sniff(_ data: Data, tga: Bool = false) -> Sniffed {
        count.add(1, ordering: .relaxed)
        let head = Head(data)
        if let image = image(head, data) { return image }
        if let other = other(head) { return other }
        if let text = textual(data) { return text }
        if tga, isTGAHeader(head.b) { return .image(.tga) }
        return .unknown
    }

    /// A file's first 64 bytes, and tests on them.
    struct Head {
        let b: [UInt8]
        init(_ data: Data) { b = [UInt8](data.prefix(64)) }
        func starts(_ bytes: [UInt8], at offset: Int = 0) -> Bool {
            b.count >= offset + bytes.count && Array(b[offset..<offset + bytes.count]) == bytes
        }
    }

    /// The image formats recognised by a signature in their first bytes (or a TGA 2.0 footer).
    static func image(_ head: Head, _ data: Data) -> Sniffed? {
        let b = head.b
        func starts(_ bytes: [UInt8], at offset: Int = 0) -> Bool { head.starts(bytes, at: offset) }
        func isSpace(_ byte: UInt8) -> Bool { [0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C].contains(byte) }
        if starts([0xFF, 0xD8, 0xFF]) { return .image(.jpeg) }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .image(.png) }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return .image(.gif) }
        if starts(Array("RIFF".utf8)), starts(Array("WEBP".utf8), at: 8) { return .image(.webp) }
        if starts([0x49, 0x49, 0x2A, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2A]) { return .image(.tiff) }
        // BigTIFF: version 43, offsets of 8 bytes; libtiff (and ImageMagick's TIFF coder) read it.
        if starts([0x49, 0x49, 0x2B, 0x00, 0x08, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2B, 0x00, 0x08]) { return .image(.tiff) }
        if starts(Array("BM".utf8)), b.count >= 14 { return .image(.bmp) }
        if starts([0x00, 0x00, 0x01, 0x00]), b.count >= 6, b[4] != 0 || b[5] != 0 { return .image(.ico) }
        if starts([0x00, 0x00, 0x02, 0x00]), b.count >= 6, b[4] != 0 || b[5] != 0 { return .image(.cur) }
        if starts(Array("ftyp".utf8), at: 4), b.count >= 12 {
            let brand = String(decoding: b[8..<12], as: UTF8.self)
            if ["avif", "avis"].contains(brand) { return .image(.avif) }
            if ["heic", "heix", "hevc", "heim", "heis", "mif1", "msf1"].contains(brand) { return .image(.heic) }
            if brand == "qt  " { return .image(.mov) }
            if videoBrands.contains(brand) { return .image(.mp4) }
        }
        // QuickTime files older than the ftyp box start with one of its top-level atoms.
        if b.count >= 8, ["moov", "mdat", "wide", "pnot"].contains(String(decoding: b[4..<8], as: UTF8.self)) { return .image(.mov) }
        // Matroska and WebM: an EBML header, whose DocType says which.
        if starts([0x1A, 0x45, 0xDF, 0xA3]) { return .image(docType(b) == "webm" ? .webm : .mkv) }
        // JPEG XL: a bare codestream, or the container's signature box.
        if starts([0xFF, 0x0A]) || starts([0x00, 0x00, 0x00, 0x0C, 0x4A, 0x58, 0x4C, 0x20, 0x0D, 0x0A, 0x87, 0x0A]) { return .image(.jxl) }
        // JPEG 2000: the JP2 signature box, or a bare codestream (SOC then SIZ).
        if starts([0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20, 0x0D, 0x0A, 0x87, 0x0A]) { return .image(.jp2) }
        if starts([0xFF, 0x4F, 0xFF, 0x51]) { return .image(.j2k) }
        // Photoshop: version 1 (PSD) or 2 (large document, PSB).
        if starts(Array("8BPS".utf8) + [0x00, 0x01]) { return .image(.psd) }
        if starts(Array("8BPS".utf8) + [0x00, 0x02]) { return .image(.psb) }
        // netpbm: P1-P7 (bitmap, greymap, pixmap in text or binary; PAM) and PF/Pf (PFM), then whitespace.
        if b.count >= 3, b[0] == UInt8(ascii: "P"), (UInt8(ascii: "1")...UInt8(ascii: "7")).contains(b[1])
            || b[1] == UInt8(ascii: "F") || b[1] == UInt8(ascii: "f"), isSpace(b[2]) {
            return .image(.pnm)
        }
        // PCX: manufacturer 10, a known version, RLE or none, 1/2/4/8 bits, a window that is not inverted.
        if data.count >= 128, b.count >= 12, b[0] == 0x0A, [0, 2, 3, 4, 5].contains(b[1]), b[2] <= 1, [1, 2, 4, 8].contains(b[3]) {
            let le = { (i: Int) in Int(b[i]) | Int(b[i + 1]) << 8 }
            if le(4) <= le(8), le(6) <= le(10) { return .image(.pcx) }
        }
        // SGI: magic 474, RLE or verbatim storage, 1 or 2 bytes per channel, 1 to 3 dimensions.
        if starts([0x01, 0xDA]), b.count >= 6, b[2] <= 1, [1, 2].contains(b[3]), b[4] == 0, (1...3).contains(b[5]) {
            return .image(.sgi)
        }
        if starts([0x59, 0xA6, 0x6A, 0x95]) { return .image(.sun) }
        // DirectDraw Surface: magic and a 124-byte header. DCX: a directory of PCX pages. FITS: its
        // first header card.
        if starts(Array("DDS ".utf8) + [0x7C, 0x00, 0x00, 0x00]) { return .image(.dds) }
        if starts([0xB1, 0x68, 0xDE, 0x3A]) { return .image(.dcx) }
        if starts(Array("SIMPLE  =".utf8)) { return .image(.fits) }
        // TGA 2.0 ends with its footer's signature; earlier TGA files only by their header rules.
        if data.count >= 44, data.suffix(18).elementsEqual(Array("TRUEVISION-XFILE.".utf8) + [0]), isTGAHeader(b) {
            return .image(.tga)
        }
        return nil
    }

    /// The major brands of MP4 video files (ISO BMFF, 3GPP, DASH), AVIF and HEIF excepted.
    static let videoBrands: Set<String> = ["isom", "iso2", "iso3", "iso4", "iso5", "iso6", "iso8", "mp41", "mp42", "avc1", "M4V ", "M4VP",
                                           "dash", "mmp4", "3gp4", "3gp5", "3gp6", "3g2a", "3g2b", "MSNV", "msnv", "XAVC", "f4v ", "NDAS"]

    /// The DocType of an EBML header in the first bytes (`webm`, `matroska`), if it is there.
    static func docType(_ b: [UInt8]) -> String? {
        guard let at = (4..<max(4, b.count - 3)).first(where: { b[$0] == 0x42 && b[$0 + 1] == 0x82 }), b[at + 2] & 0x80 != 0 else { return nil }
        let length = Int(b[at + 2] & 0x7F)
        guard at + 3 + length <= b.count else { return nil }
        return String(decoding: b[(at + 3)..<(at + 3 + length)], as: UTF8.self)
    }

    /// Formats recognised and read by nothing here (documents, other images), so that they are
    /// named as such.
    static func other(_ head: Head) -> Sniffed? {
        let b = head.b
        func starts(_ bytes: [UInt8], at offset: Int = 0) -> Bool { head.starts(bytes, at: offset) }
        if starts(Array("%PDF".utf8)) { return .other("PDF") }
        if starts(Array("qoif".utf8)) { return .other("QOI") }
        if starts(Array("icns".utf8)) { return .other("ICNS") }
        if starts(Array("BLP1".utf8)) || starts(Array("BLP2".utf8)) { return .other("BLP") }
        if b.count >= 6, [0x11, 0x12].contains(b[4]), b[5] == 0xAF { return .other("FLIC") }
        if starts([0x76, 0x2F, 0x31, 0x01]) { return .other("OpenEXR") }
        if starts(Array("gimp xcf".utf8)) { return .other("XCF") }
        if starts(Array("BPG".utf8) + [0xFB]) { return .other("BPG") }
        if starts([0xD7, 0xCD, 0xC6, 0x9A]) { return .other("WMF") }
        if starts(Array("DanM".utf8)) || starts(Array("LinS".utf8)) { return .other("MSP") }
        if starts(Array("%!".utf8)) || starts([0xC5, 0xD0, 0xD3, 0xC6]) { return .other("PostScript") }
        return nil
    }

    /// Formats written as text (SVG, XPM, XBM; HTML, XML, JSON, scripts): looked for past
    /// whitespace and a UTF-8 BOM.
    static func textual(_ data: Data) -> Sniffed? {
        var text = String(decoding: data.prefix(512), as: UTF8.self)
        if text.hasPrefix("\u{FEFF}") { text.removeFirst() }
        let lower = text.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        if lower.hasPrefix("<svg") || (lower.hasPrefix("<?xml") && lower.contains("<svg")) { return .image(.svg) }
        if lower.hasPrefix("<!doctype html") || lower.hasPrefix("<html") || lower.hasPrefix("<head") || lower.hasPrefix("<body") {
            return .other("HTML")
        }
        if lower.hasPrefix("<image") || lower.hasPrefix("<msl") || (lower.hasPrefix("<?xml") && (lower.contains("<image") || lower.contains("<msl"))) {
            return .other("MSL")
        }
        if lower.hasPrefix("<?xml") { return .other("XML") }
        // X bitmaps and pixmaps: C source text.
        if lower.hasPrefix("/* xpm */") { return .image(.xpm) }
        if lower.hasPrefix("#define "), lower.contains("_width ") { return .image(.xbm) }
        if lower.hasPrefix("push graphic-context") || lower.hasPrefix("viewbox") { return .other("MVG") }
        if lower.hasPrefix("{") || lower.hasPrefix("[") { return .other("JSON") }
        // Printable text (ImageMagick's TXT/TEXT coders, or a `text:`/`label:` pseudo-file name).
        if isText(data.prefix(512)) { return .other("text") }
        return nil
    }

    /// Whether the first bytes follow TGA's header rules: colour-mapped (types 1 and 9) with a
    /// colour map of known entry size, true-colour (2 and 10) or grey (3 and 11) without one, a
    /// known pixel depth, a size, and the descriptor's reserved bits clear.
    static func isTGAHeader(_ b: [UInt8]) -> Bool {
        guard b.count >= 18 else { return false }
        let le = { (i: Int) in Int(b[i]) | Int(b[i + 1]) << 8 }
        let mapType = b[1], type = b[2], mapLength = le(5), entryBits = b[7], depth = b[16], descriptor = b[17]
        guard le(12) > 0, le(14) > 0, descriptor & 0xC0 == 0, descriptor & 0x0F <= 8 else { return false }
        switch type {
        case 1, 9:
            return mapType == 1 && mapLength > 0 && [15, 16, 24, 32].contains(entryBits) && [8, 16].contains(depth)
        case 2, 10:
            return mapType == 0 && [15, 16, 24, 32].contains(depth)
        case 3, 11:
            return mapType == 0 && [8, 16].contains(depth)
        default:
            return false
        }
    }
}
