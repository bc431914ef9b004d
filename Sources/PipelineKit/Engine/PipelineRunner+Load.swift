import Foundation

/// Step "load": the source's bytes, from the data cache when fresh, revalidated through the loader
/// when stale, or from the loader, within the loader's concurrency limit.
extension PipelineRunner {
    /// The data cache for this loader's originals, when there is one and it keeps them.
    func originalsCache(_ slot: LoaderSlot) -> (any DataCaching)? {
        slot.loader.usesDataCache ? dataCache.flatMap { $0.storesOriginals ? $0 : nil } : nil
    }

    func load(_ plan: ItemPlan) async throws -> LoadedSource {
        // Runners derived for other parameters of the same pipeline share one load per source,
        // and the items it reaches decode once (each notes what it needs).
        let (shared, _) = try await sourceLoads.run(plan.workKey, note: decodeNeed) {
            var loaded = try await self.loadOnce(plan)
            loaded.decodes = SharedDecodes()
            return loaded
        }
        var loaded = shared.value
        let needs = shared.notes.compactMap { $0 as? SharedDecodes.Need }
        if needs.count > 1 { loaded.decodes?.settle(needs) } else { loaded.decodes = nil }
        return loaded
    }

    /// What this runner's items decode, noted with their loads: items of runners with the same
    /// decoder and options decode together.
    var decodeNeed: SharedDecodes.Need {
        SharedDecodes.Need(group: decoderIdentifier + (decodeHint.wantsSourceFacts ? "+facts" : ""), hint: decodeHint)
    }

    private func loadOnce(_ plan: ItemPlan) async throws -> LoadedSource {
        let start = ContinuousClock.now
        let cache = originalsCache(plan.slot)
        var stale: CachedEntry?
        if let cache, let entry = await cachedEntry(plan.key, in: cache) {
            if entry.isFresh { return LoadedSource(data: entry.data, cache: .hit, milliseconds: (ContinuousClock.now - start).milliseconds) }
            stale = entry
        }
        do {
            let (answer, milliseconds) = try await withLoadSlot(plan.slot) { () async throws -> Revalidation in
                if let stale { return try await plan.slot.loader.revalidate(plan.source, cached: stale.data.directives) }
                return .modified(try await plan.slot.loader.load(plan.source))
            }
            switch answer {
            case .notModified(let directives):
                await cache?.refresh(plan.key, directives: directives)
                var data = stale!.data
                data.directives = directives
                return LoadedSource(data: data, cache: .revalidated, milliseconds: milliseconds)
            case .modified(let data):
                if let cache { await storeQuietly(data, for: plan.key, in: cache) }
                return LoadedSource(data: data, cache: cache == nil ? .off : .miss, milliseconds: milliseconds)
            }
        } catch {
            throw classify(error, stage: .load, kind: .io, plugin: plan.slot.name)
        }
    }

    /// Runs `body` holding one of the loader's slots, and how long it took: the wait for the slot
    /// is neither loading nor counted by the item's time limit.
    func withLoadSlot<T: Sendable>(_ slot: LoaderSlot, _ body: () async throws -> T) async throws -> (T, milliseconds: Double) {
        try await waitingTurn { try await slot.limit.acquire() }
        defer { slot.limit.release() }
        let begin = ContinuousClock.now
        let value = try await body()
        return (value, (ContinuousClock.now - begin).milliseconds)
    }

    /// The entry for `key` in `cache`; a cache that cannot be read is logged and counts as a miss.
    func cachedEntry(_ key: String, in cache: any DataCaching) async -> CachedEntry? {
        do { return try await cache.entry(for: key) } catch {
            logger.warning("data cache read failed", metadata: ["key": "\(key)", "error": "\(error)"])
            return nil
        }
    }

    /// Stores `data` in `cache`; a failure to store is logged, never the item's failure.
    func storeQuietly(_ data: LoadedData, for key: String, output: OutputStamp? = nil, in cache: any DataCaching) async {
        do { try await cache.store(data, for: key, output: output) } catch {
            logger.warning("data cache store failed", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }
}
