import Foundation
import Logging
import Synchronization

/// How a run is carried out; every default is the one `pipelinectl run` uses.
public struct RunOptions: Sendable {
    /// Overrides the pipeline's `output.dir` (`--output DIR`).
    public var outputDirectory: String?
    /// CPU workers for decode, process and encode: one per core by default.
    public var workers: Int = ProcessInfo.processInfo.activeProcessorCount
    /// Items in flight at once; by default the largest loader limit plus two per worker. Bounds
    /// memory whatever the length of the list.
    public var maxInFlight: Int?
    /// `true` runs only the loader and the data cache (`pipelinectl fetch`): nothing is decoded
    /// or written, and each item reports the bytes it loaded.
    public var fetchOnly = false
    /// Where the engine logs (a failure per item at `warning`, each item at `debug`).
    public var logger = Logger(label: "pipelinekit")

    public init() {}
}

/// Runs a validated ``Pipeline`` over a list of sources.
///
/// The runner owns policy: which loader serves a line (by scheme), how many loads and items are in
/// flight, coalescing of identical work, cache lookups, timing and error classification. Stages
/// only do their one thing. One failing item never stops the others.
public final class PipelineRunner: Sendable {
    struct LoaderSlot: Sendable {
        let name: String
        let loader: any DataLoading
        let limit: AsyncSemaphore
    }
    struct LoadOutcome: Sendable {
        let data: LoadedData
        let milliseconds: Double
    }
    struct ImageOutcome: Sendable {
        let image: Image
        let bytesIn: Int
        let cacheData: CacheOutcome
        let timings: StageTimings
    }
    struct ItemOutcome: Sendable {
        let image: Image
        let bytesIn: Int
        let bytesOut: Int
        let cacheData: CacheOutcome
        let cacheImage: CacheOutcome
        let timings: StageTimings
    }

    public let pipeline: Pipeline
    /// The directory outputs are written to.
    public let outputDirectory: String
    let loaders: [String: LoaderSlot]
    let schemesServed: [String]
    let dataCache: (any DataCaching)?
    let decoder: any ImageDecoding
    let processors: [any ImageProcessing]
    let imageCache: (any ImageCaching)?
    let encoder: any ImageEncoding
    let decodeHint: DecodeHint
    /// Identifies decoder options and the processor chain in image cache keys.
    let chainIdentifier: String
    let cpu: WorkerPool
    let maxInFlight: Int
    let logger: Logger
    let fetchOnly: Bool
    private let loadCoalescer = Coalescer<LoadOutcome>()
    private let imageCoalescer = Coalescer<ImageOutcome>()
    private let itemCoalescer = Coalescer<ItemOutcome>()
    private let outputClaims = Mutex<[String: (key: String, source: String)]>([:])

    /// Instantiates every stage of `pipeline`. Loaders the pipeline does not configure are made with
    /// their defaults, so a list may mix URLs and paths.
    public init(pipeline: Pipeline, registry: PluginRegistry, options: RunOptions = RunOptions()) throws {
        Magick.initialize()
        self.pipeline = pipeline
        var loaders: [String: LoaderSlot] = [:]
        for plugin in registry.plugins(in: .loader) {
            let config = pipeline.loader?.plugin.spec.name == plugin.spec.name
                ? pipeline.loader!
                : StageConfig(plugin: plugin, options: plugin.defaultOptions, position: SourcePosition(line: 1, column: 1))
            let loader = try config.makeLoader()
            let slot = LoaderSlot(name: plugin.spec.name, loader: loader,
                                  limit: AsyncSemaphore(permits: loader.maxConcurrentLoads, order: loader.loadOrder))
            for scheme in plugin.schemes where loaders[scheme] == nil || config.plugin.spec.name == pipeline.loader?.plugin.spec.name {
                loaders[scheme] = slot
            }
        }
        self.loaders = loaders
        self.schemesServed = loaders.keys.sorted().map { $0.isEmpty ? "paths" : $0 }
        dataCache = try pipeline.dataCache?.makeDataCache()
        decoder = try pipeline.decoder.makeDecoder()
        processors = try pipeline.processors.map { try $0.makeProcessor() }
        imageCache = try pipeline.imageCache?.makeImageCache()
        encoder = try pipeline.encoder.makeEncoder()
        // Shrink-on-load only when the first processor sets the size: a processor before it could
        // change geometry, and a hint computed past it would be wrong.
        decodeHint = DecodeHint(targetSize: processors.first?.decodeHint)
        chainIdentifier = ([pipeline.decoder.plugin.spec.name + "(" + pipeline.decoder.options.canonical + ")"]
            + processors.map(\.identifier)).joined(separator: "|")
        cpu = WorkerPool(threads: options.workers, name: "pipelinekit-cpu")
        let loadLimit = loaders.values.map(\.loader.maxConcurrentLoads).max() ?? 8
        maxInFlight = options.maxInFlight ?? (loadLimit + 2 * max(1, options.workers))
        outputDirectory = options.outputDirectory ?? pipeline.output.dir
        logger = options.logger
        fetchOnly = options.fetchOnly
    }

    /// Runs every source of `sources`, calling `onItem` as each item finishes (in completion order).
    /// Returns the counts. Throws only when the list itself cannot be read.
    public func run<S: AsyncSequence>(
        _ sources: S, onItem: @escaping @Sendable (ItemResult) async -> Void
    ) async throws -> RunSummary where S.Element == Source {
        let start = ContinuousClock.now
        var summary = RunSummary()
        try await withThrowingTaskGroup(of: ItemResult.self) { group in
            var inFlight = 0
            var iterator = sources.makeAsyncIterator()
            while let source = try await iterator.next() {
                if inFlight >= maxInFlight, let done = try await group.next() {
                    inFlight -= 1
                    summary.add(done)
                    await onItem(done)
                }
                group.addTask { await self.runItem(source) }
                inFlight += 1
            }
            while let done = try await group.next() {
                summary.add(done)
                await onItem(done)
            }
        }
        summary.wallSeconds = (ContinuousClock.now - start).seconds
        return summary
    }

    /// Runs one source through every stage. Never throws: failures become a failed result.
    public func runItem(_ source: Source) async -> ItemResult {
        var result = ItemResult(source: source.text, index: source.index, status: .failed)
        do {
            guard let slot = loader(for: source) else {
                throw PipelineError(.blockedProtocol,
                                    "no loader serves '\(source.scheme ?? "")' sources; this run loads: "
                                        + schemesServed.joined(separator: ", "), stage: .load)
            }
            let key = slot.loader.cacheKey(for: source)
            if fetchOnly {
                let (loaded, cacheData, milliseconds) = try await load(source: source, slot: slot, key: key)
                result.status = .ok
                result.bytesIn = loaded.data.count
                result.timings.load = milliseconds
                result.cacheData = cacheData
                return result
            }
            let relative = pipeline.output.name.render(source: source, cacheKey: key, fileExtension: encoder.fileExtension)
            let path = outputDirectory.hasSuffix("/") ? outputDirectory + relative : outputDirectory + "/" + relative
            try claim(path, key: key, source: source)
            let (outcome, shared) = try await itemCoalescer.run(path) {
                try await self.produce(source: source, slot: slot, key: key, path: path)
            }
            result.status = .ok
            result.outputs = [path]
            result.width = outcome.image.width
            result.height = outcome.image.height
            result.bytesOut = outcome.bytesOut
            if shared {
                result.cacheData = dataCache == nil ? .off : .hit
                result.cacheImage = .hit
            } else {
                result.bytesIn = outcome.bytesIn
                result.timings = outcome.timings
                result.cacheData = outcome.cacheData
                result.cacheImage = outcome.cacheImage
            }
            logger.debug("ok", metadata: ["source": "\(source.text)", "output": "\(path)"])
        } catch {
            let failure = classify(error, stage: .load, kind: .io)
            result.status = .failed
            result.error = ItemError(stage: failure.stage ?? .load, kind: failure.kind, message: failure.message)
            logger.warning("failed", metadata: [
                "source": "\(source.text)", "stage": "\(failure.stage?.rawValue ?? "load")",
                "kind": "\(failure.kind)", "message": "\(failure.message)",
            ])
        }
        return result
    }

    func loader(for source: Source) -> LoaderSlot? { loaders[source.scheme ?? ""] }

    /// Records that `path` is the output of `key`; two different sources may not share an output.
    private func claim(_ path: String, key: String, source: Source) throws {
        let other = outputClaims.withLock { claims -> String? in
            if let existing = claims[path] { return existing.key == key ? nil : existing.source }
            claims[path] = (key, source.text)
            return nil
        }
        if let other {
            throw PipelineError(.outputCollision,
                                "output '\(path)' is already the output of '\(other)'; use {hash} or {index} in output.name",
                                stage: .output)
        }
    }

    private func produce(source: Source, slot: LoaderSlot, key: String, path: String) async throws -> ItemOutcome {
        let imageKey = key + "#" + chainIdentifier
        var image: Image
        var timings = StageTimings()
        var bytesIn = 0
        var cacheData = CacheOutcome.off
        var cacheImage = CacheOutcome.off
        if let cached = imageCache?.image(for: imageKey) {
            image = cached
            cacheImage = .hit
        } else {
            cacheImage = imageCache == nil ? .off : .miss
            let (made, shared) = try await imageCoalescer.run(imageKey) {
                try await self.makeImage(source: source, slot: slot, key: key, imageKey: imageKey)
            }
            image = made.image
            if shared {
                cacheImage = .hit
                cacheData = dataCache == nil ? .off : .hit
            } else {
                timings = made.timings
                bytesIn = made.bytesIn
                cacheData = made.cacheData
            }
        }
        let encoder = self.encoder
        let encodeStart = ContinuousClock.now
        let finalImage = image
        let data: Data
        do {
            data = try await cpu.run { try encoder.encode(finalImage) }
        } catch {
            throw classify(error, stage: .encode, kind: .encodeFailed)
        }
        timings.encode = (ContinuousClock.now - encodeStart).milliseconds
        do {
            try await WorkerPool.io.run { try AtomicFile.write(data, to: path) }
        } catch {
            throw classify(error, stage: .output, kind: .writeFailed)
        }
        return ItemOutcome(image: image, bytesIn: bytesIn, bytesOut: data.count, cacheData: cacheData,
                           cacheImage: cacheImage, timings: timings)
    }

    private func makeImage(source: Source, slot: LoaderSlot, key: String, imageKey: String) async throws -> ImageOutcome {
        var timings = StageTimings()
        let (loaded, cacheData, loadMilliseconds) = try await load(source: source, slot: slot, key: key)
        timings.load = loadMilliseconds
        let decoder = self.decoder
        let hint = decodeHint
        let decodeStart = ContinuousClock.now
        var image: Image
        do {
            image = try await cpu.run { try decoder.decode(loaded, hint: hint) }
        } catch {
            throw classify(error, stage: .decode, kind: .decodeFailed)
        }
        timings.decode = (ContinuousClock.now - decodeStart).milliseconds
        if !processors.isEmpty {
            let processors = self.processors
            let decoded = image
            let processStart = ContinuousClock.now
            do {
                image = try await cpu.run {
                    try processors.reduce(decoded) { image, processor in try processor.process(image) }
                }
            } catch {
                throw classify(error, stage: .process, kind: .processFailed)
            }
            timings.process = (ContinuousClock.now - processStart).milliseconds
        }
        imageCache?.store(image, for: imageKey)
        return ImageOutcome(image: image, bytesIn: loaded.data.count, cacheData: cacheData, timings: timings)
    }

    /// Bytes for `key`: from the data cache, or from the loader (once for concurrent callers).
    private func load(source: Source, slot: LoaderSlot, key: String) async throws -> (LoadedData, CacheOutcome, Double) {
        let start = ContinuousClock.now
        let cache = slot.loader.usesDataCache ? dataCache : nil
        if let cache, let hit = await cache.data(for: key) {
            return (hit, .hit, (ContinuousClock.now - start).milliseconds)
        }
        let logger = self.logger
        do {
            let (outcome, shared) = try await loadCoalescer.run(key) {
                let begin = ContinuousClock.now
                let data = try await slot.limit.withPermit { try await slot.loader.load(source) }
                let elapsed = (ContinuousClock.now - begin).milliseconds
                if let cache {
                    do { try await cache.store(data, for: key) } catch {
                        logger.warning("data cache store failed", metadata: ["key": "\(key)", "error": "\(error)"])
                    }
                }
                return LoadOutcome(data: data, milliseconds: elapsed)
            }
            let outcome2: CacheOutcome = cache == nil ? .off : (shared ? .hit : .miss)
            return (outcome.data, outcome2, shared ? 0 : outcome.milliseconds)
        } catch {
            throw classify(error, stage: .load, kind: .io)
        }
    }

    /// A ``PipelineError`` with its stage set; other errors get `kind`.
    func classify(_ error: any Error, stage: StageName, kind: ErrorKind) -> PipelineError {
        if var failure = error as? PipelineError {
            if failure.stage == nil { failure.stage = stage }
            return failure
        }
        if error is CancellationError { return PipelineError(.cancelled, "cancelled", stage: stage) }
        return PipelineError(kind, String(describing: error), stage: stage)
    }
}

extension Duration {
    var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
    var milliseconds: Double { (seconds * 1000 * 1000).rounded() / 1000 }
}
