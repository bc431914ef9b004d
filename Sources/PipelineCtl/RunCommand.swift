import ArgumentParser
import Foundation
import Logging
import PipelineKit
import Synchronization

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a pipeline over a list of URLs and paths.",
        discussion: helpText("""
            The list has one URL or path per line; blank lines and lines starting with # are skipped;
            '-' reads standard input. Relative paths are relative to the list file.

            Exit codes: 0 every item succeeded; 1 items failed for reasons of their own (see the
            report; retrying will not help); 2 the pipeline, list or options are wrong (never retry);
            3 outputs or stores could not be written (retry with --resume); 128+N stopped by signal N.

            Examples:
              pipelinectl run thumbnails examples/urls.txt --report run.json
              pipelinectl run thumbnails urls.txt --output out/thumbs
              pipelinectl run thumbnails urls.txt --shard auto/16 --resume \\
                --report reports/run.json
            """))

    @Argument(help: "The pipeline file, or its name in pipelines/.")
    var pipeline: String

    @Argument(help: "The URL list ('-' for standard input).")
    var urls: String

    @Option(name: [.short, .customLong("output")], help: "Write outputs here instead of the pipeline's output.dir.")
    var outputDirectory: String?

    @Option(help: "CPU workers for decode, process and encode (default: one per core).")
    var workers: Int?

    @Option(help: "Memory decodes in progress may take together, estimated from each header (e.g. 200MiB, 1GB); huge images wait for each other.")
    var decodeMemory: String = "200MiB"

    @Option(help: "Longest time one item's own work may take (e.g. 90s, 5m; waits for a load slot or a worker do not count); 0 for no limit.")
    var itemTimeout: String = "5m"

    @Option(help: "Sources whose result the run remembers, so a line repeated later in the list reuses it (about 200 bytes each); 0: only lines in flight together share.")
    var dedupeWindow: Int = 100_000

    @Flag(help: "Skip items whose outputs an earlier run of the same pipeline already wrote completely (even if it was killed).")
    var resume = false

    @OptionGroup var output: RunOutputOptions

    @OptionGroup var sharding: ShardOptions

    func validate() throws {
        if let workers, workers < 1 { throw ValidationError("--workers must be at least 1") }
        if dedupeWindow < 0 { throw ValidationError("--dedupe-window must be 0 or more") }
        if (Units.parseSize(decodeMemory) ?? 0) < 1 {
            throw ValidationError("--decode-memory expects a size such as 256MiB or 1GB, got '\(decodeMemory)'")
        }
        if Units.parseDuration(itemTimeout) == nil {
            throw ValidationError("--item-timeout expects a duration such as 90s or 5m, got '\(itemTimeout)'")
        }
    }

    func run() async throws {
        var options = RunOptions()
        options.outputDirectory = outputDirectory
        options.resume = resume
        if let workers { options.workers = workers }
        options.decodeMemory = Units.parseSize(decodeMemory) ?? options.decodeMemory
        let limit = Units.parseDuration(itemTimeout) ?? 300
        options.itemTimeout = limit > 0 ? limit : nil
        options.dedupeWindow = dedupeWindow
        options.shard = try sharding.resolvedShard()
        try await runPipeline(pipeline, urls: urls, options: options, output: output,
                              stopGrace: sharding.graceSeconds)
    }
}

/// `--log-format`.
enum LogFormatArgument: String, ExpressibleByArgument, CaseIterable {
    case text, json
    var format: LogFormat { LogFormat(rawValue: rawValue)! }
}

/// `--progress`.
enum ProgressModeArgument: String, ExpressibleByArgument, CaseIterable {
    case auto, plain, none
    var mode: ProgressMode { ProgressMode(rawValue: rawValue)! }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
