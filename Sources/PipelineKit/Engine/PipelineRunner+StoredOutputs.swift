import Foundation

/// Outputs that all came from the data cache (``StoredOutputsStep``): written without loading,
/// decoding or encoding; for a service, a stored result answered at once, outside the job limit.
extension PipelineRunner {
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
        guard !fetchOnly, delivery != .factsOnly, let storedOutputs else { return nil }
        let start = ContinuousClock.now
        guard let plan = try? makePlan(source, delivery: delivery) else { return nil }
        let entries = await storedOutputs.entries(plan)
        guard StoredOutputsStep.coverEveryVariant(entries, variants.count), entries.values.allSatisfy(\.isFresh) else { return nil }
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
            outcome.facts.merge(StoredOutputsStep.storedEncoding(entry.output?.facts).facts) { first, _ in first }
            try await output.write(StoredOutputsStep.storedOutput(entry), plan, variant: variants[index], index: index, into: &outcome)
        }
        try await output.writeFactsSidecar(plan, into: &outcome)
        outcome.timings.load = stored.milliseconds
        return outcome
    }
}
