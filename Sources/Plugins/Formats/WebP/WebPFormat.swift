import Foundation
import MagickKit
import PipelineKit

/// WebP: its row in ``FormatTable``, its header probe, its facts and metadata from the container's
/// chunks, and its fuzz target.
enum WebPFormat {
    static let entry = FormatEntry(
        name: "webp", formats: [.webp],
        reader: { _, loaded, settings in try WebPReader(try loaded.wholeData(), keepsFrames: settings.maxFrames > 1) },
        dimensions: dimensions,
        encoders: [WebPEncoder.plugin],
        fuzzTargets: ["webp": fuzz])

    /// The size in the first chunk: lossy (`VP8 `), lossless (`VP8L`) or extended (`VP8X`).
    @Sendable static func dimensions(_ data: Data) -> PixelSize? {
        let head = HeadBytes(data)
        guard head.count >= 30 else { return nil }
        switch head.text(12..<16) {
        case "VP8 ": return PixelSize(width: head.le16(26) & 0x3FFF, height: head.le16(28) & 0x3FFF)
        case "VP8L":
            let bits = head.le32(21)
            return PixelSize(width: (bits & 0x3FFF) + 1, height: ((bits >> 14) & 0x3FFF) + 1)
        case "VP8X": return PixelSize(width: head.le24(24) + 1, height: head.le24(27) + 1)
        default: return nil
        }
    }

    /// The facts ``SourceFacts/read(_:)`` gives, for a WebP file, from its container's chunks (`ICCP`, `EXIF`)
    /// rather than a ping, which decodes the whole picture in ImageMagick 6.
    static func facts(_ data: Data) -> ImageFacts {
        var facts: ImageFacts = ["colorspace": .string("sRGB")]
        if let profile = chunk("ICCP", in: data) { facts["icc"] = .string(ICCProfile.description(profile) ?? "unnamed profile") }
        let metadata = metadata(data) { _ in true }
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
    static func metadata(_ data: Data, upright: (Int) -> Bool) -> ImageMetadata {
        var exif = chunk("EXIF", in: data)
        if let block = exif, block.starts(with: Data("Exif\0\0".utf8)) { exif = Data(block.dropFirst(6)) }
        let orientation = exif.map { block in block.withUnsafeBytes { ExifOrientation.read($0) } } ?? 1
        return ImageMetadata(exif: exif, xmp: chunk("XMP ", in: data), orientation: orientation, upright: upright(orientation))
    }

    /// The payload of the first chunk `fourCC` of a RIFF file (WebP), walking chunk by chunk.
    static func chunk(_ fourCC: String, in data: Data) -> Data? {
        chunks(in: data).found.first { $0.type == fourCC }.map { Data(data[$0.body]) }
    }

    /// The container's chunks in order, each its type and where its contents lie; `whole` is
    /// false when a chunk runs past the end (the chunks before it are listed).
    static func chunks(in data: Data) -> (found: [(type: String, body: Range<Int>)], whole: Bool) {
        var found: [(type: String, body: Range<Int>)] = [], at = data.startIndex + 12
        while at + 8 <= data.endIndex {
            let size = Int(data[at + 4]) | Int(data[at + 5]) << 8 | Int(data[at + 6]) << 16 | Int(data[at + 7]) << 24
            guard size <= data.endIndex - at - 8 else { return (found, false) }
            found.append((String(decoding: data[at..<(at + 4)], as: UTF8.self), (at + 8)..<(at + 8 + size)))
            at += 8 + size + size % 2
        }
        return (found, true)
    }

    /// `data`, an animated WebP, with its last frame's duration (24 bits in its `ANMF` chunk) set so
    /// that all frames last `total` milliseconds; as it was when the others already take that long.
    static func settingLastFrameDuration(_ data: Data, total: Int) -> Data {
        let (found, whole) = chunks(in: data)
        let frames = found.filter { $0.type == "ANMF" && $0.body.count >= 16 }.map { $0.body.lowerBound + 12 }
        let duration = { (at: Int) in Int(data[at]) | Int(data[at + 1]) << 8 | Int(data[at + 2]) << 16 }
        guard whole, let last = frames.last else { return data }
        let rest = total - frames.dropLast().map(duration).reduce(0, +)
        guard rest > 0, rest < 1 << 24 else { return data }
        var out = data
        for index in 0..<3 { out[last + index] = UInt8(truncatingIfNeeded: rest >> (8 * index)) }
        return out
    }

    /// The WebP path: our container plan, libwebp's scaled decode, libwebpdemux for animations.
    @Sendable static func fuzz(_ data: Data) {
        guard FuzzTargets.fits(dimensions(data)),
              let plan = (try? WebPReducer.plan(data, keepsFrames: data.count % 2 == 0)) ?? nil,
              let scaled = WebPReducer.scaledSize(plan, hint: FuzzTargets.hint(data), headroom: 2) else { return }
        _ = try? WebPReducer.decode(data, plan: plan, size: scaled, failOn: FailOn.allCases[data.count % 4])
    }
}
