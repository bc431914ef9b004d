import Foundation

/// The loader slot: turns a source into bytes.
///
/// A loader declares the URL schemes it serves in its plugin (``Plugin/loader(_:schemes:make:)``);
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

    /// Loads the bytes of `source`, throwing a ``PipelineError`` whose kind says what went wrong.
    func load(_ source: Source) async throws -> LoadedData
}

extension DataLoading {
    public var maxConcurrentLoads: Int { 8 }
    public func cacheKey(for source: Source) -> String { source.text }
    public var usesDataCache: Bool { true }
}
