import ArgumentParser
import Foundation
import PipelineKit

/// `pipelinectl bench-library PIPELINE LIST`: the list's sources through ``ImagePipelines``, the
/// API app code calls, as many at once as `run` keeps in flight; for bench/library.py, which
/// compares it with `pipelinectl run` on the same pipeline and list. Hidden: not a user's command.
struct BenchLibrary: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-library",
        abstract: "Process a list through the library API (ImagePipelines), for bench/library.py.",
        shouldDisplay: false)

    @Argument(help: "The pipeline file.")
    var pipeline: String

    @Argument(help: "A file of sources, one per line.")
    var list: String

    @Option(help: "store (the pipeline's output:), values or facts_only.")
    var delivery: String = "store"

    func run() async throws {
        guard let delivery = OutputDelivery(rawValue: delivery) else { throw ValidationError("--delivery: store, values or facts_only") }
        var options = ImagePipelines.Options()
        options.itemTimeout = 300
        let images: ImagePipelines
        do { images = try ImagePipelines(paths: [PipelineFile.locate(pipeline) ?? pipeline], registry: PipelineCtl.registry, options: options) } catch {
            printError("\(error)")
            throw Exit.invalid
        }
        let name = images.names[0]
        let lines = try String(contentsOfFile: list, encoding: .utf8).split(separator: "\n").map(String.init).filter { !$0.isEmpty }
        let start = ContinuousClock.now
        let limit = 8 + 2 * options.workers  // `run`'s default in flight for one loader of 8
        var ok = 0, failed = 0, bytes = 0
        await withTaskGroup(of: (Bool, Int).self) { group in
            var next = 0
            func add() {
                let line = lines[next]
                next += 1
                group.addTask {
                    do {
                        let made = try await images.process(Source(text: line, index: 1), pipeline: name, delivery: delivery)
                        return (true, made.outputs.reduce(0) { $0 + $1.byteCount } + made.result.bytesOut)
                    } catch {
                        return (false, 0)
                    }
                }
            }
            while next < min(limit, lines.count) { add() }
            while let (done, made) = await group.next() {
                if done { ok += 1 } else { failed += 1 }
                bytes += made
                if next < lines.count { add() }
            }
        }
        print("\(name): \(lines.count) items: \(ok) ok, \(failed) failed, \(bytes) bytes out in \(String(format: "%.3f", (ContinuousClock.now - start).seconds)) s")
    }
}
