import ArgumentParser
import Foundation
import Logging
import PipelineKit
import Synchronization

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
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

    @OptionGroup var engine: EngineOptions

    @Option(help: "Sources whose result the run remembers, so a line repeated later in the list reuses it (about 200 bytes each); 0: only lines in flight together share.")
    var dedupeWindow: Int = 100_000

    @Flag(help: "Skip items whose outputs an earlier run of the same pipeline already wrote completely (even if it was killed).")
    var resume = false

    @Option(help: ArgumentHelp("Keep the record --resume reads here instead of OUTPUT_DIR/.pipelinectl (for an output folder that is synced or served as it is).", valueName: "DIR"))
    var stateDir: String?

    @OptionGroup var output: RunOutputOptions

    @OptionGroup var sharding: ShardOptions

    func validate() throws {
        if dedupeWindow < 0 { throw ValidationError("--dedupe-window must be 0 or more") }
    }

    func run() async throws {
        var options = RunOptions()
        options.outputDirectory = outputDirectory
        options.resume = resume
        options.stateDirectory = stateDir
        engine.apply(to: &options)
        options.dedupeWindow = dedupeWindow
        options.shard = try sharding.resolvedShard()
        try await runPipeline(RunRequest(pipeline: pipeline, list: urls, options: options, output: output,
                                         stopGrace: sharding.graceSeconds))
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
