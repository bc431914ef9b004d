import ArgumentParser
import PipelineKit

struct Validate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check pipeline files and print every problem found.",
        discussion: """
            Each problem is printed as FILE:LINE:COLUMN: error: MESSAGE, with the line and a caret.
            Exits 0 when every file is valid, 1 otherwise.

            Example:
              pipelinectl validate pipelines/*.yaml
            """)

    @Argument(help: "Pipeline files, or names looked up in pipelines/.")
    var pipelines: [String]

    func run() async throws {
        var allValid = true
        for name in pipelines {
            if let pipeline = loadPipeline(name) {
                print("\(pipeline.file): ok (\(pipeline.name))")
            } else {
                allValid = false
            }
        }
        if !allValid { throw Exit.itemsFailed }
    }
}
