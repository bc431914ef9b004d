import CTIFF
import Foundation
import MagickKit
import PipelineKit

/// Shrink-on-load for TIFF: libtiff's RGBA interface reads the first page (every compression and
/// bit depth libtiff decodes: deflate, LZW, JPEG-in-TIFF, 16 bits a sample, palette) as 8-bit
/// RGBA, and whole blocks are averaged down to no less than twice the target (``BoxReducer``)
/// before ImageMagick sees the image. ImageMagick's TIFF coder would hold the page in 16-bit
/// channels and the resize would then box it down there: most of a TIFF thumbnail's time.
///
/// Left to ImageMagick: greyscale (kept grey there), CMYK and other ink or Lab spaces (converted
/// there, through their profile), orientations that transpose (5-8), kept multi-page files, and
/// anything the RGBA interface declines.
enum TIFFReducer {
    /// The reduced first page, or `nil` when this TIFF is one for ImageMagick. Throws
    /// `decode_failed` with libtiff's reason for a corrupt or truncated file.
    static func decode(_ data: Data, hint: DecodeHint, headroom: Int, keepsPages: Bool) throws -> Wand? {
        try data.withUnsafeBytes { raw -> Wand? in
            var ok: Int32 = 0
            // No single allocation beyond what a 16-bit RGBA page of the decoder's limits needs.
            guard let reader = pk_tiff_open(raw.baseAddress, raw.count, 1 << 31, &ok) else { return nil }
            defer { pk_tiff_close(reader) }
            guard ok != 0 else { throw failure(reader) }
            var width: UInt32 = 0, height: UInt32 = 0
            var photometric: UInt16 = 0, samples: UInt16 = 0, bits: UInt16 = 0, orientation: UInt16 = 0
            var morePages: Int32 = 0
            pk_tiff_info(reader, &width, &height, &photometric, &samples, &bits, &orientation, &morePages)
            let size = PixelSize(width: Int(width), height: Int(height))
            guard size.width > 0, size.height > 0, orientation <= 4, !(keepsPages && morePages != 0),
                  [PHOTOMETRIC_RGB, PHOTOMETRIC_YCBCR, PHOTOMETRIC_PALETTE].contains(Int32(photometric)),
                  let shrink = hint.maxShrink(from: size),
                  let factor = BoxReducer.blockSize(for: size, shrink: shrink, headroom: headroom),
                  pk_tiff_rgba_ok(reader) != 0 else { return nil }
            let alpha = pk_tiff_has_alpha(reader) != 0
            var profile: Data?
            var profileLength: UInt32 = 0
            if let icc = pk_tiff_icc(reader, &profileLength), profileLength > 0 {
                profile = Data(bytes: icc, count: Int(profileLength))
            }
            var raster = [UInt32](repeating: 0, count: size.width * size.height)
            let read = raster.withUnsafeMutableBufferPointer { pk_tiff_read_rgba(reader, $0.baseAddress, width, height) }
            guard read != 0 else { throw failure(reader) }
            var box = BoxReducer(width: size.width, height: size.height, factor: factor, alpha: true)
            box.premultiplied = true
            var y = 0
            let rgba = try raster.withUnsafeBytes { pixels in
                try box.reduce { row in
                    row.withUnsafeMutableBytes {
                        $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: pixels[(y * size.width * 4)..<((y + 1) * size.width * 4)]))
                    }
                    y += 1
                }
            }
            let wand: Wand
            if alpha {
                wand = try Wand.fromPixels(rgba, width: box.outWidth, height: box.outHeight, hasAlpha: true)
            } else {
                // Opaque: drop the alpha byte rather than carry an alpha channel of 255s.
                var rgb = [UInt8](repeating: 0, count: box.outWidth * box.outHeight * 3)
                for i in 0..<(box.outWidth * box.outHeight) {
                    rgb[i * 3] = rgba[i * 4]; rgb[i * 3 + 1] = rgba[i * 4 + 1]; rgb[i * 3 + 2] = rgba[i * 4 + 2]
                }
                wand = try Wand.fromPixels(rgb, width: box.outWidth, height: box.outHeight, hasAlpha: false)
            }
            if let profile { try wand.setICCProfile(profile) }
            return wand
        }
    }

    /// libtiff's reason for the reader's last failure.
    static func failure(_ reader: UnsafeMutablePointer<pk_tiff_reader>) -> PipelineError {
        let message = String(cString: pk_tiff_message(reader))
        return PipelineError(.decodeFailed, "TIFF: " + (message.isEmpty ? "unreadable image data" : message))
    }
}
