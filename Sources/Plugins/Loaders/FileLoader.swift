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
                .size("in_place_above", default: "16MB", min: "0B",
                      doc: "Files larger than this are left open for the decoder, which reads the parts it needs as it decodes (TIFF strip by strip, a pyramid only its level, PNG a megabyte at a time) instead of holding the whole file in memory; formats the decoder reads whole are read whole."),
            ]),
        schemes: ["", "file"]
    ) { options in
        FileLoader(maxBytes: options.bytes("max_bytes")!, maxConcurrentLoads: options.int("max_concurrent")!,
                   inPlaceAbove: options.bytes("in_place_above")!)
    }

    let maxBytes: Int
    /// Files larger than this are handed over open (``LoadedData/file``), not read.
    let inPlaceAbove: Int
    public let maxConcurrentLoads: Int
    public var usesDataCache: Bool { false }

    public init(maxBytes: Int, maxConcurrentLoads: Int, inPlaceAbove: Int = 16 << 20) {
        self.maxBytes = maxBytes
        self.maxConcurrentLoads = maxConcurrentLoads
        self.inPlaceAbove = inPlaceAbove
    }

    public func cacheKey(for source: Source) -> String { source.localPath.map { "file://" + $0 } ?? source.text }

    public func load(_ source: Source) async throws -> LoadedData {
        guard let path = source.localPath else {
            throw PipelineError(.invalidSource, "not a local path or file:// URL: \(source.text)")
        }
        let maxBytes = self.maxBytes, inPlaceAbove = self.inPlaceAbove
        return try await WorkerPool.io.run {
            // A FIFO or a device is refused before it is opened (opening a FIFO waits for a writer).
            var named = stat()
            guard stat(path, &named) == 0 else {
                let code = errno
                throw PipelineError(code == ENOENT ? .notFound : .io, "\(path): \(String(cString: strerror(code)))")
            }
            guard (named.st_mode & S_IFMT) == S_IFREG else { throw PipelineError(.notFound, "\(path): not a regular file") }
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
            guard descriptor >= 0 else {
                let code = errno
                throw PipelineError(code == ENOENT ? .notFound : .io, "\(path): \(String(cString: strerror(code)))")
            }
            // The descriptor's own facts: what is read is the file these describe.
            var info = stat()
            guard fstat(descriptor, &info) == 0 else {
                let code = errno
                close(descriptor)
                throw PipelineError(.io, "\(path): \(String(cString: strerror(code)))")
            }
            // Owned from here: closed when the last reference goes.
            let file = LocalFile(descriptor: descriptor, size: Int(info.st_size), path: path)
            // What was opened, every link resolved, is inside the source's boundary: checked on
            // the descriptor, so a link swapped in after the service's check cannot lead out.
            if let boundary = source.boundary {
                guard let opened = FileLoader.openedPath(descriptor), boundary.admitsOpened(path: opened) else {
                    throw PipelineError(.sourceNotAllowed, "local paths are served only under a directory listed in serve.sources")
                }
            }
            guard (info.st_mode & S_IFMT) == S_IFREG else {
                throw PipelineError(.notFound, "\(path): not a regular file")
            }
            guard file.size <= maxBytes else {
                throw PipelineError(.tooLarge, "\(path) is \(info.st_size) bytes; max_bytes is \(Units.formatSize(maxBytes))")
            }
            let directives = FileLoader.directives(info)
            if file.size > inPlaceAbove { return try LoadedData(file: file, directives: directives) }
            // The size the validator names, no more (a file cut short since reads short, and its
            // decode fails as damaged).
            return LoadedData(data: try file.read(at: 0, count: file.size), directives: directives)
        }
    }

    /// The path the kernel gives for an open descriptor (`/proc/self/fd`): the file itself, every
    /// link resolved.
    static func openedPath(_ descriptor: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/fd/\(descriptor)", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
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
