import Foundation
import Synchronization

/// The run's loaders by URL scheme, each built when the first source of its schemes comes: a run
/// of http URLs never builds the s3 loader (nor needs S3 credentials). The pipeline's `loader:`
/// serves its schemes with its options; every other loader its own, with its defaults.
final class LoaderSlots: Sendable {
    /// The configuration serving each scheme (`""` for plain paths).
    private let configs: [String: StageConfig]
    /// Loaders built so far, by plugin name (one loader may serve several schemes), or why one
    /// could not be built.
    private let built = Mutex<[String: Result<LoaderSlot, PipelineError>]>([:])
    /// The largest concurrency limit of the loaders built so far.
    private let largest = Mutex(0)
    /// The pipeline's `sources:`: where every source of `run` and `work` (and `serve`, unless its
    /// own `serve.sources` is set) must come from; `nil` when it lists none.
    let boundary: SourceBoundary?

    init(_ pipeline: Pipeline, _ registry: PluginRegistry) {
        boundary = pipeline.sources.isEmpty ? nil : SourceBoundary(pipeline.sources)
        var configs: [String: StageConfig] = [:]
        let configured = pipeline.loader?.plugin.spec.name
        for plugin in registry.plugins(in: .loader) {
            let config = configured == plugin.spec.name
                ? pipeline.loader!
                : StageConfig(plugin: plugin, options: plugin.defaultOptions, position: SourcePosition(line: 1, column: 1))
            for scheme in plugin.schemes where configs[scheme] == nil || configured == plugin.spec.name {
                configs[scheme] = config
            }
        }
        self.configs = configs
    }

    /// Bytes handed in memory (``Source/bytes``): no plugin, no limit worth the name.
    let inline = LoaderSlot(name: "bytes", loader: InlineLoader(), limit: AsyncSemaphore(permits: 1024, order: .fifo))

    /// The schemes some loader serves, for messages (`paths` for plain paths).
    var schemesServed: [String] { configs.keys.sorted().map { $0.isEmpty ? "paths" : $0 } }

    /// The largest load concurrency of the loaders built so far; 8 before any.
    var largestLimit: Int { max(8, largest.withLock { $0 }) }

    /// The loader serving `source`'s scheme, built now if it was not yet; `nil` when no loader
    /// serves the scheme. Throws why the loader cannot be built (for every source it would serve).
    func slot(for source: Source) throws -> LoaderSlot? {
        if source.bytes != nil { return inline }
        guard let config = configs[source.scheme ?? ""] else { return nil }
        let name = config.plugin.spec.name
        let result = built.withLock { built -> Result<LoaderSlot, PipelineError> in
            if let done = built[name] { return done }
            let made: Result<LoaderSlot, PipelineError>
            do {
                let loader = try config.makeLoader()
                made = .success(LoaderSlot(name: name, loader: loader,
                                           limit: AsyncSemaphore(permits: loader.maxConcurrentLoads, order: loader.loadOrder)))
            } catch {
                var failure = error as? PipelineError ?? PipelineError(.invalidOption, "\(error)")
                failure.message = "loader '\(name)': " + failure.message
                if failure.stage == nil { failure.stage = .load }
                if failure.plugin == nil { failure.plugin = name }
                made = .failure(failure)
            }
            built[name] = made
            return made
        }
        let slot = try result.get()
        largest.withLock { $0 = max($0, slot.loader.maxConcurrentLoads) }
        return slot
    }

    /// The loaders built so far.
    var builtLoaders: [any DataLoading] {
        built.withLock { $0.values.compactMap { try? $0.get().loader } }
    }
}


/// The loader of bytes handed in memory (an upload): they are their own content.
struct InlineLoader: DataLoading {
    var maxConcurrentLoads: Int { 1024 }
    var usesDataCache: Bool { false }
    func cacheKey(for source: Source) -> String { "bytes:sha256:" + (source.bytes?.digest ?? Hashing.sha256Hex(source.text)) }
    func load(_ source: Source) async throws -> LoadedData {
        guard let bytes = source.bytes else { throw PipelineError(.invalidSource, "no bytes were handed in", stage: .load) }
        return LoadedData(data: bytes.data, contentType: bytes.contentType, directives: CacheDirectives(immutable: true))
    }
}
