import CJPEG
import CJPEGEighth
import Foundation
import PipelineKit
import Synchronization

/// A baseline JPEG read at 1/8 by the threads of the pool that are idle, not by libjpeg alone
/// (Sources/CJPEGEighth/jpeg_eighth.c): its entropy-coded data cut into parts whose Huffman
/// decoding runs side by side, then joined, then turned into RGB rows in bands. The pixels are
/// libjpeg's for the same file at 1/8, byte for byte, so which reader ran never shows in a result.
///
/// A lone huge JPEG spends most of its time in that one sequential decoding (79% of a 160 MP
/// photo's, at 1/8); with a second core idle this halves it. Decoded alone the parts are no
/// faster than libjpeg (4:2:0 files are up to 1.2x slower, their chroma blocks keep four
/// coefficients), so ``JPEGReducer`` uses it only when threads are idle to take parts.
enum JPEGEighth {
    /// Below this many source pixels the file is left to libjpeg: too little to share.
    static let minimumPixels = 4_000_000
    /// Parts of the entropy-coded data: four, so that two threads share them evenly and a helper
    /// that starts late still finds one.
    static let parts = 4
    /// Decodes ``JPEGReducer`` made this way (for tests).
    static let count = Atomic<Int>(0)

    /// Whether a `size` JPEG read at 1/8 should take this path now.
    static func worthSharing(_ size: PixelSize) -> Bool {
        size.width * size.height >= minimumPixels && WorkerPool.idleThreads > 0
    }

    /// The RGB pixels at 1/8 of the JPEG whose header `reader` has read (nothing else done with
    /// it since), or `nil` when this reader does not take the file (progressive, arithmetic-coded,
    /// a sampling or colour space it leaves to libjpeg) or could not finish it exactly as libjpeg
    /// would (damaged data: libjpeg then reads it and reports the damage). The reader is left as
    /// it was.
    static func decode(_ reader: UnsafeMutablePointer<pk_jpeg_reader>) -> (pixels: [UInt8], width: Int, height: Int)? {
        let info = UnsafeMutableRawPointer(reader) + MemoryLayout<pk_jpeg_reader>.offset(of: \pk_jpeg_reader.info)!
        var width: Int32 = 0, height: Int32 = 0
        guard let job = pk_jpeg8_prepare(info, Int32(parts), &width, &height) else { return nil }
        defer { pk_jpeg8_free(job) }
        let shared = SharedJob(job: job)
        WorkerPool.shareIdleThreads(parts: Int(pk_jpeg8_ranges(job))) { pk_jpeg8_unstuff(shared.job, Int32($0)) }
        guard pk_jpeg8_split(job) != 0 else { return nil }
        WorkerPool.shareIdleThreads(parts: Int(pk_jpeg8_parts(job))) { pk_jpeg8_part(shared.job, Int32($0)) }
        guard pk_jpeg8_join(job) != 0 else { return nil }
        let rowBytes = Int(width) * 3
        let pixels = [UInt8](unsafeUninitializedCapacity: rowBytes * Int(height)) { buffer, count in
            let rows = SharedRows(base: buffer.baseAddress!)
            WorkerPool.shareIdleThreads(parts: Int(pk_jpeg8_bands(job))) { band in
                pk_jpeg8_band(shared.job, Int32(band), rows.base, rowBytes)
            }
            count = buffer.count
        }
        return (pixels, Int(width), Int(height))
    }

    /// ``decode(_:)`` of the JPEG in `data`: `nil` also when libjpeg cannot read its header.
    static func decode(_ data: Data) -> (pixels: [UInt8], width: Int, height: Int)? {
        data.withUnsafeBytes { raw in
            var ok: Int32 = 0
            guard let reader = pk_jpeg_open(raw.baseAddress, raw.count, 4, &ok) else { return nil }
            defer { pk_jpeg_close(reader) }
            return ok != 0 ? decode(reader) : nil
        }
    }

    /// The job, handed to the threads that take parts: each part and each band touches only its
    /// own state (jpeg_eighth.h).
    private struct SharedJob: @unchecked Sendable { let job: OpaquePointer }
    /// The output, whose bands the threads write apart.
    private struct SharedRows: @unchecked Sendable { let base: UnsafeMutablePointer<UInt8> }
}
