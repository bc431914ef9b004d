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
            let full = PixelSize(width: Int(width), height: Int(height))
            guard full.width > 0, full.height > 0, orientation <= 4, !(keepsPages && morePages != 0),
                  [PHOTOMETRIC_RGB, PHOTOMETRIC_YCBCR, PHOTOMETRIC_PALETTE].contains(Int32(photometric)),
                  let fullShrink = hint.maxShrink(from: full) else { return nil }
            var profile: Data?
            var profileLength: UInt32 = 0
            if let icc = pk_tiff_icc(reader, &profileLength), profileLength > 0 {
                profile = Data(bytes: icc, count: Int(profileLength))
            }
            // A pyramid (levels as reduced-resolution directories after the first): the smallest
            // level that still leaves the shrink its headroom is read instead of the full image.
            var size = full, shrink = fullShrink, level = false
            if morePages != 0, !keepsPages, let chosen = smallestLevel(reader, full: full, shrink: fullShrink, headroom: headroom) {
                (size, level) = (chosen.size, true)
                shrink = fullShrink * Double(chosen.size.width) / Double(full.width)
                var reduced: Int32 = 0
                guard pk_tiff_select(reader, chosen.index, &width, &height, &reduced) != 0 else { throw failure(reader) }
            }
            let factor = BoxReducer.blockSize(for: size, shrink: shrink, headroom: headroom) ?? (level ? 1 : nil)
            guard let factor, pk_tiff_rgba_ok(reader) != 0 else { return nil }
            let alpha = pk_tiff_has_alpha(reader) != 0
            // Read in bands of a strip or a tile row, each reduced as it comes: memory is the
            // band and the output, not the page (a 160 MP page is 640 MB as RGBA).
            // Flipped orientations (2-4) are read whole: libtiff turns the page as a whole, and
            // bands come in the file's row order.
            let banded = orientation <= 1
            if banded { guard pk_tiff_band_begin(reader) != 0 else { throw failure(reader) } }
            let band = banded ? Int(pk_tiff_band_rows(reader)) : size.height
            var buffer = [UInt32](repeating: 0, count: size.width * band)
            var bandStart = -band
            var box = BoxReducer(width: size.width, height: size.height, factor: factor, alpha: true)
            box.premultiplied = true
            var y = 0
            let rgba = try box.reduce { row in
                if y >= bandStart + band {
                    bandStart = y
                    let rows = min(band, size.height - y)
                    let read = buffer.withUnsafeMutableBufferPointer { pixels in
                        banded ? pk_tiff_band_read(reader, pixels.baseAddress, UInt32(y), UInt32(rows))
                            : pk_tiff_read_rgba(reader, pixels.baseAddress, UInt32(size.width), UInt32(size.height))
                    }
                    guard read != 0 else { throw failure(reader) }
                }
                let offset = (y - bandStart) * size.width
                buffer.withUnsafeBytes { pixels in
                    row.withUnsafeMutableBytes {
                        $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: pixels[(offset * 4)..<((offset + size.width) * 4)]))
                    }
                }
                y += 1
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

    struct Level {
        let index: Int32
        let size: PixelSize
    }

    /// The smallest reduced-resolution directory of a pyramid that may still be shrunk `headroom`
    /// times to the target, or `nil` (no pyramid, or no level small enough to pay).
    static func smallestLevel(_ reader: UnsafeMutablePointer<pk_tiff_reader>, full: PixelSize, shrink: Double, headroom: Int) -> Level? {
        let count = pk_tiff_directories(reader)
        guard count > 1 else { return nil }
        var best: Level?
        for index in 1..<min(count, 64) {
            var width: UInt32 = 0, height: UInt32 = 0, reduced: Int32 = 0
            guard pk_tiff_select(reader, index, &width, &height, &reduced) != 0 else { break }
            guard reduced != 0, width > 0, height > 0, Int(width) < full.width else { continue }
            // The same picture, smaller: its aspect within a pixel of the first directory's.
            let expected = Double(full.height) * Double(width) / Double(full.width)
            guard abs(expected - Double(height)) <= 1.5 else { continue }
            let levelShrink = shrink * Double(width) / Double(full.width)
            guard levelShrink >= Double(headroom), best.map({ Int(width) < $0.size.width }) ?? true else { continue }
            best = Level(index: index, size: PixelSize(width: Int(width), height: Int(height)))
        }
        var width: UInt32 = 0, height: UInt32 = 0, reduced: Int32 = 0
        guard pk_tiff_select(reader, 0, &width, &height, &reduced) != 0 else { return nil }
        return best
    }

    /// libtiff's reason for the reader's last failure.
    static func failure(_ reader: UnsafeMutablePointer<pk_tiff_reader>) -> PipelineError {
        let message = String(cString: pk_tiff_message(reader))
        return PipelineError(.decodeFailed, "TIFF: " + (message.isEmpty ? "unreadable image data" : message))
    }
}
