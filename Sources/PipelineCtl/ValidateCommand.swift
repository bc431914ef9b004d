import ArgumentParser
import Foundation
import PipelineKit

struct Validate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check pipeline files and print every problem found.",
        discussion: helpText("""
            Each problem is printed as FILE:LINE:COLUMN: error: MESSAGE (or warning:), with the line
            and a caret under the column. Checks run in stages: YAML syntax, plugin names, options,
            then facts about this machine (writable output and cache directories, readable files),
            which are warnings here ("... on this machine": the file may be meant for another host;
            run, serve and work refuse to start on them). A file a stage reads when it is built (a
            watermark) is still an error. Exits 0 when every file is valid (warnings allowed), 1
            otherwise.

            Examples:
              pipelinectl validate pipelines/*.yaml
              pipelinectl validate pipelines/
              pipelinectl validate thumbnails --format json
            """))

    enum Format: String, ExpressibleByArgument, CaseIterable { case text, json }

    @Argument(help: "Pipeline files, directories of them (every *.yaml and *.yml, as serve reads them), or names looked up in pipelines/.")
    var pipelines: [String]

    @Option(help: "Output format: text (for people) or json (an array of diagnostics, for scripts).")
    var format: Format = .text

    func run() async throws {
        var allValid = true
        var all: [Diagnostic] = []
        for name in try ServiceSetup.pipelineFiles(pipelines) {
            // Facts of this machine are warnings: the file may be meant for another host.
            let (pipeline, diagnostics, source) = checkPipeline(name, machineFacts: .warning)
            if pipeline == nil { allValid = false }
            all += diagnostics
            guard format == .text else { continue }
            for diagnostic in diagnostics { printError(diagnostic.rendered(source: source)) }
            if let pipeline { print("\(pipeline.file): ok (\(pipeline.name))") }
        }
        if format == .json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(all), as: UTF8.self))
        }
        if !allValid { throw Exit.itemsFailed }
    }
}
