import ArgumentParser
import Foundation
import Logging
import PipelineKit
import Synchronization

struct Fetch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Download every source into the pipeline's data cache, without decoding anything.",
        discussion: """
            Warms the data cache ahead of a run (or measures the loader alone). Uses the pipeline's
            loader and data_cache; local files and data: URLs are only read. Exit codes as for run.

            Example:
              pipelinectl fetch thumbnails urls.txt --report fetch.json
            """)

    @Argument(help: "The pipeline file, or its name in pipelines/.")
    var pipeline: String

    @Argument(help: "The URL list ('-' for standard input).")
    var urls: String

    @Option(help: "Write a report of every item to this file.")
    var report: String?

    @Option(help: "Report format: json (written at the end) or jsonl (one line per item, as items finish).")
    var reportFormat: ReportFormat = .json

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (warning: a line per failed item).")
    var logLevel: Logger.Level = .warning

    @Option(help: "Log format: text, or json (one object per line, for log collectors).")
    var logFormat: LogFormatArgument = .text

    @Option(help: "Progress: auto (a live line when stderr is a terminal), plain (a line every 5s), none.")
    var progress: ProgressModeArgument = .auto

    @Flag(name: .shortAndLong, help: "No progress display.")
    var quiet = false

    func run() async throws {
        var options = RunOptions()
        options.fetchOnly = true
        try await runPipeline(pipeline, urls: urls, options: options, report: report, reportFormat: reportFormat,
                              logLevel: logLevel, logFormat: logFormat.format, progress: quiet ? .none : progress.mode)
    }
}
