import Foundation

/// Step "encode": a variant's final image to bytes on a CPU worker, with what the pipeline's
/// `metadata:` keeps of the source's metadata. Timed inside the job: waiting for a worker is not
/// encoding.
///
/// Takes a ``PipelineImage`` and its ``RunnableVariant``; returns an ``EncodedOutput``. A failure
/// is `encode_failed` at `encode`, naming the encoder and the variant.
struct EncodeStep: Sendable {
    let metadataPolicy: MetadataPolicy
    let cpu: WorkerPool

    func encode(_ image: PipelineImage, _ variant: RunnableVariant) async throws -> EncodedOutput {
        let encoder = variant.encoder
        var image = image
        image.metadata = metadataPolicy.output(for: image.metadata)
        do {
            return try await cpu.inItemContext { [image] in
                let start = ContinuousClock.now
                let made = try encoder.encoded(image)
                let chosen = made.fileExtension
                return EncodedOutput(data: made.data, chosenExtension: chosen == encoder.fileExtension ? nil : chosen,
                                     size: image.size, milliseconds: (ContinuousClock.now - start).milliseconds,
                                     encoding: made.facts)
            }
        } catch {
            throw StepFailure.classify(error, stage: .encode, kind: .encodeFailed, plugin: variant.encoderName, variant: variant)
        }
    }
}

/// Step "encode" for a variant with breakpoints by bytes: its outputs, narrowest first, and
/// what choosing the widths cost.
struct WidthOutputs: Sendable {
    var outputs: [EncodedOutput]
    /// `breakpoints.by_bytes.VARIANT` in the item's facts: the widths, their bytes, the step, and
    /// the time of the kept encodes against the time of the trials that were not kept.
    var facts: FactValue
    var milliseconds: Double
}

extension EncodeStep {
    /// The variant's image at each width ``BytesBreakpoints/choose(imageWidth:elapsed:encode:)``
    /// picks, scaled from the variant's image (one decode, the chain run once) and encoded, in
    /// one job on a CPU worker. A scale that fails is `process_failed` naming the scaler; an
    /// encode that fails is `encode_failed`.
    func encodeWidths(_ image: PipelineImage, _ variant: RunnableVariant) async throws -> WidthOutputs {
        guard let breakpoints = variant.byBytes, let scaler = variant.scaler else {
            let one = try await encode(image, variant)
            return WidthOutputs(outputs: [one], facts: .object([:]), milliseconds: one.milliseconds)
        }
        let encoder = variant.encoder
        var image = image
        image.metadata = metadataPolicy.output(for: image.metadata)
        return try await cpu.inItemContext { [image] in
            let start = ContinuousClock.now
            var kept = 0.0
            let choice = try breakpoints.choose(imageWidth: image.size.width, elapsed: { (ContinuousClock.now - start).seconds }) { width in
                let began = ContinuousClock.now
                var scaled = image
                if width < image.size.width {
                    do { scaled = try scaler.atWidth(width).makeProcessor().process(image) } catch {
                        throw StepFailure.classify(error, stage: .process, kind: .processFailed, plugin: scaler.plugin.spec.name, variant: variant)
                    }
                }
                let made: EncodedImage
                do { made = try encoder.encoded(scaled) } catch {
                    throw StepFailure.classify(error, stage: .encode, kind: .encodeFailed, plugin: variant.encoderName, variant: variant)
                }
                let output = EncodedOutput(data: made.data, chosenExtension: made.fileExtension == encoder.fileExtension ? nil : made.fileExtension,
                                           size: scaled.size, milliseconds: (ContinuousClock.now - began).milliseconds, encoding: made.facts)
                return BytesBreakpoints.Trial(width: scaled.size.width, bytes: made.data.count, value: output)
            }
            let outputs = choice.chosen.map(\.value)
            kept = outputs.reduce(0) { $0 + $1.milliseconds }
            let total = (ContinuousClock.now - start).milliseconds
            let facts: FactValue = .object([
                "widths": .list(choice.chosen.map { .int($0.width) }),
                "bytes": .list(choice.chosen.map { .int($0.bytes) }),
                "step": .int(choice.step), "capped": .bool(choice.capped),
                "trials_discarded": .int(choice.discarded), "budget_spent": .bool(choice.budgetSpent),
                "encode_ms": .number((kept * 10).rounded() / 10), "trial_ms": .number(((total - kept) * 10).rounded() / 10),
            ])
            return WidthOutputs(outputs: outputs, facts: facts, milliseconds: total)
        }
    }
}

extension WorkerPool {
    /// Runs `body` on this pool with the calling item's stage context; the item's clock is paused
    /// while the job waits in the queue. A job still queued when the item is cancelled never runs.
    /// Waiting jobs of higher `priority` go first (see ``JobPriority``).
    func inItemContext<T: Sendable>(priority: Int = JobPriority.finishing, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let context = StageContext.current
        return try await run(priority: priority) { try StageContext.withThreadValue(context, body) }
    }
}
