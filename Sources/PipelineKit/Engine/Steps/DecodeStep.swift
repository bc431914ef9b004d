import Foundation
import Synchronization
import Tracing

/// Step "decode and process": the final image of every variant, from the image cache, or by
/// decoding once and running each variant's chain, computing the prefixes chains share only once.
///
/// A decode first asks the decoder to read the header (``ImageDecoding/prepare(_:hint:)``), then
/// waits for its estimated memory in the decode budget, then decodes and runs the chains in one job
/// on a CPU worker: a full-size decoded image never waits in a queue. Items that received one
/// shared load decode once, with the hint that covers them all (``SharedDecodes``).
///
/// Takes a ``LoadedSource`` (or loads it through the closure it is given, only on a cache miss);
/// returns ``ProcessedImages``. A failure is `decode_failed` at `decode`, or `process_failed` at
/// `process` naming the processor and the variant.
struct DecodeStep: Sendable {
    /// Where the decode's and each processor's spans go.
    let spans: EngineSpans
    let decoder: any ImageDecoding
    let decoderName: String
    /// Identifies the decoder and its options (and what outputs keep of the metadata) in keys.
    let decoderIdentifier: String
    /// What one decode must keep for every variant (the largest target, the facts asked for).
    let hint: DecodeHint
    let variants: [RunnableVariant]
    let imageCache: (any ImageCaching)?
    let cpu: WorkerPool
    let budget: MemoryBudget
    /// Decodes this step ran (each image decoded, not those shared or taken from a cache).
    let decodes = DecodeCounter()

    /// What the chains' processors need besides their images, at most (``ImageProcessing/workingMemory``),
    /// reserved with each decode.
    var workingMemory: Int { variants.flatMap(\.processors).map(\.workingMemory).max() ?? 0 }

    /// What this step's items decode, noted with their loads: items of runners with the same
    /// decoder and options decode together.
    var need: SharedDecodes.Need {
        SharedDecodes.Need(group: decoderIdentifier + (hint.wantsSourceFacts ? "+facts" : ""), hint: hint)
    }

    /// The images of the `needed` variants: from the image cache, or decoded and processed.
    func images(_ plan: ItemPlan, needed: [Int], preloaded: LoadedSource?, digest: String?,
                tracker: StageTracker, load: () async throws -> LoadedSource) async throws -> ProcessedImages {
        // With the source's version: a replaced file is never answered with the old one's image.
        let base = plan.workKey + "#" + decoderIdentifier
        var images: [Int: PipelineImage] = [:]
        for index in needed { images[index] = imageCache?.image(for: base + variants[index].prefixIDs.last!) }
        if images.count == needed.count, let identity = preloaded.map({ OutputFingerprint.source($0.data, digest: digest) })
            ?? images.values.first?.sourceIdentity {
            return ProcessedImages(images: images, loaded: preloaded, cacheImage: imageCache == nil ? .off : .hit,
                                   timings: StageTimings(load: preloaded?.milliseconds ?? 0), sourceIdentity: identity)
        }
        let loaded = if let preloaded { preloaded } else { try await load() }
        let identity = OutputFingerprint.source(loaded.data, digest: digest)
        let pending = needed.filter { images[$0] == nil }
        let job = try await decodeAndProcess(loaded.data, identity: identity, pending: pending, decodes: loaded.decodes, tracker: tracker)
        for (index, image) in job.finished {
            images[index] = image
            if job.degraded == nil { imageCache?.store(image, for: base + variants[index].prefixIDs.last!) }
        }
        // Prefixes that more than one variant starts from are worth keeping for the next duplicate.
        var uses: [String: Int] = [:]
        for variant in variants { for id in Set(variant.prefixIDs) { uses[id, default: 0] += 1 } }
        for (id, image) in job.prefixes where uses[id, default: 0] > 1 && !id.isEmpty && job.degraded == nil {
            imageCache?.store(image, for: base + id)
        }
        var kept = loaded
        kept.decodes = nil  // not held while encoding: the decoded image goes once every item of the load has it
        return ProcessedImages(images: images, loaded: kept, cacheImage: imageCache == nil ? .off : .miss,
                               timings: StageTimings(load: loaded.milliseconds, decode: job.decode, process: job.process),
                               degraded: job.degraded, decodeShared: job.decodeShared, sourceIdentity: identity)
    }

    /// What one decode-and-process job made.
    struct ChainsJob: Sendable {
        var finished: [Int: PipelineImage] = [:]
        /// Every intermediate image, by chain prefix identifier.
        var prefixes: [String: PipelineImage] = [:]
        var decode: Double = 0
        var process: Double = 0
        /// Why the decode was degraded, when it was.
        var degraded: String?
        /// Whether the decoded image was another item's (``SharedDecodes``).
        var decodeShared = false
    }

    /// Decodes `data` and runs the `pending` variants' chains in one job on one worker, holding the
    /// decode's share of the memory budget: a full-size decoded image never waits in a queue, so
    /// pixel memory is bounded by the number of workers, not of items in flight.
    /// `identity` (``OutputFingerprint/source``) is set on the decoded image, and so on every image made from it.
    ///
    /// Items that received one shared load (`decodes`) decode once, with the hint that covers them
    /// all; those that did not decode wait for that image and run only their chains on it.
    func decodeAndProcess(_ data: LoadedData, identity: String, pending: [Int], decodes: SharedDecodes? = nil,
                          tracker: StageTracker) async throws -> ChainsJob {
        let data = try await forDecoder(data)
        guard let decodes else { return try await decodeOwn(data, hint: self.hint, identity: identity, pending: pending, tracker: tracker) }
        let hint = decodes.hint(for: need)
        let start = ContinuousClock.now
        let began = DefaultTracerClock.now
        let parent = ServiceContext.current ?? .topLevel
        var arriving = true
        while true {
            let shared: DecodedImage
            defer { arriving = false }
            switch decodes.turn(need.group, arriving: arriving) {
            case .decode(let decode):
                defer { decodes.close(decode) }
                return try await decodeOwn(data, hint: hint, identity: identity, pending: pending, tracker: tracker) {
                    decodes.publish(decode, $0)
                }
            case .done(let result):
                tracker.enter(.decode)
                shared = try result.get()
            case .join(let decode):
                tracker.enter(.decode)
                do { shared = try await decodes.image(of: decode) } catch is SharedDecodes.OwnerLeft { continue }
            }
            let waited = (ContinuousClock.now - start).milliseconds
            // The decode was another item's: this item's span links to it (not its child).
            let span = spans.start("decode", context: parent, at: began)
            if span.isRecording {
                if let owner = shared.trace { span.addLink(SpanLink(context: owner, attributes: ["pipelinectl.decode.shared": true])) }
                span.updateAttributes { attributes in
                    attributes["pipelinectl.decode.shared"] = true
                    Self.describe(shared.image, in: &attributes)
                }
            }
            span.end()
            var job = try await cpu.inItemContext { [self] in try chains(shared.image, pending: pending, tracker: tracker, context: parent) }
            job.decode = waited
            job.decodeShared = true
            return job
        }
    }

    /// `data` as the decoder takes it: a file the loader left open, for a decoder that takes
    /// bytes, read whole.
    /// A body read by range, for a decoder that does not read ranges, is fetched whole.
    func forDecoder(_ data: LoadedData) async throws -> LoadedData {
        guard (data.file != nil && !decoder.readsLocalFiles) || (data.ranged != nil && !decoder.readsRanges) else { return data }
        do { return try await data.readWhole() } catch {
            throw StepFailure.classify(error, stage: .load, kind: .io, plugin: nil)
        }
    }

    /// Decodes under `hint`: the memory it needs, then one job that decodes, hands the image (or
    /// the failure) to `publish` for the items waiting for it, and runs this item's chains.
    func decodeOwn(_ data: LoadedData, hint: DecodeHint, identity: String, pending: [Int], tracker: StageTracker,
                   publish: @escaping @Sendable (Result<DecodedImage, any Error>) -> Void = { _ in }) async throws -> ChainsJob {
        // The format and header are read once; the memory asked for and the decode both follow.
        let prepared: PreparedDecode
        do { prepared = try await preparing(data, hint: hint) } catch {
            tracker.enter(.decode)
            let failure = StepFailure.classify(error, stage: .decode, kind: .decodeFailed, plugin: decoderName)
            publish(.failure(failure))
            throw failure
        }
        let bytes = (prepared.estimatedMemory ?? 0) + workingMemory
        let parent = ServiceContext.current ?? .topLevel
        try await waitingTurn { try await budget.acquire(bytes) }
        let reservation = DecodeReservation(budget, bytes: bytes)
        defer { reservation.releaseUnlessHeld() }  // the image, when made, holds it instead
        let decoderName = self.decoderName
        return try await cpu.inItemContext(priority: JobPriority.decode(data)) { [self] in
            tracker.enter(.decode)  // here, not when queued: waiting for a worker is not decoding
            let start = ContinuousClock.now
            let span = spans.start("decode", context: parent)
            var decoded: PipelineImage
            decodes.add()
            do { decoded = try prepared.decode() } catch {
                let failure = StepFailure.classify(error, stage: .decode, kind: .decodeFailed, plugin: decoderName)
                EngineSpans.fail(span, failure)
                span.end()
                publish(.failure(failure))
                throw failure
            }
            if span.isRecording {
                span.updateAttributes { attributes in
                    attributes["pipelinectl.decoder"] = decoderName
                    Self.describe(decoded, in: &attributes)
                }
            }
            decoded.sourceIdentity = identity
            if hint.wantsSourceBytes { decoded.sourceBytes = Self.untouchedSource(decoded, data) }
            let shared = DecodedImage(decoded, milliseconds: (ContinuousClock.now - start).milliseconds, holding: reservation,
                                      trace: span.context)
            publish(.success(shared))
            span.end()
            var job = try chains(shared.image, pending: pending, tracker: tracker, context: parent)
            job.decode = shared.milliseconds
            return job
        }
    }

    /// The decoder's ``ImageDecoding/prepare(_:hint:)``: on an I/O thread for a body read by
    /// range, whose header may take several fetches (a Swift concurrency thread is never held
    /// waiting on the network).
    func preparing(_ data: LoadedData, hint: DecodeHint) async throws -> PreparedDecode {
        guard data.ranged != nil else { return try decoder.prepare(data, hint: hint) }
        let decoder = self.decoder
        return try await WorkerPool.io.run { try decoder.prepare(data, hint: hint) }
    }

    /// The bytes `image` was decoded from, when its pixels are all of them: one frame, at the
    /// size the header gives (turned upright or not), nothing damaged, and in memory (a file the
    /// loader left open, above its `in_place_above`, is not read whole for this: it may be a video
    /// whose image is one frame).
    static func untouchedSource(_ image: PipelineImage, _ data: LoadedData) -> Data? {
        guard !data.isPartial, image.degraded == nil, image.frameCount == 1, let source = image.sourceSize,
              image.size == source || image.size == PixelSize(width: source.height, height: source.width) else { return nil }
        return try? data.wholeData()
    }

    /// What a decode span says of the image: the source's format, its size, the decoded size
    /// (smaller when reduced on load), frames, and why it was degraded.
    /// Set in one update: each attribute set alone copies the span's attributes under its lock.
    static func describe(_ image: PipelineImage, in attributes: inout SpanAttributes) {
        attributes["pipelinectl.image.format"] = image.sourceFormat
        if let source = image.sourceSize {
            attributes["pipelinectl.image.width"] = source.width
            attributes["pipelinectl.image.height"] = source.height
        }
        attributes["pipelinectl.decode.width"] = image.width
        attributes["pipelinectl.decode.height"] = image.height
        if image.frameCount > 1 { attributes["pipelinectl.image.frames"] = image.frameCount }
        if let degraded = image.degraded { attributes["pipelinectl.decode.degraded"] = degraded }
    }

    /// The `pending` variants' chains from `decoded` (on a worker), each processor in a span under
    /// `context` (the item's).
    func chains(_ decoded: PipelineImage, pending: [Int], tracker: StageTracker, context: ServiceContext = .topLevel) throws -> ChainsJob {
        var job = ChainsJob(degraded: decoded.degraded)
        tracker.enter(.process)
        let processStart = ContinuousClock.now
        job.prefixes = ["": decoded]
        for index in pending { job.finished[index] = try runChain(variants[index], prefixes: &job.prefixes, context: context) }
        job.prefixes[""] = nil  // the full-size decode is not kept
        job.process = variants.contains { !$0.processors.isEmpty } ? (ContinuousClock.now - processStart).milliseconds : 0
        return job
    }

    /// Runs `variant`'s processors from the longest prefix already computed, recording each new one.
    /// Each processor run is a span `process NAME` under `context`.
    func runChain(_ variant: RunnableVariant, prefixes: inout [String: PipelineImage], context: ServiceContext = .topLevel) throws -> PipelineImage {
        var step = variant.processors.count
        while prefixes[variant.prefixIDs[step]] == nil { step -= 1 }
        var image = prefixes[variant.prefixIDs[step]]!
        while step < variant.processors.count {
            let span = spans.start("process " + variant.processorNames[step], context: context)
            defer { span.end() }
            do { image = try variant.processors[step].process(image) } catch {
                let failure = StepFailure.classify(error, stage: .process, kind: .processFailed, plugin: variant.processorNames[step],
                                                   variant: variant)
                EngineSpans.fail(span, failure)
                throw failure
            }
            if span.isRecording {
                span.updateAttributes { attributes in
                    attributes["pipelinectl.processor"] = variant.processors[step].identifier
                    attributes["pipelinectl.width"] = image.width
                    attributes["pipelinectl.height"] = image.height
                }
            }
            step += 1
            prefixes[variant.prefixIDs[step]] = image
        }
        return image
    }
}

/// Counts decodes (``DecodeStep/decodes``), for the run's summary.
final class DecodeCounter: Sendable {
    private let count = Atomic(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
