import ArgumentParser
import CBuildInfo
import Foundation
import Logging
import MagickKit
import PipelineKit

/// The controller: every `pipelinectl` command, for the stock binary and for custom builds.
///
/// A custom build with its own plugins is a short `main.swift`:
/// ```swift
/// import PipelineCtl
/// import Plugins
///
/// await PipelineCtl.main(plugins: [BuiltIns.self, MyPlugins.self])
/// ```
/// It gets `validate`, `explain`, `run`, `fetch`, `test`, `plugins` and `schema`, with its plugins
/// validated, described and documented exactly like the built-ins.
public enum PipelineCtl {
    /// This build's version.
    public static let version = PipelineKitVersion.current

    /// The source revision this binary was built from (`git describe --always --dirty` when the
    /// Makefile built it), or `unknown`.
    public static let revision = String(cString: pk_build_revision())

    /// The plugin bundles this build registered, for the libraries `--version` lists.
    nonisolated(unsafe) static var bundles: [any PluginBundle.Type] = []

    /// What `pipelinectl --version` prints: the version, the source revision and the version of
    /// every library the build runs with, one per line.
    static func versionText() -> String {
        var imageMagick = Magick.version
        if imageMagick.hasPrefix("ImageMagick ") { imageMagick.removeFirst("ImageMagick ".count) }
        if let url = imageMagick.range(of: " https://") { imageMagick.removeSubrange(url.lowerBound...) }
        var rows = [("revision", revision), ("traces", Telemetry.exporterBuilt ? "OTLP/HTTP exporter (swift-otel)" : "no exporter (built without the OTLP trait)"),
                    ("ImageMagick", imageMagick)]
        var seen: Set<String> = []
        for bundle in bundles {
            for library in bundle.libraries where seen.insert(library.name).inserted {
                rows.append((library.name, library.version))
            }
        }
        let width = rows.map(\.0.count).max() ?? 0
        return (["pipelinectl \(version)"] + rows.map { $0.0.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $0.1 })
            .joined(separator: "\n")
    }

    /// The registry the commands use; set once by ``main(plugins:)`` before any command runs.
    nonisolated(unsafe) static var registry = PluginRegistry()

    /// Registers `plugins`, parses the command line and runs the command, then exits.
    ///
    /// Exit codes: 0 when everything succeeded; 1 when an item failed (after every item was tried)
    /// or a file is invalid (`validate`, `explain`) or a test failed (`test`); 2 when the pipeline,
    /// the list or the arguments are invalid (nothing ran), or when two plugins share a name.
    public static func main(plugins: [any PluginBundle.Type]) async -> Never {
        Magick.returnLargeBlocksToTheSystem()
        bundles = plugins
        do {
            registry = try PluginRegistry(bundles: plugins)
        } catch {
            printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
            Foundation.exit(2)
        }
        await RootCommand.main()
        Foundation.exit(0)
    }
}

struct RootCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipelinectl",
        abstract: "Validate, run and report on image pipelines declared in YAML.",
        discussion: helpText("""
            Examples:
              pipelinectl validate pipelines/thumbnails.yaml
              pipelinectl run thumbnails examples/urls.txt --report run.json
              pipelinectl fetch thumbnails urls.txt
              pipelinectl plugins
              pipelinectl --version
            """),
        subcommands: [Validate.self, Explain.self, Run.self, Fetch.self, Serve.self, Work.self, QueueCommand.self, Sign.self, CacheCommand.self, TestCommand.self, Report.self, PluginsCommand.self, Schema.self, BenchLibrary.self]
    )

    @Flag(help: "Print the version, the source revision and the version of every library it runs with.")
    var version = false

    func run() async throws {
        guard version else { throw CleanExit.helpRequest(self) }
        print(PipelineCtl.versionText())
    }

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

/// Help text as the argument parser should get it: each paragraph on one line, so that the parser
/// wraps it once, at the terminal's width. Paragraphs are separated by blank lines; a line that
/// starts with a space (an example, a list item) keeps its own line, as written.
func helpText(_ text: String) -> String {
    var paragraphs: [String] = [], current: [String] = []
    func flush() {
        if !current.isEmpty { paragraphs.append(current.joined(separator: " ")) }
        current = []
    }
    var out: [String] = []
    for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
        if line.trimmingCharacters(in: .whitespaces).isEmpty {
            flush()
            out.append(contentsOf: paragraphs); paragraphs = []
            out.append("")
        } else if line.hasPrefix(" ") {
            flush()
            out.append(contentsOf: paragraphs); paragraphs = []
            out.append(line)
        } else {
            current.append(line)
        }
    }
    flush()
    out.append(contentsOf: paragraphs)
    return out.joined(separator: "\n")
}

/// Exit codes, chosen so that a batch engine's retry policy can tell the cases apart.
enum Exit {
    /// The run finished; some items failed for reasons of their own (a 404, a broken image). The
    /// report records them: retrying the whole shard would not help.
    static let itemsFailed = ExitCode(1)
    /// The pipeline, the list or an option is wrong: never retry. (Usage errors caught by the
    /// argument parser exit 2 too, not its default 64; see ``RootCommand/main()``.)
    static let invalid = ExitCode(2)
    /// Infrastructure trouble: an output or cache store could not be written, or the list could
    /// not be read to its end. Retry (with `--resume`, only what is missing is done again).
    static let infrastructure = ExitCode(3)
}

/// Writes a line to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// Finds and validates a pipeline: the pipeline (with its warnings) or every diagnostic.
/// `machineFacts`: how facts of this machine are reported (``PipelineFile/load(path:registry:environment:machineFacts:)``).
func checkPipeline(_ name: String, machineFacts: Diagnostic.Severity = .error) -> (Pipeline?, [Diagnostic], source: String?) {
    guard let path = PipelineFile.locate(name) else {
        let message = "no pipeline '\(name)' (looked for \(name), pipelines/\(name), pipelines/\(name).yaml)"
        return (nil, [Diagnostic(file: name, line: 1, column: 1, message: message)], nil)
    }
    do {
        let pipeline = try PipelineFile.load(path: path, registry: PipelineCtl.registry, machineFacts: machineFacts)
        return (pipeline, pipeline.warnings, try? String(contentsOfFile: path, encoding: .utf8))
    } catch let invalid as PipelineValidationError {
        return (nil, invalid.diagnostics, invalid.source)
    } catch {
        return (nil, [Diagnostic(file: path, line: 1, column: 1, message: "\(error)")], nil)
    }
}

/// Finds and validates a pipeline, printing every diagnostic to stderr; `nil` when invalid.
func loadPipeline(_ name: String) -> Pipeline? {
    let (pipeline, diagnostics, source) = checkPipeline(name)
    if pipeline == nil, diagnostics.count == 1, diagnostics[0].message.hasPrefix("no pipeline '") {
        printError("error: " + diagnostics[0].message)
        return nil
    }
    for diagnostic in diagnostics { printError(diagnostic.rendered(source: source)) }
    return pipeline
}
