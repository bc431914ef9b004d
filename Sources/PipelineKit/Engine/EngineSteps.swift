import Foundation

// The named values that travel between the engine's steps for one item:
//   plan -> (finished in this run? reuse) -> stored outputs -> load -> decode and process
//        -> encode -> write (to the plan's sink: the destination, or values) -> ItemOutcome
// Each step is one function of PipelineRunner, in the file named after it.

/// A loader with its concurrency limit.
struct LoaderSlot: Sendable {
    let name: String
    let loader: any DataLoading
    let limit: AsyncSemaphore
}

/// One variant, ready to run.
struct RunnableVariant: Sendable {
    let name: String?
    let processors: [any ImageProcessing]
    /// The plugin name of each processor, for failures.
    let processorNames: [String]
    let encoderName: String
    /// `prefixIDs[k]`: identifier of the first k processors (k = 0 is the decoded image).
    let prefixIDs: [String]
    let encoder: any ImageEncoding
    let template: NameTemplate
    /// The recipe part of its outputs' fingerprints (``OutputFingerprint/recipe``).
    let recipe: String
    /// Breakpoints by bytes: one output per width chosen for each image (``Variant/byBytes``).
    var byBytes: BytesBreakpoints? = nil
    /// Scales the variant's image to a width, for ``byBytes``.
    var scaler: StageConfig? = nil
}

/// What one line of the list will make: its loader, its key, and its outputs.
struct ItemPlan: Sendable {
    let source: Source
    let slot: LoaderSlot
    /// The loader's cache key: the item's identity for caches, sharing and de-duplication.
    let key: String
    /// Output paths relative to the output directory, by variant, named with each encoder's
    /// declared extension (an encoder that picks it from the image may change it).
    let planned: [String]
    /// Where its outputs go.
    var delivery: OutputDelivery = .store
    /// The facts sidecar's path, when the pipeline writes one.
    var sidecar: String? = nil
    /// The srcset manifest's path, when a variant has breakpoints by bytes and outputs are stored.
    var srcset: String? = nil

    /// The key work is shared and de-duplicated under: the cache key and the source's version, so
    /// that a re-upload is never answered with what was made of the earlier content.
    var workKey: String { source.version.map { key + "\u{1}" + $0 } ?? key }
}

/// Step "load": the source's bytes and where they came from.
struct LoadedSource: Sendable {
    var data: LoadedData
    var cache: CacheOutcome
    var milliseconds: Double
    /// The decodes of the items this load reached (``SharedDecodes``), when they share one.
    var decodes: SharedDecodes?
}

/// Step "stored outputs": encoded outputs the data cache kept for these very source bytes.
struct StoredOutputs: Sendable {
    /// Usable entries, by variant index.
    var entries: [Int: CachedEntry] = [:]
    /// The source, when it had to be loaded to check the entries.
    var loaded: LoadedSource?
    /// SHA-256 of the loaded bytes, stamped on the outputs made now.
    var digest: String?
    /// Time spent looking and checking, when every output was found.
    var milliseconds: Double = 0
}

/// Step "decode and process": the final image of every variant that was needed.
struct ProcessedImages: Sendable {
    var images: [Int: PipelineImage] = [:]
    var loaded: LoadedSource?
    var cacheImage: CacheOutcome
    var timings = StageTimings()
    /// Why the decode was degraded (see ``PipelineImage/degraded``), when it was.
    var degraded: String?
    /// Whether the decoded image was another item's (``SharedDecodes``).
    var decodeShared = false
    /// Identifies the source bytes (``OutputFingerprint/source``).
    var sourceIdentity: String
}

/// Step "encode": one variant's bytes.
struct EncodedOutput: Sendable {
    let data: Data
    /// The extension the encoder chose from the image, when it differs from the declared one.
    let chosenExtension: String?
    let size: PixelSize
    var milliseconds: Double = 0
    /// What the encoder chose (``EncodedImage/facts``), or what a stored output's stamp recorded.
    var encoding: ImageFacts = [:]
}

/// What one item made, by variant: enough to report it and to reuse it for a duplicate line.
struct ItemOutcome: Sendable {
    /// Planned output paths (relative), as in ``ItemPlan/planned``.
    var planned: [String] = []
    /// Output paths (relative): written now, or kept as they were. One per variant, in variant
    /// order, except that a variant with breakpoints by bytes has one per width
    /// (``variantOf`` says whose each is); every per-output list below follows this one.
    var written: [String] = []
    /// The variant (index) of each output.
    var variantOf: [Int] = []
    /// Outputs that replaced one made from other source bytes or by another recipe (``ItemResult/replaced``).
    var replaced: [String] = []
    /// The srcset manifest of the variants with breakpoints by bytes, when one was stored.
    var srcset: (path: String, state: OutputState, fingerprint: OutputFingerprint)?
    /// What happened to each output, by variant.
    var states: [OutputState] = []
    /// What made each output, by variant.
    var fingerprints: [OutputFingerprint] = []
    /// The facts sidecar, when one was stored: its path, what happened to it, and what made it.
    var sidecar: (path: String, state: OutputState, fingerprint: OutputFingerprint)?
    /// Identifies the source bytes the outputs were made from (``OutputFingerprint/source``).
    var sourceIdentity = ""
    /// The extension each encoder chose, when it differs from the declared one.
    var chosenExtensions: [String?] = []
    /// What each output's encoder chose (``EncodedImage/facts``), by variant; also in ``facts``
    /// under `encoding` when any is not empty.
    var encodings: [ImageFacts] = []
    var size = PixelSize(width: 0, height: 0)
    var bytesIn = 0
    var bytesOut = 0
    var cacheData = CacheOutcome.off
    var cacheImage = CacheOutcome.off
    var timings = StageTimings()
    /// Why the decode was degraded, when it was.
    var degraded: String?
    /// Whether the decoded image was another item's (``SharedDecodes``).
    var decodeShared = false
    /// What analysing processors found (from every variant's image, in variant order).
    var facts: ImageFacts = [:]
    /// Each output's dimensions and size in bytes, by variant.
    var outputSizes: [PixelSize] = []
    var outputBytes: [Int] = []
    /// Set on the outcome handed to a line that named a source another line made, under the very
    /// same names: the line is a duplicate delivery, not an item of its own (not encoded).
    var duplicate = false
    /// The sink the outputs went to (``ItemPlan/delivery``).
    var delivery: OutputDelivery = .store
    /// The outputs themselves, by variant, when they were asked for as values.
    var values: [ImageOutput] = []
}
