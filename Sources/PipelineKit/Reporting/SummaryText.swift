import Foundation

/// The short, human summary printed at the end of a run.
public enum SummaryText {
    /// Lines of text: counts, time and rate, bytes, where outputs went, and each failure with its
    /// source, stage, kind and message (at most `maxFailures`, then a count of the rest).
    public static func render(pipeline: String, summary: RunSummary, items: [ItemResult], outputDirectory: String?,
                              maxFailures: Int = 20) -> String {
        var lines: [String] = []
        let rate = summary.wallSeconds > 0 ? Double(summary.total) / summary.wallSeconds : 0
        lines.append("\(pipeline): \(summary.total) items: \(summary.ok) ok, \(summary.failed) failed, "
            + "\(summary.skipped) skipped in \(String(format: "%.2f", summary.wallSeconds))s "
            + "(\(String(format: "%.1f", rate)) items/s)")
        lines.append("bytes in \(bytes(summary.bytesIn)), out \(bytes(summary.bytesOut))")
        if let outputDirectory, summary.ok > 0 { lines.append("outputs in \(outputDirectory)") }
        let failures = items.filter { $0.status == .failed }
        if !failures.isEmpty {
            var byKind: [String: Int] = [:]
            for item in failures { byKind[item.error?.kind.rawValue ?? "unknown", default: 0] += 1 }
            lines.append("failures by kind: " + byKind.sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }
                .map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            for item in failures.prefix(maxFailures) {
                let error = item.error
                let plugin = error?.plugin.map { " (\($0))" } ?? ""
                lines.append("  \(item.source): \(error?.stage.rawValue ?? "?")\(plugin) \(error?.kind.rawValue ?? "?"): \(error?.message ?? "")")
            }
            if failures.count > maxFailures { lines.append("  ... and \(failures.count - maxFailures) more (see --report)") }
        }
        return lines.joined(separator: "\n")
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
