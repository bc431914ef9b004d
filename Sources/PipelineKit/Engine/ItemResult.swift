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
    /// What analysing processors (`analyze`) found about the image; empty without them.
    public var facts: ImageFacts = [:]
    /// `on_failure`: the source the outputs were made from instead of the failed one.
    public var alternative: String?
    /// `on_failure`: whether the outputs are the fallback image's.
    public var fallback = false
    /// `on_failure`: the failure an alternative or the fallback stood in for.
    public var recoveredFrom: ItemError?

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
        case bytesIn = "bytes_in", bytesOut = "bytes_out", timings = "timings_ms", cache, degraded, facts
        case alternative, fallback, recoveredFrom = "recovered_from"
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
        if !facts.isEmpty { try c.encode(facts, forKey: .facts) }
        try c.encodeIfPresent(alternative, forKey: .alternative)
        if fallback { try c.encode(true, forKey: .fallback) }
        try c.encodeIfPresent(recoveredFrom, forKey: .recoveredFrom)
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
        facts = try c.decodeIfPresent(ImageFacts.self, forKey: .facts) ?? [:]
        alternative = try c.decodeIfPresent(String.self, forKey: .alternative)
        fallback = try c.decodeIfPresent(Bool.self, forKey: .fallback) ?? false
        recoveredFrom = try c.decodeIfPresent(ItemError.self, forKey: .recoveredFrom)
    }
}

/// Counts for a whole run.
public struct RunSummary: Sendable, Codable {
    public var total = 0
    public var ok = 0
    /// Items whose every output was already there and left as it was.
    public var kept = 0
    public var failed = 0
    public var skipped = 0
    /// Outputs written by this run.
    public var outputsWritten = 0
    /// Outputs already there with the fingerprint this run would write, left as they were.
    public var outputsKept = 0
    /// Outputs already there with another fingerprint, kept because of `existing: keep`.
    public var outputsStale = 0
    /// Items decoded despite damage (`ok`, with ``ItemResult/degraded`` set).
    public var degraded = 0
    /// Items made from an alternative source (`on_failure`).
    public var alternatives = 0
    /// Items made from the fallback image (`on_failure`).
    public var fallbacks = 0
    public var wallSeconds = 0.0
    public var bytesIn = 0
    public var bytesOut = 0
    /// Images the image cache dropped to stay within its limits, when it counts them.
    public var imageCacheEvictions: Int?
    /// When the run was stopped early (Ctrl-C, SIGTERM): the lines of the list it did not start.
    public var notStarted: Int?
    /// When the run was one shard of the list (`--shard K/N`): which, as `K/N`.
    public var shard: String?
    /// When the run was one shard: the lines of the list that belong to other shards (not items here).
    public var otherShards: Int?

    public init() {}

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        total = try c.decode(Int.self, forKey: .total)
        ok = try c.decode(Int.self, forKey: .ok)
        failed = try c.decode(Int.self, forKey: .failed)
        skipped = try c.decode(Int.self, forKey: .skipped)
        kept = try c.decodeIfPresent(Int.self, forKey: .kept) ?? 0
        outputsWritten = try c.decodeIfPresent(Int.self, forKey: .outputsWritten) ?? 0
        outputsKept = try c.decodeIfPresent(Int.self, forKey: .outputsKept) ?? 0
        outputsStale = try c.decodeIfPresent(Int.self, forKey: .outputsStale) ?? 0
        degraded = try c.decodeIfPresent(Int.self, forKey: .degraded) ?? 0  // reports before fail_on have none
        alternatives = try c.decodeIfPresent(Int.self, forKey: .alternatives) ?? 0
        fallbacks = try c.decodeIfPresent(Int.self, forKey: .fallbacks) ?? 0
        wallSeconds = try c.decode(Double.self, forKey: .wallSeconds)
        bytesIn = try c.decode(Int.self, forKey: .bytesIn)
        bytesOut = try c.decode(Int.self, forKey: .bytesOut)
        imageCacheEvictions = try c.decodeIfPresent(Int.self, forKey: .imageCacheEvictions)
        notStarted = try c.decodeIfPresent(Int.self, forKey: .notStarted)
        shard = try c.decodeIfPresent(String.self, forKey: .shard)
        otherShards = try c.decodeIfPresent(Int.self, forKey: .otherShards)
    }

    enum CodingKeys: String, CodingKey {
        case total, ok, kept, failed, skipped, degraded, alternatives, fallbacks
        case outputsWritten = "outputs_written", outputsKept = "outputs_kept", outputsStale = "outputs_stale"
        case wallSeconds = "wall_seconds", bytesIn = "bytes_in", bytesOut = "bytes_out"
        case imageCacheEvictions = "image_cache_evictions", notStarted = "not_started"
        case shard, otherShards = "other_shards"
    }

    /// The counts of several runs (the shards of one list) as one: sums, and the longest wall time.
    public static func merged(_ parts: [RunSummary]) -> RunSummary {
        var all = RunSummary()
        for part in parts {
            all.total += part.total
            all.ok += part.ok
            all.failed += part.failed
            all.skipped += part.skipped
            all.kept += part.kept
            all.outputsWritten += part.outputsWritten
            all.outputsKept += part.outputsKept
            all.outputsStale += part.outputsStale
            all.degraded += part.degraded
            all.alternatives += part.alternatives
            all.fallbacks += part.fallbacks
            all.wallSeconds = max(all.wallSeconds, part.wallSeconds)
            all.bytesIn += part.bytesIn
            all.bytesOut += part.bytesOut
            if let evictions = part.imageCacheEvictions { all.imageCacheEvictions = (all.imageCacheEvictions ?? 0) + evictions }
            if let notStarted = part.notStarted { all.notStarted = (all.notStarted ?? 0) + notStarted }
        }
        return all
    }

    /// Adds one item's figures.
    public mutating func add(_ item: ItemResult) {
        total += 1
        switch item.status {
        case .ok: ok += 1
        case .kept: kept += 1
        case .failed: failed += 1
        case .skipped: skipped += 1
        }
        if item.status == .ok || item.status == .kept {
            outputsKept += item.kept.count
            outputsStale += item.stale.count
            outputsWritten += item.outputs.count - item.kept.count - item.stale.count
        }
        if item.degraded != nil { degraded += 1 }
        if item.alternative != nil { alternatives += 1 }
        if item.fallback { fallbacks += 1 }
        bytesIn += item.bytesIn
        bytesOut += item.bytesOut
    }
}

/// The JSON report `pipelinectl run --report FILE` writes.
public struct RunReport: Sendable, Codable {
    /// The version of this format; bumped when a field changes meaning or goes away.
    public static let currentVersion = 1

    public var reportVersion: Int = RunReport.currentVersion
    public var pipeline: String
    public var summary: RunSummary
    /// Per-stage times and cache figures over the items.
    public var stats: RunStatistics { RunStatistics(items) }
    /// Items in list order.
    public var items: [ItemResult]

    enum CodingKeys: String, CodingKey {
        case reportVersion = "report_version", pipeline, summary, stats, items
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(reportVersion, forKey: .reportVersion)
        try c.encode(pipeline, forKey: .pipeline)
        try c.encode(summary, forKey: .summary)
        try c.encode(stats, forKey: .stats)
        try c.encode(items, forKey: .items)
    }

    public init(pipeline: String, summary: RunSummary, items: [ItemResult]) {
        self.pipeline = pipeline
        self.summary = summary
        self.items = items
    }

    /// Several reports (the shards of one list) as one: the items of all in list order, the
    /// counts summed (``RunSummary/merged(_:)``). One report is returned as it is.
    public static func merged(_ reports: [RunReport]) -> RunReport {
        guard reports.count != 1 else { return reports[0] }
        let names = Array(Set(reports.map(\.pipeline))).sorted()
        return RunReport(pipeline: names.joined(separator: "+"), summary: RunSummary.merged(reports.map(\.summary)),
                         items: reports.flatMap(\.items).sorted { $0.index < $1.index })
    }

    /// Reads a report written with `--report` (JSON) or `--report-format jsonl`. A JSONL report of a
    /// run that was killed has no summary line: the summary is then counted from its items.
    public static func read(_ data: Data) throws -> RunReport {
        let decoder = JSONDecoder()
        if let whole = try? decoder.decode(RunReport.self, from: data) { return whole }
        let text = String(decoding: data, as: UTF8.self)
        do {
            var pipeline = "", summary: RunSummary?, items: [ItemResult] = []
            for line in text.split(separator: "\n") where !line.trimmingCharacters(in: .whitespaces).isEmpty {
                let bytes = Data(line.utf8)
                let head = try decoder.decode(StreamLine.self, from: bytes)
                switch head.type {
                case "run": pipeline = head.pipeline ?? ""
                case "item": items.append(try decoder.decode(ItemResult.self, from: bytes))
                case "summary": summary = try decoder.decode(RunSummary.self, from: bytes)
                default: break
                }
            }
            var counted = RunSummary()
            for item in items { counted.add(item) }
            return RunReport(pipeline: pipeline, summary: summary ?? counted, items: items.sorted { $0.index < $1.index })
        }
    }

    struct StreamLine: Decodable {
        let type: String
        let pipeline: String?
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        reportVersion = try c.decodeIfPresent(Int.self, forKey: .reportVersion) ?? 1
        pipeline = try c.decode(String.self, forKey: .pipeline)
        summary = try c.decode(RunSummary.self, forKey: .summary)
        items = try c.decode([ItemResult].self, forKey: .items)
    }

    /// Pretty-printed JSON with stable key order.
    public func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }
}

/// Figures over a run's items: milliseconds per stage (p50, p95, max, over the items that ran the
/// stage) and cache outcomes.
public struct RunStatistics: Sendable, Codable, Equatable {
    public struct Times: Sendable, Codable, Equatable {
        public let p50: Double
        public let p95: Double
        public let max: Double
        public let count: Int
    }
    public struct CacheCounts: Sendable, Codable, Equatable {
        public var hit = 0
        public var miss = 0
        public var off = 0
        public var revalidated = 0
        public var processedHit = 0

        enum CodingKeys: String, CodingKey { case hit, miss, off, revalidated, processedHit = "processed_hit" }

        public init() {}

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            hit = try c.decodeIfPresent(Int.self, forKey: .hit) ?? 0
            miss = try c.decodeIfPresent(Int.self, forKey: .miss) ?? 0
            off = try c.decodeIfPresent(Int.self, forKey: .off) ?? 0
            revalidated = try c.decodeIfPresent(Int.self, forKey: .revalidated) ?? 0
            processedHit = try c.decodeIfPresent(Int.self, forKey: .processedHit) ?? 0
        }

        /// Counts one item's outcome.
        public mutating func add(_ outcome: CacheOutcome) {
            switch outcome {
            case .hit: hit += 1
            case .miss: miss += 1
            case .off: off += 1
            case .revalidated: revalidated += 1
            case .processedHit: processedHit += 1
            }
        }

        /// Items that used the cache.
        public var used: Int { hit + miss + revalidated + processedHit }
        /// Items served without a full load, over those that used the cache.
        public var hitRate: Double? { used == 0 ? nil : Double(hit + revalidated + processedHit) / Double(used) }
    }

    /// By stage name (`load`, `decode`, `process`, `encode`), in milliseconds.
    public let stagesMs: [String: Times]
    /// By cache (`data`, `image`).
    public let cache: [String: CacheCounts]

    enum CodingKeys: String, CodingKey { case stagesMs = "stages_ms", cache }

    public init(_ items: [ItemResult]) {
        var builder = Builder()
        for item in items { builder.add(item) }
        self = builder.statistics
    }

    init(stagesMs: [String: Times], cache: [String: CacheCounts]) {
        self.stagesMs = stagesMs
        self.cache = cache
    }

    /// Collects the figures item by item, keeping only what they need (four numbers and two
    /// outcomes per item), so a long run does not hold every ``ItemResult``.
    public struct Builder: Sendable {
        private var times: [String: [Double]] = ["load": [], "decode": [], "process": [], "encode": []]
        private var cache = ["data": CacheCounts(), "image": CacheCounts()]

        public init() {}

        public mutating func add(_ item: ItemResult) {
            for (name, value) in [("load", item.timings.load), ("decode", item.timings.decode),
                                  ("process", item.timings.process), ("encode", item.timings.encode)] where value > 0 {
                times[name]!.append(value)
            }
            cache["data"]!.add(item.cacheData)
            cache["image"]!.add(item.cacheImage)
        }

        public var statistics: RunStatistics {
            var stages: [String: Times] = [:]
            for (name, unsorted) in times where !unsorted.isEmpty {
                let values = unsorted.sorted()
                func rank(_ p: Double) -> Double { values[Swift.min(values.count, Swift.max(1, Int((Double(values.count) * p).rounded(.up)))) - 1] }
                stages[name] = Times(p50: rank(0.5), p95: rank(0.95), max: values.last!, count: values.count)
            }
            return RunStatistics(stagesMs: stages, cache: cache)
        }
    }
}
