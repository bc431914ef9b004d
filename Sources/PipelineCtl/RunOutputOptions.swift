import ArgumentParser
import Foundation
import Logging
import PipelineKit

/// The options `run` and `fetch` share: what is reported, logged and shown while running.
struct RunOutputOptions: ParsableArguments {
    @Option(help: "Write a report of every item to this file, or to s3://bucket/key (uploaded when the run ends).")
    var report: String?

    @Option(help: "Report format: json (one document, complete when the run ends) or jsonl (one line per item, readable while the run goes); `plugins` lists the formats of this build.")
    var reportFormat: String = "json"

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

/// How `run` and `fetch` share a list with other processes and stop when told to.
struct ShardOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Run only shard K of N of the list (0-based): K/N, or auto/N to read K from JOB_COMPLETION_INDEX (Kubernetes), SLURM_ARRAY_TASK_ID (Slurm) or AWS_BATCH_JOB_ARRAY_INDEX (AWS Batch). The report, metrics and resume record get -shard-K-of-N in their names.", valueName: "K/N"))
    var shard: String?

    @Option(help: "After SIGTERM or Ctrl-C, how long items in flight may take to finish before they are cancelled and the report is written (Kubernetes waits 30s by default before SIGKILL).")
    var stopGrace: String = "25s"

    func validate() throws {
        if Units.parseDuration(stopGrace) == nil {
            throw ValidationError("--stop-grace expects a duration such as 25s, got '\(stopGrace)'")
        }
    }

    /// `--stop-grace` in seconds (checked by `validate`).
    var graceSeconds: Double { Units.parseDuration(stopGrace) ?? 25 }

    /// The shard, or `nil` for the whole list; throws (exit 2) when `--shard` is wrong.
    func resolvedShard() throws -> Shard? {
        guard let shard else { return nil }
        do { return try Shard.parse(shard, environment: ProcessInfo.processInfo.environment) } catch {
            printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
            throw Exit.invalid
        }
    }
}
