import Foundation
import Logging
import Tracing

/// Step "load": the source's bytes, from the data cache when fresh, revalidated through the loader
/// when stale, or from the loader, within the loader's concurrency limit. Loads of one source in
/// flight at once are shared, with the runners derived from this one too (the service's sizes of
/// one source), and the items a load reaches decode once (each notes what it needs).
///
/// Takes the ``ItemPlan``; returns a ``LoadedSource``. A failure is the loader's, at the `load`
/// stage, naming the loader.
struct LoadStep: Sendable {
    /// Loaders by scheme, built when first needed.
    let loaders: LoaderSlots
    /// The pipeline's data cache (originals are read and stored here when it keeps them).
    let dataCache: (any DataCaching)?
    /// Loads in progress by source key, shared with derived runners.
    let sourceLoads: SharedWork<LoadedSource>
    /// What this runner's items decode, noted with their loads.
    let need: SharedDecodes.Need
    let logger: Logger
    let spans: EngineSpans

    func load(_ plan: ItemPlan) async throws -> LoadedSource {
        let (shared, _) = try await sourceLoads.run(plan.workKey, note: need) {
            var loaded = try await self.loadOnce(plan)
            loaded.decodes = SharedDecodes()
            return loaded
        }
        var loaded = shared.value
        let needs = shared.notes.compactMap { $0 as? SharedDecodes.Need }
        if needs.count > 1 { loaded.decodes?.settle(needs) } else { loaded.decodes = nil }
        return loaded
    }

    /// The data cache for this loader's originals, when there is one and it keeps them.
    func originalsCache(_ slot: LoaderSlot) -> QuietCache? {
        guard slot.loader.usesDataCache, let cache = dataCache, cache.storesOriginals else { return nil }
        return QuietCache(cache: cache, logger: logger)
    }

    /// In a span `load`: the loader, the source, the bytes taken and the data cache's part.
    private func loadOnce(_ plan: ItemPlan) async throws -> LoadedSource {
        try await spans.with("load") { span in
            let loaded = try await loadFromCacheOrLoader(plan)
            if span.isRecording {
                span.updateAttributes { attributes in
                    attributes["pipelinectl.loader"] = plan.slot.name
                    attributes["pipelinectl.source"] = plan.source.text
                    attributes["pipelinectl.bytes_in"] = loaded.data.bytesLoaded
                    attributes["pipelinectl.cache.data"] = loaded.cache.rawValue
                    if loaded.data.ranged != nil { attributes["pipelinectl.ranged"] = true }
                }
            }
            return loaded
        }
    }

    private func loadFromCacheOrLoader(_ plan: ItemPlan) async throws -> LoadedSource {
        let start = ContinuousClock.now
        let cache = originalsCache(plan.slot)
        var stale: CachedEntry?
        if let cache, let entry = await cache.entry(plan.key) {
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
                await cache?.cache.refresh(plan.key, directives: directives)
                var data = stale!.data
                data.directives = directives
                return LoadedSource(data: data, cache: .revalidated, milliseconds: milliseconds)
            case .modified(let data) where data.ranged != nil:
                // Read by range: only the parts the decoder asks for are ever fetched, so there is
                // no whole body to keep (the outputs and the image cache are kept as usual).
                return LoadedSource(data: data, cache: .off, milliseconds: milliseconds)
            case .modified(let data):
                await cache?.store(data, for: plan.key)
                return LoadedSource(data: data, cache: cache == nil ? .off : .miss, milliseconds: milliseconds)
            }
        } catch {
            throw StepFailure.classify(error, stage: .load, kind: .io, plugin: plan.slot.name)
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
}

/// A data cache whose failures are logged, never an item's: an entry that cannot be read is a
/// miss, a store that fails is skipped.
struct QuietCache: Sendable {
    let cache: any DataCaching
    let logger: Logger

    func entry(_ key: String) async -> CachedEntry? {
        do { return try await cache.entry(for: key) } catch {
            logger.warning("data cache read failed", metadata: ["key": "\(key)", "error": "\(error)"])
            return nil
        }
    }

    /// A body read by range is never stored (there is no whole body to keep).
    func store(_ data: LoadedData, for key: String, output: OutputStamp? = nil) async {
        guard data.ranged == nil else { return }
        do { try await cache.store(data, for: key, output: output) } catch {
            logger.warning("data cache store failed", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }
}
