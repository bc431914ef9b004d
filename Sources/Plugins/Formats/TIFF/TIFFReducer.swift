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
    typealias Input = EncodedInput

    /// Runs `body` with a libtiff reader of `input` opened at its first directory (closed after).
    /// Throws `decode_failed` with libtiff's reason when the file is not a readable TIFF.
    static func withReader<T>(_ input: Input, _ body: (UnsafeMutablePointer<pk_tiff_reader>) throws -> T) throws -> T {
        try input.withSource { bytes, descriptor, size in
            var ok: Int32 = 0
            // No single allocation beyond what a 16-bit RGBA page of the decoder's limits needs.
            guard let reader = pk_tiff_open(bytes, descriptor, size, 1 << 31, &ok) else { throw outOfMemory }
            defer { pk_tiff_close(reader) }
            guard ok != 0 else { throw failure(reader) }
            return try body(reader)
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

    /// What the reduced path will read: the directory (the first, or a pyramid level, selected
    /// in `reader` on return), its size, the block, the orientation.
    struct Layout {
        let size: PixelSize
        let levelIndex: Int32?
        let factor: Int
        let orientation: UInt16
        let profile: Data?
        /// Rows one read decodes (a strip's or a tile row's).
        let band: Int
        /// Strips of 8-bit RGB read raw, without libtiff's RGBA packing (``reduceRawRows``).
        let raw: Bool
        var outWidth: Int { (size.width + factor - 1) / factor }
        var outHeight: Int { (size.height + factor - 1) / factor }
    }

    /// The layout of the reduced read of `reader`'s file, or `nil` when it is one for ImageMagick.
    static func layout(_ reader: UnsafeMutablePointer<pk_tiff_reader>, hint: DecodeHint, headroom: Int, keepsPages: Bool) throws -> Layout? {
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
        return Layout(size: size, levelIndex: levelIndex, factor: factor, orientation: orientation, profile: profile,
                      band: Int(pk_tiff_band_rows(reader)), raw: orientation <= 1 && pk_tiff_raw_rgb(reader) != 0)
    }

    /// Peak memory of the reduced read, or `nil` when the file is one for ImageMagick: for each
    /// reader at once (one per core at most) a band as RGBA and libtiff's decoded and compressed
    /// strip (up to 16-bit samples), the output twice (reduced, then in the wand); a page read
    /// whole (flipped orientations) as RGBA. Not the page: a 160 MP strip TIFF needs tens of MB,
    /// so two run side by side under the decode budget.
    static func estimatedMemory(_ input: Input, hint: DecodeHint, headroom: Int, keepsPages: Bool) -> Int? {
        guard let layout = try? withReader(input, { try Self.layout($0, hint: hint, headroom: headroom, keepsPages: keepsPages) }) else {
            return nil
        }
        let output = layout.outWidth * layout.outHeight * 4 * 2
        if layout.orientation > 1 { return layout.size.width * layout.size.height * 4 + output }
        let readers = chunks(height: layout.size.height, factor: layout.factor,
                             pixels: layout.size.width * layout.size.height).count > 1 ? 2 : 1
        return readers * layout.size.width * layout.band * (4 + 8 + 8) + output
    }

    /// The reduced first page, or `nil` when this TIFF is one for ImageMagick: 8-bit pixels when
    /// it has no ICC profile and is stored upright (as PNG's and JPEG's reduced reads give them),
    /// else a wand carrying the profile. Throws `decode_failed` with libtiff's reason for a
    /// corrupt or truncated file.
    static func decode(_ input: Input, hint: DecodeHint, headroom: Int, keepsPages: Bool) throws -> Decoded? {
        try withReader(input) { reader -> Decoded? in
            guard let layout = try layout(reader, hint: hint, headroom: headroom, keepsPages: keepsPages) else { return nil }
            let (size, levelIndex, factor, orientation, profile) = (layout.size, layout.levelIndex, layout.factor, layout.orientation, layout.profile)
            let alpha = !layout.raw && pk_tiff_has_alpha(reader) != 0
            // Read in bands of a strip or a tile row, each reduced as it comes: memory is the
            // band and the output, not the page (a 160 MP page is 640 MB as RGBA).
            // Flipped orientations (2-4) are read whole: libtiff turns the page as a whole, and
            // bands come in the file's row order.
            let rgba: [UInt8]
            if orientation <= 1 {
                let band = layout.band
                let chunks = Self.chunks(height: size.height, factor: factor, pixels: size.width * size.height)
                if chunks.count > 1, WorkerPool.current != nil {
                    rgba = try reduceInParallel(input, level: levelIndex, size: size, band: band, factor: factor, raw: layout.raw, chunks: chunks)
                } else if layout.raw {
                    rgba = try reduceRawRows(reader, size: size, rowsPerStrip: band, factor: factor, rows: 0..<size.height)
                } else {
                    guard pk_tiff_band_begin(reader) != 0 else { throw failure(reader) }
                    rgba = try reduceRows(reader, size: size, band: band, factor: factor, rows: 0..<size.height)
                }
            } else {
                rgba = try reduceWhole(reader, size: size, factor: factor)
            }
            let outWidth = (size.width + factor - 1) / factor, outHeight = (size.height + factor - 1) / factor
            let pixels: [UInt8], hasAlpha = !layout.raw && alpha
            if layout.raw || alpha {
                pixels = rgba  // RGB already, or RGBA with its alpha
            } else {
                // Opaque: drop the alpha byte rather than carry an alpha channel of 255s.
                var rgb = [UInt8](repeating: 0, count: outWidth * outHeight * 3)
                for i in 0..<(outWidth * outHeight) {
                    rgb[i * 3] = rgba[i * 4]; rgb[i * 3 + 1] = rgba[i * 4 + 1]; rgb[i * 3 + 2] = rgba[i * 4 + 2]
                }
                pixels = rgb
            }
            // No profile to convert through or keep, nothing to turn: the resize and the writers
            // take 8-bit pixels without ImageMagick's 16-bit copy (a pyramid level's box average
            // in ImageMagick's ScaleImage was 4 ms of a 50 ms thumbnail).
            if profile == nil, orientation <= 1 {
                return .pixels(RGB8Pixels(width: outWidth, height: outHeight, hasAlpha: hasAlpha, bytes: pixels))
            }
            let wand = try Wand.fromPixels(pixels, width: outWidth, height: outHeight, hasAlpha: hasAlpha)
            if let profile { try wand.setICCProfile(profile) }
            return .wand(wand)
        }
    }

    /// A page with a flipped orientation (2-4), read whole (libtiff turns the page as a whole, and
    /// bands come in the file's row order), then box-reduced by `factor`: RGBA, premultiplied in,
    /// straight out.
    static func reduceWhole(_ reader: UnsafeMutablePointer<pk_tiff_reader>, size: PixelSize, factor: Int) throws -> [UInt8] {
        var buffer = [UInt32](repeating: 0, count: size.width * size.height)
        let read = buffer.withUnsafeMutableBufferPointer { pixels in
            pk_tiff_read_rgba(reader, pixels.baseAddress, UInt32(size.width), UInt32(size.height))
        }
        guard read != 0 else { throw failure(reader) }
        var box = BoxReducer(width: size.width, height: size.height, factor: factor, alpha: true)
        box.premultiplied = true
        var y = 0
        return try box.reduce { row in
            buffer.withUnsafeBytes { pixels in
                row.withUnsafeMutableBytes {
                    $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: pixels[(y * size.width * 4)..<((y + 1) * size.width * 4)]))
                }
            }
            y += 1
        }
    }

    /// `rows` of the reader's current directory (begun for bands), read a band at a time and
    /// box-reduced by `factor` as they come: RGBA, premultiplied in, straight out. `rows` starts
    /// on a block boundary; reads stay on the file's strip (or tile row) boundaries, so each strip
    /// is decoded once even when `rows` starts inside one.
    static func reduceRows(_ reader: UnsafeMutablePointer<pk_tiff_reader>, size: PixelSize, band: Int, factor: Int,
                           rows: Range<Int>) throws -> [UInt8] {
        var buffer = [UInt32](repeating: 0, count: size.width * band)
        if factor == 1 { return try copyRows(reader, size: size, band: band, rows: rows, buffer: &buffer) }
        var readStart = rows.lowerBound, readEnd = rows.lowerBound
        var box = BoxReducer(width: size.width, height: rows.count, factor: factor, alpha: true)
        box.premultiplied = true
        var y = rows.lowerBound
        return try box.reduce { row in
            if y >= readEnd {
                readStart = y
                readEnd = min(rows.upperBound, (y / band + 1) * band)
                let read = buffer.withUnsafeMutableBufferPointer { pixels in
                    pk_tiff_band_read(reader, pixels.baseAddress, UInt32(y), UInt32(readEnd - y))
                }
                guard read != 0 else { throw failure(reader) }
            }
            let offset = (y - readStart) * size.width
            buffer.withUnsafeBytes { pixels in
                row.withUnsafeMutableBytes {
                    $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: pixels[(offset * 4)..<((offset + size.width) * 4)]))
                }
            }
            y += 1
        }
    }

    /// `rows` of 8-bit RGB strips read raw (``pk_tiff_raw_rgb``), each strip decoded once into a
    /// buffer and its rows box-reduced where they lie: RGB out. One pass over the pixels fewer than
    /// the RGBA interface (which packs every pixel into 32 bits first), and a quarter less to add.
    static func reduceRawRows(_ reader: UnsafeMutablePointer<pk_tiff_reader>, size: PixelSize, rowsPerStrip: Int, factor: Int,
                              rows: Range<Int>) throws -> [UInt8] {
        let stride = size.width * 3
        var strip = [UInt8](repeating: 0, count: stride * rowsPerStrip)
        var loaded = -1
        let box = BoxReducer(width: size.width, height: rows.count, factor: factor, alpha: false)
        return try strip.withUnsafeMutableBufferPointer { buffer in
            try box.reduce(feeding: { index, take in
                let y = rows.lowerBound + index, number = y / rowsPerStrip
                if number != loaded {
                    let expected = min(rowsPerStrip, size.height - number * rowsPerStrip) * stride
                    let got = pk_tiff_read_strip(reader, UInt32(number), buffer.baseAddress, Int64(buffer.count))
                    guard got >= expected else { throw failure(reader) }
                    loaded = number
                }
                let offset = (y - number * rowsPerStrip) * stride
                take(UnsafeBufferPointer(rebasing: buffer[offset..<(offset + stride)]))
            })
        }
    }

    /// `rows` as they are (a pyramid level that needs no block): read a band at a time straight
    /// into the output, alpha divided out where a pixel is not opaque.
    static func copyRows(_ reader: UnsafeMutablePointer<pk_tiff_reader>, size: PixelSize, band: Int, rows: Range<Int>,
                         buffer: inout [UInt32]) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: size.width * rows.count * 4)
        var y = rows.lowerBound
        while y < rows.upperBound {
            let end = min(rows.upperBound, (y / band + 1) * band)
            let read = buffer.withUnsafeMutableBufferPointer { pk_tiff_band_read(reader, $0.baseAddress, UInt32(y), UInt32(end - y)) }
            guard read != 0 else { throw failure(reader) }
            buffer.withUnsafeBytes { source in
                out.withUnsafeMutableBytes { target in
                    let from = source.bindMemory(to: UInt8.self), to = target.bindMemory(to: UInt8.self)
                    let base = (y - rows.lowerBound) * size.width * 4
                    for i in stride(from: 0, to: (end - y) * size.width * 4, by: 4) {
                        let a = UInt32(from[i + 3])
                        if a == 255 || a == 0 {
                            to[base + i] = from[i]; to[base + i + 1] = from[i + 1]; to[base + i + 2] = from[i + 2]; to[base + i + 3] = from[i + 3]
                        } else {
                            // Premultiplied in: the same rounding as the box's (r x 255 + a/2) / a.
                            to[base + i] = UInt8(min(255, (UInt32(from[i]) * 255 + a / 2) / a))
                            to[base + i + 1] = UInt8(min(255, (UInt32(from[i + 1]) * 255 + a / 2) / a))
                            to[base + i + 2] = UInt8(min(255, (UInt32(from[i + 2]) * 255 + a / 2) / a))
                            to[base + i + 3] = UInt8(a)
                        }
                    }
                }
            }
            y = end
        }
        return out
    }

    /// Pieces of rows that may be reduced apart: each starts on a block boundary, so the blocks
    /// are the ones one pass makes and the pieces' outputs stacked are the one pass's output. A
    /// strip that a boundary cuts is decoded by both pieces (3 strips in all: under 4% more
    /// decoding for a 160 MP page in strips of 128 rows). Four pieces, so that two threads share
    /// them evenly and a helper that starts late still finds one; one piece below 8 MP, too
    /// little work to share.
    static func chunks(height: Int, factor: Int, pixels: Int) -> [Range<Int>] {
        guard pixels >= 8_000_000, factor > 0 else { return [0..<height] }
        let count = 4
        var bounds = [0]
        for index in 1..<count {
            let bound = (height * index / count + factor / 2) / factor * factor
            if bound > bounds.last!, bound < height { bounds.append(bound) }
        }
        bounds.append(height)
        return zip(bounds, bounds.dropFirst()).map { $0..<$1 }
    }

    /// Pieces reduced in this thread and in the idle threads of its pool, each with a libtiff
    /// reader of its own over the same input, then stacked in order.
    static func reduceInParallel(_ input: Input, level: Int32?, size: PixelSize, band: Int, factor: Int, raw: Bool,
                                 chunks: [Range<Int>]) throws -> [UInt8] {
        let results = Mutex<[Int: Result<[UInt8], any Error>]>([:])
        WorkerPool.shareIdleThreads(parts: chunks.count) { part in
            let result = Result {
                try withReader(input) { reader -> [UInt8] in
                    if let level {
                        var width: UInt32 = 0, height: UInt32 = 0, reduced: Int32 = 0
                        guard pk_tiff_select(reader, level, &width, &height, &reduced) != 0 else { throw failure(reader) }
                    }
                    if raw { return try reduceRawRows(reader, size: size, rowsPerStrip: band, factor: factor, rows: chunks[part]) }
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
