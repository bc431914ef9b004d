import ArgumentParser
import PipelineKit

struct Explain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "Print a pipeline as it will run: every default filled in, variables substituted.",
        discussion: helpText("""
            Sizes and durations are normalised, each processor's cache-key identifier is shown as a
            comment, and the output is itself a valid pipeline file.

            Example:
              pipelinectl explain thumbnails > thumbnails.resolved.yaml
            """))

    @Argument(help: "The pipeline file, or its name in pipelines/.")
    var pipeline: String

    func run() async throws {
        guard let pipeline = loadPipeline(pipeline) else { throw Exit.itemsFailed }
        print(PipelineExplain.yaml(pipeline), terminator: "")
    }
}
