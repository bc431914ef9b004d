import ArgumentParser
import Logging

/// The options `run` and `fetch` share: what is reported, logged and shown while running.
struct RunOutputOptions: ParsableArguments {
    @Option(help: "Write a report of every item to this file.")
    var report: String?

    @Option(help: "Report format: json (written at the end) or jsonl (one line per item, as items finish).")
    var reportFormat: ReportFormat = .json

    @Option(help: "Write Prometheus metrics here at the end (for node_exporter's textfile collector).")
    var metrics: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (warning: a line per failed item).")
    var logLevel: Logger.Level = .warning

    @Option(help: "Log format: text, or json (one object per line, for log collectors).")
    var logFormat: LogFormatArgument = .text

    @Option(help: "Progress: auto (a live line when stderr is a terminal), plain (a line every 5s), none.")
    var progress: ProgressModeArgument = .auto

    @Flag(name: .shortAndLong, help: "Silent unless something fails: no progress, no summary, no 'report in' lines (failures are still summarised, on standard error).")
    var quiet = false
}
