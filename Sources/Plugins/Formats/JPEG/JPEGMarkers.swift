import Foundation
import PipelineKit

/// A JPEG's metadata segments replaced and its picture left as it is, byte for byte: for
/// rebuilding a JPEG elsewhere (JPEG XL's lossless recompression) with only the metadata a
/// pipeline keeps.
enum JPEGMarkers {
    struct Segment {
        let marker: UInt8
        let range: Range<Int>
        /// The segment's contents after its length.
        let body: Range<Int>
    }

    /// The segments before the scan (SOI excluded), and where the scan starts; nil when `data` is
    /// not a JPEG laid out as the standard says.
    static func segments(_ data: Data) -> (segments: [Segment], scan: Int)? {
        let bytes = [UInt8](data)
        guard bytes.count > 4, bytes[0] == 0xFF, bytes[1] == 0xD8 else { return nil }
        var segments: [Segment] = [], at = 2
        while at + 4 <= bytes.count {
            guard bytes[at] == 0xFF else { return nil }
            let marker = bytes[at + 1]
            if marker == 0xFF { at += 1; continue }
            if marker == 0xDA { return (segments, at) }
            guard ![0xD8, 0xD9, 0x01].contains(marker), !(0xD0...0xD7).contains(marker) else { return nil }
            let length = Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
            guard length >= 2, at + 2 + length <= bytes.count else { return nil }
            segments.append(Segment(marker: marker, range: at..<(at + 2 + length), body: (at + 4)..<(at + 2 + length)))
            at += 2 + length
        }
        return nil
    }

    static func starts(_ data: Data, _ segment: Segment, with prefix: String) -> Bool {
        data[segment.body].starts(with: Array(prefix.utf8))
    }

    /// Whether the JPEG carries an ICC profile.
    static func hasICCProfile(_ data: Data) -> Bool {
        segments(data)?.segments.contains { $0.marker == 0xE2 && starts(data, $0, with: "ICC_PROFILE\0") } ?? false
    }

    /// `data` with every application segment and comment before the scan taken out except
    /// JFIF's APP0, Adobe's APP14 (which says how colours are stored) and the ICC profile when
    /// `metadata` keeps it, and `metadata`'s EXIF, XMP and IPTC put in after SOI and APP0. Every
    /// other segment and the scan are copied unchanged. nil when `data` is not a JPEG as expected
    /// or a block is too large for one segment.
    static func withMetadata(_ data: Data, _ metadata: ImageMetadata) -> Data? {
        guard let (segments, scan) = segments(data) else { return nil }
        let kept = segments.filter { segment in
            switch segment.marker {
            case 0xE0, 0xEE: return true
            case 0xE2: return metadata.keepsICC && starts(data, segment, with: "ICC_PROFILE\0")
            case 0xE1...0xEF, 0xFE: return false
            default: return true
            }
        }
        var added: [Data] = []
        if let exif = metadata.exif { added.append(Data("Exif\0\0".utf8) + exif) }
        if let xmp = metadata.xmp { added.append(Data("http://ns.adobe.com/xap/1.0/\0".utf8) + xmp) }
        var out = Data([0xFF, 0xD8])
        var rest = kept[...]
        while let first = rest.first, first.marker == 0xE0 {
            out += data[first.range]
            rest = rest.dropFirst()
        }
        for body in added {
            guard let segment = segment(0xE1, body) else { return nil }
            out += segment
        }
        if let iptc = metadata.iptc {
            // Photoshop's image resource 0x0404 (IPTC-IIM), with an empty name, padded to even.
            let resource = Data("8BIM".utf8) + Data([0x04, 0x04, 0, 0]) + be32(iptc.count) + iptc + Data(count: iptc.count % 2)
            guard let segment = segment(0xED, Data("Photoshop 3.0\0".utf8) + resource) else { return nil }
            out += segment
        }
        for segment in rest { out += data[segment.range] }
        return out + data[scan...]
    }

    static func segment(_ marker: UInt8, _ body: Data) -> Data? {
        guard body.count + 2 <= 0xFFFF else { return nil }
        return Data([0xFF, marker, UInt8((body.count + 2) >> 8), UInt8((body.count + 2) & 0xFF)]) + body
    }

    static func be32(_ value: Int) -> Data { Data([UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]) }

    /// The EXIF orientation the JPEG's own APP1 gives, 1 when it has none.
    static func orientation(_ data: Data) -> Int {
        guard let (segments, _) = segments(data),
              let app1 = segments.first(where: { $0.marker == 0xE1 && starts(data, $0, with: "Exif\0\0") }) else { return 1 }
        return Data(data[(app1.body.lowerBound + 6)..<app1.body.upperBound]).withUnsafeBytes { ExifOrientation.read($0) }
    }
}
