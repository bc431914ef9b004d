import Foundation
import Logging

/// The outcome of one pipeline test.
public struct PipelineTestResult: Sendable {
    public let name: String
    /// What did not match: empty when the test passed.
    public let problems: [String]
    public var passed: Bool { problems.isEmpty }
}

/// What pipeline tests need from a codec: inputs made from built-in generators (`rose:`,
/// `gradient:red-blue`), and the facts of a written output. `MagickKit` provides ImageMagick's.
public protocol PipelineTestImaging: Sendable {
    /// A PNG of the built-in `spec`, at `size` when given.
    func makeInput(_ spec: String, size: PixelSize?) throws -> Data
    /// The size and alpha of `data` read as `format` (from the magic bytes); `nil` when it is not
    /// an image.
    func inspect(_ data: Data, format: String) -> (width: Int, height: Int, hasAlpha: Bool)?
}

/// Runs pipeline tests through the real engine, with real plugins, into a temporary directory.
public enum PipelineTestRunner {
    public static func run(_ tests: [PipelineTest], pipeline: Pipeline, registry: PluginRegistry,
                           imaging: any PipelineTestImaging) async throws -> [PipelineTestResult] {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("pipelinectl-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        var options = RunOptions()
        options.outputDirectory = work.appendingPathComponent("out").path
        options.logger = Logger(label: "pipelinectl-test", factory: { _ in SwiftLogNoOpLogHandler() })  // results are reported per test
        let runner = try PipelineRunner(pipeline: pipeline, registry: registry, options: options)
        let base = URL(fileURLWithPath: pipeline.file).deletingLastPathComponent()
        var results: [PipelineTestResult] = []
        for (index, test) in tests.enumerated() {
            let path: String
            if PipelineTest.builtIns.contains(where: { test.input.hasPrefix($0) }) {
                do {
                    let data = try imaging.makeInput(test.input, size: test.size)
                    path = work.appendingPathComponent("input-\(index)").path  // read by its content
                    try data.write(to: URL(fileURLWithPath: path))
                } catch {
                    results.append(PipelineTestResult(name: test.name, problems: ["cannot make input '\(test.input)': \(error)"]))
                    continue
                }
            } else {
                path = test.input.hasPrefix("/") ? test.input : base.appendingPathComponent(test.input).path
            }
            let item = await runner.runItem(Source(text: path, index: index + 1))
            results.append(PipelineTestResult(name: test.name, problems: check(item, test, pipeline, imaging)))
        }
        return results
    }

    static func check(_ item: ItemResult, _ test: PipelineTest, _ pipeline: Pipeline, _ imaging: any PipelineTestImaging) -> [String] {
        if let fails = test.fails {
            guard let error = item.error else { return ["expected a failure of kind \(fails), but it succeeded"] }
            return error.kind == fails ? [] : ["expected a failure of kind \(fails), got \(error.stage.rawValue) \(error.kind): \(error.message)"]
        }
        if let error = item.error { return ["failed: \(error.stage.rawValue) \(error.kind): \(error.message)"] }
        var problems: [String] = []
        let fellBack = item.fallback
        if let fallback = test.expect.fallback, fallback != fellBack {
            problems.append(fallback ? "expected the fallback image, but the source was used"
                : "expected the source, but the fallback image was used (\(item.recoveredFrom?.message ?? "failed"))")
        }
        for (path, expected) in test.expect.facts.sorted(by: { $0.key < $1.key }) {
            guard let actual = fact(path, in: item.facts) else {
                problems.append("fact \(path): expected \(expected), but the item has none")
                continue
            }
            if actual != expected { problems.append("fact \(path): expected \(expected), got \(actual)") }
        }
        // One output per variant; a facts sidecar, when there is one, comes after them.
        for (index, output) in item.outputs.prefix(pipeline.variants.count).enumerated() {
            let variant = index < pipeline.variants.count ? pipeline.variants[index].name : nil
            let label = variant.map { "output '\($0)'" } ?? "output"
            guard let bytes = (try? FileManager.default.attributesOfItem(atPath: output))?[.size] as? Int else {
                problems.append("\(label) \(output): was not written")
                continue
            }
            let image = inspect(output, imaging)
            var expectations = [test.expect]
            if let variant, let own = test.outputs[variant] { expectations.append(own) }
            for expect in expectations {
                let wantsImage = expect.width != nil || expect.height != nil || expect.format != nil || expect.hasAlpha != nil
                if wantsImage {
                    guard let image else {
                        problems.append("\(label): expected an image, but the output is not one")
                        continue
                    }
                    func compare<T: Equatable>(_ what: String, _ expected: T?, _ actual: T) {
                        if let expected, expected != actual { problems.append("\(label): \(what) expected \(expected), got \(actual)") }
                    }
                    compare("width", expect.width, image.width)
                    compare("height", expect.height, image.height)
                    compare("format", expect.format, image.format)
                    compare("has_alpha", expect.hasAlpha, image.hasAlpha)
                }
                if let max = expect.maxBytes, bytes > max {
                    problems.append("\(label): max_bytes expected at most \(Units.formatSize(max)), got \(bytes) bytes")
                }
                if let min = expect.minBytes, bytes < min {
                    problems.append("\(label): min_bytes expected at least \(Units.formatSize(min)), got \(bytes) bytes")
                }
            }
        }
        return problems
    }

    /// The fact at `path` (keys and list indices joined by dots) as JSON text without quotes.
    static func fact(_ path: String, in facts: ImageFacts) -> String? {
        var current: FactValue = .object(facts)
        for part in path.split(separator: ".").map(String.init) {
            switch current {
            case .object(let object): guard let next = object[part] else { return nil }; current = next
            case .list(let list): guard let index = Int(part), list.indices.contains(index) else { return nil }; current = list[index]
            default: return nil
            }
        }
        switch current {
        case .string(let text): return text
        case .int(let value): return String(value)
        case .number(let value): return String(value)
        case .bool(let value): return String(value)
        case .list, .object: return (try? JSONEncoder.sorted.encode(current)).map { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Format (from the magic bytes), size and alpha of a written image; `nil` when it is not one.
    static func inspect(_ path: String, _ imaging: any PipelineTestImaging) -> (format: String, width: Int, height: Int, hasAlpha: Bool)? {
        guard let data = FileManager.default.contents(atPath: path), case .image(let format) = FormatSniffer.sniff(data),
              let facts = imaging.inspect(data, format: format.coder) else {
            return nil
        }
        return (format.coder, facts.width, facts.height, facts.hasAlpha)
    }
}
