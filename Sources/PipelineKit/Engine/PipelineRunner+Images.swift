import Foundation

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
        var outcome = ItemOutcome(planned: plan.planned, bytesIn: made.loaded?.data.byteCount ?? 0,
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
                encoded = try await encoding.encode(made.images[index]!, variants[index])
                outcome.timings.encode += encoded.milliseconds
                // Damaged pixels are never stored: a later run decodes the source again (and says so).
                if made.degraded == nil {
                    await storedOutputs?.keep(encoded, plan, index: index, stored: stored, facts: made.images[index]!.facts)
                }
            }
            tracker.enter(.output)
            try await output.write(encoded, plan, variant: variants[index], index: index, into: &outcome)
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
        let made = try await making.images(plan, needed: Array(variants.indices), preloaded: nil, digest: nil, tracker: tracker) {
            try await self.loading.load(plan)
        }
        var outcome = ItemOutcome(planned: plan.planned, bytesIn: made.loaded?.data.byteCount ?? 0,
                                  cacheData: made.loaded?.cache ?? .off, cacheImage: made.cacheImage, timings: made.timings,
                                  degraded: made.degraded)
        outcome.sourceIdentity = made.sourceIdentity
        outcome.decodeShared = made.decodeShared
        outcome.delivery = .factsOnly
        for index in variants.indices { outcome.facts.merge(made.images[index]?.facts ?? [:]) { first, _ in first } }
        outcome.size = made.images[0]?.size ?? outcome.size
        for index in variants.indices where variants[index].byBytes != nil {
            guard let image = made.images[index] else { continue }
            var widths = ItemOutcome(delivery: .factsOnly)
            widths.facts = outcome.facts
            try await encodeWidths(image, plan, index: index, into: &widths, tracker: tracker, storing: false)
            outcome.facts = widths.facts
            outcome.timings.encode += widths.timings.encode
        }
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
