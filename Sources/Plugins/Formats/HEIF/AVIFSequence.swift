import CAVIF
import Foundation
import MagickKit
import PipelineKit

/// An animation written as an AVIF image sequence through libavif 0.11 and libaom, which
/// ImageMagick 6's HEIF coder cannot write: every frame with its duration, alpha kept, and the
/// loop count in an edit list (``AVIFEditList``), which libavif 0.11 does not write.
///
/// Quality is on libheif's scale, as the `avif` encoder's stills are (``quantizer(quality:)``),
/// encoded at libaom speed 6 on one thread, as libheif encodes stills: the engine's workers encode
/// items side by side.
struct AVIFSequence {
    /// 1 (smallest) to 100 (best).
    var quality: Int
    /// libaom's speed, 0 (slowest) to 10.
    var speed = 6

    /// libheif's mapping of a quality to AV1's quantizer (0 best, 63 worst), which libavif 1.0
    /// adopted too.
    static func quantizer(quality: Int) -> Int { ((100 - min(100, max(0, quality))) * 63 + 50) / 100 }

    /// Every frame of `wand` (coalesced: each the whole canvas) as one AVIF sequence, each shown
    /// for its entry of `durations` (ms), the whole played `plays` times (0: forever). The frames
    /// must be sRGB; the caller converts them.
    func write(_ wand: Wand, durations: [Int], plays: Int) throws -> Data {
        guard let encoder = avifEncoderCreate() else { throw failure("libavif could not start an encoder") }
        defer { avifEncoderDestroy(encoder) }
        encoder.pointee.codecChoice = AVIF_CODEC_CHOICE_AOM
        encoder.pointee.maxThreads = 1
        encoder.pointee.speed = Int32(speed)
        encoder.pointee.timescale = 1000
        let quantizer = Int32(Self.quantizer(quality: quality))
        // libaom's constant-quality mode, at the quantizer libheif's quality gives (libavif 0.11
        // sets no cq-level outside all-intra mode, so the range alone would be used).
        encoder.pointee.minQuantizer = 0
        encoder.pointee.maxQuantizer = 63
        encoder.pointee.minQuantizerAlpha = 0
        encoder.pointee.maxQuantizerAlpha = 63
        avifEncoderSetCodecSpecificOption(encoder, "end-usage", "q")
        avifEncoderSetCodecSpecificOption(encoder, "cq-level", "\(quantizer)")
        let alpha = wand.hasAlpha
        var index = 0
        try wand.eachFrame { frame in
            try add(frame, alpha: alpha, duration: durations[min(index, durations.count - 1)], to: encoder)
            index += 1
        }
        var output = avifRWData(data: nil, size: 0)
        defer { avifRWDataFree(&output) }
        try check(avifEncoderFinish(encoder, &output), "finishing the sequence", encoder)
        let data = Data(bytes: output.data, count: output.size)
        return try AVIFEditList.settingLoops(data, plays: plays)
    }

    /// The current frame of `frame`, converted to YUV 4:2:0 (full range, BT.601 matrix, sRGB), added
    /// for `duration` milliseconds.
    private func add(_ frame: Wand, alpha: Bool, duration: Int, to encoder: UnsafeMutablePointer<avifEncoder>) throws {
        let width = frame.width, height = frame.height
        var samples = try frame.bytes(channels: alpha ? "RGBA" : "RGB")
        guard let image = avifImageCreate(UInt32(width), UInt32(height), 8, AVIF_PIXEL_FORMAT_YUV420) else {
            throw failure("no image for a \(width)x\(height) frame")
        }
        defer { avifImageDestroy(image) }
        image.pointee.colorPrimaries = UInt16(AVIF_COLOR_PRIMARIES_BT709)
        image.pointee.transferCharacteristics = UInt16(AVIF_TRANSFER_CHARACTERISTICS_SRGB)
        image.pointee.matrixCoefficients = UInt16(AVIF_MATRIX_COEFFICIENTS_BT601)
        image.pointee.yuvRange = AVIF_RANGE_FULL
        var rgb = avifRGBImage()
        avifRGBImageSetDefaults(&rgb, image)
        rgb.format = alpha ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB
        rgb.depth = 8
        rgb.rowBytes = UInt32(width * (alpha ? 4 : 3))
        try samples.withUnsafeMutableBytes { buffer in
            rgb.pixels = buffer.bindMemory(to: UInt8.self).baseAddress
            try check(avifImageRGBToYUV(image, &rgb), "converting a frame to YUV", nil)
        }
        try check(avifEncoderAddImage(encoder, image, UInt64(max(1, duration)), avifAddImageFlags(AVIF_ADD_IMAGE_FLAG_NONE.rawValue)),
                  "encoding a frame", encoder)
    }

    private func check(_ result: avifResult, _ what: String, _ encoder: UnsafeMutablePointer<avifEncoder>?) throws {
        guard result != AVIF_RESULT_OK else { return }
        var detail = String(cString: avifResultToString(result))
        if let encoder {
            let diagnostics = withUnsafeBytes(of: encoder.pointee.diag.error) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if !diagnostics.isEmpty { detail += ": " + diagnostics }
        }
        throw failure("\(what) failed (\(detail))")
    }

    private func failure(_ what: String) -> PipelineError { PipelineError(.encodeFailed, "AVIF sequence: " + what) }
}
