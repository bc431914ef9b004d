import Foundation

/// The human summary printed at the end of a run, and by `pipelinectl report`: counts, rate,
/// bytes, per-stage times, cache figures, and failures grouped by kind. Fits on one screen.
public enum SummaryText {
    /// - Parameters:
    ///   - examples: example sources shown per failure kind.
    public static func render(pipeline: String, summary: RunSummary, items: [ItemResult], outputDirectory: String?,
                              examples: Int = 3) -> String {
        var lines: [String] = []
        let rate = summary.wallSeconds > 0 ? Double(summary.total) / summary.wallSeconds : 0
        lines.append("\(pipeline): \(summary.total) items: \(summary.ok) ok, \(summary.failed) failed, "
            + "\(summary.skipped) skipped in \(String(format: "%.2f", summary.wallSeconds))s "
            + "(\(String(format: "%.1f", rate)) items/s)")
        if let notStarted = summary.notStarted {
            lines.append("stopped early: \(notStarted) line\(notStarted == 1 ? "" : "s") of the list not started (run again with --resume)")
        }
        lines.append("bytes in \(bytes(summary.bytesIn)), out \(bytes(summary.bytesOut))")
        if let outputDirectory, summary.ok > 0 { lines.append("outputs in \(outputDirectory)") }

        let ran = items.filter { $0.status != .skipped }
        let stages: [(String, KeyPath<StageTimings, Double>)] = [("load", \.load), ("decode", \.decode),
                                                                  ("process", \.process), ("encode", \.encode)]
        let rows = stages.compactMap { name, path -> String? in
            let values = ran.map { $0.timings[keyPath: path] }.filter { $0 > 0 }.sorted()
            guard !values.isEmpty else { return nil }
            return "  " + name.padding(toLength: 8, withPad: " ", startingAt: 0)
                + [percentile(values, 0.5), percentile(values, 0.95), values.last!].map { pad(ms($0)) }.joined()
        }
        if !rows.isEmpty {
            lines.append("stage ms     p50     p95     max")
            lines += rows
        }
        let data = count(ran.map(\.cacheData)), image = count(ran.map(\.cacheImage))
        var cache: [String] = []
        if data.used > 0 { cache.append("data \(data.hit) hit, \(data.miss) miss (\(data.rate))") }
        if image.used > 0 {
            cache.append("image \(image.hit) hit, \(image.miss) miss (\(image.rate))"
                + (summary.imageCacheEvictions.map { ", \($0) evicted" } ?? ""))
        }
        if !cache.isEmpty { lines.append("cache: " + cache.joined(separator: "; ")) }

        let failures = items.filter { $0.status == .failed }
        if !failures.isEmpty {
            var byKind: [String: [ItemResult]] = [:]
            for item in failures { byKind[item.error?.kind.rawValue ?? "unknown", default: []].append(item) }
            let ordered = byKind.sorted { $0.value.count > $1.value.count || ($0.value.count == $1.value.count && $0.key < $1.key) }
            lines.append("failures by kind: " + ordered.map { "\($0.key) \($0.value.count)" }.joined(separator: ", "))
            for (_, group) in ordered {
                for item in group.prefix(examples) { lines.append("  " + failureLine(item)) }
                if group.count > examples { lines.append("    ... \(group.count - examples) more of this kind") }
            }
        }
        return lines.joined(separator: "\n")
    }

    /// `SOURCE: stage (plugin) kind: message`
    public static func failureLine(_ item: ItemResult) -> String {
        let error = item.error
        let plugin = error?.plugin.map { " (\($0))" } ?? ""
        return "\(item.source): \(error?.stage.rawValue ?? "?")\(plugin) \(error?.kind.rawValue ?? "?"): \(error?.message ?? "")"
    }

    /// Nearest-rank percentile of sorted values.
    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        let rank = Int((Double(sorted.count) * p).rounded(.up))
        return sorted[min(sorted.count, max(1, rank)) - 1]
    }

    static func ms(_ value: Double) -> String { value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value) }
    static func pad(_ text: String) -> String { String(repeating: " ", count: max(1, 8 - text.count)) + text }

    static func count(_ outcomes: [CacheOutcome]) -> (used: Int, hit: Int, miss: Int, rate: String) {
        let hit = outcomes.filter { $0 == .hit }.count, miss = outcomes.filter { $0 == .miss }.count
        let used = hit + miss
        return (used, hit, miss, used == 0 ? "-" : "\(Int((Double(hit) / Double(used) * 100).rounded()))% hit")
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
