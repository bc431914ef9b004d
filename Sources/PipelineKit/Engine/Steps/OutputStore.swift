import Foundation
import Logging
import Synchronization

/// Step "store": where an item's outputs go and under which names. It claims each planned name
/// for one source, hands each encoded output to the plan's sink (stored by the destination as
/// `output.existing` says, or kept as a value), writes the facts sidecar, answers `--resume`
/// from what is already stored, and records what a run completed.
///
/// Takes an ``EncodedOutput`` and the ``ItemPlan``; adds to the ``ItemOutcome``. A failure is a
/// `write_failed` (or the destination's own kind) at the `output` stage, naming the variant.
struct OutputStore: Sendable {
    let destination: any OutputDestination
    /// What happens to an output already at its path (`output.existing`).
    let existing: ExistingOutputs
    /// The facts sidecar's name (`output.facts_sidecar`, `output.facts_name`), when there is one.
    let factsName: NameTemplate?
    /// The recipe part of the facts sidecar's fingerprint: the recipes of every variant.
    let factsRecipe: String
    /// The run record `--resume` reads (a local directory only).
    let manifest: CompletionManifest
    let claims: OutputClaims
    /// Outputs handed back as values past this size are spooled to a file (``RunOptions/spoolThreshold``).
    let spoolThreshold: Int
    let spoolDirectory: String?
    let logger: Logger

    /// Claims the names an item plans to store under for its source (`path` is relative).
    func claim(_ path: String, key: String, source: Source) throws {
        try claims.claim(path, key: key, line: source.index) { destination.location(path) }
    }

    /// Hands `variant`'s bytes (the item's output `index`) to the plan's sink: stored under its
    /// planned name (with the extension the encoder chose), or kept as a value; adds it to
    /// `outcome`, whose ``ItemOutcome/sourceIdentity`` is set.
    /// A variant with breakpoints by bytes names each output by its width, claimed here.
    func write(_ encoded: EncodedOutput, _ plan: ItemPlan, variant: RunnableVariant, index: Int,
               into outcome: inout ItemOutcome) async throws {
        let path: String
        if variant.byBytes != nil {
            path = variant.template.render(source: plan.source, cacheKey: plan.key,
                                           fileExtension: encoded.chosenExtension ?? variant.encoder.fileExtension,
                                           variant: variant.name, width: encoded.size.width)
            if plan.delivery == .store { try claim(path, key: plan.key, source: plan.source) }
        } else {
            path = variant.outputPath(plan.planned[index], source: plan.source, key: plan.key, fileExtension: encoded.chosenExtension)
        }
        let fingerprint = OutputFingerprint(recipe: variant.recipe, source: outcome.sourceIdentity)
        let state: OutputState
        switch plan.delivery {
        case .store, .factsOnly:
            do {
                let replaced: Bool
                (state, replaced) = try await storeNoting(OutputFile(relative: path, data: encoded.data, fingerprint: fingerprint))
                if replaced { outcome.replaced.append(path) }
            } catch {
                throw StepFailure.classify(error, stage: .output, kind: .writeFailed, variant: variant)
            }
        case .values:
            outcome.values.append(try await value(encoded, name: path, variant: variant, fingerprint: fingerprint))
            state = .written
        }
        outcome.add(encoded, path: path, state: state, fingerprint: fingerprint, variant: index)
    }

    /// An encoded output as a value: in memory, or spooled to a temporary file past
    /// ``spoolThreshold`` (on the I/O threads).
    func value(_ encoded: EncodedOutput, name: String, variant: RunnableVariant, fingerprint: OutputFingerprint) async throws -> ImageOutput {
        var body = ImageOutput.Body.data(encoded.data)
        if encoded.data.count > spoolThreshold {
            let data = encoded.data, directory = spoolDirectory ?? NSTemporaryDirectory()
            do { body = .file(try await WorkerPool.io.run { try SpooledFile.spool(data, in: directory) }) } catch {
                throw StepFailure.classify(error, stage: .output, kind: .writeFailed, variant: variant)
            }
        }
        let ext = encoded.chosenExtension ?? variant.encoder.fileExtension
        return ImageOutput(variant: variant.name, name: name, body: body, mediaType: OutputFile.contentType("x." + ext),
                           fileExtension: ext, size: encoded.size, byteCount: encoded.data.count, fingerprint: fingerprint,
                           encoding: encoded.encoding)
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
            throw StepFailure.classify(error, stage: .output, kind: .writeFailed)
        }
    }

    /// With variants of breakpoints by bytes, the srcset manifest beside the facts sidecar
    /// (``ItemPlan/srcset``): for each such variant, its outputs narrowest first, the `srcset`
    /// attribute and an `<img>` snippet. Names are the outputs' names, relative to the output
    /// directory, as a page that serves the directory links them.
    func writeSrcsetManifest(_ plan: ItemPlan, variants: [RunnableVariant], into outcome: inout ItemOutcome) async throws {
        guard let path = plan.srcset else { return }
        var manifest = SrcsetManifest(source: plan.source.text)
        for (index, variant) in variants.enumerated() {
            guard let breakpoints = variant.byBytes else { continue }
            let outputs = outcome.written.indices.filter { outcome.variantOf[$0] == index }
            let images = outputs.map { at in
                SrcsetManifest.Image(path: outcome.written[at], width: outcome.outputSizes[at].width,
                                     height: outcome.outputSizes[at].height, bytes: outcome.outputBytes[at],
                                     type: OutputFile.contentType(outcome.written[at]))
            }
            manifest.variants[variant.name ?? ""] = SrcsetManifest.Entry(images: images, sizes: breakpoints.sizes)
        }
        let json = JSONEncoder.sorted
        json.outputFormatting.insert(.prettyPrinted)
        let recipe = OutputFingerprint.recipe("srcset:" + variants.filter { $0.byBytes != nil }.map(\.recipe).joined(separator: ","))
        let file = OutputFile(relative: path, data: try json.encode(manifest),
                              fingerprint: OutputFingerprint(recipe: recipe, source: outcome.sourceIdentity))
        do { outcome.srcset = (path, try await store(file), file.fingerprint) } catch {
            throw StepFailure.classify(error, stage: .output, kind: .writeFailed)
        }
        outcome.facts["srcset_manifest"] = .string(destination.location(path))
    }

    /// Stores one output as `output.existing` says: an output already at its path is kept when
    /// its fingerprint is this one (`replace_if_changed`, `keep`), replaced otherwise
    /// (`replace_if_changed`, `replace`) or kept and reported stale (`keep`).
    func store(_ file: OutputFile) async throws -> OutputState { try await storeNoting(file).state }

    /// ``store(_:)``, and whether the output replaced one made otherwise (from other source
    /// bytes or by another recipe): a re-upload, whose answers a CDN may still hold. Known under
    /// `replace_if_changed` (the default); `replace` writes without looking.
    func storeNoting(_ file: OutputFile) async throws -> (state: OutputState, replaced: Bool) {
        switch existing {
        case .replace:
            try await destination.write(file)
            return (.written, false)
        case .replaceIfChanged:
            guard let there = try await destination.create(file) else { return (.written, false) }
            if there.fingerprint == file.fingerprint { return (.kept, false) }
            try await destination.write(file)
            return (.written, true)
        case .keep:
            guard let there = try await destination.create(file) else { return (.written, false) }
            return (there.fingerprint == file.fingerprint ? .kept : .stale, false)
        }
    }

    /// Stores a copy of the output at `from` (made for the same source earlier in this run) as `to`.
    func copy(_ from: String, to: String, fingerprint: OutputFingerprint) async throws -> OutputState {
        guard let data = try await destination.read(from) else {
            throw PipelineError(.notFound, "the output '\(destination.location(from))' made for the same source earlier in this run is gone")
        }
        return try await store(OutputFile(relative: to, data: data, fingerprint: fingerprint))
    }

    /// For `--resume`: the item's outputs when every one is already there, made by the same recipe
    /// (`recipes`, one per variant: what the pipeline would make; the source is not loaded again),
    /// `nil` otherwise. In a local directory the run record says which outputs a run completed (and
    /// under which names); an output whose recorded fingerprint has another recipe is made again.
    func alreadyWritten(_ plan: ItemPlan, recipes: [String]) async throws -> [String]? {
        let paths: [String]
        if let directory = destination.localDirectory {
            guard let done = manifest.completed(plan.planned, in: directory) else { return nil }
            paths = done
        } else {
            paths = plan.planned
        }
        for (index, path) in paths.enumerated() {
            guard let there = try await destination.stored(path) else { return nil }
            // Without a recorded fingerprint only the local record vouches for the output.
            if let fingerprint = there.fingerprint {
                guard fingerprint.recipe == recipes[index] else { return nil }
            } else if destination.localDirectory == nil {
                return nil
            }
        }
        if let sidecar = plan.sidecar, try await destination.stored(sidecar) != nil { return paths + [sidecar] }
        return paths
    }

    /// Records the item's outputs as complete, for `--resume`; a record that cannot be written is
    /// logged (the outputs are stored: the item is not failed for it).
    func recordCompleted(_ outcome: ItemOutcome) {
        do { try manifest.record(outcome.planned, as: outcome.written) } catch {
            logger.warning("cannot record completed outputs", metadata: ["manifest": "\(manifest.path)", "error": "\(error)"])
        }
    }

    /// Where reports show the output at `path`: the destination's location when stored, the name
    /// alone when handed back as a value.
    func location(_ path: String, _ delivery: OutputDelivery) -> String {
        delivery == .store ? destination.location(path) : path
    }
}

/// The names outputs were stored under in this run, so that two different sources never write one
/// output: by hash (path -> source key and line), small per item, so that a list of millions of
/// lines is checked without holding its text. Only names two sources could share are recorded:
/// not when every name template has `{hash}` or `{index}` (the default does), so that memory does
/// not grow with the list.
final class OutputClaims: Sendable {
    let enabled: Bool
    private let claims = Mutex<[Int: (key: Int, line: Int)]>([:])

    init(enabled: Bool) { self.enabled = enabled }

    /// Records that `path` is the output of `key` (line `line`); throws `output_collision`
    /// naming the line that claimed it first when another source did.
    func claim(_ path: String, key: String, line: Int, location: () -> String) throws {
        guard enabled else { return }
        let other = claims.withLock { claims -> Int? in
            if let existing = claims[path.hashValue] { return existing.key == key.hashValue ? nil : existing.line }
            claims[path.hashValue] = (key.hashValue, line)
            return nil
        }
        if let other {
            throw PipelineError(.outputCollision,
                                "output '\(location())' is already the output of line \(other) of the list; use {hash} or {index} in output.name",
                                stage: .output)
        }
    }
}

extension RunnableVariant {
    /// The output's path relative to the output directory; `fileExtension` for `{ext}` (default:
    /// the encoder's declared extension).
    func relativeOutputPath(source: Source, key: String, fileExtension: String?) -> String {
        template.render(source: source, cacheKey: key, fileExtension: fileExtension ?? encoder.fileExtension, variant: name)
    }

    /// The path an output is written to: the planned one, or the same name with the extension the
    /// encoder chose from the image.
    func outputPath(_ planned: String, source: Source, key: String, fileExtension: String?) -> String {
        guard let fileExtension else { return planned }
        return relativeOutputPath(source: source, key: key, fileExtension: fileExtension)
    }
}

extension ItemOutcome {
    /// Adds one written (or kept) output: every per-output list grows together.
    mutating func add(_ encoded: EncodedOutput, path: String, state: OutputState, fingerprint: OutputFingerprint, variant: Int) {
        if written.isEmpty { size = encoded.size }
        written.append(path)
        variantOf.append(variant)
        states.append(state)
        fingerprints.append(fingerprint)
        encodings.append(encoded.encoding)
        if encodings.contains(where: { !$0.isEmpty }) {
            facts[StoredOutputsStep.encodingFact] = .list(encodings.map { .object($0) })
        }
        chosenExtensions.append(encoded.chosenExtension)
        outputSizes.append(encoded.size)
        outputBytes.append(encoded.data.count)
        if state == .written { bytesOut += encoded.data.count }
    }
}

/// The srcset manifest of one item: what a page needs to show the widths of breakpoints by bytes.
struct SrcsetManifest: Codable, Sendable {
    struct Image: Codable, Sendable {
        var path: String
        var width: Int
        var height: Int
        var bytes: Int
        var type: String
    }

    struct Entry: Codable, Sendable {
        /// Narrowest first.
        var images: [Image]
        var sizes: String
        var srcset: String
        /// `<img src srcset sizes width height>`, the widest as `src`.
        var img: String

        init(images: [Image], sizes: String) {
            self.images = images
            self.sizes = sizes
            srcset = images.map { "\(Self.escaped($0.path)) \($0.width)w" }.joined(separator: ", ")
            if let widest = images.last {
                img = "<img src=\"\(Self.escaped(widest.path))\" srcset=\"\(srcset)\" sizes=\"\(Self.escaped(sizes))\" "
                    + "width=\"\(widest.width)\" height=\"\(widest.height)\" alt=\"\">"
            } else {
                img = ""
            }
        }

        /// `text` safe inside a double-quoted HTML attribute (a name is never a URL with commas:
        /// names keep to `A-Z a-z 0-9 . _ - /`).
        static func escaped(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
                .replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        }
    }

    var source: String
    /// By variant name.
    var variants: [String: Entry] = [:]
}
