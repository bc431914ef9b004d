import CTIFF
import Foundation
import MagickKit
import PipelineKit
import Synchronization

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
    /// Where the TIFF's bytes are: in memory, or in a local file read as needed (a 160 MP master
    /// then costs the strips being decoded, not the file).
    enum Input: Sendable {
        case memory(Data)
        case file(LocalFile)
    }

    /// Runs `body` with a libtiff reader of `input` opened at its first directory (closed after).
    /// Throws `decode_failed` with libtiff's reason when the file is not a readable TIFF.
    static func withReader<T>(_ input: Input, _ body: (UnsafeMutablePointer<pk_tiff_reader>) throws -> T) throws -> T {
        var ok: Int32 = 0
        // No single allocation beyond what a 16-bit RGBA page of the decoder's limits needs.
        let maxAlloc: Int64 = 1 << 31
        switch input {
        case .memory(let data):
            return try data.withUnsafeBytes { raw in
                guard let reader = pk_tiff_open(raw.baseAddress, -1, raw.count, maxAlloc, &ok) else { throw outOfMemory }
                defer { pk_tiff_close(reader) }
                guard ok != 0 else { throw failure(reader) }
                return try body(reader)
            }
        case .file(let file):
            return try withExtendedLifetime(file) {
                guard let reader = pk_tiff_open(nil, file.descriptor, file.size, maxAlloc, &ok) else { throw outOfMemory }
                defer { pk_tiff_close(reader) }
                guard ok != 0 else { throw failure(reader) }
                return try body(reader)
            }
        }
    }

    static let outOfMemory = PipelineError(.decodeFailed, "TIFF: out of memory opening the file")

    /// The first directory's size, from its header.
    static func size(_ input: Input) throws -> PixelSize {
        try withReader(input) { reader in
            var width: UInt32 = 0, height: UInt32 = 0
            var photometric: UInt16 = 0, samples: UInt16 = 0, bits: UInt16 = 0, orientation: UInt16 = 0
            var morePages: Int32 = 0
            pk_tiff_info(reader, &width, &height, &photometric, &samples, &bits, &orientation, &morePages)
            return PixelSize(width: Int(width), height: Int(height))
        }
    }

    /// The reduced first page, or `nil` when this TIFF is one for ImageMagick. Throws
    /// `decode_failed` with libtiff's reason for a corrupt or truncated file.
    static func decode(_ input: Input, hint: DecodeHint, headroom: Int, keepsPages: Bool) throws -> Wand? {
        try withReader(input) { reader -> Wand? in
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
            var size = full, shrink = fullShrink, levelIndex: Int32?
            if morePages != 0, !keepsPages, let chosen = smallestLevel(reader, full: full, shrink: fullShrink, headroom: headroom) {
                (size, levelIndex) = (chosen.size, chosen.index)
                shrink = fullShrink * Double(chosen.size.width) / Double(full.width)
                var reduced: Int32 = 0
                guard pk_tiff_select(reader, chosen.index, &width, &height, &reduced) != 0 else { throw failure(reader) }
            }
            let factor = BoxReducer.blockSize(for: size, shrink: shrink, headroom: headroom) ?? (levelIndex != nil ? 1 : nil)
            guard let factor, pk_tiff_rgba_ok(reader) != 0 else { return nil }
            let alpha = pk_tiff_has_alpha(reader) != 0
            // Read in bands of a strip or a tile row, each reduced as it comes: memory is the
            // band and the output, not the page (a 160 MP page is 640 MB as RGBA).
            // Flipped orientations (2-4) are read whole: libtiff turns the page as a whole, and
            // bands come in the file's row order.
            let rgba: [UInt8]
            if orientation <= 1 {
                let band = Int(pk_tiff_band_rows(reader))
                let chunks = Self.chunks(height: size.height, band: band, factor: factor, pixels: size.width * size.height)
                if chunks.count > 1, WorkerPool.current != nil {
                    rgba = try reduceInParallel(input, level: levelIndex, size: size, band: band, factor: factor, chunks: chunks)
                } else {
                    guard pk_tiff_band_begin(reader) != 0 else { throw failure(reader) }
                    rgba = try reduceRows(reader, size: size, band: band, factor: factor, rows: 0..<size.height)
                }
            } else {
                var buffer = [UInt32](repeating: 0, count: size.width * size.height)
                let read = buffer.withUnsafeMutableBufferPointer { pixels in
                    pk_tiff_read_rgba(reader, pixels.baseAddress, UInt32(size.width), UInt32(size.height))
                }
                guard read != 0 else { throw failure(reader) }
                var box = BoxReducer(width: size.width, height: size.height, factor: factor, alpha: true)
                box.premultiplied = true
                var y = 0
                rgba = try box.reduce { row in
                    buffer.withUnsafeBytes { pixels in
                        row.withUnsafeMutableBytes {
                            $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: pixels[(y * size.width * 4)..<((y + 1) * size.width * 4)]))
                        }
                    }
                    y += 1
                }
            }
            let outWidth = (size.width + factor - 1) / factor, outHeight = (size.height + factor - 1) / factor
            let wand: Wand
            if alpha {
                wand = try Wand.fromPixels(rgba, width: outWidth, height: outHeight, hasAlpha: true)
            } else {
                // Opaque: drop the alpha byte rather than carry an alpha channel of 255s.
                var rgb = [UInt8](repeating: 0, count: outWidth * outHeight * 3)
                for i in 0..<(outWidth * outHeight) {
                    rgb[i * 3] = rgba[i * 4]; rgb[i * 3 + 1] = rgba[i * 4 + 1]; rgb[i * 3 + 2] = rgba[i * 4 + 2]
                }
                wand = try Wand.fromPixels(rgb, width: outWidth, height: outHeight, hasAlpha: false)
            }
            if let profile { try wand.setICCProfile(profile) }
            return wand
        }
    }

    /// `rows` of the reader's current directory (begun for bands), read a band at a time and
    /// box-reduced by `factor` as they come: RGBA, premultiplied in, straight out. `rows` starts
    /// at a band and block boundary.
    static func reduceRows(_ reader: UnsafeMutablePointer<pk_tiff_reader>, size: PixelSize, band: Int, factor: Int,
                           rows: Range<Int>) throws -> [UInt8] {
        var buffer = [UInt32](repeating: 0, count: size.width * band)
        var bandStart = rows.lowerBound - band
        var box = BoxReducer(width: size.width, height: rows.count, factor: factor, alpha: true)
        box.premultiplied = true
        var y = rows.lowerBound
        return try box.reduce { row in
            if y >= bandStart + band {
                bandStart = y
                let count = min(band, rows.upperBound - y)
                let read = buffer.withUnsafeMutableBufferPointer { pixels in
                    pk_tiff_band_read(reader, pixels.baseAddress, UInt32(y), UInt32(count))
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
    }

    /// Pieces of rows that may be reduced apart: each starts on a strip (or tile row) boundary,
    /// so no strip is decoded twice, and on a block boundary, so the blocks are the ones one pass
    /// makes; the pieces' outputs stacked are the one pass's output. One piece below 8 MP: too
    /// little work to share. At most 8, so a helper that starts late still finds some left.
    static func chunks(height: Int, band: Int, factor: Int, pixels: Int) -> [Range<Int>] {
        guard pixels >= 8_000_000, band > 0 else { return [0..<height] }
        var step = band
        while step % factor != 0 { step += band }  // a multiple of both
        let count = min(8, height / step)
        guard count > 1 else { return [0..<height] }
        let per = (height / step + count - 1) / count * step
        return stride(from: 0, to: height, by: per).map { $0..<min(height, $0 + per) }
    }

    /// Pieces reduced in this thread and in the idle threads of its pool, each with a libtiff
    /// reader of its own over the same input, then stacked in order.
    static func reduceInParallel(_ input: Input, level: Int32?, size: PixelSize, band: Int, factor: Int,
                                 chunks: [Range<Int>]) throws -> [UInt8] {
        let results = Mutex<[Int: Result<[UInt8], any Error>]>([:])
        WorkerPool.shareIdleThreads(parts: chunks.count) { part in
            let result = Result {
                try withReader(input) { reader -> [UInt8] in
                    if let level {
                        var width: UInt32 = 0, height: UInt32 = 0, reduced: Int32 = 0
                        guard pk_tiff_select(reader, level, &width, &height, &reduced) != 0 else { throw failure(reader) }
                    }
                    guard pk_tiff_band_begin(reader) != 0 else { throw failure(reader) }
                    return try reduceRows(reader, size: size, band: band, factor: factor, rows: chunks[part])
                }
            }
            results.withLock { $0[part] = result }
        }
        ParallelReads.add()
        var out = [UInt8]()
        out.reserveCapacity(((size.width + factor - 1) / factor) * ((size.height + factor - 1) / factor) * 4)
        for part in chunks.indices { out += try results.withLock { $0[part]! }.get() }
        return out
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

/// TIFF pages reduced in pieces on more than one thread so far (for the test that checks a lone
/// large TIFF is shared).
enum ParallelReads {
    static let count = Atomic<Int>(0)
    static func add() { count.add(1, ordering: .relaxed) }
}
