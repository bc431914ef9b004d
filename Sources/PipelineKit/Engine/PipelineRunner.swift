import Foundation
import Logging
import Synchronization

/// How a run is carried out; every default is the one `pipelinectl run` uses.
public struct RunOptions: Sendable {
    /// Overrides the pipeline's `output.dir` (`--output DIR`).
    public var outputDirectory: String?
    /// CPU workers for decode, process and encode: one per core by default.
    public var workers: Int = ProcessInfo.processInfo.activeProcessorCount
    /// Memory that decodes in progress may take together, by the decoder's estimate from each
    /// header: two huge images wait for each other instead of being decoded at once. An image
    /// larger than the whole budget is decoded alone. Default 200 MiB (below ImageMagick's Debian
    /// policy memory limit).
    public var decodeMemory: Int = 200 << 20
    /// Items in flight at once; by default the largest loader limit plus two per worker. Bounds
    /// memory whatever the length of the list.
    public var maxInFlight: Int?
    /// Longest time one item may take, from its load to its last output; a plugin that hangs is
    /// cut off (the item fails as `timeout`). `nil`: no limit. Default 5 minutes.
    public var itemTimeout: Double? = 300
    /// Skip items whose outputs this pipeline (same fingerprint) already wrote completely into the
    /// output directory, as recorded by earlier runs, even ones that were killed. Skipped items
    /// report status `skipped`.
    public var resume = false
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
        let cacheData: CacheOutcome
    }
    /// One variant, ready to run.
    struct RunnableVariant: Sendable {
        let name: String?
        let processors: [any ImageProcessing]
        /// The plugin name of each processor, for failures.
        let processorNames: [String]
        let encoderName: String
        /// `prefixIDs[k]`: identifier of the first k processors (k = 0 is the decoded image).
        let prefixIDs: [String]
        let encoder: any ImageEncoding
        let template: NameTemplate
    }
    /// The images of every variant of one source, and what it took to make them.
    struct ImagesOutcome: Sendable {
        /// By variant; `nil` for variants that were not needed.
        let images: [PipelineImage?]
        let bytesIn: Int
        let cacheData: CacheOutcome
        let cacheImage: CacheOutcome
        let timings: StageTimings
    }
    struct ItemOutcome: Sendable {
        let outputs: [String]
        let size: PixelSize
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
    let variants: [RunnableVariant]
    let imageCache: (any ImageCaching)?
    let decodeHint: DecodeHint
    /// Identifies the decoder and its options in image cache keys.
    let decoderIdentifier: String
    /// Identifies every variant's chain, for coalescing the work of one source.
    let chainsIdentifier: String
    let cpu: WorkerPool
    let decodeBudget: MemoryBudget
    let maxInFlight: Int
    let logger: Logger
    let fetchOnly: Bool
    let itemTimeout: Double?
    let resume: Bool
    /// Identifies what outputs depend on: decoder, every chain, encoders and name templates.
    public let fingerprint: String
    let manifest: CompletionManifest
    private let stopRequested = Mutex(false)
    let loadCoalescer = Coalescer<LoadOutcome>()
    let imagesCoalescer = Coalescer<ImagesOutcome>()
    private let itemCoalescer = Coalescer<ItemOutcome>()
    /// Output path hash -> (cache key hash, line number): small per item, so a list of millions
    /// of lines is checked for collisions without holding its text.
    private let outputClaims = Mutex<[Int: (key: Int, line: Int)]>([:])

    /// Instantiates every stage of `pipeline`. Loaders the pipeline does not configure are made with
    /// their defaults, so a list may mix URLs and paths.
    public init(pipeline: Pipeline, registry: PluginRegistry, options: RunOptions = RunOptions()) throws {
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
        imageCache = try pipeline.imageCache?.makeImageCache()
        variants = try pipeline.variants.map { variant in
            let processors = try variant.processors.map { try $0.makeProcessor() }
            var ids = [""]
            for processor in processors { ids.append(ids.last! + "|" + processor.identifier) }
            return RunnableVariant(name: variant.name, processors: processors,
                                   processorNames: variant.processors.map(\.plugin.spec.name),
                                   encoderName: variant.encoder.plugin.spec.name, prefixIDs: ids,
                                   encoder: try variant.encoder.makeEncoder(), template: variant.template)
        }
        // Shrink-on-load only when every variant's first processor sets the size (a processor
        // before it could change geometry), and then large enough for the largest.
        let hints = variants.map { $0.processors.first?.decodeHint }
        if hints.allSatisfy({ $0 != nil }), let first = hints.first ?? nil {
            decodeHint = DecodeHint(targetSize: hints.compactMap { $0 }.reduce(first) {
                PixelSize(width: max($0.width, $1.width), height: max($0.height, $1.height))
            })
        } else {
            decodeHint = DecodeHint()
        }
        decoderIdentifier = pipeline.decoder.plugin.spec.name + "(" + pipeline.decoder.options.canonical + ")"
        chainsIdentifier = decoderIdentifier + variants.map { $0.prefixIDs.last! + ">" + $0.encoder.identifier }.joined(separator: ";")
        cpu = WorkerPool.cpu(threads: max(1, options.workers))
        decodeBudget = MemoryBudget(bytes: options.decodeMemory)
        // Items in flight: enough to keep every load slot and every worker busy, no more. A decoded
        // image exists only inside a worker's job, so this bounds compressed bytes, not pixels.
        let loadLimit = loaders.values.map(\.loader.maxConcurrentLoads).max() ?? 8
        maxInFlight = options.maxInFlight ?? (loadLimit + 2 * max(1, options.workers))
        outputDirectory = options.outputDirectory ?? pipeline.output.dir
        logger = options.logger
        fetchOnly = options.fetchOnly
        itemTimeout = options.itemTimeout
        resume = options.resume
        fingerprint = Hashing.sha256Hex(chainsIdentifier + "\n" + variants.map(\.template.text).joined(separator: "\n"))
        manifest = CompletionManifest(outputDirectory: options.outputDirectory ?? pipeline.output.dir, fingerprint: fingerprint,
                                      load: options.resume)
    }

    /// The pipeline's data cache, when it has one (for `pipelinectl cache`).
    public var dataCacheStage: (any DataCaching)? { dataCache }

    /// Every data cache key this pipeline uses for the list line `line`: the loaded bytes' key and
    /// each variant's encoded output key. Relative paths resolve against the working directory.
    public func dataCacheKeys(for line: String) -> [String] {
        let source = Source(text: line, index: 1)
        guard let slot = loader(for: source) else { return [] }
        let key = slot.loader.cacheKey(for: source)
        return [key] + variants.map { outputKey(key, $0) }
    }

    /// Asks the run to stop gracefully: no new item starts; items in flight finish. ``run(_:onItem:)``
    /// then counts the lines it did not start in ``RunSummary/notStarted`` and returns.
    public func stop() { stopRequested.withLock { $0 = true } }

    /// Runs every source of `sources`, calling `onItem` as each item finishes (in completion order).
    /// Returns the counts. Throws only when the list itself cannot be read.
    public func run<S: AsyncSequence>(
        _ sources: S, onItem: @escaping @Sendable (ItemResult) async -> Void
    ) async throws -> RunSummary where S.Element == Source {
        let start = ContinuousClock.now
        var summary = RunSummary()
        var dataCacheCounts = RunStatistics.CacheCounts()
        func count(_ item: ItemResult) {
            summary.add(item)
            dataCacheCounts.add(item.cacheData)
        }
        try await withThrowingTaskGroup(of: ItemResult.self) { group in
            var inFlight = 0
            var iterator = sources.makeAsyncIterator()
            while let source = try await iterator.next() {
                if stopRequested.withLock({ $0 }) {
                    summary.notStarted = 1
                    while try await iterator.next() != nil { summary.notStarted! += 1 }
                    break
                }
                if inFlight >= maxInFlight, let done = try await group.next() {
                    inFlight -= 1
                    count(done)
                    await onItem(done)
                }
                group.addTask { await self.runItem(source) }
                inFlight += 1
            }
            while let done = try await group.next() {
                count(done)
                await onItem(done)
            }
        }
        summary.wallSeconds = (ContinuousClock.now - start).seconds
        summary.imageCacheEvictions = imageCache?.evictionCount
        await dataCache?.recordRun(CacheUsage(counts: dataCacheCounts))
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
            let relativePaths = variants.map { relativeOutputPath($0, source: source, key: key, fileExtension: $0.encoder.fileExtension) }
            let paths = relativePaths.map(absoluteOutputPath)
            for path in paths { try claim(path, key: key, source: source) }
            if resume, let done = manifest.completed(relativePaths, in: outputDirectory) {
                result.status = .skipped
                result.outputs = done.map(absoluteOutputPath)
                return result
            }
            let tracker = StageTracker()
            let limit = itemTimeout
            let context = StageContext(source: source, cacheKey: key, logger: logger,
                                       deadline: limit.map { ContinuousClock.now + .seconds($0) })
            let (outcome, shared) = try await withDeadline(limit, timeout: {
                PipelineError(.timeout, "the item did not finish within the item time limit (\(Units.formatDuration(limit ?? 0)))",
                              stage: tracker.stage)
            }) {
                try await StageContext.$taskValue.withValue(context) {
                    try await self.itemCoalescer.run(paths.joined(separator: "\n")) {
                        try await self.produce(source: source, slot: slot, key: key, paths: paths, tracker: tracker)
                    }
                }
            }
            let written = outcome.outputs.map { String($0.dropFirst(absoluteOutputPath("").count)) }
            do { try manifest.record(relativePaths, as: written) } catch {
                logger.warning("cannot record completed outputs", metadata: ["manifest": "\(manifest.path)", "error": "\(error)"])
            }
            result.status = .ok
            result.outputs = outcome.outputs
            result.width = outcome.size.width
            result.height = outcome.size.height
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
            logger.debug("ok", metadata: ["source": "\(source.text)", "outputs": "\(result.outputs)"])
        } catch {
            let failure = classify(error, stage: .load, kind: .io)
            result.status = .failed
            result.error = ItemError(stage: failure.stage ?? .load, kind: failure.kind, message: failure.message,
                                     plugin: failure.plugin)
            logger.warning("failed", metadata: [
                "source": "\(source.text)", "stage": "\(failure.stage?.rawValue ?? "load")",
                "kind": "\(failure.kind)", "message": "\(failure.message)", "plugin": "\(failure.plugin ?? "")",
            ])
        }
        return result
    }

    func loader(for source: Source) -> LoaderSlot? { loaders[source.scheme ?? ""] }

    /// Records that `path` is the output of `key`; two different sources may not share an output.
    /// A variant's output path relative to the output directory, with `fileExtension` for `{ext}`.
    func relativeOutputPath(_ variant: RunnableVariant, source: Source, key: String, fileExtension: String) -> String {
        variant.template.render(source: source, cacheKey: key, fileExtension: fileExtension, variant: variant.name)
    }

    func absoluteOutputPath(_ relative: String) -> String {
        outputDirectory.hasSuffix("/") ? outputDirectory + relative : outputDirectory + "/" + relative
    }

    private func claim(_ path: String, key: String, source: Source) throws {
        let other = outputClaims.withLock { claims -> Int? in
            if let existing = claims[path.hashValue] { return existing.key == key.hashValue ? nil : existing.line }
            claims[path.hashValue] = (key.hashValue, source.index)
            return nil
        }
        if let other {
            throw PipelineError(.outputCollision,
                                "output '\(path)' is already the output of line \(other) of the list; use {hash} or {index} in output.name",
                                stage: .output)
        }
    }

    /// A ``PipelineError`` with its stage set; other errors get `kind`.
    func classify(_ error: any Error, stage: StageName, kind: ErrorKind, plugin: String? = nil) -> PipelineError {
        Self.classifyStatic(error, stage: stage, kind: kind, plugin: plugin)
    }

    static func classifyStatic(_ error: any Error, stage: StageName, kind: ErrorKind, plugin: String? = nil) -> PipelineError {
        if var failure = error as? PipelineError {
            if failure.stage == nil { failure.stage = stage }
            if failure.plugin == nil { failure.plugin = plugin }
            return failure
        }
        if error is CancellationError { return PipelineError(.cancelled, "cancelled", stage: stage, plugin: plugin) }
        // Any other error a plugin throws: its own description, kind by stage.
        return PipelineError(kind, String(describing: error), stage: stage, plugin: plugin)
    }
}

extension Duration {
    var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
    var milliseconds: Double { (seconds * 1000 * 1000).rounded() / 1000 }
}
