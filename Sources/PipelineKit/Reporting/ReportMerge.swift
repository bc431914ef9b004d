import Foundation

/// Several run reports read as one (`pipelinectl report a.json b.json…`): the shards of one list,
/// a first run and its retries. Each source counts once, with its newest result; what does not
/// add up is said, not hidden.
public struct ReportMerge: Sendable {
    /// One report given to the merge.
    public struct Input: Sendable {
        /// How the user named it (a path or URL), for messages.
        public let name: String
        public let report: RunReport
        /// The directory its relative sources resolve against when the report does not record
        /// one (a version 1 report): the report's own directory.
        public let fallbackBase: String?

        public init(name: String, report: RunReport, fallbackBase: String?) {
            self.name = name
            self.report = report
            self.fallbackBase = fallbackBase
        }
    }

    /// The merged report: one item per source (its newest result), in list order of the reports'
    /// lines, and the summary counted from them.
    public let report: RunReport
    /// What the merged totals do not cover or count once only: a missing shard, a report given
    /// twice, reports of different pipelines.
    public let warnings: [String]
    /// The run header each merged item came from (for links to its outputs), by position in
    /// ``report``'s items.
    public let headers: [RunHeader?]
    /// The directory each merged item's relative source resolves against.
    public let bases: [String?]

    public init(_ inputs: [Input]) {
        var warnings: [String] = []
        // The same run given twice (two copies, or one named twice) is read once.
        var seen: [String: String] = [:]
        var unique: [Input] = []
        for input in inputs {
            if let run = input.report.run {
                let id = run.id, key = run.part.map { "\(run.id)#\($0)" } ?? run.id
                if let first = seen[key] {
                    warnings.append("'\(input.name)' is the same run as '\(first)' (run \(id.prefix(8))): read once")
                    continue
                }
                seen[key] = input.name
            }
            unique.append(input)
        }
        warnings += Self.pipelineWarnings(unique) + Self.shardWarnings(unique)
        // Oldest first, so a newer result replaces an older one; reports without a header (version
        // 1) count as oldest, in the order given.
        let ordered = unique.enumerated().sorted { a, b in
            (a.element.report.run?.started ?? "", a.offset) < (b.element.report.run?.started ?? "", b.offset)
        }.map(\.element)
        // By source: the items of the newest report that has it (every line of that report that
        // names it: a list may repeat a source on purpose, each line with its own outputs).
        var latest: [String: (items: [ItemResult], report: Int, order: Int)] = [:]
        var order = 0
        for (number, input) in ordered.enumerated() {
            let base = input.report.run?.listBase ?? input.fallbackBase
            for item in input.report.items {
                let key = Self.absoluteSource(item.source, base: base)
                if let earlier = latest[key], earlier.report == number {
                    latest[key]!.items.append(item)
                } else {
                    latest[key] = ([item], number, latest[key]?.order ?? order)
                }
                order += 1
            }
        }
        let kept = latest.values.sorted { $0.order < $1.order }.flatMap { entry in entry.items.map { (item: $0, report: entry.report) } }
        var summary = RunSummary()
        for entry in kept { summary.add(entry.item) }
        summary.wallSeconds = unique.map(\.report.summary.wallSeconds).max() ?? 0
        let evictions = unique.compactMap(\.report.summary.imageCacheEvictions)
        summary.imageCacheEvictions = evictions.isEmpty ? nil : evictions.reduce(0, +)
        let decodes = unique.compactMap(\.report.summary.decodes)
        summary.decodes = decodes.isEmpty ? nil : decodes.reduce(0, +)
        let names = Array(Set(unique.map(\.report.pipeline))).sorted()
        let single = unique.count == 1 ? unique[0].report.run : nil
        if unique.count == 1 {
            // One report: its own summary (a stopped run's lines not started, a shard's other lines).
            summary = unique[0].report.summary
        }
        report = RunReport(pipeline: names.joined(separator: "+"), summary: summary, items: kept.map(\.item), run: single)
        headers = kept.map { ordered[$0.report].report.run }
        bases = kept.map { ordered[$0.report].report.run?.listBase ?? ordered[$0.report].fallbackBase }
        self.warnings = warnings
    }

    /// `source` as an absolute path when it is a local one (resolved against `base`), else as written.
    public static func absoluteSource(_ source: String, base: String?) -> String {
        let parsed = Source(text: source, index: 0, base: base)
        guard parsed.scheme == nil || parsed.scheme == "file", let path = parsed.localPath else { return source }
        return path
    }

    /// Reports of more than one pipeline (different fingerprints): their items are counted together.
    static func pipelineWarnings(_ inputs: [Input]) -> [String] {
        let fingerprints = Set(inputs.compactMap(\.report.run?.fingerprint))
        guard fingerprints.count > 1 else { return [] }
        let described = inputs.compactMap { input in
            input.report.run.map { "'\(input.name)' (\($0.pipeline), fingerprint \($0.fingerprint.prefix(8)))" }
        }
        return ["the reports are of \(fingerprints.count) different pipelines or versions of one: "
                + described.joined(separator: ", ") + "; their items are counted together"]
    }

    /// For the shards of each pipeline: the ones missing, and the ones run more than once.
    static func shardWarnings(_ inputs: [Input]) -> [String] {
        var groups: [String: [(shard: Int, count: Int, name: String)]] = [:]
        for input in inputs {
            guard let run = input.report.run, let text = run.shard else { continue }
            let parts = text.split(separator: "/").compactMap { Int($0) }
            guard parts.count == 2 else { continue }
            groups[run.fingerprint + "/" + String(parts[1]), default: []].append((parts[0], parts[1], input.name))
        }
        var warnings: [String] = []
        for (_, shards) in groups.sorted(by: { $0.key < $1.key }) {
            let count = shards[0].count
            let present = Set(shards.map(\.shard))
            let missing = (0..<count).filter { !present.contains($0) }
            if !missing.isEmpty {
                warnings.append("shard\(missing.count == 1 ? "" : "s") " + missing.map { "\($0)/\(count)" }.joined(separator: ", ")
                    + " of \(count) \(missing.count == 1 ? "is" : "are") missing (given: "
                    + present.sorted().map { "\($0)/\(count)" }.joined(separator: ", ") + "): the totals cover only part of the list")
            }
            for shard in present.sorted() {
                let runs = shards.filter { $0.shard == shard }
                if runs.count > 1 {
                    warnings.append("shard \(shard)/\(count) was run \(runs.count) times (" + runs.map { "'\($0.name)'" }.joined(separator: ", ")
                        + "): each source counts once, with its newest result")
                }
            }
        }
        return warnings
    }
}
