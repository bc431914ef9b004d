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

extension WorkerPool {
    /// Runs `body` on this pool with the calling item's stage context; the item's clock is paused
    /// while the job waits in the queue. A job still queued when the item is cancelled never runs.
    /// Waiting jobs of higher `priority` go first (see ``JobPriority``).
    func inItemContext<T: Sendable>(priority: Int = JobPriority.finishing, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let context = StageContext.current
        return try await run(priority: priority) { try StageContext.withThreadValue(context, body) }
    }
}
