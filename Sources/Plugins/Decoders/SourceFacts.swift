import Foundation
import MagickKit
import PipelineKit

/// The source's own facts, for a chain that asks for them (`analyze`): orientation, colour space,
/// the ICC profile's description and a few EXIF fields, read by ImageMagick from the header (a
/// ping: no pixel is decoded), so they are the file's, whatever the decode then converts or drops.
enum SourceFacts {
    /// ImageMagick's reading of the header of `data` as `format`, for ``read(_:)`` and
    /// ``metadata(_:data:format:upright:)`` (one ping for both); `nil` for HEIC, AVIF and SVG, which
    /// ImageMagick 6 would decode or render to ping, and for a header it cannot read.
    static func ping(_ data: Data, format: ImageFormat) -> Wand? {
        guard !format.isHEIF, format != .svg else { return nil }
        let wand = Wand()
        return (try? wand.ping(data, format: format.coder)) != nil ? wand : nil
    }

    /// What the pinged header says (``ping(_:format:)``).
    static func read(_ wand: Wand) -> ImageFacts {
        var facts: ImageFacts = ["colorspace": .string(wand.colorspaceName)]
        if (1...8).contains(wand.orientation) { facts["orientation"] = .int(wand.orientation) }
        if let profile = wand.iccProfile { facts["icc"] = .string(ICCProfile.description(profile) ?? "unnamed profile") }
        var exif: ImageFacts = [:]
        for (name, property) in [("make", "exif:Make"), ("model", "exif:Model"), ("lens", "exif:LensModel"),
                                 ("taken", "exif:DateTimeOriginal")] {
            if let value = wand.property(property)?.trimmingCharacters(in: .whitespaces), !value.isEmpty { exif[name] = .string(value) }
        }
        if wand.profile("exif") != nil {
            // Whether the file says where it was taken: a GPS position, not just a GPS block.
            exif["gps"] = .bool(!wand.propertyNames("exif:GPSLatitude*").isEmpty || !wand.propertyNames("exif:GPSLongitude*").isEmpty)
        }
        if !exif.isEmpty { facts["exif"] = .object(exif) }
        return facts
    }

    /// The metadata of `data` (read as `format`) from ImageMagick's ping of it (``ping(_:format:)``):
    /// its EXIF (without JPEG's `Exif\0\0`), XMP and IPTC, and its orientation; `upright` says, for
    /// an orientation, whether the decode turns the pixels upright.
    static func metadata(_ wand: Wand, data: Data, format: ImageFormat, upright: (Int) -> Bool) -> ImageMetadata {
        var exif = wand.profile("exif")
        // ImageMagick 6 does not see a PNG's eXIf chunk after the image data, where its own writer puts it.
        if exif == nil, format == .png { exif = pngChunk("eXIf", in: data) }
        // A TIFF's EXIF is its own first directory.
        if exif == nil, format == .tiff { exif = ExifRewriter.fromTIFF(data) }
        if let block = exif, block.starts(with: Data("Exif\0\0".utf8)) { exif = block.dropFirst(6) }
        let orientation = (1...8).contains(wand.orientation) ? wand.orientation : 1
        return ImageMetadata(exif: exif.map { Data($0) }, xmp: wand.profile("xmp"), iptc: wand.profile("iptc"),
                             orientation: orientation, upright: upright(orientation))
    }

    /// The data of the first chunk of `type` in PNG `data`, walking chunk by chunk (lengths checked).
    static func pngChunk(_ type: String, in data: Data) -> Data? {
        let wanted = Array(type.utf8), end = Array("IEND".utf8)
        var at = data.startIndex + 8
        while at + 12 <= data.endIndex {
            let length = Int(data[at]) << 24 | Int(data[at + 1]) << 16 | Int(data[at + 2]) << 8 | Int(data[at + 3])
            guard length <= data.endIndex - at - 12 else { return nil }
            let name = Array(data[(at + 4)..<(at + 8)])
            if name == wanted { return Data(data[(at + 8)..<(at + 8 + length)]) }
            if name == end { return nil }
            at += 12 + length
        }
        return nil
    }

    /// The facts ``read(_:)`` gives, for a WebP file, from its container's chunks (`ICCP`, `EXIF`)
    /// rather than a ping, which decodes the whole picture in ImageMagick 6.
    static func webPFacts(_ data: Data) -> ImageFacts {
        var facts: ImageFacts = ["colorspace": .string("sRGB")]
        if let profile = riffChunk("ICCP", in: data) { facts["icc"] = .string(ICCProfile.description(profile) ?? "unnamed profile") }
        let metadata = webPMetadata(data) { _ in true }
        guard let exif = metadata.exif else { return facts }
        if (1...8).contains(metadata.orientation), ExifRewriter.value(exif, .main, 0x0112) != nil {
            facts["orientation"] = .int(metadata.orientation)
        }
        var fields: ImageFacts = [:]
        for (name, directory, tag) in [("make", ExifRewriter.Directory.main, UInt16(0x010F)), ("model", .main, 0x0110),
                                       ("lens", .exif, 0xA434), ("taken", .exif, 0x9003)] {
            if let text = ExifRewriter.text(exif, directory, tag) { fields[name] = .string(text) }
        }
        fields["gps"] = .bool(ExifRewriter.value(exif, .gps, 0x0002) != nil || ExifRewriter.value(exif, .gps, 0x0004) != nil)
        facts["exif"] = .object(fields)
        return facts
    }

    /// The metadata of a WebP file, from its container's `EXIF` and `XMP ` chunks: ImageMagick 6
    /// decodes the whole picture to ping a WebP (25 ms a file on the bench corpus, 119 ms at worst).
    static func webPMetadata(_ data: Data, upright: (Int) -> Bool) -> ImageMetadata {
        var exif = riffChunk("EXIF", in: data)
        if let block = exif, block.starts(with: Data("Exif\0\0".utf8)) { exif = Data(block.dropFirst(6)) }
        let orientation = exif.map { block in block.withUnsafeBytes { ExifOrientation.read($0) } } ?? 1
        return ImageMetadata(exif: exif, xmp: riffChunk("XMP ", in: data), orientation: orientation, upright: upright(orientation))
    }

    /// The payload of the first chunk `fourCC` of a RIFF file (WebP), walking chunk by chunk.
    static func riffChunk(_ fourCC: String, in data: Data) -> Data? {
        let wanted = Array(fourCC.utf8)
        var at = data.startIndex + 12
        while at + 8 <= data.endIndex {
            let size = Int(data[at + 4]) | Int(data[at + 5]) << 8 | Int(data[at + 6]) << 16 | Int(data[at + 7]) << 24
            guard size <= data.endIndex - at - 8 else { return nil }
            if Array(data[at..<(at + 4)]) == wanted { return Data(data[(at + 8)..<(at + 8 + size)]) }
            at += 8 + size + size % 2
        }
        return nil
    }

    /// The metadata of an open HEIF file, from libheif's metadata blocks (EXIF and XMP). Its
    /// pixels are always upright: libheif applies the file's rotation and mirroring itself.
    static func metadata(_ file: HEIFReducer.File) -> ImageMetadata {
        var exif = file.metadataBlock(type: "Exif")
        // A HEIF EXIF block starts with the offset of the TIFF header after these four bytes.
        if let block = exif, block.count > 4 {
            let offset = Int(block[block.startIndex]) << 24 | Int(block[block.startIndex + 1]) << 16
                | Int(block[block.startIndex + 2]) << 8 | Int(block[block.startIndex + 3])
            let skip = 4 + offset
            exif = skip < block.count ? Data(block.dropFirst(skip)) : nil
        } else {
            exif = nil
        }
        return ImageMetadata(exif: exif, xmp: file.metadataBlock(type: "mime", contentType: "application/rdf+xml"),
                             orientation: 1, upright: true)
    }
}

/// Reads an ICC profile's description tag (`desc`): ASCII in version 2 profiles (`desc` type),
/// UTF-16 in version 4 (`mluc` type, its first record). Every offset is checked against the
/// profile's length: the bytes are the file's.
enum ICCProfile {
    static func description(_ profile: Data) -> String? {
        let bytes = [UInt8](profile)
        func u32(_ at: Int) -> Int? {
            guard at >= 0, at + 4 <= bytes.count else { return nil }
            return Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
        }
        guard let count = u32(128), count < 1000 else { return nil }
        for entry in 0..<count {
            let at = 132 + entry * 12
            guard let signature = u32(at), let offset = u32(at + 4), let size = u32(at + 8) else { return nil }
            guard signature == 0x6465_7363, size >= 12, offset + size <= bytes.count else { continue }  // 'desc'
            switch u32(offset) {
            case 0x6465_7363:  // 'desc': a counted ASCII string
                guard let length = u32(offset + 8), length > 0, offset + 12 + length <= offset + size else { return nil }
                let text = bytes[(offset + 12)..<(offset + 12 + length)].prefix { $0 != 0 }
                return String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespaces)
            case 0x6D6C_7563:  // 'mluc': records of UTF-16BE strings
                guard let records = u32(offset + 8), records > 0, let length = u32(offset + 20), let start = u32(offset + 24),
                      length % 2 == 0, offset + start + length <= offset + size else { return nil }
                let units = stride(from: offset + start, to: offset + start + length, by: 2).map { UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]) }
                return String(decoding: units, as: UTF16.self).trimmingCharacters(in: CharacterSet(charactersIn: "\0 "))
            default:
                return nil
            }
        }
        return nil
    }
}
