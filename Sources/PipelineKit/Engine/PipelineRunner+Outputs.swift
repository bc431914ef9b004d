import Foundation

/// Steps "encode" and "write": each variant's image to bytes on a CPU worker, then to its
/// destination, whole or not at all.
extension PipelineRunner {
    /// Encodes variant `index`'s final image. Timed inside the job: waiting for a worker is not encoding.
    func encode(_ image: PipelineImage, variant index: Int) async throws -> EncodedOutput {
        let variant = variants[index]
        let encoder = variant.encoder
        var image = image
        image.metadata = metadataPolicy.output(for: image.metadata)
        do {
            return try await onWorker { [image] in
                let start = ContinuousClock.now
                let made = try encoder.encoded(image)
                let chosen = made.fileExtension
                return EncodedOutput(data: made.data, chosenExtension: chosen == encoder.fileExtension ? nil : chosen,
                                     size: image.size, milliseconds: (ContinuousClock.now - start).milliseconds,
                                     encoding: made.facts)
            }
        } catch {
            throw Self.named(classify(error, stage: .encode, kind: .encodeFailed, plugin: variant.encoderName), variant)
        }
    }

    /// Keeps a new encoded output in the data cache, stamped with the source bytes' digest, when
    /// the cache keeps outputs. The stamp keeps the image's facts and, under `encoding`, what the
    /// encoder chose (``storedEncoding(_:)`` takes it back out).
    func storeOutput(_ encoded: EncodedOutput, _ plan: ItemPlan, variant index: Int, stored: StoredOutputs,
                     facts: ImageFacts = [:]) async {
        guard let cache = outputsCache, let digest = stored.digest, let loaded = stored.loaded else { return }
        var stamp = OutputStamp(sourceDigest: digest, width: encoded.size.width, height: encoded.size.height,
                                fileExtension: encoded.chosenExtension)
        var facts = facts
        if !encoded.encoding.isEmpty { facts[Self.encodingFact] = .object(encoded.encoding) }
        stamp.facts = facts.isEmpty ? nil : facts
        let entry = LoadedData(data: encoded.data, contentType: nil, directives: loaded.data.directives)
        await storeQuietly(entry, for: outputKey(plan.key, variants[index]), output: stamp, in: cache)
    }

    /// The fact that holds what each output's encoder chose, a list in the order of the outputs.
    static let encodingFact = "encoding"

    /// A stored output's stamp facts split into the image's facts and what its encoder chose.
    static func storedEncoding(_ facts: ImageFacts?) -> (facts: ImageFacts, encoding: ImageFacts) {
        var facts = facts ?? [:]
        guard case .object(let encoding) = facts.removeValue(forKey: encodingFact) else { return (facts, [:]) }
        return (facts, encoding)
    }
}
