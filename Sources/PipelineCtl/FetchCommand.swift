import ArgumentParser
import Foundation
import Logging
import PipelineKit
import Synchronization

struct Fetch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fetch",
        abstract: "Download every source into the pipeline's data cache, without decoding anything.",
        discussion: helpText("""
            Warms the data cache ahead of a run (or measures the loader alone). Uses the pipeline's
            loader and data_cache; local files and data: URLs are only read. Exit codes as for run.

            Example:
              pipelinectl fetch thumbnails urls.txt --report fetch.json
            """))

    @Argument(help: "The pipeline file, or its name in pipelines/.")
    var pipeline: String

    @Argument(help: "The URL list ('-' for standard input).")
    var urls: String

    @OptionGroup var output: RunOutputOptions

    @OptionGroup var sharding: ShardOptions

    func run() async throws {
        var options = RunOptions()
        options.fetchOnly = true
        options.shard = try sharding.resolvedShard()
        try await runPipeline(RunRequest(pipeline: pipeline, list: urls, options: options, output: output,
                                         stopGrace: sharding.graceSeconds))
    }
}
