import CPNG
import CPNGImageData
import Foundation
import MagickKit
import PipelineKit

/// PNG written by libpng directly, for the `png` encoder and `auto`: 8-bit RGB or RGBA with the ICC
/// profile when the pipeline keeps it, nothing else; the image data compressed by libdeflate (see
/// ``wholeLimit``). Neither keeps process-wide state while writing. (ImageMagick's PNG coder was
/// noted to serialise writes; measured in a batch at 256 px, both writers ran at the same speed
/// with both cores busy, and this one's files were 4.6% smaller at the same zlib level:
/// bench/NOTEBOOK.md.)
///
/// ImageMagick still writes what this does not cover: palette PNGs, EXIF, XMP or IPTC to keep,
/// `max_bytes`, images that are not sRGB or whose pixels are all grey (written as grey PNGs
/// there), and an ICC profile libpng refuses.
enum PNGWriter {
    /// The `png` encoder's defaults, which `auto` writes PNG with too. Level 5, not zlib's 6: on
    /// 39 photos' 512 px thumbnails (both bench corpora) 2.4% more bytes in 44% less time (15.7
    /// against 28.0 ms, the median); level 6 was most of a PNG answer's time after the decode.
    static let defaultLevel = 5
    static let defaultFilter = Filter.adaptive

    /// libpng's row filter: `adaptive` tries every filter on each row and keeps the one likely to
    /// compress best (as ImageMagick does by default); one named filter is faster, often larger.
    enum Filter: String, CaseIterable, Sendable {
        case adaptive, none, sub, up, average, paeth

        var flags: Int32 {
            switch self {
            case .adaptive: return Int32(PNG_FILTER_NONE | PNG_FILTER_SUB | PNG_FILTER_UP | PNG_FILTER_AVG | PNG_FILTER_PAETH)
            case .none: return Int32(PNG_FILTER_NONE)
            case .sub: return Int32(PNG_FILTER_SUB)
            case .up: return Int32(PNG_FILTER_UP)
            case .average: return Int32(PNG_FILTER_AVG)
            case .paeth: return Int32(PNG_FILTER_PAETH)
            }
        }
    }

    /// The PNG of `image` at zlib `level` with `filter`, or `nil` when ImageMagick must write it
    /// (see the type's comment).
    static func write(_ image: PipelineImage, level: Int, filter: Filter) throws -> Data? {
        let metadata = image.metadata ?? ImageMetadata()
        guard image.frameCount == 1, metadata.exif == nil, metadata.xmp == nil, metadata.iptc == nil else { return nil }
        if let pixels = image.rgb8 {
            // All grey (a greyscale JPEG read as RGB): ImageMagick writes a grey PNG, as it did
            // when it decoded such JPEGs itself.
            if pixels.isGrey { return nil }
            // 8-bit pixels carry no profile (see RGB8Pixels).
            return try write(pixels.bytes, width: pixels.width, height: pixels.height, channels: pixels.channels, profile: nil,
                             level: level, filter: filter)
        }
        return try image.withCopy { wand -> Data? in
            guard wand.colorspaceName == "sRGB" else { return nil }
            let channels = wand.hasAlpha ? "RGBA" : "RGB"
            let pixels = try wand.bytes(channels: channels)
            if RGB8Pixels.isGrey(pixels, channels: channels.count) { return nil }  // a grey PNG, by ImageMagick
            let profile = metadata.keepsICC ? wand.iccProfile : nil
            return try write(pixels, width: wand.width, height: wand.height, channels: channels.count, profile: profile,
                             level: level, filter: filter)
        }
    }

    /// Images whose pixels take at most this many bytes have their image data compressed whole by
    /// libdeflate (Sources/CPNGImageData): on the 39 PNG sources' 512 px thumbnails of both bench
    /// corpora, half zlib's time at the same level and 0.8% larger (medians;
    /// bench/NOTEBOOK.md#png-libdeflate). libdeflate needs the filtered rows and the result in
    /// memory at once (about twice the pixels), so larger images are streamed through zlib by
    /// libpng, at the same level.
    static let wholeLimit = 32 << 20

    /// The PNG of 8-bit `pixels` (`channels` 3 or 4), with `profile`; `nil` when libpng refuses
    /// the profile (ImageMagick then writes it).
    static func write(_ pixels: [UInt8], width: Int, height: Int, channels: Int, profile: Data?, level: Int,
                      filter: Filter, wholeLimit: Int = wholeLimit) throws -> Data? {
        var length = 0
        var message = [CChar](repeating: 0, count: 160)
        let written = pixels.withUnsafeBufferPointer { rows in
            var imageDataLength = 0
            let imageData = pixels.count <= wholeLimit
                ? pk_png_image_data(rows.baseAddress, UInt32(width), UInt32(height), Int32(channels), Int32(level), filter.flags, &imageDataLength)
                : nil
            defer { free(imageData) }
            return (profile ?? Data()).withUnsafeBytes { icc in
                pk_png_write(rows.baseAddress, UInt32(width), UInt32(height), Int32(channels), Int32(level),
                             filter.flags, profile == nil ? nil : icc.bindMemory(to: UInt8.self).baseAddress,
                             UInt32(profile?.count ?? 0), imageData, imageDataLength, &length, &message)
            }
        }
        guard let written else {
            let reason = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if reason == "icc" { return nil }  // libpng refuses the profile: ImageMagick keeps it
            throw PipelineError(.encodeFailed, "PNG: " + reason)
        }
        defer { free(written) }
        return Data(bytes: written, count: length)
    }
}
