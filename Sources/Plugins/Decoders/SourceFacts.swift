import Foundation
import MagickKit
import PipelineKit

/// The source's own facts, for a chain that asks for them (`analyze`): orientation, colour space,
/// the ICC profile's description and a few EXIF fields, read by ImageMagick from the header (a
/// ping: no pixel is decoded), so they are the file's, whatever the decode then converts or drops.
/// What every reader does unless its format reads them otherwise (``FormatReader/headerFacts(facts:metadata:upright:)``).
enum SourceFacts {
    /// ImageMagick's reading of the header of `data` as `format`, for ``read(_:)`` and
    /// ``metadata(_:exifBesideProfiles:xmpBesideProfiles:upright:)`` (one ping for both); `nil` for a header it
    /// cannot read. The readers of formats that ImageMagick 6 would decode or render to ping
    /// (WebP, HEIC, AVIF, SVG) read their facts themselves.
    static func ping(_ data: Data, format: ImageFormat) -> Wand? {
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

    /// The TIFF structure of an EXIF block stored as ISO BMFF stores it (HEIF's and JPEG XL's
    /// `Exif` item or box): a 4-byte big-endian offset, then that many bytes, then the TIFF
    /// header. `nil` when the offset points past the block.
    static func exifAfterOffset(_ block: Data) -> Data? {
        guard block.count > 4 else { return nil }
        let start = block.startIndex
        let offset = Int(block[start]) << 24 | Int(block[start + 1]) << 16 | Int(block[start + 2]) << 8 | Int(block[start + 3])
        return 4 + offset < block.count ? Data(block.dropFirst(4 + offset)) : nil
    }

    /// The metadata from ImageMagick's ping of a file (``ping(_:format:)``): its EXIF (without
    /// JPEG's `Exif\0\0`; `exifBesideProfiles` where the ping finds none), XMP (`xmpBesideProfiles`
    /// where it finds none) and IPTC, and its
    /// orientation; `upright` says, for an orientation, whether the decode turns the pixels upright.
    static func metadata(_ wand: Wand, exifBesideProfiles: () -> Data?, xmpBesideProfiles: () -> Data? = { nil },
                         upright: (Int) -> Bool) -> ImageMetadata {
        var exif = wand.profile("exif") ?? exifBesideProfiles()
        if let block = exif, block.starts(with: Data("Exif\0\0".utf8)) { exif = block.dropFirst(6) }
        let orientation = (1...8).contains(wand.orientation) ? wand.orientation : 1
        return ImageMetadata(exif: exif.map { Data($0) }, xmp: wand.profile("xmp") ?? xmpBesideProfiles(), iptc: wand.profile("iptc"),
                             orientation: orientation, upright: upright(orientation))
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
