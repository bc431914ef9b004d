import Foundation

/// Identifies a format from its first bytes, so ImageMagick never guesses from content.
public enum FormatSniffer {
    /// What the first bytes say.
    public enum Sniffed: Equatable, Sendable {
        /// An image format, by ImageMagick coder name (`JPEG`, `PNG`, ...).
        case image(String)
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

    public static func sniff(_ data: Data) -> Sniffed {
        let b = [UInt8](data.prefix(64))
        func starts(_ bytes: [UInt8], at offset: Int = 0) -> Bool {
            b.count >= offset + bytes.count && Array(b[offset..<offset + bytes.count]) == bytes
        }
        if starts([0xFF, 0xD8, 0xFF]) { return .image("JPEG") }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .image("PNG") }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return .image("GIF") }
        if starts(Array("RIFF".utf8)), starts(Array("WEBP".utf8), at: 8) { return .image("WEBP") }
        if starts([0x49, 0x49, 0x2A, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2A]) { return .image("TIFF") }
        // BigTIFF: version 43, offsets of 8 bytes; libtiff (and ImageMagick's TIFF coder) read it.
        if starts([0x49, 0x49, 0x2B, 0x00, 0x08, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2B, 0x00, 0x08]) { return .image("TIFF") }
        if starts(Array("BM".utf8)), b.count >= 14 { return .image("BMP") }
        if starts([0x00, 0x00, 0x01, 0x00]), b.count >= 6, b[4] != 0 || b[5] != 0 { return .image("ICO") }
        if starts(Array("ftyp".utf8), at: 4), b.count >= 12 {
            let brand = String(decoding: b[8..<12], as: UTF8.self)
            if ["avif", "avis"].contains(brand) { return .image("AVIF") }
            if ["heic", "heix", "hevc", "heim", "heis", "mif1", "msf1"].contains(brand) { return .image("HEIC") }
        }
        if starts([0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20]) { return .image("JP2") }
        if starts(Array("8BPS".utf8)) { return .other("PSD") }
        if starts(Array("%PDF".utf8)) { return .other("PDF") }
        if starts(Array("%!".utf8)) || starts([0xC5, 0xD0, 0xD3, 0xC6]) { return .other("PostScript") }
        // Text-based formats: look past whitespace and a UTF-8 BOM.
        var text = String(decoding: data.prefix(512), as: UTF8.self)
        if text.hasPrefix("\u{FEFF}") { text.removeFirst() }
        let lower = text.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        if lower.hasPrefix("<svg") || (lower.hasPrefix("<?xml") && lower.contains("<svg")) { return .other("SVG") }
        if lower.hasPrefix("<!doctype html") || lower.hasPrefix("<html") || lower.hasPrefix("<head") || lower.hasPrefix("<body") {
            return .other("HTML")
        }
        if lower.hasPrefix("<image") || lower.hasPrefix("<msl") || (lower.hasPrefix("<?xml") && (lower.contains("<image") || lower.contains("<msl"))) {
            return .other("MSL")
        }
        if lower.hasPrefix("<?xml") { return .other("XML") }
        if lower.hasPrefix("push graphic-context") || lower.hasPrefix("viewbox") { return .other("MVG") }
        if lower.hasPrefix("{") || lower.hasPrefix("[") { return .other("JSON") }
        // Printable text (ImageMagick's TXT/TEXT coders, or a `text:`/`label:` pseudo-file name).
        if isText(data.prefix(512)) { return .other("text") }
        return .unknown
    }
}
