import ArgumentParser
import MagickKit
import PipelineKit

struct TestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test",
        abstract: "Run the tests declared with pipelines (a 'tests:' section, or NAME.test.yaml beside the file).",
        discussion: helpText("""
            Each test names an input (a file relative to the pipeline, or an ImageMagick built-in such
            as rose: or plasma: with a size) and what every output, or each variant's output, must be:
            width, height, format, max_bytes, min_bytes, has_alpha; or the failure kind it must end
            with (fails: not_an_image). Exits 0 when every test passes, 1 when one fails, 2 when a
            pipeline or its tests are invalid.

            Example:
              pipelinectl test pipelines/*.yaml
            """))

    @Argument(help: "Pipeline files, or names looked up in pipelines/.")
    var pipelines: [String]

    func run() async throws {
        var passed = 0, failed = 0, invalid = false
        for name in pipelines {
            guard let pipeline = loadPipeline(name) else { invalid = true; continue }
            let tests: [PipelineTest]
            do {
                tests = try PipelineTest.load(pipelinePath: pipeline.file, variants: pipeline.variants.compactMap(\.name))
            } catch let error as PipelineValidationError {
                for diagnostic in error.diagnostics { printError(diagnostic.rendered(source: error.source)) }
                invalid = true
                continue
            }
            print("\(pipeline.file): \(tests.isEmpty ? "no tests" : "\(tests.count) test\(tests.count == 1 ? "" : "s")")")
            let results = try await PipelineTestRunner.run(tests, pipeline: pipeline, registry: PipelineCtl.registry, imaging: MagickTestImaging())
            for result in results {
                print("  \(result.passed ? "ok  " : "FAIL") \(result.name)")
                for problem in result.problems { print("       \(problem)") }
                if result.passed { passed += 1 } else { failed += 1 }
            }
        }
        print("\(passed) passed, \(failed) failed")
        if invalid { throw Exit.invalid }
        if failed > 0 { throw Exit.itemsFailed }
    }
}
