import Foundation
import PipelineKit

/// `file`: reads local files, given as plain paths or `file://` URLs.
///
/// Relative paths are resolved against the URL list's directory. Local files bypass the data cache.
public struct FileLoader: DataLoading {
    public static let plugin = Plugin.loader(
        PluginSpec(
            name: "file",
            summary: "Reads local files: plain paths (relative to the URL list) and file:// URLs.",
            options: [
                .size("max_bytes", default: "50MB", min: "1B", doc: "Largest file accepted."),
                .int("max_concurrent", default: 8, range: 1...512, doc: "Files read at once."),
            ]),
        schemes: ["", "file"]
    ) { options in FileLoader(maxBytes: options.bytes("max_bytes")!, maxConcurrentLoads: options.int("max_concurrent")!) }

    let maxBytes: Int
    public let maxConcurrentLoads: Int
    public var usesDataCache: Bool { false }

    public func cacheKey(for source: Source) -> String { source.localPath.map { "file://" + $0 } ?? source.text }

    public func load(_ source: Source) async throws -> LoadedData {
        guard let path = source.localPath else {
            throw PipelineError(.invalidSource, "not a local path or file:// URL: \(source.text)")
        }
        let maxBytes = self.maxBytes
        return try await WorkerPool.io.run {
            var info = stat()
            guard stat(path, &info) == 0 else {
                let reason = String(cString: strerror(errno))
                throw PipelineError(errno == ENOENT ? .notFound : .io, "\(path): \(reason)")
            }
            guard (info.st_mode & S_IFMT) == S_IFREG else {
                throw PipelineError(.notFound, "\(path): not a regular file")
            }
            guard Int(info.st_size) <= maxBytes else {
                throw PipelineError(.tooLarge, "\(path) is \(info.st_size) bytes; max_bytes is \(Units.formatSize(maxBytes))")
            }
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw PipelineError(.io, "\(path): \(String(cString: strerror(errno)))")
            }
            defer { try? handle.close() }
            let data = try handle.read(upToCount: maxBytes + 1) ?? Data()
            guard data.count <= maxBytes else {
                throw PipelineError(.tooLarge, "\(path) is larger than max_bytes (\(Units.formatSize(maxBytes)))")
            }
            return LoadedData(data: data, directives: FileLoader.directives(info))
        }
    }

    /// A file is its own validator: device, inode, size and modification time, checked on every use.
    static func directives(_ info: stat) -> CacheDirectives {
        CacheDirectives(etag: "\(info.st_dev)-\(info.st_ino)-\(info.st_size)-\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)",
                        revalidateAlways: true)
    }

    /// Compares the file's `stat` with the cached copy's; reads it again only when it changed.
    public func revalidate(_ source: Source, cached: CacheDirectives) async throws -> Revalidation {
        guard let path = source.localPath else { return .modified(try await load(source)) }
        let current = try await WorkerPool.io.run { () -> CacheDirectives? in
            var info = stat()
            return stat(path, &info) == 0 ? FileLoader.directives(info) : nil
        }
        if let current, current.etag == cached.etag { return .notModified(current) }
        return .modified(try await load(source))
    }
}
