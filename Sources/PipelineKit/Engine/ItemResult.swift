import Foundation

/// How one item ended.
public enum ItemStatus: String, Sendable, Codable {
    /// Its outputs were made, and at least one was written by this run.
    case ok
    /// Every output was already at its path and left there (see ``ItemResult/kept`` and ``ItemResult/stale``).
    case kept
    case failed
    /// `--resume` found its outputs complete and did not load the source.
    case skipped
}

/// Whether a cache answered for an item: `hit`, `miss`, or `off` (no cache in that slot, or not
/// used for this source).
public enum CacheOutcome: String, Sendable, Codable {
    case hit, miss, off
    /// The data cache's entry was stale; the source answered "not modified" and the entry was used.
    case revalidated
    /// Every output came from the data cache's processed entries: nothing decoded or encoded.
    case processedHit = "processed_hit"
}

/// The failure of one item, as it appears in reports.
public struct ItemError: Sendable, Codable, Equatable {
    public let stage: StageName
    public let kind: ErrorKind
    public let message: String
    /// The plugin that failed, when one did (`http`, `imagemagick`, a custom plugin's name).
    public var plugin: String?

    public init(stage: StageName, kind: ErrorKind, message: String, plugin: String? = nil) {
        self.stage = stage
        self.kind = kind
        self.message = message
        self.plugin = plugin
    }

    enum CodingKeys: String, CodingKey { case stage, kind, message, plugin }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(stage, forKey: .stage)
        try c.encode(kind, forKey: .kind)
        try c.encode(message, forKey: .message)
        try c.encode(plugin, forKey: .plugin)
    }
}

/// Milliseconds spent in each stage for one item (0 when the stage did not run for it).
public struct StageTimings: Sendable, Codable, Equatable {
    public var load: Double = 0
    public var decode: Double = 0
    public var process: Double = 0
    public var encode: Double = 0
    public init(load: Double = 0, decode: Double = 0, process: Double = 0, encode: Double = 0) {
        self.load = load
        self.decode = decode
        self.process = process
        self.encode = encode
    }
}

/// What happened to one line of the list.
public struct ItemResult: Sendable, Codable {
    public var source: String
    /// 1-based line number in the list.
    public var index: Int
    public var status: ItemStatus
    /// Every output of the item, by variant, then the facts sidecar when there is one: paths
    /// (relative to the working directory when the output dir is) or URLs (`s3://bucket/key`).
    public var outputs: [String] = []
    /// The outputs that were already there with the fingerprint this run would write, and were left
    /// as they were (not written again).
    public var kept: [String] = []
    /// The outputs that were already there with another fingerprint (or none), and were kept
    /// because the pipeline says `existing: keep`: they are not what this pipeline makes.
    public var stale: [String] = []
    public var error: ItemError?
    /// Dimensions of the final image.
    public var width: Int?
    public var height: Int?
    /// Bytes loaded (or read from the data cache) and written.
    public var bytesIn: Int = 0
    public var bytesOut: Int = 0
    public var timings = StageTimings()
    public var cacheData: CacheOutcome = .off
    public var cacheImage: CacheOutcome = .off
    /// When the decoder decoded a damaged source anyway (`fail_on` allowed it): why its pixels
    /// may be incomplete. The item is `ok`, and counted as degraded in the summary.
    public var degraded: String?
    /// Whether the item used a decode another item made: one the same load reached, with the same
    /// decoder and options (the service's sizes of one source asked for at once; the decode is
    /// planned for the largest). Its `decode` time is then the time it waited for that image.
    public var decodeShared = false
    /// What analysing processors (`analyze`) found about the image; empty without them.
    public var facts: ImageFacts = [:]
    /// `on_failure`: the source the outputs were made from instead of the failed one.
    public var alternative: String?
    /// `on_failure`: whether the outputs are the fallback image's.
    public var fallback = false
    /// `on_failure`: the failure an alternative or the fallback stood in for.
    public var recoveredFrom: ItemError?
    /// Whether this line named a source (with the same ``Source/version``) that an earlier line
    /// of the run, or one in flight, already made under the same names: a duplicate delivery. It
    /// wrote nothing; the summary and metrics count it as a duplicate, not as an item.
    public var duplicate = false
    /// Whether the outputs came from work this run did for another line of the same source
    /// (shared in flight, or made earlier): no load, no cache lookup, no decode of its own.
    public var shared = false
    /// Each output's variant, path, dimensions, size and format, in variant order.
    public var variants: [VariantOutput] = []
    /// With `notify:`: the item's "ready" event, and whether it was delivered or is pending.
    public var event: EventState?
    /// Outputs written over one made from other source bytes or by another recipe (a re-upload,
    /// a changed pipeline), under `existing: replace_if_changed`: what a CDN may still serve.
    public var replaced: [String] = []
    /// With `work --purge-replaced`: what the purgers said for an item that replaced outputs
    /// (`purged`, or the failure).
    public var purge: String?
    /// The W3C trace id (32 hex digits) of the item's span, when the tracer it ran under
    /// propagates W3C trace context (`nil` with none set up): the key from a report line, a log
    /// line or a failed answer to the item's trace.
    public var traceID: String?

    public init(source: String, index: Int, status: ItemStatus) {
        self.source = source
        self.index = index
        self.status = status
    }

    /// Whether the item failed because of where results go, not because of its source: an output
    /// (or a store it needs) could not be written. A rerun with `--resume` may well succeed, so
    /// `pipelinectl run` exits 3 (retry) rather than 1.
    public var failedOnOurSide: Bool {
        guard status == .failed, let error else { return false }
        return error.stage == .output && error.kind != .outputCollision
    }

    enum CodingKeys: String, CodingKey {
        case source, index, status, outputs, kept, stale, error, width, height
        case bytesIn = "bytes_in", bytesOut = "bytes_out", timings = "timings_ms", cache, degraded, decodeShared = "decode_shared", facts
        case alternative, fallback, recoveredFrom = "recovered_from"
        case duplicate, shared, variants, event, replaced, purge, traceID = "trace_id"
    }
    struct Cache: Codable { var data: CacheOutcome; var image: CacheOutcome }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(source, forKey: .source)
        try c.encode(index, forKey: .index)
        try c.encode(status, forKey: .status)
        try c.encode(outputs, forKey: .outputs)
        if !kept.isEmpty { try c.encode(kept, forKey: .kept) }
        if !stale.isEmpty { try c.encode(stale, forKey: .stale) }
        try c.encode(error, forKey: .error)  // null when absent, as the report format says
        try c.encode(width, forKey: .width)
        try c.encode(height, forKey: .height)
        try c.encode(bytesIn, forKey: .bytesIn)
        try c.encode(bytesOut, forKey: .bytesOut)
        try c.encode(timings, forKey: .timings)
        try c.encode(Cache(data: cacheData, image: cacheImage), forKey: .cache)
        try c.encodeIfPresent(degraded, forKey: .degraded)
        if decodeShared { try c.encode(true, forKey: .decodeShared) }
        if !facts.isEmpty { try c.encode(facts, forKey: .facts) }
        try c.encodeIfPresent(alternative, forKey: .alternative)
        if fallback { try c.encode(true, forKey: .fallback) }
        try c.encodeIfPresent(recoveredFrom, forKey: .recoveredFrom)
        if duplicate { try c.encode(true, forKey: .duplicate) }
        if shared { try c.encode(true, forKey: .shared) }
        if !variants.isEmpty { try c.encode(variants, forKey: .variants) }
        try c.encodeIfPresent(event, forKey: .event)
        if !replaced.isEmpty { try c.encode(replaced, forKey: .replaced) }
        try c.encodeIfPresent(purge, forKey: .purge)
        try c.encodeIfPresent(traceID, forKey: .traceID)
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        source = try c.decode(String.self, forKey: .source)
        index = try c.decodeIfPresent(Int.self, forKey: .index) ?? 0
        status = try c.decode(ItemStatus.self, forKey: .status)
        outputs = try c.decodeIfPresent([String].self, forKey: .outputs) ?? []
        kept = try c.decodeIfPresent([String].self, forKey: .kept) ?? []
        stale = try c.decodeIfPresent([String].self, forKey: .stale) ?? []
        error = try c.decodeIfPresent(ItemError.self, forKey: .error)
        width = try c.decodeIfPresent(Int.self, forKey: .width)
        height = try c.decodeIfPresent(Int.self, forKey: .height)
        bytesIn = try c.decodeIfPresent(Int.self, forKey: .bytesIn) ?? 0
        bytesOut = try c.decodeIfPresent(Int.self, forKey: .bytesOut) ?? 0
        timings = try c.decodeIfPresent(StageTimings.self, forKey: .timings) ?? StageTimings()
        let cache = try c.decodeIfPresent(Cache.self, forKey: .cache)
        cacheData = cache?.data ?? .off
        cacheImage = cache?.image ?? .off
        degraded = try c.decodeIfPresent(String.self, forKey: .degraded)
        decodeShared = try c.decodeIfPresent(Bool.self, forKey: .decodeShared) ?? false
        facts = try c.decodeIfPresent(ImageFacts.self, forKey: .facts) ?? [:]
        alternative = try c.decodeIfPresent(String.self, forKey: .alternative)
        fallback = try c.decodeIfPresent(Bool.self, forKey: .fallback) ?? false
        recoveredFrom = try c.decodeIfPresent(ItemError.self, forKey: .recoveredFrom)
        duplicate = try c.decodeIfPresent(Bool.self, forKey: .duplicate) ?? false
        shared = try c.decodeIfPresent(Bool.self, forKey: .shared) ?? false
        variants = try c.decodeIfPresent([VariantOutput].self, forKey: .variants) ?? []
        event = try c.decodeIfPresent(EventState.self, forKey: .event)
        replaced = try c.decodeIfPresent([String].self, forKey: .replaced) ?? []
        purge = try c.decodeIfPresent(String.self, forKey: .purge)
        traceID = try c.decodeIfPresent(String.self, forKey: .traceID)
    }
}

/// One output of an item, as the report lists it (`variants` in each item's line).
public struct VariantOutput: Sendable, Codable, Equatable {
    /// The variant's name (`variants:`), or `nil` for a pipeline's single output.
    public var name: String?
    /// Where it is: a path (relative to the working directory when the output dir is) or a URL.
    public var path: String
    public var width: Int
    public var height: Int
    /// Its size in bytes.
    public var bytes: Int
    /// The format, as its file extension (`jpg`, `webp`, `avif`, `png`).
    public var format: String

    public init(name: String?, path: String, width: Int, height: Int, bytes: Int, format: String) {
        self.name = name
        self.path = path
        self.width = width
        self.height = height
        self.bytes = bytes
        self.format = format
    }
}

