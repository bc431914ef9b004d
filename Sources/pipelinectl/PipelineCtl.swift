import ArgumentParser
import Foundation
import Logging
import PipelineKit
import Plugins

/// `pipelinectl`: validates, runs and reports on image pipelines.
///
/// Exit codes: 0 when everything succeeded; 1 when an item failed (after every item was tried) or a
/// pipeline is invalid (`validate`); 2 when the pipeline or the arguments are invalid (nothing ran).
@main
struct PipelineCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipelinectl",
        abstract: "Validate, run and report on image pipelines declared in YAML.",
        discussion: """
            Examples:
              pipelinectl validate pipelines/thumbnails.yaml
              pipelinectl run thumbnails examples/urls.txt --report run.json
              pipelinectl fetch thumbnails urls.txt
              pipelinectl plugins
            """,
        subcommands: [Validate.self, Run.self, Fetch.self, PluginsCommand.self]
    )

    /// The registry every command uses: the built-ins.
    static let registry = BuiltIns.registry()

    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // Usage errors exit 2, as invalid pipelines do; ArgumentParser would use 64.
            if exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}

/// Exit codes, named.
enum Exit {
    static let itemsFailed = ExitCode(1)
    static let invalid = ExitCode(2)
}

/// Writes a line to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// Finds and validates a pipeline, printing every diagnostic; `nil` when it is missing or invalid.
func loadPipeline(_ name: String) -> Pipeline? {
    guard let path = PipelineFile.locate(name) else {
        printError("error: no pipeline '\(name)' (looked for \(name), pipelines/\(name), pipelines/\(name).yaml)")
        return nil
    }
    do {
        let pipeline = try PipelineFile.load(path: path, registry: PipelineCtl.registry)
        return pipeline
    } catch let invalid as PipelineValidationError {
        for diagnostic in invalid.diagnostics { printError(diagnostic.rendered(source: invalid.source)) }
        return nil
    } catch {
        printError("error: \(path): \(error)")
        return nil
    }
}
