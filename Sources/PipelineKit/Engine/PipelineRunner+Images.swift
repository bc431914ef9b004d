import Foundation

/// Making the outputs of one source: load once, decode once, run each variant's chain (sharing
/// the start the chains have in common), encode and write each variant.
extension PipelineRunner {
    func produce(source: Source, slot: LoaderSlot, key: String, paths: [String], tracker: StageTracker) async throws -> ItemOutcome {
        // Encoded outputs kept by the data cache (`store: processed|all`), by variant.
        let outputCache = dataCache.flatMap { $0.storesOutputs ? $0 : nil }
        var cached: [Int: CachedEntry] = [:]
        var preloaded: (LoadedData, CacheOutcome, Double)?
        if let outputCache {
            let start = ContinuousClock.now
            for (index, variant) in variants.enumerated() {
                if let entry = await outputCache.entry(for: outputKey(key, variant)), entry.output != nil { cached[index] = entry }
            }
            let digests = Set(cached.values.compactMap(\.output?.sourceDigest))
            if cached.count == variants.count, digests.count == 1 {
                switch try await reuseOutputs(cached, source: source, slot: slot, key: key, cache: outputCache) {
                case .reused(let entries):
                    let milliseconds = (ContinuousClock.now - start).milliseconds
                    return try await writeCached(entries, paths: paths, source: source, key: key, tracker: tracker,
                                                 loadMilliseconds: milliseconds)
                case .changed(let loaded):
                    cached = [:]
                    preloaded = loaded
                }
            }
        }
        var needed = Set(variants.indices)
        var digest: String?
        var loadedOutcome: (data: LoadedData, cacheData: CacheOutcome, milliseconds: Double)?
        if outputCache != nil {
            // The source's bytes decide which stored outputs are still valid: the same bytes, the
            // same chain, the same output.
            var loaded: (LoadedData, CacheOutcome, Double)
            if let preloaded { loaded = preloaded } else { loaded = try await load(source: source, slot: slot, key: key) }
            // The cache took part (for outputs) even when the loaded bytes bypass it.
            if loaded.1 == .off { loaded.1 = .miss }
            loadedOutcome = loaded
            let sourceDigest = Hashing.sha256Hex(loaded.0.data)
            digest = sourceDigest
            for (index, entry) in cached {
                if entry.output?.sourceDigest == sourceDigest {
                    needed.remove(index)
                    if !entry.isFresh { await outputCache!.refresh(outputKey(key, variants[index]), directives: loaded.0.directives) }
                } else {
                    cached[index] = nil
                }
            }
        } else {
            cached = [:]
        }
        let neededNow = needed, preloadedNow = loadedOutcome.map { ($0.data, $0.cacheData, $0.milliseconds) }
        let (made, shared) = try await imagesCoalescer.run(key + "#" + chainsIdentifier + "#" + needed.sorted().map(String.init).joined(separator: ",")) {
            try await self.makeImages(source: source, slot: slot, key: key, needed: neededNow, preloaded: preloadedNow, tracker: tracker)
        }
        tracker.enter(.encode)
        var timings = shared ? StageTimings() : made.timings
        var bytesOut = 0
        var written: [String] = []
        var size: PixelSize?
        for (index, variant) in variants.enumerated() {
            let data: Data
            var path = paths[index]
            if let entry = cached[index] {
                data = entry.data.data
                if size == nil, let output = entry.output { size = PixelSize(width: output.width, height: output.height) }
                path = outputPath(paths[index], variant, source: source, key: key, fileExtension: entry.output?.fileExtension)
            } else {
                let image = made.images[index]!
                if size == nil { size = PixelSize(width: image.width, height: image.height) }
                let encoder = variant.encoder
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
                let chosen = encoder.fileExtension(for: image)
                let fileExtension = chosen == encoder.fileExtension ? nil : chosen
                path = outputPath(paths[index], variant, source: source, key: key, fileExtension: fileExtension)
                if let outputCache, let digest, let loaded = loadedOutcome {
                    let stamp = OutputStamp(sourceDigest: digest, width: image.width, height: image.height, fileExtension: fileExtension)
                    let entry = LoadedData(data: data, contentType: nil, directives: loaded.data.directives)
                    do { try await outputCache.store(entry, for: outputKey(key, variant), output: stamp) } catch {
                        logger.warning("data cache store failed", metadata: ["key": "\(key)", "error": "\(error)"])
                    }
                }
            }
            tracker.enter(.output)
            try await writeOutput(data, to: path, variant: variant)
            bytesOut += data.count
            written.append(path)
        }
        return ItemOutcome(outputs: written, size: size ?? PixelSize(width: 0, height: 0),
                           bytesIn: shared ? 0 : made.bytesIn, bytesOut: bytesOut,
                           cacheData: shared ? (dataCache == nil ? .off : .hit) : made.cacheData,
                           cacheImage: shared ? .hit : made.cacheImage, timings: timings)
    }

    /// The data cache key of a variant's encoded output: the source's key, the decoder and its
    /// options, every processor's identifier and the encoder's. Changing any of them changes it.
    func outputKey(_ key: String, _ variant: RunnableVariant) -> String {
        "output:" + key + "#" + decoderIdentifier + variant.prefixIDs.last! + ">" + variant.encoder.identifier
    }

    enum OutputReuse {
        case reused([CachedEntry])
        /// The source changed: its new bytes.
        case changed((LoadedData, CacheOutcome, Double))
    }

    /// Every variant's output is stored for the same source bytes: uses them when fresh, or when
    /// the source answers "not modified" (or sends the same bytes again).
    func reuseOutputs(_ cached: [Int: CachedEntry], source: Source, slot: LoaderSlot, key: String,
                      cache: any DataCaching) async throws -> OutputReuse {
        let entries = variants.indices.map { cached[$0]! }
        if entries.allSatisfy(\.isFresh) { return .reused(entries) }
        let directives = entries[0].data.directives
        let answer: Revalidation
        let start = ContinuousClock.now
        do {
            answer = try await slot.limit.withPermit { try await slot.loader.revalidate(source, cached: directives) }
        } catch {
            throw classify(error, stage: .load, kind: .io, plugin: slot.name)
        }
        let current: CacheDirectives
        switch answer {
        case .notModified(let updated):
            current = updated
        case .modified(let loaded):
            let original = slot.loader.usesDataCache ? dataCache.flatMap { $0.storesOriginals ? $0 : nil } : nil
            if let original {
                do { try await original.store(loaded, for: key) } catch {
                    logger.warning("data cache store failed", metadata: ["key": "\(key)", "error": "\(error)"])
                }
            }
            guard Hashing.sha256Hex(loaded.data) == entries[0].output?.sourceDigest else {
                return .changed((loaded, original == nil ? .off : .miss, (ContinuousClock.now - start).milliseconds))
            }
            current = loaded.directives
        }
        for variant in variants { await cache.refresh(outputKey(key, variant), directives: current) }
        return .reused(entries)
    }

    /// Writes one output atomically; a failure names the variant.
    func writeOutput(_ data: Data, to path: String, variant: RunnableVariant) async throws {
        do {
            try await WorkerPool.io.run { try AtomicFile.write(data, to: path) }
        } catch {
            throw named(classify(error, stage: .output, kind: .writeFailed), variant)
        }
    }

    /// The path an output is written to: the planned one, or the same name with the extension
    /// the encoder chose from the image.
    func outputPath(_ planned: String, _ variant: RunnableVariant, source: Source, key: String, fileExtension: String?) -> String {
        guard let fileExtension else { return planned }
        return absoluteOutputPath(relativeOutputPath(variant, source: source, key: key, fileExtension: fileExtension))
    }

    /// Writes outputs that came from the data cache: nothing loaded, decoded or encoded.
    func writeCached(_ entries: [CachedEntry], paths: [String], source: Source, key: String, tracker: StageTracker,
                     loadMilliseconds: Double) async throws -> ItemOutcome {
        tracker.enter(.output)
        var bytesOut = 0
        var written: [String] = []
        for (index, entry) in entries.enumerated() {
            let path = outputPath(paths[index], variants[index], source: source, key: key, fileExtension: entry.output?.fileExtension)
            try await writeOutput(entry.data.data, to: path, variant: variants[index])
            bytesOut += entry.data.data.count
            written.append(path)
        }
        var timings = StageTimings()
        timings.load = loadMilliseconds
        let size = entries[0].output.map { PixelSize(width: $0.width, height: $0.height) } ?? PixelSize(width: 0, height: 0)
        return ItemOutcome(outputs: written, size: size, bytesIn: 0, bytesOut: bytesOut, cacheData: .processedHit,
                           cacheImage: .off, timings: timings)
    }

    /// The final image of every variant: from the image cache, or by loading and decoding once and
    /// running each chain, computing the prefixes that chains share only once.
    func makeImages(source: Source, slot: LoaderSlot, key: String, needed: Set<Int>,
                    preloaded: (LoadedData, CacheOutcome, Double)?, tracker: StageTracker) async throws -> ImagesOutcome {
        let base = key + "#" + decoderIdentifier
        var images: [PipelineImage?] = variants.indices.map { needed.contains($0) ? imageCache?.image(for: base + self.variants[$0].prefixIDs.last!) : nil }
        if needed.allSatisfy({ images[$0] != nil }) {
            return ImagesOutcome(images: images, bytesIn: preloaded?.0.data.count ?? 0, cacheData: preloaded?.1 ?? .off,
                                 cacheImage: imageCache == nil ? .off : .hit,
                                 timings: StageTimings(load: preloaded?.2 ?? 0))
        }
        var timings = StageTimings()
        let (loaded, cacheData, loadMilliseconds): (LoadedData, CacheOutcome, Double)
        if let preloaded { (loaded, cacheData, loadMilliseconds) = preloaded } else {
            (loaded, cacheData, loadMilliseconds) = try await load(source: source, slot: slot, key: key)
        }
        timings.load = loadMilliseconds
        // Decode and process are one job on one worker: a full-size decoded image never waits in
        // a queue, so pixel memory is bounded by the number of workers, not of items in flight.
        let decoder = self.decoder
        let hint = decodeHint
        var counts: [String: Int] = [:]
        for variant in variants { for id in Set(variant.prefixIDs) { counts[id, default: 0] += 1 } }
        let pending = needed.sorted().filter { images[$0] == nil }
        let variants = self.variants
        let decoderName = pipeline.decoder.plugin.spec.name
        let context = StageContext.current
        let budget = decoder.estimatedMemory(loaded, hint: hint) ?? 0
        await decodeBudget.acquire(budget)
        defer { decodeBudget.release(budget) }
        let job = try await cpu.run { () throws -> (finished: [Int: PipelineImage], memo: [String: PipelineImage], decode: Double, process: Double) in
            try StageContext.withThreadValue(context) {
                tracker.enter(.decode)  // here, not when queued: waiting for a worker is not decoding
                let decodeStart = ContinuousClock.now
                let decoded: PipelineImage
                do {
                    decoded = try decoder.decode(loaded, hint: hint)
                } catch {
                    throw Self.classifyStatic(error, stage: .decode, kind: .decodeFailed, plugin: decoderName)
                }
                let decodeTime = (ContinuousClock.now - decodeStart).milliseconds
                tracker.enter(.process)
                let processStart = ContinuousClock.now
                var memo: [String: PipelineImage] = ["": decoded]
                var finished: [Int: PipelineImage] = [:]
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
        return ImagesOutcome(images: images, bytesIn: loaded.data.count, cacheData: cacheData,
                             cacheImage: imageCache == nil ? .off : .miss, timings: timings)
    }

    /// Bytes for `key`: from the data cache when fresh, revalidated through the loader when stale,
    /// or from the loader (once for concurrent callers).
    func load(source: Source, slot: LoaderSlot, key: String) async throws -> (LoadedData, CacheOutcome, Double) {
        let start = ContinuousClock.now
        let cache = slot.loader.usesDataCache ? dataCache.flatMap { $0.storesOriginals ? $0 : nil } : nil
        var found: CachedEntry?
        if let cache, let entry = await cache.entry(for: key) {
            if entry.isFresh { return (entry.data, .hit, (ContinuousClock.now - start).milliseconds) }
            found = entry
        }
        let stale = found
        let logger = self.logger
        do {
            let (outcome, shared) = try await loadCoalescer.run(key) {
                // Timed inside the permit: waiting for a load slot is not loading.
                let (answer, elapsed) = try await slot.limit.withPermit {
                    let begin = ContinuousClock.now
                    let answer: Revalidation = if let stale {
                        try await slot.loader.revalidate(source, cached: stale.data.directives)
                    } else {
                        .modified(try await slot.loader.load(source))
                    }
                    return (answer, (ContinuousClock.now - begin).milliseconds)
                }
                switch answer {
                case .notModified(let directives):
                    await cache?.refresh(key, directives: directives)
                    var data = stale!.data
                    data.directives = directives
                    return LoadOutcome(data: data, milliseconds: elapsed, cacheData: .revalidated)
                case .modified(let data):
                    if let cache {
                        do { try await cache.store(data, for: key) } catch {
                            logger.warning("data cache store failed", metadata: ["key": "\(key)", "error": "\(error)"])
                        }
                    }
                    return LoadOutcome(data: data, milliseconds: elapsed, cacheData: cache == nil ? .off : .miss)
                }
            }
            let status: CacheOutcome = cache == nil ? .off : (shared ? .hit : outcome.cacheData)
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
