import CPNGParts
import Foundation
import PipelineKit
import Synchronization

/// A large 8-bit RGB or RGBA PNG read by the threads of the pool that are idle, not by libpng
/// alone (Sources/CPNGParts/png_parts.c): its zlib stream inflated in parts side by side, the
/// parts joined in order, the rows unfiltered and box-reduced while the next parts inflate. The
/// rows are libpng's for the same file, byte for byte, so which reader ran never shows in a result.
///
/// Inflating is most of a large PNG's time (88% of a 160 MP photo's), one sequential zlib stream
/// that libpng reads on one core; with a second core idle this nearly halves it. Alone the parts
/// are no faster than libpng, so ``PNGReducer`` uses it only when threads are idle to take parts.
enum PNGParts {
    /// Below this many source pixels the file is left to libpng: too little to share.
    static let minimumPixels = 4_000_000
    /// Parts inflated side by side in one step: eight, so that two threads share them evenly
    /// while one of them also hands out the rows of the step before.
    static let parts = 8
    /// The most compressed bytes in a part (the reader adapts it to give about a million bytes
    /// of image data a part).
    static let partBytes = 1 << 20
    /// Decodes ``PNGReducer`` made this way (for tests).
    static let count = Atomic<Int>(0)

    /// Most bytes of image data (inflated) a byte of the file may hold for this path. Data that
    /// compresses further inflates fast on one thread (its matches are long copies), so the parts
    /// gain nothing, while what they hold grows with the ratio (each part keeps its output, two
    /// bytes a value, and a part's compressed size is set by the step before): a 5120x2880 RGBA
    /// PNG at 23:1 held 110 MiB more read in parts than read by libpng, and took as long.
    static let maxRatio = 5
    /// The parts of one read of a file at most ``maxRatio`` hold 16-45 MiB more than libpng's own
    /// read (measured on the corpora's 8-15 MP PNGs at 3.3-4.4:1). The decode-memory admission
    /// does not count it (the parts are a speed-up taken only when a thread is idle); one read at
    /// a time in the process (``takeReadingSlot()``) bounds it.
    private static let reading = Atomic<Bool>(false)

    /// Takes the process's one place for a read chosen by ``PNGReducer`` (`false` while another
    /// read has it: libpng reads the file); give it back with ``leaveReadingSlot()``.
    static func takeReadingSlot() -> Bool {
        reading.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }

    static func leaveReadingSlot() { reading.store(false, ordering: .releasing) }

    /// Whether a PNG of `pixels` whose image data inflates to `inflatedBytes` from a file of
    /// `fileBytes` should take this path now: large, compressed no more than ``maxRatio``, and a
    /// thread of the pool idle.
    static func worthSharing(pixels: Int, inflatedBytes: Int, fileBytes: Int) -> Bool {
        pixels >= minimumPixels && inflatedBytes <= fileBytes * maxRatio && WorkerPool.idleThreads > 0
    }

    /// The image data of an 8-bit `width` x `height` PNG with `channels` channels, inflated: each
    /// row's filter byte and samples.
    static func inflatedBytes(width: Int, height: Int, channels: Int) -> Int { height * (1 + width * channels) }

    /// `box`'s reduction of the PNG in `input`, or `nil` when this reader does not take the file
    /// (not 8-bit RGB or RGBA, interlaced, with transparency by tRNS, an unusual zlib header) or
    /// could not finish it exactly as libpng would (damaged data: libpng then reads it and reports
    /// the damage), or the file is not the size `box` expects.
    static func reduce<Sample: FixedWidthInteger & UnsignedInteger>(_ input: EncodedInput, box: BoxReducer, as _: Sample.Type = UInt8.self,
                               partBytes: Int = partBytes) -> [Sample]? {
        let sink = RowSink<Sample>(box: box)
        guard rows(input, partBytes: partBytes, channels: box.alpha ? 4 : 3, size: (box.width, box.height),
                   { sink.accumulator.add($0) }) != nil else { return nil }
        return sink.accumulator.pixels
    }

    /// Hands every unfiltered row of the PNG in `input` to `row`, in order, from whichever thread
    /// takes the step (one at a time). Returns the compressed bytes of parts whose guessed start
    /// was wrong and which were inflated again in order (for tests and measurements), or `nil`
    /// when the reader does not take the file, could not finish it (the rows handed out are then
    /// to be thrown away), or it is not `size` with `channels`. `nil` size and channels take any.
    @discardableResult
    static func rows(_ input: EncodedInput, partBytes: Int = partBytes, channels: Int? = nil, size: (Int, Int)? = nil,
                     _ row: @escaping (UnsafeBufferPointer<UInt8>) -> Void) -> Int? {
        input.withSource { bytes, descriptor, length -> Int? in
            let handler = RowHandler(row)
            let context = Unmanaged.passUnretained(handler).toOpaque()
            guard let job = pk_pngp_open(bytes?.assumingMemoryBound(to: UInt8.self), descriptor, length, Int32(parts), partBytes, { context, row in
                let handler = Unmanaged<RowHandler>.fromOpaque(context!).takeUnretainedValue()
                handler.row(UnsafeBufferPointer(start: row, count: handler.rowBytes))
            }, context) else { return nil }
            defer { pk_pngp_free(job) }
            var width: UInt32 = 0, height: UInt32 = 0, jobChannels: Int32 = 0
            pk_pngp_size(job, &width, &height, &jobChannels)
            if let channels, channels != Int(jobChannels) { return nil }
            if let size, size != (Int(width), Int(height)) { return nil }
            handler.rowBytes = Int(width) * Int(jobChannels)
            let shared = SharedJob(job: job)
            return withExtendedLifetime(handler) {
                while true {
                    let tasks = Int(pk_pngp_tasks(job))
                    WorkerPool.shareIdleThreads(parts: tasks) { pk_pngp_task(shared.job, Int32($0)) }
                    switch pk_pngp_settle(job) {
                    case 1: continue
                    case 2: return Int(pk_pngp_redone(job))
                    default: return nil
                    }
                }
            }
        }
    }

    /// The row callback's state; its steps run one at a time (png_parts.h).
    private final class RowHandler: @unchecked Sendable {
        let row: (UnsafeBufferPointer<UInt8>) -> Void
        var rowBytes = 0
        init(_ row: @escaping (UnsafeBufferPointer<UInt8>) -> Void) { self.row = row }
    }

    /// The accumulator the rows go to.
    private final class RowSink<Sample: FixedWidthInteger & UnsignedInteger>: @unchecked Sendable {
        var accumulator: BoxReducer.Accumulator<Sample>
        init(box: BoxReducer) { accumulator = BoxReducer.Accumulator(box) }
    }

    /// The job, handed to the threads that take tasks: each task touches only its own state
    /// (png_parts.h).
    private struct SharedJob: @unchecked Sendable { let job: OpaquePointer }
}
