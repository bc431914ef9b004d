import Foundation
import PipelineKit
import Synchronization

/// `disk`: keeps loaded bytes on disk across runs, one file per entry, least recently used swept
/// first when the size limit is crossed.
///
/// An entry is named by the SHA-256 of its key and written to a temporary file, then renamed. It
/// starts with a header holding the body's length and SHA-256; a read that finds a short,
/// damaged or foreign file deletes it and reports a miss, so a damaged entry is never served.
public final class DiskDataCache: DataCaching {
    public static let plugin = Plugin.dataCache(
        PluginSpec(
            name: "disk",
            summary: "Keeps downloaded bytes on disk across runs, checksummed, LRU within a size limit.",
            options: [
                .path("path", default: ".cache/pipelinectl/data", access: .writableDirectory, doc: "Directory of the cache (relative to the working directory)."),
                .size("size_limit", default: "1GB", min: "1MB", doc: "Most bytes kept; a write that crosses it sweeps the oldest entries."),
                .number("sweep_to", default: 0.7, range: 0.1...1.0, doc: "Fraction of size_limit kept after a sweep."),
            ]),
        make: { options in
            DiskDataCache(path: options.string("path")!, sizeLimit: options.bytes("size_limit")!,
                          sweepTo: options.number("sweep_to")!)
        })

    static let magic = Data("PKDC".utf8)
    static let version: UInt8 = 1

    public let root: String
    public let sizeLimit: Int
    let sweepTo: Double
    /// Bytes on disk, known after the first scan.
    private let total = Mutex<Int?>(nil)

    public init(path: String, sizeLimit: Int, sweepTo: Double = 0.7) {
        self.root = path
        self.sizeLimit = sizeLimit
        self.sweepTo = sweepTo
    }

    struct Meta: Codable {
        var key: String
        var contentType: String?
        var finalURL: String?
        var storedAt: Double
    }

    /// The entry file of `key`: `ROOT/ab/abcdef...` (first two hex digits as a subdirectory).
    public func entryPath(for key: String) -> String {
        let hash = Hashing.sha256Hex(key)
        return "\(root)/\(hash.prefix(2))/\(hash)"
    }

    public func data(for key: String) async -> LoadedData? {
        let path = entryPath(for: key)
        return try? await WorkerPool.io.run { () -> LoadedData? in
            guard let file = FileManager.default.contents(atPath: path) else { return nil }
            guard let (meta, body) = DiskDataCache.decode(file), meta.key == key else {
                unlink(path)  // damaged or foreign: never served, refetched by the caller
                return nil
            }
            utimes(path, nil)  // last access, for LRU
            return LoadedData(data: body, contentType: meta.contentType, finalURL: meta.finalURL)
        }
    }

    public func store(_ loaded: LoadedData, for key: String) async throws {
        let path = entryPath(for: key)
        let meta = Meta(key: key, contentType: loaded.contentType, finalURL: loaded.finalURL,
                        storedAt: Date().timeIntervalSince1970)
        let file = try DiskDataCache.encode(meta: meta, body: loaded.data)
        try await WorkerPool.io.run { [self] in
            let known = total.withLock { $0 }
            let before = known == nil ? scanSize() : nil
            var previous = stat()
            let replaced = stat(path, &previous) == 0 ? Int(previous.st_size) : 0
            try AtomicFile.write(file, to: path)
            let now = total.withLock { total -> Int in
                let value = (total ?? before ?? 0) + file.count - replaced
                total = value
                return value
            }
            if now > sizeLimit { sweep() }
        }
    }

    static func encode(meta: Meta, body: Data) throws -> Data {
        let metaData = try JSONEncoder().encode(meta)
        var out = Data()
        out.reserveCapacity(48 + metaData.count + body.count)
        out.append(magic)
        out.append(contentsOf: [version, 0, 0, 0])
        withUnsafeBytes(of: UInt64(body.count).littleEndian) { out.append(contentsOf: $0) }
        out.append(Hashing.sha256(body))
        withUnsafeBytes(of: UInt32(metaData.count).littleEndian) { out.append(contentsOf: $0) }
        out.append(metaData)
        out.append(body)
        return out
    }

    static func decode(_ file: Data) -> (Meta, Data)? {
        let bytes = [UInt8](file.prefix(52))
        guard bytes.count == 52, Data(bytes[0..<4]) == magic, bytes[4] == version else { return nil }
        let length = bytes[8..<16].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let checksum = Data(bytes[16..<48])
        let metaLength = Int(bytes[48..<52].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        guard file.count == 52 + metaLength + Int(length) else { return nil }
        let start = file.startIndex
        let metaData = file[(start + 52)..<(start + 52 + metaLength)]
        let body = file[(start + 52 + metaLength)...]
        guard Hashing.sha256(Data(body)) == checksum,
              let meta = try? JSONDecoder().decode(Meta.self, from: metaData) else { return nil }
        return (meta, Data(body))
    }

    private func entries() -> [(path: String, size: Int, accessed: Double)] {
        var out: [(String, Int, Double)] = []
        guard let shards = try? FileManager.default.contentsOfDirectory(atPath: root) else { return [] }
        for shard in shards where shard.count == 2 {
            let dir = "\(root)/\(shard)"
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where !name.hasPrefix(".") {
                var info = stat()
                let path = "\(dir)/\(name)"
                if stat(path, &info) == 0 {
                    out.append((path, Int(info.st_size), Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9))
                }
            }
        }
        return out
    }

    private func scanSize() -> Int { entries().reduce(0) { $0 + $1.size } }

    /// Deletes least recently used entries until the cache holds `sweep_to` of its limit.
    private func sweep() {
        let all = entries().sorted { $0.accessed < $1.accessed }
        var size = all.reduce(0) { $0 + $1.size }
        let target = Int(Double(sizeLimit) * sweepTo)
        for entry in all where size > target {
            if unlink(entry.path) == 0 { size -= entry.size }
        }
        total.withLock { $0 = size }
    }
}
