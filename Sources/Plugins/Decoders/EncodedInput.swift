import Foundation
import PipelineKit

/// Where a file's encoded bytes are: in memory, or in a local file the loader left open
/// (``LoadedData/file``), which the TIFF and PNG readers read as they decode, so a 150 MB master
/// costs the rows being decoded, not the file.
enum EncodedInput: Sendable {
    case memory(Data)
    case file(LocalFile)

    /// The whole file (read from disk now for a file; a read that fails gives what it read, and
    /// the decode then fails as damaged).
    var data: Data {
        switch self {
        case .memory(let data): return data
        case .file(let file): return (try? file.read(at: 0, count: file.size)) ?? Data()
        }
    }

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
