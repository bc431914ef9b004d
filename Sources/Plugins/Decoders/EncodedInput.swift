import Foundation
import PipelineKit

/// Where a file's encoded bytes are: in memory, or in a local file the loader left open
/// (``LoadedData/file``), which the TIFF and PNG readers read as they decode, so a 150 MB master
/// costs the rows being decoded, not the file.
enum EncodedInput: Sendable {
    case memory(Data)
    case file(LocalFile)

    /// The whole file (read from disk now for a file; a read that fails gives what it read, and
    /// the decode then fails as damaged). A large file is read in pieces by the pool's idle
    /// threads too, when there are some: copying 22 MB from the page cache and faulting in its
    /// pages took a lone huge JPEG 20 ms on one core.
    var data: Data {
        switch self {
        case .memory(let data): return data
        case .file(let file):
            if file.size >= Self.sharedReadBytes, WorkerPool.idleThreads > 0, let data = Self.readInPieces(file) { return data }
            return (try? file.read(at: 0, count: file.size)) ?? Data()
        }
    }

    /// Files from this size up are read in pieces when threads are idle.
    static let sharedReadBytes = 4 << 20

    /// `file` read by up to four threads, each a piece; cut at the first piece that read short
    /// (the file shrank since it was opened) or failed. `nil` when out of memory.
    static func readInPieces(_ file: LocalFile, pieces: Int = 4) -> Data? {
        let size = file.size
        guard size > 0, let buffer = malloc(size) else { return nil }
        let base = SharedBuffer(base: buffer)
        let counts = UnsafeMutablePointer<Int>.allocate(capacity: pieces)
        defer { counts.deallocate() }
        counts.initialize(repeating: 0, count: pieces)
        let done = SharedCounts(base: counts)  // each piece writes its own; read after all are done
        WorkerPool.shareIdleThreads(parts: pieces) { piece in
            let lower = size * piece / pieces, upper = size * (piece + 1) / pieces
            done.base[piece] = file.read(at: lower, count: upper - lower, into: base.base + lower).read
        }
        var length = 0
        for piece in 0..<pieces {
            let lower = size * piece / pieces, upper = size * (piece + 1) / pieces
            length = lower + counts[piece]
            if length < upper { break }
        }
        return Data(bytesNoCopy: buffer, count: length, deallocator: .free)
    }

    /// The buffer the pieces are read into, each piece to its own bytes.
    private struct SharedBuffer: @unchecked Sendable { let base: UnsafeMutableRawPointer }
    private struct SharedCounts: @unchecked Sendable { let base: UnsafeMutablePointer<Int> }

    /// The size in bytes.
    var byteCount: Int {
        switch self {
        case .memory(let data): return data.count
        case .file(let file): return file.size
        }
    }

    /// Runs `body` with the bytes' address (`nil` for a file), the descriptor (`-1` in memory)
    /// and the size, for a C reader; the bytes or the file stay alive meanwhile.
    func withSource<T>(_ body: (UnsafeRawPointer?, Int32, Int) throws -> T) rethrows -> T {
        switch self {
        case .memory(let data): return try data.withUnsafeBytes { try body($0.baseAddress, -1, $0.count) }
        case .file(let file): return try withExtendedLifetime(file) { try body(nil, file.descriptor, file.size) }
        }
    }
}
