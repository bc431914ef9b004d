import Foundation

/// Metadata an image carries besides its pixels and ICC profile (which stays with the pixels):
/// EXIF, XMP and IPTC blocks, and the EXIF orientation.
///
/// A decoder fills it from the source when ``DecodeHint/wantsMetadata`` is set; the engine then
/// replaces it with what the pipeline's `metadata:` policy keeps (``MetadataPolicy/output(for:)``)
/// just before encoding, and an encoder writes exactly that: ``exif``, ``xmp`` and ``iptc`` when
/// present, and the ICC profile only when ``keepsICC``.
public struct ImageMetadata: Sendable, Equatable {
    /// The EXIF block as a TIFF structure (starting `II*\0` or `MM\0*`, without JPEG's `Exif\0\0`).
    public var exif: Data?
    /// The XMP packet (XML).
    public var xmp: Data?
    /// IPTC-IIM datasets (as in the Photoshop resource 0x0404 of a JPEG's APP13).
    public var iptc: Data?
    /// The source's EXIF orientation, 1 (upright) to 8.
    public var orientation: Int
    /// Whether the pixels are already upright (the decoder applied ``orientation``).
    public var upright: Bool
    /// Whether the output keeps the pixels' ICC profile.
    public var keepsICC: Bool
    /// Whether the pipeline keeps every kind of metadata (`keep: [all, gps]`): an encoder that
    /// rebuilds the source byte for byte may then keep its metadata exactly as it is.
    public var keepsEverything = false

    public init(exif: Data? = nil, xmp: Data? = nil, iptc: Data? = nil, orientation: Int = 1, upright: Bool = true,
                keepsICC: Bool = true) {
        self.exif = exif
        self.xmp = xmp
        self.iptc = iptc
        self.orientation = orientation
        self.upright = upright
        self.keepsICC = keepsICC
    }
}

/// The pipeline's `metadata:` section: which of the source's metadata the outputs keep.
///
/// By default only the ICC profile is kept. `keep` names what else to keep, `drop` what to remove
/// from that (it wins). GPS positions are kept only when `gps` is named: neither `exif` nor `all`
/// includes them. EXIF is rebuilt from the kept tags rather than copied, so nothing that was
/// dropped survives in it (no maker notes, embedded thumbnail or orphaned GPS bytes), and tags
/// describing the source's pixel layout are left out.
public struct MetadataPolicy: Sendable, Equatable {
    /// What `keep` and `drop` may name.
    public enum Item: String, CaseIterable, Sendable {
        /// The ICC colour profile.
        case icc
        /// Every EXIF tag (camera, lens, exposure, dates, copyright, orientation), not GPS.
        case exif
        /// EXIF's GPS block, and GPS properties in XMP.
        case gps
        /// EXIF's Orientation tag: 1 when the decoder turned the pixels upright, the source's otherwise.
        case orientation
        /// EXIF's dates: DateTime, DateTimeOriginal, DateTimeDigitized, their time offsets and sub-seconds.
        case dates
        /// EXIF's Copyright and Artist.
        case copyright
        /// The XMP packet (GPS properties removed unless `gps` is kept).
        case xmp
        /// The IPTC block (captions, credits, copyright notice).
        case iptc
        /// icc, exif, xmp and iptc: everything but GPS.
        case all
    }

    /// What the outputs keep, expanded (`all` and `exif` into their parts) and with `drop` removed.
    public let kept: Set<Item>

    /// The default: the ICC profile only.
    public static let defaults = MetadataPolicy(kept: [.icc])

    init(kept: Set<Item>) { self.kept = kept }

    /// The policy of `keep` and `drop`; throws `invalid_option` for a name it does not know.
    public init(keep: [String], drop: [String]) throws {
        func items(_ names: [String], _ option: String) throws -> Set<Item> {
            var set: Set<Item> = []
            for name in names {
                guard let item = Item(rawValue: name) else {
                    throw PipelineError(.invalidOption, "metadata: unknown \(option) entry '\(name)'"
                        + Suggest.hint(for: name, in: Item.allCases.map(\.rawValue)))
                }
                set.insert(item)
            }
            return set
        }
        func expanded(_ set: Set<Item>) -> Set<Item> {
            var out = set
            if out.contains(.all) { out.formUnion([.icc, .exif, .xmp, .iptc]) }
            if out.contains(.exif) { out.formUnion([.orientation, .dates, .copyright]) }
            out.remove(.all)
            return out
        }
        kept = expanded(try items(keep, "keep")).subtracting(expanded(try items(drop, "drop")))
    }

    /// The policy of a `metadata:` section's options (``PipelineFileSpec/metadata``).
    public init(options: PluginOptions) throws {
        try self.init(keep: options.list("keep")?.map(\.description) ?? ["icc"],
                      drop: options.list("drop")?.map(\.description) ?? [])
    }

    /// Whether the decoder has to read the source's metadata for this policy (anything beyond ICC).
    public var needsSource: Bool { !kept.subtracting([.icc]).isEmpty }

    /// A stable text for cache keys and fingerprints: empty for the default, so keys made before
    /// the section existed stay valid.
    public var keySuffix: String {
        self == .defaults ? "" : "+metadata(" + kept.map(\.rawValue).sorted().joined(separator: ",") + ")"
    }

    /// The metadata an output of an image carrying `source` gets.
    public func output(for source: ImageMetadata?) -> ImageMetadata {
        var out = ImageMetadata(keepsICC: kept.contains(.icc))
        out.keepsEverything = kept.isSuperset(of: Set(Item.allCases).subtracting([.all]))
        guard let source else { return out }
        out.orientation = source.upright ? 1 : source.orientation
        out.upright = source.upright
        if let exif = source.exif {
            out.exif = ExifRewriter.filter(exif, keep: keepsTag, orientation: out.orientation)
        }
        if kept.contains(.xmp), let xmp = source.xmp {
            out.xmp = XMPScrubber.scrub(xmp, removeGPS: !kept.contains(.gps), orientation: source.upright ? 1 : nil)
        }
        if kept.contains(.iptc) { out.iptc = source.iptc }
        return out
    }

    /// Whether EXIF tag `tag` of directory `directory` is kept.
    func keepsTag(_ directory: ExifRewriter.Directory, _ tag: UInt16) -> Bool {
        switch directory {
        case .gps: return kept.contains(.gps)
        case .main, .exif:
            if ExifRewriter.neverCopied.contains(tag) { return false }
            if tag == ExifRewriter.orientationTag { return kept.contains(.orientation) }
            if ExifRewriter.dateTags.contains(tag) { return kept.contains(.dates) }
            if ExifRewriter.copyrightTags.contains(tag) { return kept.contains(.copyright) }
            return kept.contains(.exif)
        }
    }
}

/// Rebuilds an EXIF block (a TIFF structure) from the tags a filter keeps: the main directory
/// (IFD0), the Exif directory and the GPS directory. Everything else (the thumbnail's IFD1, the
/// interoperability directory, maker notes, unreferenced bytes) is left behind, and every offset is
/// checked against the block's length: the bytes are the file's.
public enum ExifRewriter {
    /// The directories that are rebuilt.
    public enum Directory: Sendable { case main, exif, gps }

    static let orientationTag: UInt16 = 0x0112
    static let exifPointer: UInt16 = 0x8769, gpsPointer: UInt16 = 0x8825
    static let dateTags: Set<UInt16> = [0x0132, 0x9003, 0x9004, 0x9010, 0x9011, 0x9012, 0x9290, 0x9291, 0x9292]
    static let copyrightTags: Set<UInt16> = [0x8298, 0x013B]
    /// Tags never copied: the source's pixel layout and strips, sub-directories that are not
    /// rebuilt, embedded blocks (XMP, IPTC, ICC, Photoshop, maker notes: kept or dropped on their
    /// own), and the Exif pixel dimensions (the output's size differs).
    static let neverCopied: Set<UInt16> = [
        0x0100, 0x0101, 0x0102, 0x0103, 0x0106, 0x0111, 0x0115, 0x0116, 0x0117, 0x011C, 0x0142, 0x0143, 0x0144, 0x0145,
        0x014A, 0x0201, 0x0202, 0x02BC, 0x83BB, 0x8649, 0x8773, 0x8769, 0x8825, 0x927C, 0x935C, 0xA005, 0xA002, 0xA003,
    ]
    /// Bytes per value of each TIFF field type.
    static let typeSizes: [UInt16: Int] = [1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4]

    struct Entry {
        let tag: UInt16, type: UInt16, count: UInt32
        var value: [UInt8]
    }

    /// Reads a TIFF structure's directories, checking every offset against its length. It reads
    /// the bytes where they are (a TIFF file may be large): only entries' values are copied.
    struct Reader {
        let data: Data
        let little: Bool

        init?(_ data: Data) {
            self.data = data
            guard data.count >= 8 else { return nil }
            switch (data[data.startIndex], data[data.startIndex + 1]) {
            case (0x49, 0x49): little = true
            case (0x4D, 0x4D): little = false
            default: return nil
            }
        }

        var count: Int { data.count }

        func bytes(_ at: Int, _ length: Int) -> [UInt8]? {
            guard at >= 0, length >= 0, at <= data.count - length else { return nil }
            return [UInt8](data[(data.startIndex + at)..<(data.startIndex + at + length)])
        }

        func u16(_ at: Int) -> UInt16? { bytes(at, 2).flatMap(u16(of:)) }

        func u32(_ at: Int) -> UInt32? { bytes(at, 4).flatMap { u32(of: $0, 0) } }

        func u16(of array: [UInt8]) -> UInt16? {
            guard array.count >= 2 else { return nil }
            return little ? UInt16(array[0]) | UInt16(array[1]) << 8 : UInt16(array[0]) << 8 | UInt16(array[1])
        }

        func u32(of array: [UInt8], _ at: Int) -> UInt32? {
            guard at >= 0, at + 4 <= array.count else { return nil }
            let b = array[at..<(at + 4)].map(UInt32.init)
            return little ? b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24 : b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]
        }

        /// The entries of the directory at `offset` that can be read whole.
        func directory(at offset: UInt32?) -> [Entry] {
            guard let offset, offset >= 8, let count = u16(Int(offset)), count <= 1024 else { return [] }
            var entries: [Entry] = []
            for index in 0..<Int(count) {
                let at = Int(offset) + 2 + index * 12
                guard let tag = u16(at), let type = u16(at + 2), let count = u32(at + 4), let size = typeSizes[type],
                      count <= 1 << 20 else { continue }
                let length = size * Int(count)
                let start: Int
                if length <= 4 { start = at + 8 } else if let pointer = u32(at + 8) { start = Int(pointer) } else { continue }
                guard let value = bytes(start, length) else { continue }
                entries.append(Entry(tag: tag, type: type, count: count, value: value))
            }
            return entries
        }

        /// The offset a pointer entry `tag` (to a sub-directory) holds.
        func pointer(_ entries: [Entry], _ tag: UInt16) -> UInt32? {
            guard let entry = entries.first(where: { $0.tag == tag }), entry.value.count == 4 else { return nil }
            return u32(of: entry.value, 0)
        }
    }

    /// The metadata tags of a TIFF file's first directory (camera, dates, copyright, orientation)
    /// and its Exif and GPS directories, as an EXIF block: a TIFF keeps its EXIF in its own
    /// structure, not in a block of its own. `nil` when there are none or it cannot be read.
    public static func fromTIFF(_ file: Data) -> Data? {
        filter(file, keep: { directory, tag in directory != .main || tiffMetadataTags.contains(tag) }, orientation: nil)
    }

    /// The tags of a TIFF's first directory that are EXIF's rather than the picture's layout:
    /// description, make, model, orientation, resolution, software, date, artist, copyright and
    /// Windows' XP tags.
    static let tiffMetadataTags: Set<UInt16> = [0x010E, 0x010F, 0x0110, 0x0112, 0x011A, 0x011B, 0x0128, 0x0131, 0x0132, 0x013B,
                                                0x8298, 0x9C9B, 0x9C9C, 0x9C9D, 0x9C9E, 0x9C9F]

    /// `exif` with only the tags `keep` accepts, and Orientation set to `orientation` when it is
    /// kept (left as it is for `nil`); `nil` when nothing is kept or the block cannot be read.
    public static func filter(_ exif: Data, keep: (Directory, UInt16) -> Bool, orientation: Int?) -> Data? {
        guard let reader = Reader(exif) else { return nil }
        let little = reader.little
        let main = reader.directory(at: reader.u32(4))
        // Pointers to directories are never copied: the rebuilt ones get their own.
        let pointers: Set<UInt16> = [exifPointer, gpsPointer, 0xA005, 0x014A]
        let exifEntries = reader.directory(at: reader.pointer(main, exifPointer)).filter { !pointers.contains($0.tag) && keep(.exif, $0.tag) }
        let gpsEntries = reader.directory(at: reader.pointer(main, gpsPointer)).filter { !pointers.contains($0.tag) && keep(.gps, $0.tag) }
        var mainEntries = main.filter { !pointers.contains($0.tag) && keep(.main, $0.tag) }
        if let orientation, let index = mainEntries.firstIndex(where: { $0.tag == orientationTag }) {
            mainEntries[index] = Entry(tag: orientationTag, type: 3, count: 1,
                                       value: little ? [UInt8(orientation), 0] : [0, UInt8(orientation)])
        }
        guard !mainEntries.isEmpty || !exifEntries.isEmpty || !gpsEntries.isEmpty else { return nil }
        // At most 1,000 entries a directory, so the rebuilt one (with its two pointers) reads again.
        return Data(write(main: Array(mainEntries.prefix(1000)), exif: Array(exifEntries.prefix(1000)),
                          gps: Array(gpsEntries.prefix(1000)), little: little))
    }

    /// The raw value of tag `tag` in `directory` of an EXIF block, or `nil`.
    public static func value(_ exif: Data, _ directory: Directory, _ tag: UInt16) -> [UInt8]? {
        guard let reader = Reader(exif) else { return nil }
        let main = reader.directory(at: reader.u32(4))
        let entries: [Entry]
        switch directory {
        case .main: entries = main
        case .exif: entries = reader.directory(at: reader.pointer(main, exifPointer))
        case .gps: entries = reader.directory(at: reader.pointer(main, gpsPointer))
        }
        return entries.first { $0.tag == tag }?.value
    }

    /// An ASCII tag's text (up to its first NUL, spaces trimmed), or `nil` when absent or empty.
    public static func text(_ exif: Data, _ directory: Directory, _ tag: UInt16) -> String? {
        guard let value = value(exif, directory, tag) else { return nil }
        let text = String(decoding: value.prefix { $0 != 0 }, as: UTF8.self).trimmingCharacters(in: .whitespaces)
        return text.isEmpty ? nil : text
    }

    /// The resolution IFD0 gives (XResolution, YResolution and ResolutionUnit: 2 inches, 3
    /// centimetres), or `nil` without both resolutions. Encoders set it on the image, since
    /// ImageMagick rewrites these tags from the image's own resolution when it writes EXIF.
    public static func resolution(_ exif: Data) -> (x: Double, y: Double, unit: Int)? {
        guard let reader = Reader(exif) else { return nil }
        let main = reader.directory(at: reader.u32(4))
        func rational(_ tag: UInt16) -> Double? {
            guard let entry = main.first(where: { $0.tag == tag }), entry.type == 5, entry.value.count == 8,
                  let numerator = reader.u32(of: entry.value, 0), let denominator = reader.u32(of: entry.value, 4),
                  denominator > 0 else { return nil }
            return Double(numerator) / Double(denominator)
        }
        guard let x = rational(0x011A), let y = rational(0x011B) else { return nil }
        let unit = main.first { $0.tag == 0x0128 && $0.value.count == 2 }.flatMap { reader.u16(of: $0.value) } ?? 2
        return (x, y, Int(unit))
    }

    /// A TIFF structure: header, IFD0 (with pointers to the other two when they have entries), the
    /// Exif and GPS directories, then the values longer than four bytes.
    static func write(main: [Entry], exif: [Entry], gps: [Entry], little: Bool) -> [UInt8] {
        var out: [UInt8] = little ? [0x49, 0x49, 0x2A, 0x00] : [0x4D, 0x4D, 0x00, 0x2A]
        func put16(_ v: UInt16, _ into: inout [UInt8]) {
            into += little ? [UInt8(v & 0xFF), UInt8(v >> 8)] : [UInt8(v >> 8), UInt8(v & 0xFF)]
        }
        func put32(_ v: UInt32, _ into: inout [UInt8]) {
            let b = [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]
            into += little ? b.reversed() : b
        }
        put32(8, &out)
        func size(_ count: Int) -> Int { 2 + count * 12 + 4 }
        let mainCount = main.count + (exif.isEmpty ? 0 : 1) + (gps.isEmpty ? 0 : 1)
        let exifOffset = 8 + size(mainCount)
        let gpsOffset = exifOffset + (exif.isEmpty ? 0 : size(exif.count))
        // Values follow the directories, in the order the directories are written.
        let dataOffset = gpsOffset + (gps.isEmpty ? 0 : size(gps.count))
        var data: [UInt8] = []
        func pointerEntry(_ tag: UInt16, _ offset: Int) -> Entry {
            var value: [UInt8] = []
            put32(UInt32(offset), &value)
            return Entry(tag: tag, type: 4, count: 1, value: value)
        }
        func directory(_ entries: [Entry]) {
            put16(UInt16(entries.count), &out)
            for entry in entries.sorted(by: { $0.tag < $1.tag }) {
                put16(entry.tag, &out)
                put16(entry.type, &out)
                put32(entry.count, &out)
                if entry.value.count <= 4 {
                    out += entry.value + [UInt8](repeating: 0, count: 4 - entry.value.count)
                } else {
                    put32(UInt32(dataOffset + data.count), &out)
                    data += entry.value
                    if data.count % 2 == 1 { data.append(0) }
                }
            }
            put32(0, &out)
        }
        var mainAll = main
        if !exif.isEmpty { mainAll.append(pointerEntry(exifPointer, exifOffset)) }
        if !gps.isEmpty { mainAll.append(pointerEntry(gpsPointer, gpsOffset)) }
        directory(mainAll)
        if !exif.isEmpty { directory(exif) }
        if !gps.isEmpty { directory(gps) }
        return out + data
    }
}

/// Removes GPS properties from an XMP packet (`exif:GPS...`, as attributes or elements) and sets
/// `tiff:Orientation` to the pixels' orientation. A packet that is not UTF-8 is dropped rather
/// than passed on unread.
enum XMPScrubber {
    static func scrub(_ xmp: Data, removeGPS: Bool, orientation: Int?) -> Data? {
        guard var text = String(data: xmp, encoding: .utf8) else { return nil }
        func replace(_ pattern: String, _ template: String) {
            guard let regex = try? NSRegularExpression(pattern: pattern, options: [.dotMatchesLineSeparators]) else { return }
            text = regex.stringByReplacingMatches(in: text, range: NSRange(text.startIndex..., in: text), withTemplate: template)
        }
        if removeGPS {
            replace(#"\s+exif:GPS[A-Za-z]*\s*=\s*("[^"]*"|'[^']*')"#, "")
            replace(#"<exif:(GPS[A-Za-z]*)\b[^>]*/>"#, "")
            replace(#"<exif:(GPS[A-Za-z]*)\b[^>]*>.*?</exif:\1>"#, "")
        }
        if let orientation {
            replace(#"(tiff:Orientation\s*=\s*)("[^"]*"|'[^']*')"#, "$1\"\(orientation)\"")
            replace(#"(<tiff:Orientation>)[^<]*(</tiff:Orientation>)"#, "$1\(orientation)$2")
        }
        return Data(text.utf8)
    }
}
