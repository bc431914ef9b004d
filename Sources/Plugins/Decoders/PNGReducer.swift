import CSPNG
import Foundation
import PipelineKit

/// Shrink-on-load for PNG: decodes a large PNG row by row (libspng) and averages blocks of
/// `factor` x `factor` pixels as the rows arrive, so the full-size image never exists in memory.
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
    /// The block size for a `size` PNG when at least `target` is needed: the largest whole shrink
    /// that keeps at least twice the target, or `nil` when that is less than 2.
    static func factor(_ size: PixelSize, target: PixelSize) -> Int? {
        let factor = min(size.width / max(1, 2 * target.width), size.height / max(1, 2 * target.height))
        return factor >= 2 ? factor : nil
    }

    /// Memory the reduced decode of a `size` PNG needs at its peak: one row, the block sums, the
    /// reduced pixels and ImageMagick's copy of them.
    static func estimatedMemory(_ size: PixelSize, factor: Int) -> Int {
        let outW = (size.width + factor - 1) / factor, outH = (size.height + factor - 1) / factor
        return size.width * 8 + outW * 4 * 8 + outW * outH * (4 + 8)
    }

    /// What the header says about a PNG the fast path takes.
    struct Plan {
        let width: Int, height: Int
        let alpha: Bool
        /// An ICC profile to keep on the result (when the decoder keeps profiles).
        let profile: Data?
    }

    /// Reads the header chunks (no image data) into `context`: the plan, or `nil` when this PNG
    /// is not one for the fast path. An sRGB profile is dropped as ImageMagick's path drops it;
    /// any other profile sends the PNG to ImageMagick, which converts through it, unless the
    /// decoder keeps profiles (`to_srgb: false`), in which case it is kept as it is.
    static func plan(_ context: OpaquePointer, toSRGB: Bool) throws -> Plan? {
        var header = spng_ihdr()
        try check(spng_get_ihdr(context, &header))
        let colorType = Int(header.color_type)
        guard header.interlace_method == 0,
              colorType != Int(SPNG_COLOR_TYPE_GRAYSCALE.rawValue), colorType != Int(SPNG_COLOR_TYPE_GRAYSCALE_ALPHA.rawValue)
        else { return nil }
        var iccp = spng_iccp()
        var profile: Data?
        if spng_get_iccp(context, &iccp) == 0, let bytes = iccp.profile {
            let data = Data(bytes: bytes, count: iccp.profile_len)
            if toSRGB {
                guard Wand.isSRGB(data) else { return nil }
            } else {
                profile = data
            }
        }
        var transparency = spng_trns()
        let alpha = colorType == Int(SPNG_COLOR_TYPE_TRUECOLOR_ALPHA.rawValue) || spng_get_trns(context, &transparency) == 0
        return Plan(width: Int(header.width), height: Int(header.height), alpha: alpha, profile: profile)
    }

    /// Whether ``decode(_:factor:toSRGB:)`` would take `data` (reads its header chunks only).
    static func takes(_ data: Data, toSRGB: Bool) -> Bool {
        guard let context = newContext() else { return false }
        defer { spng_ctx_free(context) }
        return data.withUnsafeBytes { raw in
            spng_set_png_buffer(context, raw.baseAddress, raw.count) == 0 && ((try? plan(context, toSRGB: toSRGB)) ?? nil) != nil
        }
    }

    /// A context that skips zlib's Adler-32 check: every chunk's CRC-32, the image data's
    /// included, is still verified, so corruption is still caught; the Adler-32 pass was 4% of
    /// the corpus run.
    static func newContext() -> OpaquePointer? {
        spng_ctx_new(Int32(SPNG_CTX_IGNORE_ADLER32.rawValue))
    }

    /// The reduced image, or `nil` when this PNG is not one for the fast path (see ``plan``).
    /// Throws `decode_failed` with libspng's reason for a corrupt or truncated file.
    static func decode(_ data: Data, factor: Int, toSRGB: Bool) throws -> Wand? {
        guard let context = newContext() else { return nil }
        defer { spng_ctx_free(context) }
        return try data.withUnsafeBytes { raw -> Wand? in
            try check(spng_set_png_buffer(context, raw.baseAddress, raw.count))
            guard let plan = try plan(context, toSRGB: toSRGB) else { return nil }
            let format = plan.alpha ? SPNG_FMT_RGBA8 : SPNG_FMT_RGB8
            try check(spng_decode_image(context, nil, 0, Int32(format.rawValue),
                                        Int32(SPNG_DECODE_PROGRESSIVE.rawValue | SPNG_DECODE_TRNS.rawValue)))
            let width = plan.width, height = plan.height
            let pixels = try plan.alpha ? reduce4(context, width: width, height: height, factor: factor)
                                        : reduce3(context, width: width, height: height, factor: factor)
            let outW = (width + factor - 1) / factor, outH = (height + factor - 1) / factor
            let wand = try Wand.fromPixels(pixels, width: outW, height: outH, hasAlpha: plan.alpha)
            if let profile = plan.profile { try wand.setICCProfile(profile) }
            return wand
        }
    }

    static func check(_ status: Int32) throws {
        guard status == 0 else { throw PipelineError(.decodeFailed, "PNG: " + String(cString: spng_strerror(status))) }
    }

    /// Reads the next row; a row that ends the image early is a truncated file.
    static func readRow(_ context: OpaquePointer, _ row: inout [UInt8], last: Bool) throws {
        let status = row.withUnsafeMutableBytes { spng_decode_row(context, $0.baseAddress, $0.count) }
        if status == 0 || (status == Int32(SPNG_EOI.rawValue) && last) { return }
        if status == Int32(SPNG_EOI.rawValue) { throw PipelineError(.decodeFailed, "PNG: the image data ends before the last row") }
        try check(status)
    }

    /// RGB: plain block averages.
    static func reduce3(_ context: OpaquePointer, width: Int, height: Int, factor: Int) throws -> [UInt8] {
        let outW = (width + factor - 1) / factor, outH = (height + factor - 1) / factor
        var row = [UInt8](repeating: 0, count: width * 3)
        var sums = [UInt64](repeating: 0, count: outW * 3)
        var out = [UInt8](repeating: 0, count: outW * outH * 3)
        var rows = 0, outY = 0
        for y in 0..<height {
            try readRow(context, &row, last: y == height - 1)
            row.withUnsafeBufferPointer { source in
                sums.withUnsafeMutableBufferPointer { sums in
                    for ox in 0..<outW {
                        var r: UInt32 = 0, g: UInt32 = 0, b: UInt32 = 0
                        for x in (ox * factor)..<min(width, ox * factor + factor) {
                            r &+= UInt32(source[3 * x]); g &+= UInt32(source[3 * x + 1]); b &+= UInt32(source[3 * x + 2])
                        }
                        sums[3 * ox] &+= UInt64(r); sums[3 * ox + 1] &+= UInt64(g); sums[3 * ox + 2] &+= UInt64(b)
                    }
                }
            }
            rows += 1
            guard rows == factor || y == height - 1 else { continue }
            for ox in 0..<outW {
                let count = UInt64(rows * (min(width, ox * factor + factor) - ox * factor))
                for c in 0..<3 { out[(outY * outW + ox) * 3 + c] = UInt8((sums[3 * ox + c] + count / 2) / count) }
            }
            for i in sums.indices { sums[i] = 0 }
            rows = 0
            outY += 1
        }
        return out
    }

    /// RGBA: colour averaged premultiplied by alpha, then divided by the alpha total.
    static func reduce4(_ context: OpaquePointer, width: Int, height: Int, factor: Int) throws -> [UInt8] {
        let outW = (width + factor - 1) / factor, outH = (height + factor - 1) / factor
        var row = [UInt8](repeating: 0, count: width * 4)
        var sums = [UInt64](repeating: 0, count: outW * 4)
        var out = [UInt8](repeating: 0, count: outW * outH * 4)
        var rows = 0, outY = 0
        for y in 0..<height {
            try readRow(context, &row, last: y == height - 1)
            row.withUnsafeBufferPointer { source in
                sums.withUnsafeMutableBufferPointer { sums in
                    for ox in 0..<outW {
                        var r: UInt64 = 0, g: UInt64 = 0, b: UInt64 = 0, a: UInt64 = 0
                        for x in (ox * factor)..<min(width, ox * factor + factor) {
                            let alpha = UInt64(source[4 * x + 3])
                            r &+= UInt64(source[4 * x]) * alpha; g &+= UInt64(source[4 * x + 1]) * alpha
                            b &+= UInt64(source[4 * x + 2]) * alpha; a &+= alpha
                        }
                        sums[4 * ox] &+= r; sums[4 * ox + 1] &+= g; sums[4 * ox + 2] &+= b; sums[4 * ox + 3] &+= a
                    }
                }
            }
            rows += 1
            guard rows == factor || y == height - 1 else { continue }
            for ox in 0..<outW {
                let count = UInt64(rows * (min(width, ox * factor + factor) - ox * factor))
                let a = sums[4 * ox + 3], base = (outY * outW + ox) * 4
                for c in 0..<3 { out[base + c] = a == 0 ? 0 : UInt8((sums[4 * ox + c] + a / 2) / a) }
                out[base + 3] = UInt8((a + count / 2) / count)
            }
            for i in sums.indices { sums[i] = 0 }
            rows = 0
            outY += 1
        }
        return out
    }
}
