import ArgumentParser
import PipelineKit

struct Schema: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Print a JSON Schema of pipeline files, for editors.",
        discussion: helpText("""
            With yaml-language-server (VS Code's YAML extension, Neovim, ...), put this first line in a
            pipeline file to get completion and checks as you type:
              # yaml-language-server: $schema=../docs/pipeline.schema.json

            Example:
              pipelinectl schema > docs/pipeline.schema.json
            """))

    func run() async throws {
        print(try PipelineSchema.render(PipelineSchema.jsonSchema(PipelineCtl.registry)))
    }
}
