import Foundation

/// Step "stored outputs": with `store: processed|all`, the data cache keeps each variant's encoded
/// output stamped with the digest of the source bytes it was made from. An output is reused only
/// for the very same bytes, the same chain and encoder: when fresh, or when the source answers
/// "not modified" (or sends the same bytes again).
extension PipelineRunner {
    /// The data cache, when it keeps encoded outputs.
    var outputsCache: (any DataCaching)? { dataCache.flatMap { $0.storesOutputs ? $0 : nil } }

    /// The data cache key of a variant's encoded output: the source's key, the decoder and its
    /// options, every processor's identifier and the encoder's. Changing any of them changes it.
    func outputKey(_ key: String, _ variant: RunnableVariant) -> String {
        "output:" + key + "#" + decoderIdentifier + variant.prefixIDs.last! + ">" + variant.encoder.identifier
    }

    /// The outputs stored for this source that are still valid; loads the source when that is what
    /// it takes to know.
    func storedOutputs(_ plan: ItemPlan) async throws -> StoredOutputs {
        guard let cache = outputsCache else { return StoredOutputs() }
        let start = ContinuousClock.now
        let entries = await storedEntries(plan, in: cache)
        var preloaded: LoadedSource?
        if Self.coverEveryVariant(entries, variants.count) {
            switch try await revalidate(entries, plan, cache) {
            case .unchanged:
                return StoredOutputs(entries: entries, milliseconds: (ContinuousClock.now - start).milliseconds)
            case .changed(let loaded):
                preloaded = loaded
            }
        }
        var loaded = if let preloaded { preloaded } else { try await load(plan) }
        if loaded.cache == .off { loaded.cache = .miss }  // the cache took part, for outputs
        let digest = try await loaded.data.readBodyDigest()
        var valid: [Int: CachedEntry] = [:]
        for (index, entry) in entries where entry.output?.sourceDigest == digest {
            valid[index] = entry
            if !entry.isFresh { await cache.refresh(outputKey(plan.key, variants[index]), directives: loaded.data.directives) }
        }
        return StoredOutputs(entries: valid, loaded: loaded, digest: digest)
    }

    /// The item's result made only of outputs the data cache holds fresh for every variant (all
    /// from the same source bytes): written to the destination without loading, revalidating,
    /// decoding or waiting for a worker. `nil` when any output is missing or due for revalidation,
    /// or when anything fails: then run the item (``runItem(_:)``), which checks again.
    ///
    /// For a service, this is a stored result answered at once, outside the job limit.
    public func storedResult(_ source: Source) async -> ItemResult? {
        await stored(source, delivery: .store)?.result
    }

    /// ``storedResult(_:)`` with the outputs going to `delivery`'s sink (values for a service).
    public func stored(_ source: Source, delivery: OutputDelivery) async -> ProcessedItem? {
        guard !fetchOnly, delivery != .factsOnly, let cache = outputsCache else { return nil }
        let start = ContinuousClock.now
        guard let plan = try? makePlan(source, delivery: delivery) else { return nil }
        let entries = await storedEntries(plan, in: cache)
        guard Self.coverEveryVariant(entries, variants.count), entries.values.allSatisfy(\.isFresh) else { return nil }
        let context = StageContext(source: source, cacheKey: plan.key, logger: logger)
        let stored = StoredOutputs(entries: entries, milliseconds: (ContinuousClock.now - start).milliseconds)
        guard let outcome = try? await StageContext.$taskValue.withValue(context, operation: {
            try await self.writeStored(stored, plan, tracker: StageTracker())
        }) else { return nil }
        if delivery == .store { output.recordCompleted(outcome) }
        var item = ProcessedItem(result: ItemResult(source: source.text, index: source.index, status: .failed))
        fill(&item, with: outcome, reused: false)
        return item
    }

    /// The data cache's entries holding an encoded output for this source, by variant index.
    func storedEntries(_ plan: ItemPlan, in cache: any DataCaching) async -> [Int: CachedEntry] {
        var entries: [Int: CachedEntry] = [:]
        for (index, variant) in variants.enumerated() {
            if let entry = await cachedEntry(outputKey(plan.key, variant), in: cache), entry.output != nil { entries[index] = entry }
        }
        return entries
    }

    /// Whether `entries` hold every variant's output, all made from the same source bytes.
    static func coverEveryVariant(_ entries: [Int: CachedEntry], _ count: Int) -> Bool {
        entries.count == count && Set(entries.values.compactMap(\.output?.sourceDigest)).count == 1
    }

    enum StoredCheck {
        case unchanged
        /// The source changed: its new bytes.
        case changed(LoadedSource)
    }

    /// Every variant's output is stored for the same source bytes: are they still current?
    func revalidate(_ entries: [Int: CachedEntry], _ plan: ItemPlan, _ cache: any DataCaching) async throws -> StoredCheck {
        if entries.values.allSatisfy(\.isFresh) { return .unchanged }
        let first = entries[0]!
        let answer: Revalidation, milliseconds: Double
        do {
            (answer, milliseconds) = try await withLoadSlot(plan.slot) {
                try await plan.slot.loader.revalidate(plan.source, cached: first.data.directives)
            }
        } catch {
            throw classify(error, stage: .load, kind: .io, plugin: plan.slot.name)
        }
        var current: CacheDirectives
        switch answer {
        case .notModified(let updated):
            current = updated
        case .modified(let data):
            let originals = originalsCache(plan.slot)
            if let originals { await storeQuietly(data, for: plan.key, in: originals) }
            guard try await data.readBodyDigest() == first.output?.sourceDigest else {
                return .changed(LoadedSource(data: data, cache: originals == nil ? .off : .miss, milliseconds: milliseconds))
            }
            current = data.directives
        }
        for variant in variants { await cache.refresh(outputKey(plan.key, variant), directives: current) }
        return .unchanged
    }

    /// A stored output as if just encoded, with what its encoder chose as its stamp recorded it.
    static func storedOutput(_ entry: CachedEntry) -> EncodedOutput {
        EncodedOutput(data: entry.data.data, chosenExtension: entry.output?.fileExtension,
                      size: PixelSize(width: entry.output?.width ?? 0, height: entry.output?.height ?? 0),
                      encoding: storedEncoding(entry.output?.facts).encoding)
    }

    /// Writes outputs that all came from the data cache: nothing loaded, decoded or encoded.
    func writeStored(_ stored: StoredOutputs, _ plan: ItemPlan, tracker: StageTracker) async throws -> ItemOutcome {
        tracker.enter(.output)
        var outcome = ItemOutcome(planned: plan.planned, cacheData: .processedHit)
        outcome.delivery = plan.delivery
        // The source as the entries recorded it: the validator it had, else the digest of its bytes.
        let first = stored.entries[0]!
        outcome.sourceIdentity = OutputFingerprint.source(first.data, digest: first.output?.sourceDigest ?? stored.digest)
        for index in variants.indices {
            let entry = stored.entries[index]!
            outcome.facts.merge(Self.storedEncoding(entry.output?.facts).facts) { first, _ in first }
            try await output.write(Self.storedOutput(entry), plan, variant: variants[index], index: index, into: &outcome)
        }
        try await output.writeFactsSidecar(plan, into: &outcome)
        outcome.timings.load = stored.milliseconds
        return outcome
    }
}
