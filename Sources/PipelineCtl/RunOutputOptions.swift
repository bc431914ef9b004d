import ArgumentParser
import Foundation
import Logging
import PipelineKit

/// The options `run` and `fetch` share: what is reported, logged and shown while running.
struct RunOutputOptions: ParsableArguments {
    @Option(help: "Write a report of every item to this file, or to s3://bucket/key (uploaded when the run ends).")
    var report: String?

    @Option(help: "Report format: json (one document, complete when the run ends), jsonl (one line per item, readable while the run goes), html (a contact sheet) or text (the summary); `plugins` lists the formats of this build.")
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

/// How a run uses the machine, for `run` and `work`: CPU workers, the memory decodes may take, the
/// time one item may take.
struct EngineOptions: ParsableArguments {
    @Option(help: "CPU workers for decode, process and encode (default: one per CPU the process may use, counting its affinity mask and cgroup CPU quota; each pinned to a CPU of its own when they match the mask).")
    var workers: Int?

    @Option(help: "Memory decodes in progress may take together, estimated from each header (e.g. 200MiB, 1GB); huge images wait for each other.")
    var decodeMemory: String = "200MiB"

    @Option(help: "Longest time one item's own work may take (e.g. 90s, 5m; waits for a load slot or a worker do not count); 0 for no limit.")
    var itemTimeout: String = "5m"

    func validate() throws {
        if let workers, workers < 1 { throw ValidationError("--workers must be at least 1") }
        if (Units.parseSize(decodeMemory) ?? 0) < 1 {
            throw ValidationError("--decode-memory expects a size such as 256MiB or 1GB, got '\(decodeMemory)'")
        }
        if Units.parseDuration(itemTimeout) == nil {
            throw ValidationError("--item-timeout expects a duration such as 90s or 5m, got '\(itemTimeout)'")
        }
    }

    /// Sets the engine's options from these.
    func apply(to options: inout RunOptions) {
        if let workers { options.workers = workers }
        options.decodeMemory = Units.parseSize(decodeMemory) ?? options.decodeMemory
        let limit = Units.parseDuration(itemTimeout) ?? 300
        options.itemTimeout = limit > 0 ? limit : nil
    }
}
