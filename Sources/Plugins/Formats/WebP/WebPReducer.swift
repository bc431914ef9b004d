import CWebP
import Foundation
import MagickKit
import PipelineKit

/// Shrink-on-load for WebP: libwebp decodes straight to a reduced size (its own rescaler averages
/// while it decodes, in 8 bits), so the full-size image never exists in ImageMagick's 16-bit
/// pixels. ImageMagick's WebP coder would decode every pixel, widen it to 8 bytes, and the resize
/// would then read it all again: three times libvips's time on large WebPs.
///
/// The reduced decode keeps at least twice the target for the resize filter, as the JPEG and PNG
/// paths do. libwebp premultiplies colour by alpha while it averages, so transparent pixels do not
/// bleed their hidden colour into the edges.
///
/// Taken: still images, and an animation's first frame when only one frame is kept and that frame
/// covers the canvas. Left to ImageMagick: kept animations, a first frame smaller than its canvas,
/// and files with EXIF (ImageMagick reads the orientation from it).
enum WebPReducer {
    /// What the container says about a WebP the fast path takes.
    struct Plan {
        let width: Int, height: Int
        let alpha: Bool
        /// VP8L: the decoder holds the whole image as 32-bit pixels while it decodes.
        let lossless: Bool
        /// The bitstream to decode (the whole file, or the first frame's payload), as offsets into the data.
        let payload: Range<Int>
        /// An ICC profile (ICCP chunk), when there is one.
        let profile: Data?
    }

    /// The container's facts, or `nil` when this WebP is one for ImageMagick (see the type's notes).
    /// Throws `decode_failed` with libwebp's reason when the headers are inconsistent or cut short.
    static func plan(_ data: Data, keepsFrames: Bool) throws -> Plan? {
        try data.withUnsafeBytes { raw -> Plan? in
            guard let base = raw.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
            var features = WebPBitstreamFeatures()
            let status = WebPGetFeatures(base, raw.count, &features)
            guard status == VP8_STATUS_OK else { throw failure(status) }
            guard features.width > 0, features.height > 0 else { return nil }
            var webp = WebPData(bytes: base, size: raw.count)
            guard let demux = WebPDemux(&webp) else {
                // A file cut short: the demuxer wants it whole. A still image is decoded anyway, so
                // that libwebp reports what is wrong with it.
                guard features.has_animation == 0 else { return nil }
                return Plan(width: Int(features.width), height: Int(features.height), alpha: features.has_alpha != 0,
                            lossless: features.format == 2, payload: 0..<raw.count, profile: nil)
            }
            defer { WebPDemuxDelete(demux) }
            let flags = WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS)
            guard flags & EXIF_FLAG.rawValue == 0 else { return nil }
            let canvasW = Int(WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH)), canvasH = Int(WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT))
            var profile: Data?
            var chunk = WebPChunkIterator()
            if flags & ICCP_FLAG.rawValue != 0, WebPDemuxGetChunk(demux, "ICCP", 1, &chunk) != 0 {
                if let bytes = chunk.chunk.bytes, chunk.chunk.size > 0 { profile = Data(bytes: bytes, count: chunk.chunk.size) }
                WebPDemuxReleaseChunkIterator(&chunk)
            }
            var frame = WebPIterator()
            guard WebPDemuxGetFrame(demux, 1, &frame) != 0 else { return nil }
            defer { WebPDemuxReleaseIterator(&frame) }
            if frame.num_frames > 1 || flags & ANIMATION_FLAG.rawValue != 0 {
                guard !keepsFrames, frame.x_offset == 0, frame.y_offset == 0,
                      Int(frame.width) == canvasW, Int(frame.height) == canvasH else { return nil }
            }
            guard let bytes = frame.fragment.bytes, frame.fragment.size > 0 else { return nil }
            let start = UnsafeRawPointer(bytes) - UnsafeRawPointer(base)
            var inner = WebPBitstreamFeatures()
            let frameStatus = WebPGetFeatures(bytes, frame.fragment.size, &inner)
            guard frameStatus == VP8_STATUS_OK else { throw failure(frameStatus) }
            return Plan(width: Int(frame.width), height: Int(frame.height), alpha: frame.has_alpha != 0,
                        lossless: inner.format == 2, payload: start..<(start + frame.fragment.size), profile: profile)
        }
    }

    /// The size to decode `plan` at for at least `headroom` times what `hint` needs, or `nil` when
    /// the image is less than that (ImageMagick decodes it whole, as before).
    ///
    /// libwebp maps the whole picture onto the size asked, so a size whose sides are not in the
    /// picture's proportion stretches it: half a pixel on a 300-pixel side moves edges by a fifth of
    /// an output pixel after the resize. Of the widths from the smallest that keeps the headroom up
    /// to 32 more, the first whose proportional height is within a twentieth of a whole pixel is
    /// taken (any multiple of 16 for 16:9, every width for a square), else the closest.
    static func scaledSize(_ plan: Plan, hint: DecodeHint, headroom: Int) -> PixelSize? {
        guard let shrink = hint.maxShrink(from: PixelSize(width: plan.width, height: plan.height)) else { return nil }
        let factor = shrink / Double(headroom)
        guard factor >= 1 else { return nil }
        let smallest = max(1, Int((Double(plan.width) / factor).rounded(.up)))
        let ratio = Double(plan.height) / Double(plan.width)
        func error(_ w: Int) -> Double { abs(Double(w) * ratio - (Double(w) * ratio).rounded()) }
        let widths = (smallest...min(plan.width, smallest + 32))
        let width = widths.first { error($0) <= 0.05 } ?? widths.min { error($0) < error($1) } ?? smallest
        let height = max(1, Int((Double(width) * ratio).rounded()), Int((Double(plan.height) / factor).rounded(.down)))
        return PixelSize(width: width, height: min(plan.height, height))
    }

    /// Memory the reduced decode holds at its peak: the whole image as 32-bit pixels for lossless
    /// (VP8L keeps it for its backward references), the alpha plane for lossy with alpha, libwebp's
    /// row buffers and rescaler (about 64 bytes a column), and the reduced pixels twice (8-bit,
    /// then ImageMagick's 16-bit copy).
    static func estimatedMemory(_ plan: Plan, scaled: PixelSize) -> Int {
        let full = plan.width * plan.height
        let decoder = plan.lossless ? full * 4 : (plan.alpha ? full : 0)
        return decoder + plan.width * 64 + scaled.width * scaled.height * ((plan.alpha ? 4 : 3) + 8)
    }

    /// The settings that decode `plan`'s image at `size`.
    static func config(_ plan: Plan, size: PixelSize) throws -> WebPDecoderConfig {
        var config = WebPDecoderConfig()
        guard WebPInitDecoderConfig(&config) != 0 else { throw PipelineError(.decodeFailed, "WebP: libwebp version mismatch") }
        config.options.use_scaling = 1
        config.options.scaled_width = Int32(size.width)
        config.options.scaled_height = Int32(size.height)
        config.output.colorspace = plan.alpha ? MODE_RGBA : MODE_RGB
        return config
    }

    /// The image decoded at `size`, with the damage read past when `failOn` lets a file that ends
    /// early through (the rows it holds, incrementally decoded; the rest left black and
    /// transparent); throws `decode_failed` with libwebp's reason for a corrupt or truncated file.
    static func decode(_ data: Data, plan: Plan, size: PixelSize, failOn: FailOn = .warning) throws -> (wand: Wand, damage: Damage?) {
        let (pixels, damage) = try decodePixels(data, plan: plan, size: size, failOn: failOn)
        let wand = try pixels.wand()
        if let profile = plan.profile { try wand.setICCProfile(profile) }
        return (wand, damage)
    }

    /// The same decode as 8-bit pixels, without the profile (for a caller that has none to keep).
    static func decodePixels(_ data: Data, plan: Plan, size: PixelSize, failOn: FailOn = .warning) throws -> (RGB8Pixels, Damage?) {
        var config = try config(plan, size: size)
        let status = data.withUnsafeBytes { raw -> VP8StatusCode in
            let base = raw.baseAddress!.assumingMemoryBound(to: UInt8.self)
            return WebPDecode(base + plan.payload.lowerBound, plan.payload.count, &config)
        }
        defer { WebPFreeDecBuffer(&config.output) }
        if status == VP8_STATUS_NOT_ENOUGH_DATA, !failOn.stops(.truncated) {
            return try partial(data, plan: plan, size: size)
        }
        guard status == VP8_STATUS_OK else { throw failure(status) }
        let rgba = config.output.u.RGBA
        let channels = plan.alpha ? 4 : 3
        guard let pixels = rgba.rgba, Int(rgba.stride) == size.width * channels, rgba.size >= size.width * size.height * channels else {
            throw PipelineError(.decodeFailed, "WebP: unexpected output layout")
        }
        let bytes = [UInt8](UnsafeBufferPointer(start: pixels, count: size.width * size.height * channels))
        return (RGB8Pixels(width: size.width, height: size.height, hasAlpha: plan.alpha, bytes: bytes), nil)
    }

    /// The rows of a file that ends early, by libwebp's incremental decoder; fails as
    /// ``decode(_:plan:size:failOn:)`` would when not one row could be decoded.
    static func partial(_ data: Data, plan: Plan, size: PixelSize) throws -> (RGB8Pixels, Damage?) {
        var config = try config(plan, size: size)
        guard let decoder = WebPIDecode(nil, 0, &config) else { throw failure(VP8_STATUS_OUT_OF_MEMORY) }
        // The rows are in config.output, which libwebp allocated and WebPIDelete leaves (fuzzing
        // found the leak): freed after the decoder.
        defer { WebPFreeDecBuffer(&config.output) }
        defer { WebPIDelete(decoder) }
        let status = data.withUnsafeBytes { raw -> VP8StatusCode in
            let base = raw.baseAddress!.assumingMemoryBound(to: UInt8.self)
            return WebPIUpdate(decoder, base + plan.payload.lowerBound, plan.payload.count)
        }
        guard status == VP8_STATUS_SUSPENDED || status == VP8_STATUS_OK else { throw failure(status) }
        var lastRow: Int32 = 0, width: Int32 = 0, height: Int32 = 0, stride: Int32 = 0
        let channels = plan.alpha ? 4 : 3
        guard let rows = WebPIDecGetRGB(decoder, &lastRow, &width, &height, &stride), lastRow > 0,
              Int(width) == size.width, Int(height) == size.height, Int(stride) >= size.width * channels else {
            throw failure(VP8_STATUS_NOT_ENOUGH_DATA)
        }
        var pixels = [UInt8](repeating: 0, count: size.width * size.height * channels)
        pixels.withUnsafeMutableBytes { out in
            for y in 0..<Int(lastRow) {
                out.baseAddress!.advanced(by: y * size.width * channels)
                    .copyMemory(from: rows + y * Int(stride), byteCount: size.width * channels)
            }
        }
        return (RGB8Pixels(width: size.width, height: size.height, hasAlpha: plan.alpha, bytes: pixels), Damage(level: .truncated, message: "WebP: the file ends before the image does (\(lastRow) of \(size.height) rows decoded)"))
    }

    /// libwebp's status as the decode's error.
    static func failure(_ status: VP8StatusCode) -> PipelineError {
        switch status {
        case VP8_STATUS_NOT_ENOUGH_DATA: return PipelineError(.decodeFailed, "WebP: the file ends before the image does")
        case VP8_STATUS_BITSTREAM_ERROR: return PipelineError(.decodeFailed, "WebP: corrupt bitstream")
        case VP8_STATUS_UNSUPPORTED_FEATURE: return PipelineError(.decodeFailed, "WebP: a feature libwebp does not support")
        case VP8_STATUS_OUT_OF_MEMORY: return PipelineError(.tooLarge, "WebP: out of memory while decoding")
        default: return PipelineError(.decodeFailed, "WebP: libwebp status \(status.rawValue)")
        }
    }
}
