import Foundation
import Logging
import Synchronization
import Tracing

/// How a run is carried out; every default is the one `pipelinectl run` uses.
public struct RunOptions: Sendable {
    /// Overrides the pipeline's `output.dir` (`--output DIR`).
    public var outputDirectory: String?
    /// CPU workers for decode, process and encode: one per CPU the process may use by default
    /// (``UsableCores``).
    public var workers: Int = UsableCores.count
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
    /// Sources whose result this run remembers, so that a line repeated later in the list reuses
    /// it (copies its outputs) instead of loading again: about 200 bytes each, so the default
    /// 100,000 is about 20 MB however long the list. 0 remembers none (duplicates in flight at the
    /// same time are still made once). See `FinishedSources`.
    public var dedupeWindow: Int = 100_000
    /// Whether a source without a ``Source/version`` is remembered for later lines too (a list's
    /// lines: the same line twice is one item). `work` says no: a queue's later message for a name
    /// may be new content, so without a version only work in flight is shared.
    public var dedupeUnversioned = true
    /// Skip items whose outputs this pipeline (same fingerprint) already wrote completely into the
    /// output directory, as recorded by earlier runs, even ones that were killed. Skipped items
    /// report status `skipped`.
    public var resume = false
    /// Where the record ``resume`` reads is kept (`--state-dir`); `nil`: `OUTPUT_DIR/.pipelinectl`.
    /// Records of several output directories may share one: each file's name carries a digest of
    /// its output directory's absolute path.
    public var stateDirectory: String?
    /// Run only this shard's share of the list (`--shard K/N`); `nil`: the whole list.
    public var shard: Shard?
    /// `true` runs only the loader and the data cache (`pipelinectl fetch`): nothing is decoded
    /// or written, and each item reports the bytes it loaded.
    public var fetchOnly = false
    /// Where the engine logs (a failure per item at `warning`, each item at `debug`).
    public var logger = Logger(label: "pipelinekit")
    /// Where outputs go, instead of the destination `output.dir` names.
    public var destination: (any OutputDestination)?
    /// Outputs handed back as values (``OutputDelivery/values``) larger than this many bytes are
    /// kept in a temporary file instead of memory (``ImageOutput/Body/file(_:)``). Default 32 MiB.
    public var spoolThreshold: Int = 32 << 20
    /// Where such files go; `nil`: the system's temporary directory.
    public var spoolDirectory: String?
    /// Build the `output:` destination when an output is first stored, not with the runner
    /// (``ImagePipelines`` does: outputs taken as values never need it). Default `false`: `run`
    /// and `work` fail at start for a destination that cannot be made.
    public var buildsDestinationOnUse = false
    /// Where each finished item is announced ("ready" events, the pipeline's `notify:`), at least
    /// once: the run first sends what an earlier run left pending, sets each item's
    /// ``ItemResult/event`` before settling it, and counts the events in its summary.
    public var events: EventOutbox?
    /// Called for an item whose outputs replaced others (``ItemResult/replaced``), before its
    /// event and its settling: purges what a CDN holds of the source (`work --purge-replaced`).
    /// Returns what to report (``ItemResult/purge``).
    public var purgeReplaced: (@Sendable (Source, ItemResult) async -> String)?

    /// Where the engine's spans go (an item's, and one per stage under it); `nil`: the process's
    /// tracer (`InstrumentationSystem.tracer`), a no-op unless the program set one up. An item
    /// continues the trace of the task that runs it (`ServiceContext.current`).
    public var tracer: (any Tracer)?

    /// The clock items' time limits are counted by: the machine's, unless a test moves one by hand.
    package var timers: any TimerSource = DispatchTimers.shared

    public init() {}
}

/// What runners in one process share when several run side by side (the service's presets and
/// their parameter sets): the CPU workers, the decode memory budget, and a preset's loaders.
struct EngineResources: Sendable {
    let cpu: WorkerPool
    let decodeBudget: MemoryBudget
    let loaders: LoaderSlots?
    let sourceLoads: SharedWork<LoadedSource>?
}

/// Runs a validated ``Pipeline`` over a list of sources.
///
/// The runner owns policy: which loader serves a line (by scheme), how many loads and items are in
/// flight, sharing of identical work, cache lookups, time limits, timing and error
/// classification. Stages only do their one thing. One failing item never stops the others.
///
/// One item goes through named steps, each a type with its own values in and out
/// (`Engine/Steps`): `LoadStep`, `StoredOutputsStep`, `DecodeStep`, `EncodeStep` and
/// `OutputStore`. The runner plans an item, shares identical work, runs the steps in order under
/// the item's time limit (`PipelineRunner+Item`, `+Images`), and runs the list (`run`).
public final class PipelineRunner: Sendable {
    public let pipeline: Pipeline
    /// The options it was made with.
    public let options: RunOptions
    /// Callers waiting for a source load in progress, this runner's and those derived from it.
    public var loadsWaiting: Int { loading.sourceLoads.waiting }
    /// Where outputs are written: a directory, or a destination's URL (`s3://bucket/prefix`).
    public let outputDirectory: String
    /// Identifies what outputs depend on: decoder, every chain, encoders and name templates.
    public let fingerprint: String
    let variants: [RunnableVariant]
    /// `on_failure:`, when the pipeline has it.
    let failurePolicy: FailurePolicy?
    /// The steps of an item.
    let loading: LoadStep
    /// `nil` without a data cache that keeps outputs.
    let storedOutputs: StoredOutputsStep?
    let making: DecodeStep
    /// Where the item's and its stages' spans go.
    let spans: EngineSpans
    let encoding: EncodeStep
    /// Step "store": the destination, the names outputs are claimed and stored under, `--resume`.
    let output: OutputStore
    private let stopRequested = Mutex(false)
    /// Fired by ``abort()``.
    private let aborted = OneTimeSignal()
    /// One piece of work per source key in flight, shared by every line with that key.
    let itemWork = SharedWork<ItemOutcome>()
    /// What this run already made, by source key.
    let finished: FinishedSources

    var loaders: LoaderSlots { loading.loaders }
    var dataCache: (any DataCaching)? { loading.dataCache }
    var decodeHint: DecodeHint { making.hint }
    var decoderIdentifier: String { making.decoderIdentifier }

    /// Instantiates every stage of `pipeline`. Loaders the pipeline does not configure are made with
    /// their defaults, so a list may mix URLs and paths.
    public convenience init(pipeline: Pipeline, registry: PluginRegistry, options: RunOptions = RunOptions()) throws {
        try self.init(pipeline: pipeline, registry: registry, options: options, sharing: nil)
    }

    /// A runner for `pipeline` (this runner's pipeline with some options set: `Pipeline/applying(_:)`,
    /// `Pipeline/restricted(toVariant:)`) that shares this one's workers, decode memory, loaders and
    /// destination: no thread is started, and one budget holds every decode in the process.
    /// `sharingLoaders: false` for another pipeline (its own `loader:`), made on first use.
    public func derived(_ pipeline: Pipeline, registry: PluginRegistry, sharingLoaders: Bool = true) throws -> PipelineRunner {
        var options = self.options
        // Another pipeline stores with its own `output:`; a variant of this one with this one's.
        options.destination = sharingLoaders ? output.destination : self.options.destination
        return try PipelineRunner(pipeline: pipeline, registry: registry, options: options,
                                  sharing: EngineResources(cpu: making.cpu, decodeBudget: making.budget, loaders: sharingLoaders ? loaders : nil,
                                                           sourceLoads: sharingLoaders ? loading.sourceLoads : nil))
    }

    init(pipeline: Pipeline, registry: PluginRegistry, options: RunOptions, sharing: EngineResources?) throws {
        self.pipeline = pipeline
        self.options = options
        let metadataPolicy = pipeline.metadataPolicy
        // What the decoder reads of the source's metadata and what outputs keep of it are part of
        // what a cached image or output is.
        let decoderName = pipeline.decoder.plugin.spec.name
        let processors = try pipeline.variants.map { try $0.processors.map { try $0.makeProcessor() } }
        let encoders = try pipeline.variants.map { try $0.encoder.makeEncoder() }
        let processorsRead = processors.joined().contains(where: \.wantsSourceMetadata)
        let readsMetadata = processorsRead && !metadataPolicy.needsSource ? "+metadata" : ""
        // A decoded image that carries its source's bytes (for an encoder that rebuilds them) is
        // another image in the image cache.
        let keepsSource = encoders.contains(where: \.wantsSourceBytes)
        let decoderIdentifier = decoderName + "(" + pipeline.decoder.options.canonical + ")" + metadataPolicy.keySuffix + readsMetadata
            + (keepsSource ? "+source" : "")
        let variants = try (0..<processors.count).map {
            try Self.runnable(pipeline.variants[$0], processors: processors[$0], encoder: encoders[$0], decoderIdentifier: decoderIdentifier)
        }
        self.variants = variants
        var hint = Self.decodeHint(variants)
        hint.wantsMetadata = metadataPolicy.needsSource || processorsRead
        hint.wantsSourceBytes = keepsSource
        let cpu = sharing?.cpu ?? WorkerPool.cpu(threads: max(1, options.workers))
        let spans = EngineSpans(tracer: options.tracer)
        self.spans = spans
        making = DecodeStep(spans: spans, decoder: try pipeline.decoder.makeDecoder(), decoderName: decoderName, decoderIdentifier: decoderIdentifier,
                            hint: hint, variants: variants, imageCache: try pipeline.imageCache?.makeImageCache(), cpu: cpu,
                            budget: sharing?.decodeBudget ?? MemoryBudget(bytes: options.decodeMemory))
        encoding = EncodeStep(metadataPolicy: metadataPolicy, cpu: cpu)
        let dataCache = try pipeline.dataCache?.makeDataCache()
        let loading = LoadStep(loaders: sharing?.loaders ?? LoaderSlots(pipeline, registry), dataCache: dataCache,
                               sourceLoads: sharing?.sourceLoads ?? SharedWork(), need: making.need, logger: options.logger,
                               spans: spans)
        self.loading = loading
        storedOutputs = dataCache.flatMap { cache in
            cache.storesOutputs ? StoredOutputsStep(cache: QuietCache(cache: cache, logger: options.logger), variants: variants,
                                                    decoderIdentifier: decoderIdentifier, loading: loading) : nil
        }
        failurePolicy = try pipeline.onFailure.map { try FailurePolicy(options: $0) }
        finished = FinishedSources(capacity: options.dedupeWindow)
        let chains = decoderIdentifier + variants.map { $0.prefixIDs.last! + ">" + $0.encoder.identifier }.joined(separator: ";")
        fingerprint = Hashing.sha256Hex(chains + "\n" + variants.map(\.template.text).joined(separator: "\n"))
        outputDirectory = options.outputDirectory ?? pipeline.output.dir
        output = try Self.outputStore(pipeline, registry, options, directory: outputDirectory, variants: variants, fingerprint: fingerprint)
    }

    /// Step "store" for `pipeline`'s `output:` (or the destination `options` give), with the
    /// run record `--resume` reads.
    private static func outputStore(_ pipeline: Pipeline, _ registry: PluginRegistry, _ options: RunOptions, directory: String,
                                    variants: [RunnableVariant], fingerprint: String) throws -> OutputStore {
        let destination: any OutputDestination
        if let given = options.destination {
            destination = given
        } else if options.buildsDestinationOnUse {
            let outputOptions = pipeline.output.options
            destination = LazyDestination(directory: directory) { try registry.makeDestination(directory, options: outputOptions) }
        } else {
            destination = try registry.makeDestination(directory, options: pipeline.output.options)
        }
        let localOutput = destination.localDirectory ?? directory
        let absoluteOutput = URL(fileURLWithPath: localOutput).standardizedFileURL.path
        let manifest = CompletionManifest(outputDirectory: localOutput, fingerprint: fingerprint,
                                          recordDirectory: options.stateDirectory,
                                          suffix: (options.stateDirectory == nil ? "" : "-" + Hashing.sha256Hex(absoluteOutput).prefix(8))
                                              + (options.shard?.fileSuffix ?? ""),
                                          load: options.resume,
                                          enabled: destination.localDirectory != nil && !options.fetchOnly)
        // Names are recorded to find two sources writing one name only where two could: not when
        // every template has `{hash}` or `{index}` (the default does).
        let factsName = pipeline.output.factsName
        let claimsNames = !pipeline.variants.allSatisfy(\.template.isCollisionFree) || factsName.map { !$0.isCollisionFree } == true
        return OutputStore(destination: destination, existing: pipeline.output.existing, factsName: factsName,
                           factsRecipe: OutputFingerprint.recipe("facts:" + variants.map(\.recipe).joined(separator: ",")),
                           manifest: manifest, claims: OutputClaims(enabled: claimsNames),
                           spoolThreshold: options.spoolThreshold, spoolDirectory: options.spoolDirectory, logger: options.logger)
    }

    /// Checks that outputs can be written and the data cache used before the run starts (a
    /// store's credentials and bucket); a message naming which when not. Nothing to check for a
    /// local directory (validation did).
    public func preflight() async -> PipelineError? {
        if !fetchOnly, let problem = await output.destination.preflight() {
            return PipelineError(problem.kind, "cannot write outputs to \(outputDirectory): \(problem.message)")
        }
        return await dataCache?.preflight()
    }

    static func runnable(_ variant: Variant, processors: [any ImageProcessing], encoder: any ImageEncoding,
                         decoderIdentifier: String) throws -> RunnableVariant {
        var ids = [""]
        for processor in processors { ids.append(ids.last! + "|" + processor.identifier) }
        // Breakpoints by bytes: what chooses the widths is part of how each output was made.
        let widths = variant.byBytes.map { ">" + $0.identifier } ?? ""
        return RunnableVariant(name: variant.name, processors: processors,
                               processorNames: variant.processors.map(\.plugin.spec.name),
                               encoderName: variant.encoder.plugin.spec.name, prefixIDs: ids,
                               encoder: encoder, template: variant.template,
                               recipe: OutputFingerprint.recipe(decoderIdentifier + ids.last! + ">" + encoder.identifier + widths),
                               byBytes: variant.byBytes, scaler: variant.scaler)
    }

    /// Shrink-on-load only when every variant's first processor sets the size (a processor before
    /// it could change geometry; one that only reads the image is passed over, and one that only
    /// turns it makes the box square), and then large enough for the largest.
    static func decodeHint(_ variants: [RunnableVariant]) -> DecodeHint {
        let wantsFacts = variants.contains { $0.processors.contains(where: \.wantsSourceFacts) }
        let places = variants.map { $0.processors.firstIndex { !$0.onlyReads && !$0.onlyReorients } }
        let firsts = zip(variants, places).map { variant, place in place.map { variant.processors[$0] } }
        let hints = zip(variants, places).map { variant, place -> PixelSize? in
            guard let place, let hint = variant.processors[place].decodeHint else { return nil }
            // Turned before it is sized: either side of the source may become the width.
            let turned = variant.processors[..<place].contains(where: \.onlyReorients)
            let side = max(hint.width, hint.height)
            return turned ? PixelSize(width: side, height: side) : hint
        }
        guard hints.allSatisfy({ $0 != nil }), let first = hints.first ?? nil else { return DecodeHint(wantsSourceFacts: wantsFacts) }
        // The largest box on each side; fit only when every variant fits (a fit inside the larger
        // box needs at least as much as a fit inside each).
        return DecodeHint(targetSize: hints.compactMap { $0 }.reduce(first) {
            PixelSize(width: max($0.width, $1.width), height: max($0.height, $1.height))
        }, fit: firsts.allSatisfy { $0?.decodeHintFits == true }, wantsSourceFacts: wantsFacts)
    }

    /// Where outputs go, as reports show it (a directory, or the destination's URL).
    public var outputLocation: String { outputDirectory }

    /// The HTTP address of the output directory, when outputs are objects a browser may open.
    public var outputBrowserURL: String? { output.destination.browserURL("") }

    /// Whether the run only loads (`pipelinectl fetch`).
    public var isFetchOnly: Bool { fetchOnly }

    /// The pipeline's data cache, when it has one (for `pipelinectl cache`).
    public var dataCacheStage: (any DataCaching)? { dataCache }

    /// Every data cache key this pipeline uses for the list line `line`: the loaded bytes' key and
    /// each variant's encoded output key. Relative paths resolve against the working directory.
    public func dataCacheKeys(for line: String) -> [String] {
        let source = Source(text: line, index: 1)
        guard let slot = try? loader(for: source) else { return [] }
        let key = slot.loader.cacheKey(for: source)
        return [key] + variants.map { StoredOutputsStep.outputKey(key, $0, decoderIdentifier: decoderIdentifier) }
    }

    /// Whether a data cache key belongs to the source of the list line `line`: its loaded bytes, or
    /// an encoded output of it by any recipe (every variant, parameter set and format the service
    /// made). `nil` when no loader serves the line.
    public func purgeMatcher(for line: String) -> (@Sendable (String) -> Bool)? {
        let source = Source(text: line, index: 1)
        guard let slot = try? loader(for: source) else { return nil }
        let key = slot.loader.cacheKey(for: source)
        let outputs = "output:" + key + "#"
        return { $0 == key || $0.hasPrefix(outputs) }
    }

    /// Asks the run to stop gracefully: no new item starts; items in flight finish. ``run(_:settle:onItem:)``
    /// then counts the lines it did not start in ``RunSummary/notStarted`` and returns.
    public func stop() { stopRequested.withLock { $0 = true } }

    /// Stops the run and cancels the items in flight (after ``stop()``'s grace period ran out):
    /// they fail as `cancelled`, and ``run(_:settle:onItem:)`` returns at once with them counted.
    public func abort() {
        stop()
        aborted.fire()
    }

    /// Runs every source of `sources`, calling `settle` with each item's source and result when it
    /// is finished (its outputs stored, or failed: a queue acknowledges it then), then `onItem` (in
    /// completion order). Returns the counts. Throws only when the list itself cannot be read.
    public func run<S: AsyncSequence>(
        _ sources: S, settle: (@Sendable (Source, ItemResult) async -> Void)? = nil,
        onItem: @escaping @Sendable (ItemResult) async -> Void
    ) async throws -> RunSummary where S.Element == Source {
        let start = ContinuousClock.now
        let decodesBefore = making.decodes.value
        await options.events?.deliverPending()
        // Items are counted (and `onItem` called, one at a time, in completion order) by a task of
        // their own as each finishes, not when the loop below next looks: a queue's worker waiting
        // for its next message still reports and counts what finished meanwhile.
        let (finished, sink) = AsyncStream<ItemResult>.makeStream()
        let counting = Task {
            var tally = Tally(onItem: onItem)
            for await item in finished { await tally.add(item) }
            return tally
        }
        defer { sink.finish() }  // the list broke off: the counting task ends too
        var ownership: (@Sendable (Source) -> Bool)?
        if shard != nil { ownership = { [self] source in owns(source) } }
        var iterator = OwnedSources<S.AsyncIterator>(sources.makeAsyncIterator(), owns: ownership, readAhead: Self.readsAhead(sources))
        let notStarted = try await runItems(&iterator, settle: settle, sink: sink)
        let otherShards = shard == nil ? nil : iterator.skipped
        sink.finish()
        let tally = await counting.value
        var summary = tally.summary
        if let shard {
            summary.shard = shard.description
            summary.otherShards = otherShards ?? 0
        }
        summary.notStarted = notStarted
        summary.wallSeconds = (ContinuousClock.now - start).seconds
        summary.imageCacheEvictions = making.imageCache?.evictionCount
        summary.decodes = making.decodes.value - decodesBefore
        if let events = options.events {
            let counts = await events.finish()
            summary.eventsDelivered = counts.delivered
            summary.eventsPending = counts.pending
        }
        await dataCache?.recordRun(CacheUsage(counts: tally.dataCache))
        return summary
    }

    /// Starts an item for each source `iterator` gives, at most ``maxInFlight`` at once, each
    /// yielded to `sink` as it ends, until the list ends; after ``stop()`` reads the rest without
    /// starting it and returns how many lines that was. ``abort()`` cancels the items in flight.
    private func runItems<I: AsyncIteratorProtocol>(_ iterator: inout OwnedSources<I>,
                                                    settle: (@Sendable (Source, ItemResult) async -> Void)?,
                                                    sink: AsyncStream<ItemResult>.Continuation) async throws -> Int? where I.Element == Source {
        var notStarted: Int?
        try await withThrowingTaskGroup(of: ItemResult?.self) { group in
            // The one child that is not an item: it returns when the run is aborted (``abort()``),
            // and is cancelled when the items are done.
            group.addTask { [aborted] in
                await aborted.wait()
                return nil
            }
            var inFlight = 0
            /// Takes one finished child: an item is counted; the abort cancels the items in flight.
            func take(_ done: ItemResult??) async {
                guard let done else { return }
                if done != nil {
                    inFlight -= 1
                } else {
                    group.cancelAll()
                }
            }
            while let source = try await iterator.next() {
                if stopRequested.withLock({ $0 }) {
                    notStarted = 1
                    while let _ = try await iterator.next() { notStarted! += 1 }
                    break
                }
                while inFlight >= maxInFlight { await take(try await group.next()) }  // grows as loaders are built
                group.addTask {
                    let item = await self.runItem(source, settle: settle)
                    sink.yield(item)
                    return item
                }
                inFlight += 1
            }
            while inFlight > 0 { await take(try await group.next()) }
            group.cancelAll()
        }
        return notStarted
    }

    /// Reading ahead is for a list in a file; lines on standard input or from a queue may come
    /// slowly, and each starts as soon as it comes.
    static func readsAhead<S: AsyncSequence>(_ sources: S) -> Bool {
        (sources as? SourceList)?.readsAhead ?? (sources as? SourceCursorSequence)?.readsAhead
            ?? (sources as? SourceList.Reader)?.isFile ?? false
    }

    /// One item, then its settling with the list it came from (a queue's acknowledgement).
    func runItem(_ source: Source, settle: (@Sendable (Source, ItemResult) async -> Void)?) async -> ItemResult {
        var result = await runItem(source)
        if let purge = options.purgeReplaced, !result.replaced.isEmpty, result.status == .ok { result.purge = await purge(source, result) }
        if let events = options.events { result.event = await events.announce(result, pipeline: pipeline.name, source: source) }
        await settle?(source, result)
        return result
    }

    /// The run's counts as items finish, added one at a time by one task.
    private struct Tally {
        let onItem: @Sendable (ItemResult) async -> Void
        var summary = RunSummary()
        var dataCache = RunStatistics.CacheCounts()

        mutating func add(_ item: ItemResult) async {
            summary.add(item)
            dataCache.add(item.cacheData)
            await onItem(item)
        }
    }

    /// The loader serving `source`, built now if needed; `nil` when none serves its scheme.
    func loader(for source: Source) throws -> LoaderSlot? { try loaders.slot(for: source) }

    /// Items in flight: `--max-in-flight` when set, else enough to keep every load slot and two
    /// jobs per worker busy, no more. A decoded image exists only inside a worker's job, so this
    /// bounds compressed bytes, not pixels.
    var maxInFlight: Int { options.maxInFlight ?? (loaders.largestLimit + 2 * max(1, options.workers)) }

    // What the command asked for, as the steps read it (``RunOptions``).
    var logger: Logger { options.logger }
    var fetchOnly: Bool { options.fetchOnly }
    var resume: Bool { options.resume }
    var shard: Shard? { options.shard }
    var dedupeUnversioned: Bool { options.dedupeUnversioned }
    /// Each item's time limit (``RunOptions/itemTimeout``), for each caller waiting on it.
    package var itemTimeout: Double? { options.itemTimeout }

    /// The sources a shard owns. With `readAhead`, in batches: while one batch is hashed on another
    /// thread, the next is read, so that skipping other shards' lines uses both cores. Without a
    /// shard (`owns` nil) it passes every source through as it is read.
    struct OwnedSources<Base: AsyncIteratorProtocol> where Base.Element == Source {
        static var batchSize: Int { 2048 }
        var base: Base
        let owns: (@Sendable (Source) -> Bool)?
        /// Lines read and found to be other shards'.
        private(set) var skipped = 0
        private var ready: [Source] = []
        private var readyHead = 0
        private var pending: Task<[Source], Never>?
        private var pendingCount = 0
        private var exhausted = false
        let readAhead: Bool

        init(_ base: Base, owns: (@Sendable (Source) -> Bool)?, readAhead: Bool) {
            self.base = base
            self.owns = owns
            self.readAhead = readAhead
        }

        mutating func next() async throws -> Source? {
            guard let owns else { return try await base.next() }
            guard readAhead else {
                while let source = try await base.next() {
                    if owns(source) { return source }
                    skipped += 1
                }
                return nil
            }
            while true {
                if readyHead < ready.count {
                    readyHead += 1
                    return ready[readyHead - 1]
                }
                var batch: [Source] = []
                while !exhausted, batch.count < Self.batchSize {
                    guard let source = try await base.next() else { exhausted = true; break }
                    batch.append(source)
                }
                guard let previous = pending else {
                    guard !batch.isEmpty else { return nil }
                    pendingCount = batch.count
                    pending = Task { [batch] in batch.filter(owns) }
                    continue
                }
                ready = await previous.value
                readyHead = 0
                skipped += pendingCount - ready.count
                pendingCount = batch.count
                pending = batch.isEmpty ? nil : Task { [batch] in batch.filter(owns) }
            }
        }
    }

    /// Whether `source` is this run's: always without a shard; else by its cache key (its text
    /// when no loader serves it, so that the failure is reported by exactly one shard).
    func owns(_ source: Source) -> Bool {
        guard let shard else { return true }
        return shard.owns(key: (try? loader(for: source))??.loader.cacheKey(for: source) ?? source.text)
    }

}

extension Duration {
    /// The duration in seconds, as a `Double` (for timings, limits and logs).
    public var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
    var milliseconds: Double { (seconds * 1000 * 1000).rounded() / 1000 }
}
