import CGIF
import Foundation
import MagickKit
import PipelineKit

/// Shrink-on-load for GIF: giflib decodes the first image (when it covers the logical screen, as
/// still GIFs and nearly every animation's first frame do) to 8-bit RGBA, and whole blocks are
/// averaged into 16 bits, down to no less than twice the target (``BoxReducer``, colour
/// premultiplied by alpha) before ImageMagick sees it. Nothing after the first image is read.
/// Kept animations and first frames smaller than the screen stay with ImageMagick.
enum GIFReducer {
    /// Memory at the peak: the screen as 8-bit RGBA, giflib's line and tables, the reduced pixels
    /// in 16 bits and in the wand.
    static func estimatedMemory(_ size: PixelSize, factor: Int) -> Int {
        let out = ((size.width + factor - 1) / factor) * ((size.height + factor - 1) / factor)
        return size.width * size.height * 4 + size.width * 8 + 32_768 + out * 16
    }

    /// The reduced first image, or `nil` when this GIF is one for ImageMagick. Throws
    /// `decode_failed` with giflib's reason for a corrupt or truncated file.
    static func decode(_ data: Data, factor: Int) throws -> Wand? {
        var width: Int32 = 0, height: Int32 = 0, alpha: Int32 = 0
        var pixels: UnsafeMutablePointer<UInt8>?
        var message = [CChar](repeating: 0, count: 200)
        let result = data.withUnsafeBytes { raw in
            pk_gif_first_frame(raw.baseAddress, raw.count, &width, &height, &alpha, &pixels, &message, message.count)
        }
        defer { free(pixels) }
        if result < 0 { return nil }
        guard result == 1, let pixels else {
            throw PipelineError(.decodeFailed, "GIF: " + String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        let w = Int(width), h = Int(height), keepsAlpha = alpha != 0
        let box = BoxReducer(width: w, height: h, factor: factor, alpha: true)
        var y = 0
        let rgba = try box.reduce(as: UInt16.self) { row in
            row.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(start: pixels + y * w * 4, count: w * 4)) }
            y += 1
        }
        if keepsAlpha { return try Wand.fromPixels(rgba, width: box.outWidth, height: box.outHeight, hasAlpha: true) }
        var rgb = [UInt16](repeating: 0, count: box.outWidth * box.outHeight * 3)
        for i in 0..<(box.outWidth * box.outHeight) {
            rgb[i * 3] = rgba[i * 4]; rgb[i * 3 + 1] = rgba[i * 4 + 1]; rgb[i * 3 + 2] = rgba[i * 4 + 2]
        }
        return try Wand.fromPixels(rgb, width: box.outWidth, height: box.outHeight, hasAlpha: false)
    }
}
