import Foundation
import Tracing

/// One line of a URL list: what to load, and where it came from.
public struct Source: Sendable, Hashable {
    /// The text as written in the list (trimmed): a URL or a local path.
    public let text: String
    /// 1-based line number in the list.
    public let index: Int
    /// The URL scheme in lower case (`http`, `https`, `file`, ...), or `nil` for a plain path.
    public let scheme: String?
    /// The directory relative paths are resolved against (the list file's directory).
    public let base: String?
    /// Where this source, and anything it redirects to, must stay (`serve.sources`); `nil` for
    /// no boundary. Loaders check what they open against it: the `file` loader the file it
    /// opened, the `http` loader every redirect hop.
    public var boundary: SourceBoundary?
    /// Which content of the source this is, when the list knows before loading it: an S3
    /// notification's ETag (and version or sequencer), a local file's size and modification time.
    /// A duplicate is the same source with the same version: one item, its work done once. A
    /// source named again with another version (a re-upload) is a new item, made anew.
    public var version: String?
    /// Bytes the caller handed in (an upload), loaded from memory instead of by a loader; `text`
    /// then only names them in reports.
    public let bytes: InlineBytes?
    /// The trace the item continues: its `item` span is a child of this context's span (a queue
    /// message's receive span, a caller's own span). `nil`: the task's context
    /// (`ServiceContext.current`), as for any item. Not part of the source's identity.
    public var trace: SourceTrace? {
        get { traceSlot.trace }
        set { traceSlot.trace = newValue }
    }
    /// Where ``trace`` is kept: equal and hashed alike whatever it holds.
    private var traceSlot = TraceSlot()

    public init(text: String, index: Int, base: String? = nil, boundary: SourceBoundary? = nil, version: String? = nil) {
        self.text = text
        self.index = index
        self.base = base
        self.boundary = boundary
        self.version = version
        self.scheme = Source.scheme(of: text)
        self.bytes = nil
    }

    /// Bytes in memory as a source (an upload): no loader runs and no boundary applies (the
    /// caller has the bytes already). Their identity for sharing and caches is their digest.
    /// - Parameters:
    ///   - name: names them in reports and logs, and stands for `{stem}` in output names.
    ///   - contentType: the type the uploader declared, when there was one.
    public init(bytes: Data, name: String = "upload", contentType: String? = nil, index: Int = 1) {
        self.text = name
        self.index = index
        self.base = nil
        self.boundary = nil
        self.version = nil
        self.scheme = nil
        self.bytes = InlineBytes(bytes, contentType: contentType)
    }

    /// For a plain path or a `file://` URL: the absolute local path; `nil` otherwise.
    public var localPath: String? {
        switch scheme {
        case nil:
            if text.hasPrefix("/") { return text }
            if text.hasPrefix("~/") { return NSString(string: text).expandingTildeInPath }
            let dir = base ?? FileManager.default.currentDirectoryPath
            return URL(fileURLWithPath: dir).appendingPathComponent(text).standardizedFileURL.path
        case "file":
            guard let url = URL(string: text), url.host == nil || url.host == "" || url.host == "localhost"
            else { return nil }
            return url.path.isEmpty ? nil : url.path
        default:
            return nil
        }
    }

    /// The scheme of a directory, list or report written as a URL (`s3` for `s3://bucket/prefix`),
    /// in lower case; `nil` for a path.
    public static func urlScheme(of text: String) -> String? {
        guard let range = text.range(of: "://") else { return nil }
        let scheme = text[..<range.lowerBound]
        guard let first = scheme.first, first.isLetter,
              scheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == "." }) else { return nil }
        return scheme.lowercased()
    }

    /// The scheme of `text` when it starts with `letters:` followed by `//` or when it is a
    /// known scheme-only URL (`data:`); `nil` for plain paths (including Windows-like `C:`).
    static func scheme(of text: String) -> String? {
        // On the UTF-8 bytes: this runs for every line of a list, skipped lines of a shard included.
        var text = text
        return text.withUTF8 { bytes -> String? in
            guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon >= 2 else { return nil }
            let isLetter = { (byte: UInt8) in (0x61...0x7A).contains(byte | 0x20) }
            guard isLetter(bytes[0]) else { return nil }
            var upper = false
            for byte in bytes[..<colon] {
                guard isLetter(byte) || (0x30...0x39).contains(byte) || byte == UInt8(ascii: "+")
                        || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") else { return nil }
                if (0x41...0x5A).contains(byte) { upper = true }
            }
            let spelled = String(decoding: UnsafeBufferPointer(rebasing: bytes[..<colon]), as: UTF8.self)
            let lower = upper ? spelled.lowercased() : spelled
            let slashes = colon + 2 < bytes.count && bytes[colon + 1] == UInt8(ascii: "/") && bytes[colon + 2] == UInt8(ascii: "/")
            return slashes || lower == "data" ? lower : nil
        }
    }
}

/// Bytes handed to the engine in memory (``Source/init(bytes:name:contentType:index:)``),
/// identified by their SHA-256.
public final class InlineBytes: Sendable, Hashable {
    public let data: Data
    /// The type the uploader declared, when it did (the decoder sniffs the bytes regardless).
    public let contentType: String?
    /// Hex SHA-256 of the bytes.
    public let digest: String

    public init(_ data: Data, contentType: String? = nil) {
        self.data = data
        self.contentType = contentType
        digest = Hashing.sha256Hex(data)
    }

    public static func == (a: InlineBytes, b: InlineBytes) -> Bool { a.digest == b.digest }
    public func hash(into hasher: inout Hasher) { hasher.combine(digest) }
}

/// What a loader produced: the bytes and, for network loads, facts from the response.
public struct LoadedData: Sendable {
    /// The body; when ``file`` is set, only the file's first bytes (see ``wholeData()``).
    public var data: Data
    /// The response's `Content-Type`, when there was one.
    public var contentType: String?
    /// The final URL after redirects, when it differs from the source.
    public var finalURL: String?
    /// What the source says about caching these bytes (validators, freshness).
    public var directives: CacheDirectives
    /// What the loader's look at the first bytes found, when it looked (the http loader does, to
    /// refuse HTML served as an image): a decoder uses it rather than looking again.
    public var sniffed: FormatSniffer.Sniffed?
    /// A local file left open rather than read whole (the `file` loader does so for large files):
    /// ``data`` then holds its first bytes, enough to tell the format, and a decoder that reads
    /// files in place (``ImageDecoding/readsLocalFiles``) reads the rest as it needs it. The
    /// engine reads the whole file for any other decoder.
    public var file: LocalFile?
    /// A remote body left unread but for its first bytes (in ``data``): the loader fetches the
    /// parts a decoder asks for, by range (the `http` and `s3` loaders do so for a large video,
    /// whose poster needs a few megabytes of it). A decoder that reads ranges
    /// (``ImageDecoding/readsRanges``) reads it in place; the engine reads it whole for any other,
    /// within the loader's limits. Never stored in the data cache.
    public var ranged: (any RangedBody)?

    public init(data: Data, contentType: String? = nil, finalURL: String? = nil,
                directives: CacheDirectives = CacheDirectives()) {
        self.data = data
        self.contentType = contentType
        self.finalURL = finalURL
        self.directives = directives
    }

    /// A body left in `file`, with its first `head` bytes read.
    public init(file: LocalFile, head: Int = 64 << 10, directives: CacheDirectives = CacheDirectives()) throws {
        self.init(data: try file.read(at: 0, count: min(head, file.size)), directives: directives)
        self.file = file
    }

    /// A body read by range on demand (``ranged``), with its first bytes `head` already read.
    public init(ranged body: any RangedBody, head: Data, contentType: String? = nil, finalURL: String? = nil,
                directives: CacheDirectives = CacheDirectives()) {
        self.init(data: head, contentType: contentType, finalURL: finalURL, directives: directives)
        ranged = body
    }

    /// Whether only the first bytes are in ``data`` (the rest in a file or read by range).
    public var isPartial: Bool { file != nil || ranged != nil }

    /// The size of the body in bytes (the file's, when it was left in place).
    public var byteCount: Int { file?.size ?? ranged?.size ?? data.count }

    /// The bytes taken from the source so far: the body's size, or for a body read by range its
    /// first bytes and the ranges fetched (what the report's `bytes_in` counts).
    public var bytesLoaded: Int { ranged.map { data.count + $0.bytesFetched } ?? byteCount }

    /// The whole body: ``data``, or the file read whole, or every range fetched.
    public func wholeData() throws -> Data {
        if let ranged {
            guard ranged.size <= ranged.largestWhole else {
                throw PipelineError(.tooLarge, "\(ranged.name) is \(Units.formatSize(ranged.size)), over the loader's max_bytes "
                    + "(\(Units.formatSize(ranged.largestWhole))) for a body read whole; only a video is read by range")
            }
            return try ranged.read(at: 0, count: ranged.size)
        }
        guard let file else { return data }
        return try file.read(at: 0, count: file.size)
    }

    /// The same, with the whole body in ``data`` and no ``file`` or ``ranged``.
    public func whole() throws -> LoadedData {
        guard isPartial else { return self }
        var copy = self
        copy.data = try wholeData()
        copy.file = nil
        copy.ranged = nil
        return copy
    }

    /// ``whole()`` from async code: a file is read, or a body fetched, on the I/O threads
    /// (``WorkerPool/io``).
    public func readWhole() async throws -> LoadedData {
        guard isPartial else { return self }
        let open = self
        return try await WorkerPool.io.run { try open.whole() }
    }
}

/// A body read by range, on demand, from wherever the loader found it (the `http` loader's final
/// URL, an S3 object): only the parts asked for are fetched, each checked to be of the same
/// content (its validator) as the first. Safe to read from several threads at once.
public protocol RangedBody: Sendable {
    /// The body's size in bytes, from the first answer.
    var size: Int { get }
    /// What to name it by in messages (its URL).
    var name: String { get }
    /// What identifies this content (its `ETag`, or else `Last-Modified`, and size).
    var validator: String { get }
    /// Bytes fetched so far (a block fetched twice counts twice).
    var bytesFetched: Int { get }
    /// The most that may be fetched whole, for a decoder that does not read ranges (the loader's
    /// `max_bytes`).
    var largestWhole: Int { get }
    /// Reads `count` bytes from `offset` into `buffer` (fewer only at the end), blocking the
    /// calling thread while they are fetched: how many it read. Throws the fetch's failure (the
    /// content changed, the server stopped answering ranges, the network) as a ``PipelineError``.
    func read(at offset: Int, count: Int, into buffer: UnsafeMutableRawPointer) throws -> Int
}

extension RangedBody {
    /// `count` bytes from `offset` (fewer at the end).
    public func read(at offset: Int, count: Int) throws -> Data {
        let wanted = max(0, min(count, size - offset))
        var data = Data(count: wanted)
        let got = try data.withUnsafeMutableBytes { raw in wanted > 0 ? try read(at: offset, count: wanted, into: raw.baseAddress!) : 0 }
        if got < wanted { data.count = got }
        return data
    }
}

/// An open local file, read with `pread` (no shared offset: readers on several threads may read it
/// at once). A file cut short after it was opened reads short, which the reader reports as a
/// damaged file; the descriptor keeps the file it opened even if the path is replaced. Closed when
/// the last reference goes.
public final class LocalFile: Sendable {
    /// The open descriptor.
    public let descriptor: Int32
    /// Its size when opened, in bytes.
    public let size: Int
    /// The path it was opened from (for messages).
    public let path: String

    /// Takes ownership of `descriptor`, a regular file of `size` bytes opened from `path`.
    public init(descriptor: Int32, size: Int, path: String) {
        self.descriptor = descriptor
        self.size = size
        self.path = path
    }

    deinit { close(descriptor) }

    /// `count` bytes from `offset`, or fewer where the file now ends; throws `io` with the reason
    /// when the read fails.
    public func read(at offset: Int, count: Int) throws -> Data {
        var data = Data(count: max(0, count))
        let (done, failure) = data.withUnsafeMutableBytes { raw in
            count > 0 ? read(at: offset, count: count, into: raw.baseAddress!) : (0, nil)
        }
        if let failure { throw PipelineError(.io, "\(path): \(String(cString: strerror(failure)))") }
        if done < count { data.count = done }
        return data
    }

    /// Reads `count` bytes from `offset` into `buffer`: how many it read (fewer where the file now
    /// ends, or up to a failure), and the failure's errno, if one stopped it.
    public func read(at offset: Int, count: Int, into buffer: UnsafeMutableRawPointer) -> (read: Int, error: Int32?) {
        var done = 0
        while done < count {
            let got = pread(descriptor, buffer + done, count - done, off_t(offset + done))
            if got < 0, errno == EINTR { continue }
            if got < 0 { return (done, errno) }
            if got == 0 { break }
            done += got
        }
        return (done, nil)
    }
}

/// The trace context a source's item continues (``Source/trace``): a `ServiceContext` holding the
/// parent span, from a queue message's `traceparent` or the caller.
public struct SourceTrace: Sendable {
    public let context: ServiceContext

    public init(_ context: ServiceContext) { self.context = context }
}

/// A source's trace, kept out of its identity.
private struct TraceSlot: Sendable, Hashable {
    var trace: SourceTrace?

    static func == (lhs: TraceSlot, rhs: TraceSlot) -> Bool { true }
    func hash(into hasher: inout Hasher) {}
}
