import Foundation
import Tracing

/// Step "decode and process": the final image of every variant, from the image cache, or by
/// decoding once and running each variant's chain, computing the prefixes chains share only once.
extension PipelineRunner {
    /// Makes the outputs of one source: stored outputs where valid, else load, decode and process
    /// once, then encode and write each variant.
    func produce(_ plan: ItemPlan, tracker: StageTracker) async throws -> ItemOutcome {
        if plan.delivery == .factsOnly { return try await facts(plan, tracker: tracker) }
        let stored = try await storedOutputs?.lookUp(plan) ?? StoredOutputs()
        if stored.entries.count == variants.count { return try await writeStored(stored, plan, tracker: tracker) }
        let needed = variants.indices.filter { stored.entries[$0] == nil }
        let made = try await making.images(plan, needed: needed, preloaded: stored.loaded, digest: stored.digest, tracker: tracker) {
            try await self.loading.load(plan)
        }
        tracker.enter(.encode)
        var outcome = ItemOutcome(planned: plan.planned, bytesIn: made.loaded?.data.bytesLoaded ?? 0,
                                  cacheData: made.loaded?.cache ?? .off, cacheImage: made.cacheImage, timings: made.timings,
                                  degraded: made.degraded)
        outcome.sourceIdentity = made.sourceIdentity
        outcome.decodeShared = made.decodeShared
        outcome.delivery = plan.delivery
        // Facts of the variants made now, and of those whose stored outputs recorded them.
        for index in variants.indices {
            let facts = made.images[index]?.facts ?? StoredOutputsStep.storedEncoding(stored.entries[index]?.output?.facts).facts
            outcome.facts.merge(facts) { first, _ in first }
        }
        for index in variants.indices {
            if variants[index].byBytes != nil {
                try await encodeWidths(made.images[index]!, plan, index: index, into: &outcome, tracker: tracker)
                continue
            }
            let encoded: EncodedOutput
            if let entry = stored.entries[index] {
                encoded = StoredOutputsStep.storedOutput(entry)
            } else {
                encoded = try await spans.with("encode") { span in
                    let encoded = try await encoding.encode(made.images[index]!, variants[index])
                    if span.isRecording { Self.describe(encoded, variants[index], in: span) }
                    return encoded
                }
                outcome.timings.encode += encoded.milliseconds
                // Damaged pixels are never stored: a later run decodes the source again (and says so).
                if made.degraded == nil {
                    await storedOutputs?.keep(encoded, plan, index: index, stored: stored, facts: made.images[index]!.facts)
                }
            }
            tracker.enter(.output)
            try await spans.with("store") { span in
                if span.isRecording, let name = variants[index].name { span.attributes["pipelinectl.variant"] = name }
                try await output.write(encoded, plan, variant: variants[index], index: index, into: &outcome)
            }
        }
        try await output.writeSrcsetManifest(plan, variants: variants, into: &outcome)
        try await output.writeFactsSidecar(plan, into: &outcome)
        return outcome
    }

    /// A variant with breakpoints by bytes: every width it chooses, encoded and written, and
    /// the choice in the item's facts (`breakpoints.by_bytes.VARIANT`).
    func encodeWidths(_ image: PipelineImage, _ plan: ItemPlan, index: Int, into outcome: inout ItemOutcome,
                      tracker: StageTracker, storing: Bool = true) async throws {
        tracker.enter(.encode)
        let made = try await encoding.encodeWidths(image, variants[index])
        outcome.timings.encode += made.milliseconds
        var byBytes: [String: FactValue] = [:]
        if case .object(let breakpoints)? = outcome.facts["breakpoints"], case .object(let earlier)? = breakpoints["by_bytes"] {
            byBytes = earlier
        }
        byBytes[variants[index].name ?? ""] = made.facts
        outcome.facts["breakpoints"] = .object(["by_bytes": .object(byBytes)])
        guard storing else { return }
        tracker.enter(.output)
        for encoded in made.outputs {
            try await output.write(encoded, plan, variant: variants[index], index: index, into: &outcome)
        }
    }

    /// Facts only: load, decode and run every variant's chain (analysing stages record what they
    /// find), then stop: nothing is stored. A variant with breakpoints by bytes is encoded at each
    /// width it chooses (its facts say which, and their sizes), and the files dropped.
    func facts(_ plan: ItemPlan, tracker: StageTracker) async throws -> ItemOutcome {
        // With a data cache that keeps outputs, facts are kept too: known ones are not decoded again.
        var preloaded: LoadedSource?
        if let storedOutputs {
            let start = ContinuousClock.now
            let (known, loaded) = try await storedOutputs.storedFacts(plan)
            if let known {
                var outcome = ItemOutcome(planned: plan.planned, cacheData: .processedHit)
                outcome.facts = known
                outcome.delivery = .factsOnly
                outcome.timings.load = (ContinuousClock.now - start).milliseconds
                return outcome
            }
            preloaded = loaded
        }
        let made = try await making.images(plan, needed: Array(variants.indices), preloaded: preloaded, digest: nil, tracker: tracker) {
            try await self.loading.load(plan)
        }
        var outcome = ItemOutcome(planned: plan.planned, bytesIn: made.loaded?.data.bytesLoaded ?? 0,
                                  cacheData: made.loaded?.cache ?? .off, cacheImage: made.cacheImage, timings: made.timings,
                                  degraded: made.degraded)
        outcome.sourceIdentity = made.sourceIdentity
        outcome.decodeShared = made.decodeShared
        outcome.delivery = .factsOnly
        for index in variants.indices { outcome.facts.merge(made.images[index]?.facts ?? [:]) { first, _ in first } }
        outcome.size = made.images[0]?.size ?? outcome.size
        for index in variants.indices where variants[index].byBytes != nil {
            guard let image = made.images[index] else { continue }
            try await encodeWidths(image, plan, index: index, into: &outcome, tracker: tracker, storing: false)
        }
        if let storedOutputs, let loaded = made.loaded, made.degraded == nil { await storedOutputs.keepFacts(outcome.facts, plan, loaded: loaded) }
        return outcome
    }

    /// The fallback image (`on_failure`) through every variant's processors and encoder, written
    /// under `plan`'s names. Never stored in a cache: the next run tries the source again.
    func produceFallback(_ fallback: LoadedData, _ plan: ItemPlan, tracker: StageTracker) async throws -> ItemOutcome {
        let identity = OutputFingerprint.fallback(fallback.data)
        let job = try await making.decodeAndProcess(fallback, identity: identity, pending: Array(variants.indices), tracker: tracker)
        tracker.enter(.encode)
        var outcome = ItemOutcome(planned: plan.planned, timings: StageTimings(decode: job.decode, process: job.process))
        outcome.sourceIdentity = identity
        outcome.delivery = plan.delivery
        // The fallback's own facts (analyze ran on it): what the page shows is the fallback.
        for index in variants.indices { outcome.facts.merge(job.finished[index]!.facts) { first, _ in first } }
        for index in variants.indices {
            if variants[index].byBytes != nil {
                try await encodeWidths(job.finished[index]!, plan, index: index, into: &outcome, tracker: tracker)
                continue
            }
            let encoded = try await encoding.encode(job.finished[index]!, variants[index])
            outcome.timings.encode += encoded.milliseconds
            tracker.enter(.output)
            try await output.write(encoded, plan, variant: variants[index], index: index, into: &outcome)
        }
        try await output.writeSrcsetManifest(plan, variants: variants, into: &outcome)
        try await output.writeFactsSidecar(plan, into: &outcome)
        return outcome
    }
}

extension PipelineRunner {
    /// The facts the source's header gives (format, size, orientation, colour space, ICC,
    /// EXIF), without decoding a pixel: the loader and the data cache, then the decoder's header
    /// read (``PreparedDecode/header``), under the item's time limit. Never throws: a failure is
    /// in the result, as ``process(_:delivery:)`` gives it. A decoder that cannot read headers
    /// alone fails as `unsupported_format`.
    public func headerFacts(_ source: Source) async -> ProcessedItem {
        var item = ProcessedItem(result: ItemResult(source: source.text, index: source.index, status: .failed))
        do {
            let plan = try makePlan(source, delivery: .factsOnly)
            let (outcome, _) = try await withinTimeLimit(plan) { plan, tracker in (try await self.readHeader(plan, tracker: tracker), false) }
            fill(&item, with: outcome, reused: false)
        } catch {
            let failure = StepFailure.classify(error, stage: .load, kind: .io)
            item.result.error = ItemError(stage: failure.stage ?? .load, kind: failure.kind, message: failure.message, plugin: failure.plugin)
        }
        return item
    }

    func readHeader(_ plan: ItemPlan, tracker: StageTracker) async throws -> ItemOutcome {
        let loaded = try await loading.load(plan)
        tracker.enter(.decode)
        let start = ContinuousClock.now
        let input = try await making.forDecoder(loaded.data)
        let (decoder, name, hint) = (making.decoder, making.decoderName, making.hint)
        let facts = try await WorkerPool.io.run { () throws -> ImageFacts in
            let prepared: PreparedDecode
            do { prepared = try decoder.prepare(input, hint: hint) } catch {
                throw StepFailure.classify(error, stage: .decode, kind: .decodeFailed, plugin: name)
            }
            guard let header = prepared.header else {
                throw PipelineError(.unsupportedFormat, "decoder '\(name)' cannot read a header alone", stage: .decode)
            }
            return header()
        }
        var outcome = ItemOutcome(planned: plan.planned, bytesIn: loaded.data.bytesLoaded, cacheData: loaded.cache)
        outcome.facts = facts
        outcome.delivery = .factsOnly
        outcome.timings.load = loaded.milliseconds
        outcome.timings.decode = (ContinuousClock.now - start).milliseconds
        return outcome
    }

    /// What an encode span says: the variant, the encoder, the size made, the bytes.
    static func describe(_ encoded: EncodedOutput, _ variant: RunnableVariant, in span: any Span) {
        span.updateAttributes { attributes in
            if let name = variant.name { attributes["pipelinectl.variant"] = name }
            attributes["pipelinectl.encoder"] = variant.encoderName
            attributes["pipelinectl.width"] = encoded.size.width
            attributes["pipelinectl.height"] = encoded.size.height
            attributes["pipelinectl.bytes_out"] = encoded.data.count
            if let ext = encoded.chosenExtension { attributes["pipelinectl.format"] = ext }
        }
    }
}
