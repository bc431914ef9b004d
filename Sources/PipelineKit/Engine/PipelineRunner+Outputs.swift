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

    /// With `output.facts_sidecar`, the item's facts as JSON under the sidecar's own name (by
    /// default `{stem}-{hash8}.json`), stored as outputs are.
    func writeFactsSidecar(_ plan: ItemPlan, into outcome: inout ItemOutcome) async throws {
        guard let path = plan.sidecar, !outcome.facts.isEmpty else { return }
        let json = JSONEncoder.sorted
        json.outputFormatting.insert(.prettyPrinted)
        let file = OutputFile(relative: path, data: try json.encode(outcome.facts),
                              fingerprint: OutputFingerprint(recipe: factsRecipe, source: outcome.sourceIdentity))
        do { outcome.sidecar = (path, try await store(file), file.fingerprint) } catch {
            throw classify(error, stage: .output, kind: .writeFailed)
        }
    }

    /// Hands variant `index`'s bytes to the plan's sink: stored under its planned name (with the
    /// extension the encoder chose), or kept as a value; adds it to `outcome`, whose
    /// ``ItemOutcome/sourceIdentity`` is set. A failure names the variant.
    func write(_ encoded: EncodedOutput, _ plan: ItemPlan, variant index: Int, into outcome: inout ItemOutcome) async throws {
        let variant = variants[index]
        let path = outputPath(plan.planned[index], variant, source: plan.source, key: plan.key,
                              fileExtension: encoded.chosenExtension)
        let fingerprint = OutputFingerprint(recipe: variant.recipe, source: outcome.sourceIdentity)
        let state: OutputState
        switch plan.delivery {
        case .store, .factsOnly:
            do { state = try await store(OutputFile(relative: path, data: encoded.data, fingerprint: fingerprint)) } catch {
                throw Self.named(classify(error, stage: .output, kind: .writeFailed), variant)
            }
        case .values:
            outcome.values.append(try await value(encoded, name: path, variant: variant, fingerprint: fingerprint))
            state = .written
        }
        if outcome.written.isEmpty { outcome.size = encoded.size }
        outcome.written.append(path)
        outcome.states.append(state)
        outcome.fingerprints.append(fingerprint)
        outcome.encodings.append(encoded.encoding)
        if outcome.encodings.contains(where: { !$0.isEmpty }) {
            outcome.facts[Self.encodingFact] = .list(outcome.encodings.map { .object($0) })
        }
        outcome.chosenExtensions.append(encoded.chosenExtension)
        outcome.outputSizes.append(encoded.size)
        outcome.outputBytes.append(encoded.data.count)
        if state == .written { outcome.bytesOut += encoded.data.count }
    }

    /// An encoded output as a value: in memory, or spooled to a temporary file past
    /// ``RunOptions/spoolThreshold`` (on the I/O threads).
    func value(_ encoded: EncodedOutput, name: String, variant: RunnableVariant, fingerprint: OutputFingerprint) async throws -> ImageOutput {
        var body = ImageOutput.Body.data(encoded.data)
        if encoded.data.count > options.spoolThreshold {
            let data = encoded.data, directory = options.spoolDirectory ?? NSTemporaryDirectory()
            do { body = .file(try await WorkerPool.io.run { try SpooledFile.spool(data, in: directory) }) } catch {
                throw Self.named(classify(error, stage: .output, kind: .writeFailed), variant)
            }
        }
        let ext = encoded.chosenExtension ?? variant.encoder.fileExtension
        return ImageOutput(variant: variant.name, name: name, body: body, mediaType: OutputFile.contentType("x." + ext),
                           fileExtension: ext, size: encoded.size, byteCount: encoded.data.count, fingerprint: fingerprint,
                           encoding: encoded.encoding)
    }

    /// Stores one output as `output.existing` says: an output already at its path is kept when
    /// its fingerprint is this one (`replace_if_changed`, `keep`), replaced otherwise
    /// (`replace_if_changed`, `replace`) or kept and reported stale (`keep`).
    func store(_ file: OutputFile) async throws -> OutputState {
        switch existing {
        case .replace:
            try await destination.write(file)
            return .written
        case .replaceIfChanged:
            guard let there = try await destination.create(file) else { return .written }
            if there.fingerprint == file.fingerprint { return .kept }
            try await destination.write(file)
            return .written
        case .keep:
            guard let there = try await destination.create(file) else { return .written }
            return there.fingerprint == file.fingerprint ? .kept : .stale
        }
    }
}
