import Foundation

/// Counts for a whole run.
public struct RunSummary: Sendable, Codable {
    /// Items: sources worked, each once however often the list or the queue named it. (Reports
    /// before version 3 counted every delivery: that count is now ``deliveries``.)
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
    /// Images this run decoded: one per item that was not shared, cached or stored already (a
    /// source decodes once for every variant and width). `nil` in reports before it was counted.
    public var decodes: Int?
    /// With `notify:`: events taken by a notifier (one per event and notifier; earlier runs'
    /// pending ones included), and events still pending when the run ended.
    public var eventsDelivered: Int?
    public var eventsPending: Int?
    /// Images the image cache dropped to stay within its limits, when it counts them.
    public var imageCacheEvictions: Int?
    /// When the run was stopped early (Ctrl-C, SIGTERM): the lines of the list it did not start.
    public var notStarted: Int?
    /// When the run was one shard of the list (`--shard K/N`): which, as `K/N`.
    public var shard: String?
    /// When the run was one shard: the lines of the list that belong to other shards (not items here).
    public var otherShards: Int?
    /// Lines of the list, or queue messages, that named a source (with the same version) already
    /// worked in this run under the same names: not items, and nothing written for them.
    public var duplicateDeliveries = 0
    /// Items whose outputs came from work done for another line of the same source under other
    /// names (copied): items of their own, made without a load or decode of their own.
    public var shared = 0
    /// Every delivery: items and duplicates (what ``total`` counted in schema 1).
    public var deliveries: Int { total + duplicateDeliveries }

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
        decodes = try c.decodeIfPresent(Int.self, forKey: .decodes)
        eventsDelivered = try c.decodeIfPresent(Int.self, forKey: .eventsDelivered)
        eventsPending = try c.decodeIfPresent(Int.self, forKey: .eventsPending)
        notStarted = try c.decodeIfPresent(Int.self, forKey: .notStarted)
        shard = try c.decodeIfPresent(String.self, forKey: .shard)
        otherShards = try c.decodeIfPresent(Int.self, forKey: .otherShards)
        duplicateDeliveries = try c.decodeIfPresent(Int.self, forKey: .duplicateDeliveries) ?? 0
        shared = try c.decodeIfPresent(Int.self, forKey: .shared) ?? 0
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(total, forKey: .total)
        try c.encode(ok, forKey: .ok)
        try c.encode(kept, forKey: .kept)
        try c.encode(failed, forKey: .failed)
        try c.encode(skipped, forKey: .skipped)
        try c.encode(duplicateDeliveries, forKey: .duplicateDeliveries)
        try c.encode(deliveries, forKey: .deliveries)
        try c.encode(shared, forKey: .shared)
        try c.encode(degraded, forKey: .degraded)
        try c.encode(alternatives, forKey: .alternatives)
        try c.encode(fallbacks, forKey: .fallbacks)
        try c.encode(outputsWritten, forKey: .outputsWritten)
        try c.encode(outputsKept, forKey: .outputsKept)
        try c.encode(outputsStale, forKey: .outputsStale)
        try c.encode(wallSeconds, forKey: .wallSeconds)
        try c.encode(bytesIn, forKey: .bytesIn)
        try c.encode(bytesOut, forKey: .bytesOut)
        try c.encodeIfPresent(imageCacheEvictions, forKey: .imageCacheEvictions)
        try c.encodeIfPresent(decodes, forKey: .decodes)
        try c.encodeIfPresent(eventsDelivered, forKey: .eventsDelivered)
        try c.encodeIfPresent(eventsPending, forKey: .eventsPending)
        try c.encodeIfPresent(notStarted, forKey: .notStarted)
        try c.encodeIfPresent(shard, forKey: .shard)
        try c.encodeIfPresent(otherShards, forKey: .otherShards)
    }

    enum CodingKeys: String, CodingKey {
        case total, ok, kept, failed, skipped, degraded, alternatives, fallbacks
        case outputsWritten = "outputs_written", outputsKept = "outputs_kept", outputsStale = "outputs_stale"
        case wallSeconds = "wall_seconds", bytesIn = "bytes_in", bytesOut = "bytes_out"
        case imageCacheEvictions = "image_cache_evictions", notStarted = "not_started", decodes
        case eventsDelivered = "events_delivered", eventsPending = "events_pending"
        case shard, otherShards = "other_shards"
        case duplicateDeliveries = "duplicate_deliveries", deliveries, shared
    }

    /// Adds one item's figures.
    public mutating func add(_ item: ItemResult) {
        if item.duplicate {
            duplicateDeliveries += 1
            return
        }
        if item.shared { shared += 1 }
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

