import Foundation

/// The report slot: writes a run's report as items finish (`--report FILE --report-format NAME`).
///
/// A report format is a plugin (``Plugin/report(_:make:)``). The engine hands it the run's facts
/// first, then every item as it finishes (in completion order; each carries its line number),
/// then the summary. A writer keeps nothing per item: a report of a list of millions takes no
/// more memory than one of ten. Calls come one at a time.
public protocol ReportWriting: Sendable {
    /// Starts the report with what identifies the run.
    func begin(_ run: RunHeader) throws
    /// Adds one finished item.
    func item(_ item: ItemResult) throws
    /// Ends the report with the run's counts and figures; the report is complete only now.
    func finish(summary: RunSummary, statistics: RunStatistics) throws
}

/// What identifies a run in its report, so that reports of shards, retries and different
/// pipelines can be told apart when merged (`pipelinectl report`).
public struct RunHeader: Sendable, Codable, Equatable {
    /// A new UUID per run.
    public var id: String
    /// When the run started, ISO 8601 in UTC with milliseconds.
    public var started: String
    /// The pipeline's name.
    public var pipeline: String
    /// What the outputs depend on (``PipelineRunner/fingerprint``): two runs of the same
    /// pipeline file, unchanged, have the same.
    public var fingerprint: String
    /// `K/N` for one shard of the list.
    public var shard: String?
    /// The part, from 1, of a report written in parts (`pipelinectl work --report-rotate`): the
    /// parts of one run are read together, not as the same run given twice.
    public var part: Int?
    /// The version of pipelinectl that ran.
    public var version: String?
    /// The source revision of the pipelinectl that ran (`pipelinectl --version`).
    public var revision: String?
    /// The URL list: a path, `-`, or a URL.
    public var list: String?
    /// The directory relative paths in the list resolve against.
    public var listBase: String?
    /// Where outputs went: a directory or a destination's URL.
    public var output: String?
    /// The HTTP address of `output`, when outputs are objects a browser may open (`http://…/bucket/prefix`).
    public var outputURL: String?
    /// The working directory of the run: what relative output paths in the report are relative to.
    public var workingDirectory: String?

    public init(id: String = UUID().uuidString.lowercased(), started: Date = Date(), pipeline: String, fingerprint: String) {
        self.id = id
        self.started = RunHeader.timestamp(started)
        self.pipeline = pipeline
        self.fingerprint = fingerprint
    }

    enum CodingKeys: String, CodingKey {
        case id, started, pipeline, fingerprint, shard, part, version, revision, list
        case listBase = "list_base", output, outputURL = "output_url", workingDirectory = "working_directory"
    }

    /// `date` as ISO 8601 in UTC with milliseconds (sorts as it reads).
    public static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }
}
