import Foundation

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

