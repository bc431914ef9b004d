import CJPEG
import Foundation
import MagickKit
import PipelineKit

/// JPEG written by libjpeg directly from 8-bit pixels (``RGB8Pixels``), for the `jpeg` encoder and
/// `auto`: the same file ImageMagick 6's writer makes of those pixels (the same libjpeg settings:
/// the accurate integer DCT (``MagickEncoding/jpegDCT``), baseline quantisation tables at the quality, the sampling factors, optimised Huffman
/// tables, simple progression, libjpeg's default JFIF header; a picture whose pixels are all grey
/// as a one-channel JPEG), without widening the pixels to ImageMagick's 16 bits and back first.
///
/// ImageMagick still writes what this does not cover: images held by ImageMagick, alpha to
/// flatten, EXIF, XMP or IPTC to keep, and quality targets (their search compares in ImageMagick).
enum JPEGWriter {
    /// What the encoder's options ask of libjpeg.
    struct Settings: Equatable {
        var quality: Int
        /// h0 v0 h1 v1 h2 v2.
        var sampling: [Int32]
        var optimize: Bool
        var progressive: Bool

        /// The settings ImageMagick's writer takes from `coderOptions` (`jpeg:sampling-factor`,
        /// `jpeg:optimize-coding`) and `quality`, or `nil` for a sampling factor it does not read
        /// as three `HxV` pairs. No quality is ImageMagick's 92; no sampling factor is 1x1 from
        /// quality 90 up, else libjpeg's 2x2 for luma.
        init?(quality: Int?, coderOptions: [String: String], progressive: Bool) {
            self.quality = quality ?? 92
            self.optimize = coderOptions["jpeg:optimize-coding"].map { $0 == "true" } ?? true
            self.progressive = progressive
            if let factors = coderOptions["jpeg:sampling-factor"] {
                let pairs = factors.split(separator: ",").map { $0.split(separator: "x").compactMap { Int32($0) } }
                guard pairs.count == 3, pairs.allSatisfy({ $0.count == 2 && (1...4).contains($0[0]) && (1...4).contains($0[1]) })
                else { return nil }
                sampling = pairs.flatMap { $0 }
            } else {
                sampling = self.quality >= 90 ? [1, 1, 1, 1, 1, 1] : [2, 2, 1, 1, 1, 1]
            }
        }
    }

    /// The JPEG of opaque `pixels` under `settings`. Throws `encode_failed` with libjpeg's reason.
    static func write(_ pixels: RGB8Pixels, _ settings: Settings) throws -> Data {
        precondition(!pixels.hasAlpha)
        let components: Int32 = pixels.isGrey ? 1 : 3  // all grey: one channel, as ImageMagick writes it
        var length: UInt = 0
        var message = [CChar](repeating: 0, count: Int(JMSG_LENGTH_MAX))
        let written = pixels.bytes.withUnsafeBufferPointer { bytes in
            settings.sampling.withUnsafeBufferPointer { sampling in
                pk_jpeg_write(bytes.baseAddress, UInt32(pixels.width), UInt32(pixels.height), Int32(pixels.channels), components,
                              Int32(settings.quality), sampling.baseAddress, settings.optimize ? 1 : 0, settings.progressive ? 1 : 0,
                              &length, &message)
            }
        }
        guard let written else { throw PipelineError(.encodeFailed, "JPEG: " + String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)) }
        defer { free(written) }
        return Data(bytes: written, count: Int(length))
    }
}

extension RGB8Pixels {
    /// Whether every pixel is grey (ImageMagick writes such a picture as one channel).
    var isGrey: Bool { Self.isGrey(bytes, channels: channels) }

    /// Whether every pixel of 8-bit `bytes` (RGB first, `channels` bytes a pixel) is grey.
    static func isGrey(_ bytes: [UInt8], channels: Int) -> Bool {
        bytes.withUnsafeBufferPointer { bytes in
            var i = 0
            let count = bytes.count
            while i + 2 < count {
                if bytes[i] != bytes[i + 1] || bytes[i] != bytes[i + 2] { return false }
                i += channels
            }
            return true
        }
    }
}
