import Foundation
import Yams

/// Tests declared with a pipeline (`tests:` in the file, or a sibling `NAME.test.yaml`): an input
/// and what its outputs must be, or the kind of failure it must end with.
///
/// ```yaml
/// tests:
///   - name: landscape photo fits the box
///     input: plasma:          # an ImageMagick built-in or generator, or a file next to the pipeline
///     size: 4000x3000         # for generators
///     expect: { width: 256, height: 192, format: JPEG, max_bytes: 40KB }
///   - name: variants
///     input: photos/portrait.jpg
///     outputs:
///       small: { width: 67, height: 100 }
///   - name: text is refused
///     input: notes.txt
///     expect: { fails: not_an_image }
///   - name: a broken file gets the fallback, the photo its placeholder facts
///     input: notes.txt
///     expect: { fallback: true, facts: { "encoding.0.target_met": true } }
/// ```
public struct PipelineTest: Sendable {
    /// What one output must be; `nil` fields are not checked.
    public struct Expectation: Sendable {
        public var width: Int?
        public var height: Int?
        public var format: String?
        public var maxBytes: Int?
        public var minBytes: Int?
        public var hasAlpha: Bool?
        /// Whether the outputs must be the `on_failure` fallback's (true) or the source's (false).
        public var fallback: Bool?
        /// Facts the item must report, by path (`dominant_color`, `exif.make`, `encoding.0.format`:
        /// object keys and list indices joined by dots), each as its JSON text without quotes.
        public var facts: [String: String] = [:]
    }

    public let name: String
    public let input: String
    public let size: PixelSize?
    /// Checked on every output.
    public let expect: Expectation
    /// Checked on the output of one variant, by variant name.
    public let outputs: [String: Expectation]
    /// The failure kind the item must end with, instead of outputs.
    public let fails: ErrorKind?
    public let position: SourcePosition

    static let expectationKeys = ["width", "height", "format", "max_bytes", "min_bytes", "has_alpha", "fails", "fallback", "facts"]
    static let testKeys = ["name", "input", "size", "expect", "outputs"]
    /// Built-in images and generators a test input may name.
    static let builtIns = ["rose:", "logo:", "wizard:", "granite:", "netscape:", "plasma:", "gradient:", "radial-gradient:",
                           "xc:", "canvas:", "pattern:", "label:"]

    /// The tests of the pipeline at `path`: from its `tests:` section, else from `NAME.test.yaml`.
    /// Throws ``PipelineValidationError`` when the tests are malformed.
    public static func load(pipelinePath: String, variants: [String]) throws -> [PipelineTest] {
        let sibling = URL(fileURLWithPath: pipelinePath).deletingPathExtension().path + ".test.yaml"
        for file in [pipelinePath, sibling] {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
            guard let found = try? Yams.compose(yaml: text), case .mapping(let mapping) = found else { continue }
            guard let node = mapping.first(where: { $0.key.scalar?.string == "tests" })?.value else { continue }
            var parser = TestParser(file: file, variants: variants)
            let tests = parser.tests(node)
            if !parser.diagnostics.isEmpty { throw PipelineValidationError(diagnostics: parser.diagnostics, source: text) }
            return tests
        }
        return []
    }

    struct TestParser {
        let file: String
        let variants: [String]
        var diagnostics: [Diagnostic] = []

        mutating func error(_ node: Node, _ message: String) {
            diagnostics.append(Diagnostic(file: file, line: node.mark?.line ?? 1, column: node.mark?.column ?? 1, message: message))
        }

        mutating func tests(_ node: Node) -> [PipelineTest] {
            guard case .sequence(let list) = node else {
                error(node, "expected a list of tests for 'tests'")
                return []
            }
            var out: [PipelineTest] = []
            for item in list { if let made = test(item) { out.append(made) } }
            return out
        }

        mutating func test(_ node: Node) -> PipelineTest? {
            guard case .mapping(let fields) = node else {
                error(node, "expected a test: a map with 'name', 'input' and 'expect' or 'outputs'")
                return nil
            }
            var name: String?, input: String?, size: PixelSize?, expect = Expectation(), fails: ErrorKind?
            var outputs: [String: Expectation] = [:]
            for (key, value) in fields {
                let word = key.scalar?.string ?? ""
                switch word {
                case "name": name = value.scalar?.string
                case "input": input = value.scalar?.string
                case "size":
                    let parts = (value.scalar?.string ?? "").split(separator: "x").compactMap { Int($0) }
                    if parts.count == 2, parts.allSatisfy({ $0 > 0 && $0 <= 16384 }) {
                        size = PixelSize(width: parts[0], height: parts[1])
                    } else { error(value, "expected a size such as 4000x3000 for 'size'") }
                case "expect":
                    (expect, fails) = expectation(value)
                case "outputs":
                    guard case .mapping(let byVariant) = value else { error(value, "expected a map from variant names to expectations"); continue }
                    for (variantKey, variantValue) in byVariant {
                        let variant = variantKey.scalar?.string ?? ""
                        guard variants.contains(variant) else {
                            error(variantKey, "no variant named '\(variant)'" + Suggest.hint(for: variant, in: variants))
                            continue
                        }
                        outputs[variant] = expectation(variantValue).0
                    }
                default:
                    error(key, "unknown key '\(word)' in a test" + Suggest.hint(for: word, in: PipelineTest.testKeys))
                }
            }
            guard let input, !input.isEmpty else {
                error(node, "a test needs an 'input'")
                return nil
            }
            if input.hasSuffix(":") || input.contains(":"), !input.hasPrefix("/"),
               !PipelineTest.builtIns.contains(where: { input.hasPrefix($0) }) {
                error(node, "input '\(input)' is neither a file nor one of ImageMagick's built-ins: "
                    + PipelineTest.builtIns.joined(separator: ", "))
                return nil
            }
            let at = SourcePosition(line: node.mark?.line ?? 1, column: node.mark?.column ?? 1)
            return PipelineTest(name: name ?? input, input: input, size: size, expect: expect, outputs: outputs,
                                fails: fails, position: at)
        }

        mutating func expectation(_ node: Node) -> (Expectation, ErrorKind?) {
            var result = Expectation()
            var fails: ErrorKind?
            guard case .mapping(let fields) = node else {
                error(node, "expected a map of expectations (\(PipelineTest.expectationKeys.joined(separator: ", ")))")
                return (result, nil)
            }
            for (key, value) in fields {
                let word = key.scalar?.string ?? ""
                let text = value.scalar?.string ?? ""
                switch word {
                case "width": result.width = int(value, word)
                case "height": result.height = int(value, word)
                case "format": result.format = PipelineTest.normalFormat(text)
                case "max_bytes", "min_bytes":
                    guard let bytes = Units.parseSize(text) else { error(value, "expected a size such as 50KB for '\(word)', got '\(text)'"); continue }
                    if word == "max_bytes" { result.maxBytes = bytes } else { result.minBytes = bytes }
                case "has_alpha":
                    guard text == "true" || text == "false" else { error(value, "expected true or false for 'has_alpha', got '\(text)'"); continue }
                    result.hasAlpha = text == "true"
                case "fails": fails = ErrorKind(text)
                case "fallback":
                    guard text == "true" || text == "false" else { error(value, "expected true or false for 'fallback', got '\(text)'"); continue }
                    result.fallback = text == "true"
                case "facts":
                    guard case .mapping(let facts) = value else { error(value, "expected a map from fact paths to values for 'facts'"); continue }
                    for (path, expected) in facts {
                        guard let name = path.scalar?.string, let wanted = expected.scalar?.string else {
                            error(path, "expected a fact path and a single value, such as dominant_color: \"#3a7bd5\"")
                            continue
                        }
                        result.facts[name] = wanted
                    }
                default:
                    error(key, "unknown expectation '\(word)'" + Suggest.hint(for: word, in: PipelineTest.expectationKeys))
                }
            }
            return (result, fails)
        }

        mutating func int(_ node: Node, _ name: String) -> Int? {
            guard let value = node.scalar.flatMap({ Int($0.string) }) else {
                error(node, "expected an integer for '\(name)', got \(OptionParsing.describe(node))")
                return nil
            }
            return value
        }
    }

    static func normalFormat(_ text: String) -> String {
        let upper = text.uppercased()
        return upper == "JPG" ? "JPEG" : upper
    }
}
