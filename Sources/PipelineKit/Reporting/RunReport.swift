import Foundation

/// A run's report as `pipelinectl report` reads it: the JSON document of `--report FILE` or its
/// JSON Lines (`--report-format jsonl`), version 1 or 2.
///
/// Version 2 added `run` (the run's id, start, pipeline fingerprint, shard, list and output),
/// streams items in the order they finished (each keeps its line number in `index`), and added
/// the status `kept` with the item fields `kept` and `stale`.
public struct RunReport: Sendable, Codable {
    /// The version of this format; bumped when a field changes meaning or goes away.
    /// 3: an item is counted once however often it was delivered (`duplicate_deliveries`,
    /// `deliveries`), items list their `variants`, and shared work is not a cache hit.
    public static let currentVersion = 3

    public var reportVersion: Int = RunReport.currentVersion
    public var pipeline: String
    /// What identifies the run; `nil` in version 1 reports.
    public var run: RunHeader?
    public var summary: RunSummary
    /// Per-stage times and cache figures over the items.
    public var stats: RunStatistics { RunStatistics(items) }
    /// Items in list order.
    public var items: [ItemResult]

    enum CodingKeys: String, CodingKey {
        case reportVersion = "report_version", pipeline, run, summary, stats, items
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(reportVersion, forKey: .reportVersion)
        try c.encode(pipeline, forKey: .pipeline)
        try c.encodeIfPresent(run, forKey: .run)
        try c.encode(summary, forKey: .summary)
        try c.encode(stats, forKey: .stats)
        try c.encode(items, forKey: .items)
    }

    public init(pipeline: String, summary: RunSummary, items: [ItemResult], run: RunHeader? = nil) {
        self.pipeline = pipeline
        self.summary = summary
        self.items = items
        self.run = run
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        reportVersion = try c.decodeIfPresent(Int.self, forKey: .reportVersion) ?? 1
        pipeline = try c.decode(String.self, forKey: .pipeline)
        run = try c.decodeIfPresent(RunHeader.self, forKey: .run)
        summary = try c.decode(RunSummary.self, forKey: .summary)
        items = try c.decode([ItemResult].self, forKey: .items).sorted { $0.index < $1.index }
    }

    /// Reads a report written with `--report` (JSON) or `--report-format jsonl`. A JSONL report of a
    /// run that was killed has no summary line: the summary is then counted from its items.
    public static func read(_ data: Data) throws -> RunReport {
        let decoder = JSONDecoder()
        if let whole = try? decoder.decode(RunReport.self, from: data) { return whole }
        let text = String(decoding: data, as: UTF8.self)
        var pipeline = "", run: RunHeader?, summary: RunSummary?, items: [ItemResult] = []
        for (number, line) in text.split(separator: "\n").enumerated() where !line.trimmingCharacters(in: .whitespaces).isEmpty {
            let bytes = Data(line.utf8)
            do {
                let head = try decoder.decode(StreamLine.self, from: bytes)
                switch head.type {
                case "run":
                    pipeline = head.pipeline ?? ""
                    run = head.run
                case "item": items.append(try decoder.decode(ItemResult.self, from: bytes))
                case "summary": summary = try decoder.decode(RunSummary.self, from: bytes)
                default: break
                }
            } catch {
                throw PipelineError(.invalidSource, "line \(number + 1) is not a report line: \(Self.reason(error))")
            }
        }
        guard !pipeline.isEmpty || !items.isEmpty || summary != nil else {
            throw PipelineError(.invalidSource, "neither a JSON report nor JSON Lines with a run line")
        }
        var counted = RunSummary()
        for item in items { counted.add(item) }
        return RunReport(pipeline: pipeline, summary: summary ?? counted, items: items.sorted { $0.index < $1.index }, run: run)
    }

    struct StreamLine: Decodable {
        let type: String
        let pipeline: String?
        let run: RunHeader?
    }

    /// A decoding error in a few words (which key, what was wrong).
    static func reason(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): return "no '\(key.stringValue)'"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            return "'\(context.codingPath.map(\.stringValue).joined(separator: "."))': \(context.debugDescription)"
        case DecodingError.dataCorrupted(let context): return context.debugDescription
        default: return "\(error)"
        }
    }

    /// Pretty-printed JSON with stable key order.
    public func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }
}
