import Foundation

/// The loader slot: turns a source into bytes.
///
/// A loader declares the URL schemes it serves in its plugin (``Plugin/loader(_:schemes:check:make:)``);
/// the engine picks the loader for each line by scheme, so one list may mix URLs and paths.
/// Limits on concurrency and coalescing of identical loads are the engine's; a loader only fetches.
public protocol DataLoading: Sendable {
    /// How many loads of this loader may run at once; the engine enforces it.
    var maxConcurrentLoads: Int { get }

    /// The key under which the data of `source` is cached and coalesced. Two sources with the same
    /// key are the same bytes. The default is the source text.
    func cacheKey(for source: Source) -> String

    /// Whether the engine keeps this loader's data in the data cache. Local loaders say `false`:
    /// copying a local file into a cache gains nothing.
    var usesDataCache: Bool { get }

    /// Which pending load starts first when a slot frees up: the oldest (`fifo`, the default) or
    /// the newest (`lifo`, as AlamofireImage offers).
    var loadOrder: LoadOrder { get }

    /// Transfers in progress now, for a progress display. Default: none reported.
    func progress() -> [TransferProgress]

    /// Loads the bytes of `source`, throwing a ``PipelineError`` whose kind says what went wrong.
    func load(_ source: Source) async throws -> LoadedData

    /// Checks whether the bytes cached for `source`, described by `cached`, are still current: a
    /// conditional request for HTTP (`If-None-Match` / `If-Modified-Since`), a `stat` for a file.
    /// Returns ``Revalidation/notModified(_:)`` with the source's new directives, or the new bytes.
    /// The default loads again.
    func revalidate(_ source: Source, cached: CacheDirectives) async throws -> Revalidation
}

/// The answer to a revalidation.
public enum Revalidation: Sendable {
    /// The cached bytes are still current; here is what the source now says about them.
    case notModified(CacheDirectives)
    /// The source changed (or cannot be checked): here are its bytes.
    case modified(LoadedData)
}

extension DataLoading {
    public var maxConcurrentLoads: Int { 8 }
    public func cacheKey(for source: Source) -> String { source.text }
    public var usesDataCache: Bool { true }
    public var loadOrder: LoadOrder { .fifo }
    public func progress() -> [TransferProgress] { [] }
    public func revalidate(_ source: Source, cached: CacheDirectives) async throws -> Revalidation {
        .modified(try await load(source))
    }
}

/// The order pending loads start in.
public enum LoadOrder: String, Sendable, CaseIterable {
    case fifo, lifo
}

/// How far one transfer has got.
public struct TransferProgress: Sendable, Equatable {
    /// The URL being fetched.
    public let url: String
    /// Bytes received so far (after Content-Encoding is undone).
    public let received: Int
    /// The announced length, when the server sent one.
    public let expected: Int?

    public init(url: String, received: Int, expected: Int?) {
        self.url = url
        self.received = received
        self.expected = expected
    }
}
