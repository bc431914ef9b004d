import Foundation
import PipelineKit
import Synchronization

/// When a loader leaves a body unread, to be read by range (``LoadedData/ranged``): a body over
/// `above` bytes, from a server that says it answers ranges (`Accept-Ranges: bytes`) and names the
/// content with a strong `ETag` or a `Last-Modified`, whose first `head` bytes `accepts` (a
/// video: its poster needs a few megabytes of it). The transfer stops after those bytes.
struct RangedHeadRule: Sendable {
    /// Bodies up to this size are read whole as usual.
    var above: Int
    /// The largest body read by range (the decoder bounds what it reads of it).
    var maxSize: Int
    /// The first bytes read before deciding.
    var head = 64 << 10
    /// Whether a body starting with these bytes is read by range.
    var accepts: @Sendable (Data) -> Bool = RangedHeadRule.isVideo

    /// The formats whose decoder reads ranges: the video containers.
    static let isVideo: @Sendable (Data) -> Bool = { head in
        if case .image(let format) = FormatSniffer.sniff(head) { return format.isVideo }
        return false
    }
}

/// One range request: `Range: bytes=start-end`, only of the content the first answer named
/// (`If-Match` with its strong ETag, or `If-Unmodified-Since` with its Last-Modified). Redirects
/// are not followed: the URL is the first answer's final one, already admitted.
struct RangeRequest: Sendable {
    let start: Int
    /// Inclusive.
    let end: Int
    /// `ETag` or `Last-Modified` of the first answer.
    let validator: String

    var count: Int { end - start + 1 }

    /// The precondition header that refuses any other content (412).
    var precondition: (name: String, value: String) {
        validator.hasPrefix("\"") ? ("If-Match", validator) : ("If-Unmodified-Since", validator)
    }

    /// Whether `etag` (or, without one, `lastModified`) can pin a body for range requests: a weak
    /// ETag cannot (If-Match compares strongly).
    static func validator(etag: String?, lastModified: String?) -> String? {
        if let etag, etag.hasPrefix("\"") { return etag }
        return etag == nil || etag!.hasPrefix("W/") ? lastModified : nil
    }
}

/// A ``RangedBody`` read in blocks of 1 MiB through `fetch`, the last 4 blocks kept: the demuxer's
/// small reads become a few requests, and a run of blocks read in order is fetched ahead, up to 4
/// blocks at once. Each fetch blocks the reading thread (a decoder's, or an I/O thread).
final class BlockRangedBody: RangedBody {
    static let blockSize = 1 << 20
    static let keptBlocks = 4
    static let maxAhead = 4

    let size: Int
    let name: String
    let validator: String
    let largestWhole: Int
    /// Fetches exactly the bytes of one request (fewer only at the end), or throws why not.
    let fetch: @Sendable (RangeRequest) throws -> Data

    private struct Blocks: ~Copyable {
        var data: [Int: Data] = [:]
        /// Least recently used first.
        var order: [Int] = []
        var fetched = 0
        /// The block after the last fetched run, and how many runs in a row read in order.
        var next = -1
        var inOrder = 0
    }
    private let blocks = Mutex(Blocks())

    init(size: Int, name: String, validator: String, largestWhole: Int, fetch: @escaping @Sendable (RangeRequest) throws -> Data) {
        self.size = size
        self.name = name
        self.validator = validator
        self.largestWhole = largestWhole
        self.fetch = fetch
    }

    var bytesFetched: Int { blocks.withLock { $0.fetched } }

    func read(at offset: Int, count: Int, into buffer: UnsafeMutableRawPointer) throws -> Int {
        let wanted = max(0, min(count, size - offset))
        var done = 0
        while done < wanted {
            let position = offset + done
            let block = try self.block(position / Self.blockSize)
            let start = position % Self.blockSize
            let length = min(wanted - done, block.count - start)
            guard length > 0 else { throw PipelineError(.truncated, "\(name): the range at \(position) came back short") }
            block.withUnsafeBytes { bytes in (buffer + done).copyMemory(from: bytes.baseAddress! + start, byteCount: length) }
            done += length
        }
        return done
    }

    /// Block `index`, kept or fetched (with the blocks after it when reading runs in order).
    private func block(_ index: Int) throws -> Data {
        let (kept, ahead) = blocks.withLock { blocks -> (Data?, Int) in
            if let data = blocks.data[index] {
                blocks.order.removeAll { $0 == index }
                blocks.order.append(index)
                return (data, 0)
            }
            blocks.inOrder = index == blocks.next ? blocks.inOrder + 1 : 0
            // Ahead up to the first block already kept.
            let most = min(Self.maxAhead, 1 << min(blocks.inOrder, 3))
            let ahead = (1..<most).first { blocks.data[index + $0] != nil } ?? most
            return (nil, ahead)
        }
        if let kept { return kept }
        let last = (size - 1) / Self.blockSize
        let end = min(last, index + ahead - 1)
        let request = RangeRequest(start: index * Self.blockSize, end: min(size, (end + 1) * Self.blockSize) - 1, validator: validator)
        let data = try fetch(request)
        guard data.count == request.count else {
            throw PipelineError(.truncated, "\(name): bytes \(request.start)-\(request.end) came back as \(data.count) bytes")
        }
        return blocks.withLock { blocks in
            blocks.fetched += data.count
            blocks.next = end + 1
            for block in index...end {
                let from = (block - index) * Self.blockSize
                blocks.data[block] = data.subdata(in: from..<min(data.count, from + Self.blockSize))
                blocks.order.removeAll { $0 == block }
                blocks.order.append(block)
            }
            while blocks.order.count > Self.keptBlocks { blocks.data[blocks.order.removeFirst()] = nil }
            return blocks.data[index] ?? data.prefix(Self.blockSize)
        }
    }
}

/// Runs `attempt` up to `attempts` times while its failure may succeed later, sleeping the calling
/// thread between attempts (`delay(n)` after the n-th); the last failure is thrown.
func retryingOnThisThread<T>(attempts: Int, delay: (Int, TransferFailure) -> Double,
                             _ attempt: () -> Result<T, any Error>) throws -> T {
    var number = 0
    while true {
        number += 1
        switch attempt() {
        case .success(let value): return value
        case .failure(let failure as TransferFailure) where failure.retryable && number < attempts:
            Thread.sleep(forTimeInterval: delay(number, failure))
        case .failure(let failure as TransferFailure):
            throw failure.error
        case .failure(let error):
            throw error
        }
    }
}
