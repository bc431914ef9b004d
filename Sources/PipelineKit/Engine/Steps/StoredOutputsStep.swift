import Foundation

/// Step "stored outputs": with a data cache that keeps outputs (`store: processed|all`), each
/// variant's encoded output is kept stamped with the digest of the source bytes it was made from.
/// An output is reused only for the very same bytes, the same chain and encoder: when fresh, or
/// when the source answers "not modified" (or sends the same bytes again).
///
/// Takes the ``ItemPlan``; returns ``StoredOutputs``: the valid entries by variant, and the source
/// when it had to be loaded to know. After an encode, ``keep(_:_:index:stored:facts:)`` stores the
/// new output.
struct StoredOutputsStep: Sendable {
    /// The data cache, which keeps outputs.
    let cache: QuietCache
    let variants: [RunnableVariant]
    /// Identifies the decoder and its options (with what outputs keep of the metadata).
    let decoderIdentifier: String
    let loading: LoadStep

    /// The data cache key of a variant's encoded output: the source's key, the decoder and its
    /// options, every processor's identifier and the encoder's. Changing any of them changes it.
    func outputKey(_ key: String, _ variant: RunnableVariant) -> String {
        Self.outputKey(key, variant, decoderIdentifier: decoderIdentifier)
    }

    static func outputKey(_ key: String, _ variant: RunnableVariant, decoderIdentifier: String) -> String {
        "output:" + key + "#" + decoderIdentifier + variant.prefixIDs.last! + ">" + variant.encoder.identifier
    }

    /// The outputs stored for this source that are still valid; loads the source when that is what
    /// it takes to know.
    func lookUp(_ plan: ItemPlan) async throws -> StoredOutputs {
        let start = ContinuousClock.now
        let entries = await entries(plan)
        var preloaded: LoadedSource?
        if Self.coverEveryVariant(entries, variants.count) {
            switch try await revalidate(entries, plan) {
            case .unchanged:
                return StoredOutputs(entries: entries, milliseconds: (ContinuousClock.now - start).milliseconds)
            case .changed(let loaded):
                preloaded = loaded
            }
        }
        var loaded = if let preloaded { preloaded } else { try await loading.load(plan) }
        if loaded.cache == .off { loaded.cache = .miss }  // the cache took part, for outputs
        let digest = try await loaded.data.readBodyDigest()
        var valid: [Int: CachedEntry] = [:]
        for (index, entry) in entries where entry.output?.sourceDigest == digest {
            valid[index] = entry
            if !entry.isFresh { await cache.cache.refresh(outputKey(plan.key, variants[index]), directives: loaded.data.directives) }
        }
        return StoredOutputs(entries: valid, loaded: loaded, digest: digest)
    }

    /// The entries holding an encoded output for this source, by variant index.
    func entries(_ plan: ItemPlan) async -> [Int: CachedEntry] {
        var entries: [Int: CachedEntry] = [:]
        // A variant with breakpoints by bytes has many outputs per source: not kept in the cache.
        for (index, variant) in variants.enumerated() where variant.byBytes == nil {
            if let entry = await cache.entry(outputKey(plan.key, variant)), entry.output != nil { entries[index] = entry }
        }
        return entries
    }

    /// Whether `entries` hold every variant's output, all made from the same source bytes.
    static func coverEveryVariant(_ entries: [Int: CachedEntry], _ count: Int) -> Bool {
        entries.count == count && Set(entries.values.compactMap(\.output?.sourceDigest)).count == 1
    }

    enum Check {
        case unchanged
        /// The source changed: its new bytes.
        case changed(LoadedSource)
    }

    /// Every variant's output is stored for the same source bytes: are they still current?
    /// `keys`: the entries refreshed when they are (default: every variant's output).
    func revalidate(_ entries: [Int: CachedEntry], _ plan: ItemPlan, keys: [String]? = nil) async throws -> Check {
        if entries.values.allSatisfy(\.isFresh) { return .unchanged }
        let first = entries[0]!
        let answer: Revalidation, milliseconds: Double
        do {
            (answer, milliseconds) = try await loading.withLoadSlot(plan.slot) {
                try await plan.slot.loader.revalidate(plan.source, cached: first.data.directives)
            }
        } catch {
            throw StepFailure.classify(error, stage: .load, kind: .io, plugin: plan.slot.name)
        }
        var current: CacheDirectives
        switch answer {
        case .notModified(let updated):
            current = updated
        case .modified(let data):
            let originals = loading.originalsCache(plan.slot)
            await originals?.store(data, for: plan.key)
            guard try await data.readBodyDigest() == first.output?.sourceDigest else {
                return .changed(LoadedSource(data: data, cache: originals == nil || data.ranged != nil ? .off : .miss,
                                             milliseconds: milliseconds))
            }
            current = data.directives
        }
        for key in keys ?? variants.map({ outputKey(plan.key, $0) }) { await cache.cache.refresh(key, directives: current) }
        return .unchanged
    }

    /// The data cache key of a source's facts (`/info`): the source's key and how they are made
    /// (the decoder and every variant's chain and encoder, breakpoints by bytes included).
    func factsKey(_ key: String) -> String {
        "facts:" + key + "#" + decoderIdentifier + variants.map { $0.recipe }.joined(separator: ",")
    }

    /// The facts stored for this source when they are still current (fresh, or the source
    /// answers "not modified" or sends the same bytes); else `nil` and the source if it was
    /// loaded to know.
    func storedFacts(_ plan: ItemPlan) async throws -> (facts: ImageFacts?, loaded: LoadedSource?) {
        guard let entry = await cache.entry(factsKey(plan.key)), let facts = entry.output?.facts else { return (nil, nil) }
        switch try await revalidate([0: entry], plan, keys: [factsKey(plan.key)]) {
        case .unchanged: return (facts, nil)
        case .changed(let loaded): return (nil, loaded)
        }
    }

    /// Keeps a source's facts (an empty entry whose stamp holds them), stamped with its digest.
    func keepFacts(_ facts: ImageFacts, _ plan: ItemPlan, loaded: LoadedSource) async {
        guard !facts.isEmpty, let digest = try? await loaded.data.readBodyDigest() else { return }
        var stamp = OutputStamp(sourceDigest: digest, width: 0, height: 0, fileExtension: nil)
        stamp.facts = facts
        await cache.store(LoadedData(data: Data(), contentType: nil, directives: loaded.data.directives), for: factsKey(plan.key), output: stamp)
    }

    /// Keeps a new encoded output, stamped with the source bytes' digest. The stamp keeps the
    /// image's facts and, under `encoding`, what the encoder chose (``storedEncoding(_:)``).
    func keep(_ encoded: EncodedOutput, _ plan: ItemPlan, index: Int, stored: StoredOutputs, facts: ImageFacts = [:]) async {
        guard let digest = stored.digest, let loaded = stored.loaded else { return }
        var stamp = OutputStamp(sourceDigest: digest, width: encoded.size.width, height: encoded.size.height,
                                fileExtension: encoded.chosenExtension)
        var facts = facts
        if !encoded.encoding.isEmpty { facts[Self.encodingFact] = .object(encoded.encoding) }
        stamp.facts = facts.isEmpty ? nil : facts
        let entry = LoadedData(data: encoded.data, contentType: nil, directives: loaded.data.directives)
        await cache.store(entry, for: outputKey(plan.key, variants[index]), output: stamp)
    }

    /// The fact that holds what each output's encoder chose, a list in the order of the outputs.
    static let encodingFact = "encoding"

    /// A stored output's stamp facts split into the image's facts and what its encoder chose.
    static func storedEncoding(_ facts: ImageFacts?) -> (facts: ImageFacts, encoding: ImageFacts) {
        var facts = facts ?? [:]
        guard case .object(let encoding) = facts.removeValue(forKey: encodingFact) else { return (facts, [:]) }
        return (facts, encoding)
    }

    /// A stored output as if just encoded, with what its encoder chose as its stamp recorded it.
    static func storedOutput(_ entry: CachedEntry) -> EncodedOutput {
        EncodedOutput(data: entry.data.data, chosenExtension: entry.output?.fileExtension,
                      size: PixelSize(width: entry.output?.width ?? 0, height: entry.output?.height ?? 0),
                      encoding: storedEncoding(entry.output?.facts).encoding)
    }
}
