import Foundation

/// The human summary printed at the end of a run, and by `pipelinectl report`: counts, rate,
/// bytes, per-stage times, cache figures, and failures grouped by kind. Fits on one screen.
public enum SummaryText {
    /// - Parameters:
    ///   - examples: example sources shown per failure kind.
    public static func render(pipeline: String, summary: RunSummary, items: [ItemResult], outputDirectory: String?,
                              examples: Int = 3) -> String {
        var failures = FailureDigest(examples: examples)
        for item in items { failures.add(item) }
        return render(pipeline: pipeline, summary: summary, statistics: RunStatistics(items), failures: failures,
                      outputDirectory: outputDirectory)
    }

    /// The same from figures collected during the run (``RunStatistics/Builder``) and a digest of
    /// the failures, so a long run need not keep any item.
    public static func render(pipeline: String, summary: RunSummary, statistics stats: RunStatistics, failures: FailureDigest,
                              outputDirectory: String?) -> String {
        var lines = [headline(pipeline, summary)] + notes(summary)
        lines.append("bytes in \(bytes(summary.bytesIn)), out \(bytes(summary.bytesOut))")
        if let outputDirectory, summary.ok + summary.kept > 0 { lines.append("outputs in \(outputDirectory)") }
        lines += stageTimes(stats)
        if let cache = cacheLine(stats, evictions: summary.imageCacheEvictions) { lines.append(cache) }
        lines += failureLines(failures)
        return lines.joined(separator: "\n")
    }

    /// `thumbnails: 9 items: 8 ok, 1 failed, 0 skipped in 1.20s (7.5 items/s)`, with what was
    /// degraded or recovered.
    static func headline(_ pipeline: String, _ summary: RunSummary) -> String {
        let rate = summary.wallSeconds > 0 ? Double(summary.total) / summary.wallSeconds : 0
        let notes = [
            summary.degraded > 0 ? "\(summary.degraded) degraded: decoded despite damage, as fail_on allows" : nil,
            summary.alternatives > 0 ? "\(summary.alternatives) from an alternative source" : nil,
            summary.fallbacks > 0 ? "\(summary.fallbacks) from the fallback image" : nil,
        ].compactMap { $0 }
        let degraded = notes.isEmpty ? "" : " (" + notes.joined(separator: "; ") + ")"
        let kept = summary.kept > 0 ? ", \(summary.kept) kept" : ""
        return "\(pipeline): \(summary.total) items: \(summary.ok) ok\(kept), \(summary.failed) failed, "
            + "\(summary.skipped) skipped\(degraded) in \(String(format: "%.2f", summary.wallSeconds))s "
            + "(\(String(format: "%.1f", rate)) items/s)"
    }

    /// A line for each thing the counts alone would hide: duplicates, shared work, kept and stale
    /// outputs, the shard, an early stop.
    static func notes(_ summary: RunSummary) -> [String] {
        var lines: [String] = []
        if summary.duplicateDeliveries > 0 {
            let n = summary.duplicateDeliveries
            lines.append("duplicates: \(n) line\(n == 1 ? "" : "s") or message\(n == 1 ? "" : "s") named a source already worked in this run "
                + "(same version, same names): not counted as items, nothing written for \(n == 1 ? "it" : "them")")
        }
        if summary.shared > 0 {
            lines.append("shared: \(summary.shared) item\(summary.shared == 1 ? "" : "s") made from this run's work for another line "
                + "of the same source (copied under \(summary.shared == 1 ? "its" : "their") own names: no load or decode of "
                + "\(summary.shared == 1 ? "its" : "their") own)")
        }
        if summary.outputsKept + summary.outputsStale > 0 {
            lines.append("outputs: \(summary.outputsWritten) written, \(summary.outputsKept) kept (already there with the same fingerprint)"
                + (summary.outputsStale > 0 ? ", \(summary.outputsStale) stale" : ""))
        }
        if summary.outputsStale > 0 {
            lines.append("stale: \(summary.outputsStale) output\(summary.outputsStale == 1 ? " was" : "s were") already there with another "
                + "fingerprint and kept (existing: keep): they are not what this pipeline makes")
        }
        if let shard = summary.shard {
            lines.append("shard \(shard): \(summary.otherShards ?? 0) lines of the list belong to other shards")
        }
        if let notStarted = summary.notStarted {
            lines.append("stopped early: \(notStarted) line\(notStarted == 1 ? "" : "s") of the list not started (run again with --resume)")
        }
        return lines
    }

    /// The per-stage p50, p95 and max in milliseconds, when any stage ran.
    static func stageTimes(_ stats: RunStatistics) -> [String] {
        let rows = ["load", "decode", "process", "encode"].compactMap { name -> String? in
            guard let t = stats.stagesMs[name] else { return nil }
            return "  " + name.padding(toLength: 8, withPad: " ", startingAt: 0) + [t.p50, t.p95, t.max].map { pad(ms($0)) }.joined()
        }
        return rows.isEmpty ? [] : ["stage ms     p50     p95     max"] + rows
    }

    /// `cache: data 3 hit, 1 miss (75% hit); image ...` for the caches the pipeline has; `nil` without one.
    static func cacheLine(_ stats: RunStatistics, evictions: Int?) -> String? {
        var cache: [String] = []
        if let data = stats.cache["data"], data.used > 0 {
            var parts = ["\(data.hit) hit"]
            if data.processedHit > 0 { parts.append("\(data.processedHit) processed hit") }
            if data.revalidated > 0 { parts.append("\(data.revalidated) revalidated") }
            parts.append("\(data.miss) miss")
            cache.append("data " + parts.joined(separator: ", ") + " (\(hitRate(data)))")
        }
        if let image = stats.cache["image"], image.used > 0 {
            cache.append("image \(image.hit) hit, \(image.miss) miss (\(hitRate(image)))" + (evictions.map { ", \($0) evicted" } ?? ""))
        }
        return cache.isEmpty ? nil : "cache: " + cache.joined(separator: "; ")
    }

    /// Failures by kind, most first, each with its example sources.
    static func failureLines(_ failures: FailureDigest) -> [String] {
        guard failures.total > 0 else { return [] }
        let ordered = failures.counts.sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }
        var lines = ["failures by kind: " + ordered.map { "\($0.key) \($0.value)" }.joined(separator: ", ")]
        for (kind, count) in ordered {
            let shown = failures.examples[kind] ?? []
            for item in shown { lines.append("  " + failureLine(item)) }
            if count > shown.count { lines.append("    ... \(count - shown.count) more of this kind") }
        }
        return lines
    }

    /// `SOURCE: stage (plugin) kind: message`
    public static func failureLine(_ item: ItemResult) -> String {
        let error = item.error
        let plugin = error?.plugin.map { " (\($0))" } ?? ""
        return "\(item.source): \(error?.stage.rawValue ?? "?")\(plugin) \(error?.kind.rawValue ?? "?"): \(error?.message ?? "")"
    }

    static func ms(_ value: Double) -> String { value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value) }
    static func pad(_ text: String) -> String { String(repeating: " ", count: max(1, 8 - text.count)) + text }

    static func hitRate(_ counts: RunStatistics.CacheCounts) -> String {
        "\(Int(((counts.hitRate ?? 0) * 100).rounded()))% hit"
    }

    /// `1.2 MB`-style text.
    public static func bytes(_ count: Int) -> String {
        let value = Double(count)
        if value >= 1e9 { return String(format: "%.2f GB", value / 1e9) }
        if value >= 1e6 { return String(format: "%.1f MB", value / 1e6) }
        if value >= 1e3 { return String(format: "%.1f KB", value / 1e3) }
        return "\(count) B"
    }
}

/// The failures of a run in fixed memory: a count per error kind, the first few items of each
/// kind, and whether any failed on our side (an output that could not be written).
public struct FailureDigest: Sendable {
    /// Failed items by kind.
    public private(set) var counts: [String: Int] = [:]
    /// The first items of each kind, in the order they were added.
    public private(set) var examples: [String: [ItemResult]] = [:]
    /// Whether an item failed because its outputs could not be written (``ItemResult/failedOnOurSide``).
    public private(set) var anyOnOurSide = false
    /// Items kept per kind.
    public let limit: Int

    public init(examples: Int = 3) { limit = examples }

    /// Every failed item counted.
    public var total: Int { counts.values.reduce(0, +) }

    /// Counts `item` when it failed.
    public mutating func add(_ item: ItemResult) {
        guard item.status == .failed else { return }
        let kind = item.error?.kind.rawValue ?? "unknown"
        counts[kind, default: 0] += 1
        if examples[kind, default: []].count < limit { examples[kind, default: []].append(item) }
        if item.failedOnOurSide { anyOnOurSide = true }
    }
}
