import Foundation

/// Making the outputs of one source: load once, decode once, run each variant's chain (sharing
/// the start the chains have in common), encode and write each variant.
extension PipelineRunner {
    func produce(source: Source, slot: LoaderSlot, key: String, paths: [String], tracker: StageTracker) async throws -> ItemOutcome {
        let (made, shared) = try await imagesCoalescer.run(key + "#" + chainsIdentifier) {
            try await self.makeImages(source: source, slot: slot, key: key, tracker: tracker)
        }
        tracker.enter(.encode)
        var timings = shared ? StageTimings() : made.timings
        var bytesOut = 0
        var written: [String] = []
        for (index, variant) in variants.enumerated() {
            let image = made.images[index]
            let encoder = variant.encoder
            let data: Data
            let milliseconds: Double
            do {
                // Timed inside the job: waiting for a free worker is not encoding.
                let context = StageContext.current
                (data, milliseconds) = try await cpu.run {
                    try StageContext.withThreadValue(context) {
                        let start = ContinuousClock.now
                        let data = try encoder.encode(image)
                        return (data, (ContinuousClock.now - start).milliseconds)
                    }
                }
            } catch {
                throw named(classify(error, stage: .encode, kind: .encodeFailed, plugin: variant.encoderName), variant)
            }
            timings.encode += milliseconds
            let path = paths[index]
            tracker.enter(.output)
            do {
                try await WorkerPool.io.run { try AtomicFile.write(data, to: path) }
            } catch {
                throw named(classify(error, stage: .output, kind: .writeFailed), variant)
            }
            bytesOut += data.count
            written.append(path)
        }
        let first = made.images[0]
        return ItemOutcome(outputs: written, size: PixelSize(width: first.width, height: first.height),
                           bytesIn: shared ? 0 : made.bytesIn, bytesOut: bytesOut,
                           cacheData: shared ? (dataCache == nil ? .off : .hit) : made.cacheData,
                           cacheImage: shared ? .hit : made.cacheImage, timings: timings)
    }

    /// The final image of every variant: from the image cache, or by loading and decoding once and
    /// running each chain, computing the prefixes that chains share only once.
    func makeImages(source: Source, slot: LoaderSlot, key: String, tracker: StageTracker) async throws -> ImagesOutcome {
        let base = key + "#" + decoderIdentifier
        var images: [Image?] = variants.map { imageCache?.image(for: base + $0.prefixIDs.last!) }
        if images.allSatisfy({ $0 != nil }) {
            return ImagesOutcome(images: images.map { $0! }, bytesIn: 0, cacheData: .off,
                                 cacheImage: imageCache == nil ? .off : .hit, timings: StageTimings())
        }
        var timings = StageTimings()
        let (loaded, cacheData, loadMilliseconds) = try await load(source: source, slot: slot, key: key)
        timings.load = loadMilliseconds
        // Decode and process are one job on one worker: a full-size decoded image never waits in
        // a queue, so pixel memory is bounded by the number of workers, not of items in flight.
        let decoder = self.decoder
        let hint = decodeHint
        var counts: [String: Int] = [:]
        for variant in variants { for id in Set(variant.prefixIDs) { counts[id, default: 0] += 1 } }
        let pending = variants.enumerated().filter { images[$0.offset] == nil }.map(\.offset)
        let variants = self.variants
        let decoderName = pipeline.decoder.plugin.spec.name
        let context = StageContext.current
        let job = try await cpu.run { () throws -> (finished: [Int: Image], memo: [String: Image], decode: Double, process: Double) in
            try StageContext.withThreadValue(context) {
                tracker.enter(.decode)  // here, not when queued: waiting for a worker is not decoding
                let decodeStart = ContinuousClock.now
                let decoded: Image
                do {
                    decoded = try decoder.decode(loaded, hint: hint)
                } catch {
                    throw Self.classifyStatic(error, stage: .decode, kind: .decodeFailed, plugin: decoderName)
                }
                let decodeTime = (ContinuousClock.now - decodeStart).milliseconds
                tracker.enter(.process)
                let processStart = ContinuousClock.now
                var memo: [String: Image] = ["": decoded]
                var finished: [Int: Image] = [:]
                for index in pending {
                    let variant = variants[index]
                    // Start from the longest prefix already computed for this source.
                    var step = variant.processors.count
                    while memo[variant.prefixIDs[step]] == nil { step -= 1 }
                    var image = memo[variant.prefixIDs[step]]!
                    while step < variant.processors.count {
                        do {
                            image = try variant.processors[step].process(image)
                        } catch {
                            throw Self.named(Self.classifyStatic(error, stage: .process, kind: .processFailed,
                                                                 plugin: variant.processorNames[step]), variant)
                        }
                        step += 1
                        memo[variant.prefixIDs[step]] = image
                    }
                    finished[index] = image
                }
                memo[""] = nil  // the full-size decode is not kept
                let processTime = variants.contains { !$0.processors.isEmpty } ? (ContinuousClock.now - processStart).milliseconds : 0
                return (finished, memo, decodeTime, processTime)
            }
        }
        timings.decode = job.decode
        timings.process = job.process
        let finished = job.finished, memo = job.memo
        for (index, image) in finished {
            images[index] = image
            imageCache?.store(image, for: base + variants[index].prefixIDs.last!)
        }
        for (id, image) in memo where counts[id, default: 0] > 1 && !id.isEmpty {
            imageCache?.store(image, for: base + id)
        }
        return ImagesOutcome(images: images.map { $0! }, bytesIn: loaded.data.count, cacheData: cacheData,
                             cacheImage: imageCache == nil ? .off : .miss, timings: timings)
    }

    /// Bytes for `key`: from the data cache, or from the loader (once for concurrent callers).
    func load(source: Source, slot: LoaderSlot, key: String) async throws -> (LoadedData, CacheOutcome, Double) {
        let start = ContinuousClock.now
        let cache = slot.loader.usesDataCache ? dataCache : nil
        if let cache, let hit = await cache.data(for: key) {
            return (hit, .hit, (ContinuousClock.now - start).milliseconds)
        }
        let logger = self.logger
        do {
            let (outcome, shared) = try await loadCoalescer.run(key) {
                // Timed inside the permit: waiting for a load slot is not loading.
                let (data, elapsed) = try await slot.limit.withPermit {
                    let begin = ContinuousClock.now
                    let data = try await slot.loader.load(source)
                    return (data, (ContinuousClock.now - begin).milliseconds)
                }
                if let cache {
                    do { try await cache.store(data, for: key) } catch {
                        logger.warning("data cache store failed", metadata: ["key": "\(key)", "error": "\(error)"])
                    }
                }
                return LoadOutcome(data: data, milliseconds: elapsed)
            }
            let status: CacheOutcome = cache == nil ? .off : (shared ? .hit : .miss)
            return (outcome.data, status, shared ? 0 : outcome.milliseconds)
        } catch {
            throw classify(error, stage: .load, kind: .io, plugin: slot.name)
        }
    }

    /// Prefixes a failure's message with the variant it happened in.
    static func named(_ error: PipelineError, _ variant: RunnableVariant) -> PipelineError {
        guard let name = variant.name else { return error }
        var copy = error
        copy.message = "variant '\(name)': " + error.message
        return copy
    }

    func named(_ error: PipelineError, _ variant: RunnableVariant) -> PipelineError { Self.named(error, variant) }
}
