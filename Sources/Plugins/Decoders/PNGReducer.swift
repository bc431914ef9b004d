import CPNG
import Foundation
import MagickKit
import PipelineKit

/// Shrink-on-load for PNG: decodes a large PNG row by row (libpng) and averages blocks of
/// `factor` x `factor` pixels as the rows arrive (``BoxReducer``), so the full-size image never
/// exists in memory.
///
/// libjpeg can decode at 1/2, 1/4 or 1/8; PNG has no such mode, and ImageMagick would decode the
/// whole image into 16-bit channels (8 bytes a pixel) before the resize box-averaged it down
/// anyway. This does that box average while decoding, in 8 bits, and hands ImageMagick only the
/// reduced image: the result is what `resize`'s pre-shrink (average to twice the target, then the
/// filter) makes from a full decode. Colour is averaged premultiplied by alpha, so transparent
/// pixels do not bleed their hidden colour into the edges.
///
/// Only plain cases take this path; the rest go through ImageMagick as before: interlaced PNGs,
/// greyscale ones (kept grey there), and PNGs with a profile other than sRGB (converted there).
enum PNGReducer {
    /// Memory the reduced decode of a `size` PNG needs at its peak: one 8-bit RGBA row, the
    /// per-column totals (4 bytes a channel), the reduced pixels and ImageMagick's copy of them.
    static func estimatedMemory(_ size: PixelSize, factor: Int) -> Int {
        let outW = (size.width + factor - 1) / factor, outH = (size.height + factor - 1) / factor
        return size.width * 4 + size.width * 4 * 4 + outW * outH * (4 + 8)
    }

    /// What the header says about a PNG the fast path takes.
    struct Plan {
        let width: Int, height: Int
        let alpha: Bool
        /// An ICC profile to keep on the result (when the decoder keeps profiles).
        let profile: Data?
    }

    /// Reads the header chunks (no image data) into `reader`: the plan, or `nil` when this PNG
    /// is not one for the fast path. An sRGB profile is dropped as ImageMagick's path drops it;
    /// any other profile sends the PNG to ImageMagick, which converts through it, unless the
    /// decoder keeps profiles (`to_srgb: false`), in which case it is kept as it is.
    static func plan(_ reader: UnsafeMutablePointer<pk_png_reader>, toSRGB: Bool) -> Plan? {
        var width: UInt32 = 0, height: UInt32 = 0, profileLength: UInt32 = 0
        var colorType: Int32 = 0, interlaced: Int32 = 0, transparency: Int32 = 0
        var profileBytes: UnsafePointer<UInt8>?
        pk_png_header(reader, &width, &height, &colorType, &interlaced, &transparency, &profileBytes, &profileLength)
        guard interlaced == 0, colorType & PNG_COLOR_MASK_COLOR != 0 else { return nil }  // grey stays grey in ImageMagick
        var profile: Data?
        if let profileBytes, profileLength > 0 {
            let data = Data(bytes: profileBytes, count: Int(profileLength))
            if toSRGB {
                guard Wand.isSRGB(data) else { return nil }
            } else {
                profile = data
            }
        }
        let alpha = colorType & PNG_COLOR_MASK_ALPHA != 0 || transparency != 0
        return Plan(width: Int(width), height: Int(height), alpha: alpha, profile: profile)
    }

    /// A PNG opened from `data` with its header chunks read, handed to `body`; `nil` when out of
    /// memory. Throws `decode_failed` with libpng's reason when the header chunks are corrupt.
    static func withReader<T>(_ data: Data, _ body: (UnsafeMutablePointer<pk_png_reader>) throws -> T?) throws -> T? {
        try data.withUnsafeBytes { raw -> T? in
            var ok: Int32 = 0
            guard let reader = pk_png_open(raw.baseAddress, raw.count, &ok) else { return nil }
            defer { pk_png_close(reader) }
            guard ok != 0 else { throw failure(reader) }
            return try body(reader)
        }
    }

    /// Whether ``decode(_:factor:toSRGB:)`` would take `data` (reads its header chunks only).
    static func takes(_ data: Data, toSRGB: Bool) -> Bool {
        ((try? withReader(data) { plan($0, toSRGB: toSRGB) }) ?? nil) != nil
    }

    /// The reduced image, or `nil` when this PNG is not one for the fast path (see ``plan``).
    /// Throws `decode_failed` with libpng's reason for a corrupt or truncated file.
    static func decode(_ data: Data, factor: Int, toSRGB: Bool) throws -> Wand? {
        try withReader(data) { reader -> Wand? in
            guard let plan = plan(reader, toSRGB: toSRGB) else { return nil }
            let rowBytes = pk_png_start(reader)
            guard rowBytes == plan.width * (plan.alpha ? 4 : 3) else {
                throw rowBytes == 0 ? failure(reader) : PipelineError(.decodeFailed, "PNG: unexpected row layout")
            }
            let width = plan.width, height = plan.height
            let box = BoxReducer(width: width, height: height, factor: factor, alpha: plan.alpha)
            let pixels = try box.reduce { try readRow(reader, &$0) }
            let wand = try Wand.fromPixels(pixels, width: box.outWidth, height: box.outHeight, hasAlpha: plan.alpha)
            if let profile = plan.profile { try wand.setICCProfile(profile) }
            return wand
        }
    }

    /// libpng's reason for the reader's last failure.
    static func failure(_ reader: UnsafeMutablePointer<pk_png_reader>) -> PipelineError {
        let message = withUnsafeBytes(of: &reader.pointee.message) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return PipelineError(.decodeFailed, "PNG: " + message)
    }

    /// Reads the next row (libpng checks the image data's length and CRC as it goes).
    static func readRow(_ reader: UnsafeMutablePointer<pk_png_reader>, _ row: inout [UInt8]) throws {
        let ok = row.withUnsafeMutableBufferPointer { pk_png_read_row(reader, $0.baseAddress) }
        if ok == 0 { throw failure(reader) }
    }
}
