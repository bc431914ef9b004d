import Foundation
import Synchronization
import Tracing

/// One item from start to end: plan its outputs, skip it when resuming, reuse what this run
/// already made of the same source, or make it once for every line that names it.
extension PipelineRunner {
    /// Runs one source through every stage, storing its outputs with the pipeline's destination.
    /// Never throws: failures become a failed result.
    public func runItem(_ source: Source) async -> ItemResult {
        await process(source, delivery: .store).result
    }

    /// Runs one source through every stage, its outputs going to `delivery`'s sink: stored by the
    /// destination (as ``runItem(_:)``), returned as values, or not made at all (facts only).
    /// Never throws: a failure is in ``ProcessedItem/result``'s `error`, its kind as reports
    /// give it. A cancelled task stops its own work; work another caller shares goes on.
    ///
    /// The item is a span `item` continuing the source's trace (``Source/trace``), or else the
    /// task's (`ServiceContext.current`; under a batch run's span, a trace of its own linked to
    /// it), with a
    /// span for each stage under it (``RunOptions/tracer``); a failed item's span carries the
    /// failure's kind and stage.
    public func process(_ source: Source, delivery: OutputDelivery) async -> ProcessedItem {
        let parent = source.trace?.context ?? ServiceContext.current ?? .topLevel
        // Under a batch run's span: a trace of its own, linked to the run.
        let run = source.trace == nil ? parent.batchRun : nil
        let span = spans.start("item", context: run == nil ? parent : .topLevel)
        if let run { span.addLink(SpanLink(context: run, attributes: [:])) }
        defer { span.end() }
        var item = await ServiceContext.$current.withValue(span.context) { await processItem(source, delivery: delivery) }
        item.result.traceID = spans.traceID(of: span)
        if span.isRecording {
            span.updateAttributes { attributes in
                attributes["pipelinectl.pipeline"] = pipeline.name
                attributes["pipelinectl.source"] = source.text
                attributes["pipelinectl.index"] = source.index
                attributes["pipelinectl.status"] = item.result.status.rawValue
                attributes["pipelinectl.outputs"] = item.result.outputs.count
            }
            if let error = item.result.error {
                EngineSpans.fail(span, PipelineError(error.kind, error.message, stage: error.stage))
            }
        }
        return item
    }

    private func processItem(_ source: Source, delivery: OutputDelivery) async -> ProcessedItem {
        var item = ProcessedItem(result: ItemResult(source: source.text, index: source.index, status: .failed))
        var planned: ItemPlan?
        do {
            let plan = try makePlan(source, delivery: delivery)
            planned = plan
            // Breakpoints by bytes: the names depend on the image, so the run record cannot
            // vouch for them; the item is made again and unchanged outputs are kept.
            if resume, !fetchOnly, delivery == .store, !makesWidths, let done = try await output.alreadyWritten(plan, recipes: variants.map(\.recipe)) {
                item.result.status = .skipped
                item.result.outputs = done.map(output.destination.location)
                return item
            }
            let (outcome, reused) = try await withinTimeLimit(plan)
            if !fetchOnly, delivery == .store, !makesWidths { output.recordCompleted(outcome) }
            fill(&item, with: outcome, reused: reused)
            logger.debug("ok", metadata: ["source": "\(source.text)", "outputs": "\(item.result.outputs)"])
        } catch {
            var error = error
            if let repeated = error as? DuplicateFailure {
                item.result.duplicate = true  // the source's failure, met by a line before this one
                error = repeated.failure
            }
            let failure = StepFailure.classify(error, stage: .load, kind: .io)
            let itemError = ItemError(stage: failure.stage ?? .load, kind: failure.kind, message: failure.message,
                                      plugin: failure.plugin)
            if let planned, !item.result.duplicate, let policy = failurePolicy, !fetchOnly, policy.applies(to: failure),
               await recover(planned, policy: policy, into: &item) {
                item.result.recoveredFrom = itemError
                return item
            }
            item.result.error = itemError
            logger.warning("failed", metadata: [
                "source": "\(source.text)", "stage": "\(failure.stage?.rawValue ?? "load")",
                "kind": "\(failure.kind)", "message": "\(failure.message)", "plugin": "\(failure.plugin ?? "")",
            ])
        }
        return item
    }

    /// `on_failure:` for a failed item: each alternative source in turn, written under the item's
    /// own names, then the fallback image. Whether one of them made the outputs.
    func recover(_ plan: ItemPlan, policy: FailurePolicy, into item: inout ProcessedItem) async -> Bool {
        for template in policy.alternatives {
            let text = FailurePolicy.render(template, source: plan.source.text)
            let alternative = Source(text: text, index: plan.source.index, base: plan.source.base)
            guard let slot = try? loader(for: alternative) else { continue }
            let altPlan = ItemPlan(source: alternative, slot: slot, key: slot.loader.cacheKey(for: alternative), planned: plan.planned,
                                   delivery: plan.delivery)
            do {
                let (outcome, reused) = try await withinTimeLimit(altPlan)
                if plan.delivery == .store, !makesWidths { output.recordCompleted(outcome) }
                fill(&item, with: outcome, reused: reused)
                item.result.alternative = text
                logger.info("alternative", metadata: ["source": "\(plan.source.text)", "alternative": "\(text)"])
                return true
            } catch {
                logger.debug("alternative failed", metadata: ["alternative": "\(text)", "error": "\(error)"])
            }
        }
        guard let fallback = policy.fallback else { return false }
        do {
            let (outcome, _) = try await withinTimeLimit(plan) { plan, tracker in
                (try await self.produceFallback(fallback, plan, tracker: tracker), false)
            }
            // Not recorded as complete: `--resume` tries the source again.
            fill(&item, with: outcome, reused: false)
            item.result.fallback = true
            logger.info("fallback", metadata: ["source": "\(plan.source.text)"])
            return true
        } catch {
            logger.warning("fallback failed", metadata: ["source": "\(plan.source.text)", "error": "\(error)"])
            return false
        }
    }

    /// Whether work for `source` is under way that a new item for it would share rather than
    /// repeat: its load (shared by every runner derived from this one), or this runner's whole
    /// item. The service lets a request that would share it in without a job place of its own.
    public func isSharingWork(for source: Source) -> Bool {
        // The keys the work is under: with the source's version (a local file's size and time).
        guard let plan = try? makePlan(source, delivery: .values) else { return false }
        // Whole items are shared per sink (``outcome(_:tracker:)``): the service's are values.
        return OutputDelivery.allCases.contains { itemWork.subscribers(Self.sharingKey(plan.workKey, $0)) > 0 }
            || loading.sourceLoads.subscribers(plan.workKey) > 0
    }

    /// The key an item's whole work is shared under: a caller that stores and one that takes
    /// values share the load and the decode (``load(_:)``), not the outcome.
    static func sharingKey(_ workKey: String, _ delivery: OutputDelivery) -> String {
        delivery == .store ? workKey : workKey + "\u{1}" + delivery.rawValue
    }

    /// The loader, key and planned outputs of `source`; claims the outputs for it.
    func makePlan(_ source: Source, delivery: OutputDelivery = .store) throws -> ItemPlan {
        var source = source
        // The pipeline's `sources:` hold for every line of a list and every message, decided
        // on what the loader opens (a relative path as resolved against the list's directory),
        // and carried to the loader for its redirects and the file it opens.
        if source.boundary == nil, source.bytes == nil, let boundary = loaders.boundary {
            if let refusal = boundary.refusal(for: source.scheme == nil ? source.localPath ?? source.text : source.text) {
                throw PipelineError(.sourceNotAllowed, refusal.replacingOccurrences(of: "serve.sources", with: "sources"), stage: .load)
            }
            source.boundary = boundary
        }
        // A local file's version: its size and modification time (a file replaced between two
        // lines naming it is a new item).
        if source.version == nil, source.bytes == nil, source.scheme == nil || source.scheme == "file", let path = source.localPath {
            var info = stat()
            if stat(path, &info) == 0 { source.version = "\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)" }
        }
        guard let slot = try loader(for: source) else {
            throw PipelineError(.blockedProtocol,
                                "no loader serves '\(source.scheme ?? "")' sources; this run loads: "
                                    + loaders.schemesServed.joined(separator: ", "), stage: .load)
        }
        let key = slot.loader.cacheKey(for: source)
        let planned = fetchOnly ? [] : variants.map { $0.relativeOutputPath(source: source, key: key, fileExtension: nil) }
        // Names matter only where outputs are stored under them.
        if delivery == .store { for path in planned { try output.claim(path, key: key, source: source) } }
        var plan = ItemPlan(source: source, slot: slot, key: key, planned: planned, delivery: delivery)
        if !fetchOnly, delivery == .store, let factsName = output.factsName {
            let sidecar = factsName.render(source: source, cacheKey: key, fileExtension: "json")
            try output.claim(sidecar, key: key, source: source)
            plan.sidecar = sidecar
        }
        if !fetchOnly, delivery == .store, makesWidths {
            // Beside the facts sidecar: its name (or the default one) ending `.srcset.json`.
            let facts = (output.factsName ?? (try? NameTemplate(NameTemplate.defaultFactsText)))!
            let rendered = facts.render(source: source, cacheKey: key, fileExtension: "json")
            let manifest = (rendered.hasSuffix(".json") ? String(rendered.dropLast(5)) : rendered) + ".srcset.json"
            try output.claim(manifest, key: key, source: source)
            plan.srcset = manifest
        }
        return plan
    }

    /// Whether a variant has breakpoints by bytes (its outputs' names depend on the image).
    var makesWidths: Bool { variants.contains { $0.byBytes != nil } }

    /// The item's outcome under its time limit, with the item's stage context set for every stage.
    /// `reused`: made by another line of the list (in flight or earlier).
    func withinTimeLimit(_ plan: ItemPlan,
                         work: (@Sendable (ItemPlan, StageTracker) async throws -> (ItemOutcome, reused: Bool))? = nil)
        async throws -> (ItemOutcome, reused: Bool) {
        let tracker = StageTracker()
        let limit = itemTimeout
        return try await withItemClock(limit, timers: options.timers, timeout: {
            PipelineError(.timeout, "the item did not finish within the item time limit (\(Units.formatDuration(limit ?? 0)))",
                          stage: tracker.stage)
        }) { clock in
            let context = StageContext(source: plan.source, cacheKey: plan.key, logger: self.logger, clock: clock)
            return try await StageContext.$taskValue.withValue(context) {
                if let work { return try await work(plan, tracker) }
                return try await self.outcome(plan, tracker: tracker)
            }
        }
    }

    /// What this run already made of the source, or the work of making it, shared by every line
    /// with the same key that asks while it runs.
    ///
    /// A source without a version is remembered only when the run says so
    /// (``RunOptions/dedupeUnversioned``, a list's lines): a queue's later message for it may
    /// name new content under the same name, so only work in flight is shared then.
    func outcome(_ plan: ItemPlan, tracker: StageTracker) async throws -> (ItemOutcome, reused: Bool) {
        let key = Self.sharingKey(plan.workKey, plan.delivery)
        // Outcomes are remembered only when they are names of stored outputs, not bytes.
        let remembers = plan.delivery == .store && (plan.source.version != nil || dedupeUnversioned)
        if remembers {
            switch finished.entry(for: key) {
            case .made(let earlier)?: return (try await adopt(earlier, for: plan), true)
            case .failed(let failure)?: throw DuplicateFailure(failure: failure)
            case nil: break
            }
        }
        let led = Atomic(false)
        let made: ItemOutcome, shared: Bool
        do {
            (made, shared) = try await itemWork.run(key) {
                led.store(true, ordering: .relaxed)
                do {
                    let made = try await self.fetchOnly ? self.fetch(plan) : self.produce(plan, tracker: tracker)
                    if remembers { self.finished.record(.made(made), for: key) }
                    return made
                } catch {
                    let failure = StepFailure.classify(error, stage: tracker.stage, kind: .io)
                    if remembers { self.finished.record(.failed(failure), for: key) }
                    throw failure
                }
            }
        } catch let failure as PipelineError where !led.load(ordering: .relaxed) {
            throw DuplicateFailure(failure: failure)  // the failure of the line this one joined
        }
        return shared ? (try await adopt(made, for: plan), true) : (made, false)
    }

    /// Another line's outcome for the same source, as this line's: the same files when it plans the
    /// same names, else copies of them under its own names.
    func adopt(_ made: ItemOutcome, for plan: ItemPlan) async throws -> ItemOutcome {
        guard made.planned != plan.planned, plan.delivery == .store else {
            var same = made
            same.duplicate = true
            return same
        }
        var own = made
        for index in made.written.indices {
            let variant = variants[made.variantOf[index]]
            let target = variant.byBytes == nil
                ? variant.outputPath(plan.planned[made.variantOf[index]], source: plan.source, key: plan.key,
                                     fileExtension: made.chosenExtensions[index])
                : variant.template.render(source: plan.source, cacheKey: plan.key,
                                          fileExtension: made.chosenExtensions[index] ?? variant.encoder.fileExtension,
                                          variant: variant.name, width: made.outputSizes[index].width)
            do { own.states[index] = try await output.copy(made.written[index], to: target, fingerprint: made.fingerprints[index]) } catch {
                throw StepFailure.classify(error, stage: .output, kind: .writeFailed, variant: variant)
            }
            own.written[index] = target
        }
        if let sidecar = made.sidecar, let target = plan.sidecar, target != sidecar.path {
            do { own.sidecar = (target, try await output.copy(sidecar.path, to: target, fingerprint: sidecar.fingerprint), sidecar.fingerprint) } catch {
                throw StepFailure.classify(error, stage: .output, kind: .writeFailed)
            }
        }
        if let srcset = made.srcset, let target = plan.srcset, target != srcset.path {
            // The copy names the copied outputs: the manifest is written again, not copied.
            own.srcset = nil
            do { try await output.writeSrcsetManifest(plan, variants: variants, into: &own) } catch {
                throw StepFailure.classify(error, stage: .output, kind: .writeFailed)
            }
        }
        own.planned = plan.planned
        return own
    }

    /// An item's result from its outcome. A reused outcome loaded nothing and spent no time: its
    /// data came from this run (a hit, or `off` without a data cache) and its image too.
    func fill(_ item: inout ProcessedItem, with outcome: ItemOutcome, reused: Bool) {
        item.outputs = outcome.values
        fill(&item.result, with: outcome, reused: reused)
    }

    func fill(_ result: inout ItemResult, with outcome: ItemOutcome, reused: Bool) {
        let location = { (path: String) in self.output.location(path, outcome.delivery) }
        var paths = outcome.written, states = outcome.states
        for extra in [outcome.srcset, outcome.sidecar].compactMap({ $0 }) {
            paths.append(extra.path)
            states.append(extra.state)
        }
        result.outputs = paths.map(location)
        result.kept = zip(paths, states).filter { $0.1 == .kept }.map { location($0.0) }
        result.replaced = outcome.replaced.map(location)
        result.stale = zip(paths, states).filter { $0.1 == .stale }.map { location($0.0) }
        result.status = !fetchOnly && outcome.delivery == .store && !states.isEmpty && !states.contains(.written) ? .kept : .ok
        result.width = fetchOnly ? nil : outcome.size.width
        result.height = fetchOnly ? nil : outcome.size.height
        result.bytesOut = outcome.bytesOut
        result.degraded = outcome.degraded
        result.facts = outcome.facts
        if !fetchOnly {
            // `write` appends to each of these arrays together, for every output.
            result.variants = outcome.written.indices.map { index in
                let variant = variants[outcome.variantOf[index]]
                return VariantOutput(name: variant.name, path: location(outcome.written[index]),
                                     width: outcome.outputSizes[index].width, height: outcome.outputSizes[index].height,
                                     bytes: outcome.outputBytes[index],
                                     format: outcome.chosenExtensions[index] ?? variant.encoder.fileExtension)
            }
        }
        if reused {
            // Made by this run for another line: no cache was asked (``ItemResult/shared``).
            result.shared = true
            result.duplicate = outcome.duplicate
        } else {
            result.bytesIn = outcome.bytesIn
            result.timings = outcome.timings
            result.decodeShared = outcome.decodeShared
            result.cacheData = outcome.cacheData
            result.cacheImage = outcome.cacheImage
        }
    }

    /// `pipelinectl fetch`: the loader and the data cache only.
    func fetch(_ plan: ItemPlan) async throws -> ItemOutcome {
        let loaded = try await loading.load(plan)
        var outcome = ItemOutcome()
        outcome.bytesIn = loaded.data.bytesLoaded
        outcome.cacheData = loaded.cache
        outcome.timings.load = loaded.milliseconds
        return outcome
    }

}

/// The failure of a source met by an earlier line of the run (or one in flight): the line is a
/// duplicate delivery, failed as that line failed.
struct DuplicateFailure: Error {
    let failure: PipelineError
}
