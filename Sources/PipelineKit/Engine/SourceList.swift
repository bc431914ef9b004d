import Foundation

/// A URL list kept elsewhere than in a local file (an object in a bucket), read in chunks.
public protocol RemoteList: Sendable {
    /// Throws, naming the list, when it cannot be read (missing, refused, out of reach).
    func check() async throws
    /// Up to one chunk of the list's bytes from `offset`; empty at the end.
    func read(from offset: Int) async throws -> [UInt8]
}

/// A URL list read lazily: one source per line; blank lines and lines starting with `#` skipped;
/// `-` reads standard input. Memory does not grow with the length of the list.
///
/// Relative paths in the list are resolved against the list file's directory (the working
/// directory for standard input and remote lists).
public struct SourceList: AsyncSequence, SourceListing, Sendable {
    public typealias Element = Source
    /// The list's path, `-`, or a remote list's URL.
    public let path: String
    /// Where a remote list's bytes come from; `nil` for a file or standard input.
    public let remote: (any RemoteList)?

    public init(path: String) {
        self.path = path
        remote = nil
    }

    /// A list read from `remote` (chunks fetched one ahead of the lines being read), named `url`.
    public init(url: String, remote: any RemoteList) {
        path = url
        self.remote = remote
    }

    /// The directory relative paths in this list are resolved against.
    public var baseDirectory: String {
        if path == "-" || remote != nil { return FileManager.default.currentDirectoryPath }
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        return URL(fileURLWithPath: absolute).deletingLastPathComponent().path
    }

    public var name: String { path }

    /// A file is read ahead in batches; standard input and a remote list as lines come.
    public var readsAhead: Bool { path != "-" && remote == nil }

    /// For a remote list: whether it can be read (it exists, the store accepts the credentials).
    public func check() async throws { try await remote?.check() }

    /// Opens the list once (``SourceListing``).
    public func open() async throws -> any SourceCursor { try openReader() }

    /// Opens the list; throws when it cannot be read.
    public func openReader() throws -> Reader {
        if let remote { return Reader(remote: remote, base: baseDirectory) }
        let fd: Int32 = path == "-" ? dup(0) : Foundation.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw PipelineError(.notFound, "cannot open the URL list '\(path)': \(String(cString: strerror(errno)))")
        }
        var info = stat()
        if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
            close(fd)
            throw PipelineError(.io, "the URL list '\(path)' is a directory")
        }
        let reader = Reader(fd: fd, base: baseDirectory)
        reader.markStandardInput(path == "-")
        return reader
    }

    /// Opens the list when iteration starts; a list that cannot be opened throws from the first
    /// `next()` (open it with ``open()`` first to report that before a run starts).
    public func makeAsyncIterator() -> Iterator {
        do { return Iterator(reader: try openReader(), failure: nil) } catch { return Iterator(reader: nil, failure: error) }
    }

    public struct Iterator: AsyncIteratorProtocol {
        let reader: Reader?
        var failure: (any Error)?
        public mutating func next() async throws -> Source? {
            if let failure {
                self.failure = nil
                throw failure
            }
            guard let reader else { return nil }
            return try await reader.next()
        }
    }

    /// Reads lines in 64 KiB chunks on the I/O pool (standard input may block), or a remote list's
    /// chunks with the next one fetched while the current one is read. An open list: iterate it
    /// once (it is its own iterator).
    public final class Reader: AsyncSequence, AsyncIteratorProtocol, SourceCursor, @unchecked Sendable {
        public typealias Element = Source
        public func makeAsyncIterator() -> Reader { self }
        /// Whether the list is a file (read ahead), not standard input or a remote list.
        public var isFile: Bool { fd >= 0 && !isStandardInput }
        private var isStandardInput = false
        // Used by one iterating task at a time.
        private let fd: Int32
        private let remote: (any RemoteList)?
        private var offset = 0
        private var prefetch: Task<[UInt8], any Error>?
        private let base: String
        private var buffer: [UInt8] = []
        private var pending: [(Int, String)] = []
        private var pendingHead = 0
        private var lineNumber = 0
        private var eof = false

        init(fd: Int32, base: String) {
            self.fd = fd
            remote = nil
            self.base = base
        }

        init(remote: any RemoteList, base: String) {
            fd = -1
            self.remote = remote
            self.base = base
        }

        func markStandardInput(_ value: Bool) { isStandardInput = value }

        deinit {
            if fd >= 0 { close(fd) }
            prefetch?.cancel()
        }

        /// The next source, or `nil` at the end of the list.
        public func next() async throws -> Source? {
            while true {
                if pendingHead < pending.count {
                    let (index, text) = pending[pendingHead]
                    pendingHead += 1
                    return Source(text: text, index: index, base: base)
                }
                if eof { return nil }
                pending.removeAll(keepingCapacity: true)
                pendingHead = 0
                let chunk = try await readChunk()
                if chunk.isEmpty { eof = true }
                buffer.append(contentsOf: chunk)
                split(final: chunk.isEmpty)
            }
        }

        private func readChunk() async throws -> [UInt8] {
            if let remote {
                let task = prefetch ?? Task { [offset] in try await remote.read(from: offset) }
                let chunk = try await task.value
                offset += chunk.count
                prefetch = chunk.isEmpty ? nil : Task { [offset] in try await remote.read(from: offset) }
                return chunk
            }
            let fd = self.fd
            return try await WorkerPool.io.run { () -> [UInt8] in
                var bytes = [UInt8](repeating: 0, count: 65536)
                let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, 65536) }
                if count < 0 { throw PipelineError(.io, "reading the URL list: \(String(cString: strerror(errno)))") }
                return Array(bytes.prefix(count))
            }
        }

        private func split(final: Bool) {
            var start = 0
            let ends = buffer.withUnsafeBufferPointer { bytes -> [Int] in
                var ends: [Int] = []
                var from = 0
                while from < bytes.count, let found = memchr(bytes.baseAddress! + from, 0x0A, bytes.count - from) {
                    let end = bytes.baseAddress!.distance(to: found.assumingMemoryBound(to: UInt8.self))
                    ends.append(end)
                    from = end + 1
                }
                return ends
            }
            for end in ends {
                take(buffer[start..<end])
                start = end + 1
            }
            if final, start < buffer.count {
                take(buffer[start...])
                start = buffer.count
            }
            buffer.removeFirst(start)
        }

        private func take(_ bytes: ArraySlice<UInt8>) {
            lineNumber += 1
            // ASCII white space is trimmed on the bytes (the common case, cheap for lists of
            // millions of lines); a line that still begins or ends with a non-ASCII byte (a BOM, a
            // no-break space) is trimmed by Foundation as before.
            let isSpace = { (byte: UInt8) in byte == 0x20 || (0x09...0x0D).contains(byte) }
            var line = bytes
            while let first = line.first, isSpace(first) { line = line.dropFirst() }
            while let last = line.last, isSpace(last) { line = line.dropLast() }
            guard let first = line.first, first != UInt8(ascii: "#") else { return }
            var text = String(decoding: line, as: UTF8.self)
            if first >= 0x80 || line.last! >= 0x80 {
                if lineNumber == 1, text.hasPrefix("\u{FEFF}") { text.removeFirst() }
                text = text.trimmingCharacters(in: .whitespacesAndNewlines)
                if text.isEmpty || text.hasPrefix("#") { return }
            }
            pending.append((lineNumber, text))
        }
    }
}
