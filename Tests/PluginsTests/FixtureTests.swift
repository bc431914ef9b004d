import Foundation
import PipelineKit
import Plugins
import Testing

/// Every broken pipeline in Fixtures/broken gives exactly the diagnostics in its `.expected` file:
/// message, line and column, all of them in one pass.
@Suite struct FixtureTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/broken")
    static let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [])
        .filter { $0.hasSuffix(".yaml") }.sorted()

    @Test func thereAreAtLeastThirty() {
        #expect(Self.files.count >= 30)
    }

    @Test(arguments: files)
    func brokenPipeline(_ name: String) throws {
        let path = Self.directory.appendingPathComponent(name).path
        let expected = try String(contentsOf: Self.directory.appendingPathComponent(name.replacingOccurrences(of: ".yaml", with: ".expected")),
                                  encoding: .utf8).split(separator: "\n").map(String.init)
        var found: [String] = []
        do {
            _ = try PipelineFile.load(path: path, registry: BuiltIns.registry(), environment: ["PK_FIXTURE_TIMEOUT": "later", "PK_FIXTURE_EMPTY": ""])
        } catch let error as PipelineValidationError {
            found = error.diagnostics.map { $0.description.replacingOccurrences(of: Self.directory.path + "/", with: "") }
        }
        #expect(!expected.isEmpty)
        #expect(found == expected)
        // Every message says where, by the full key path of what is wrong, unless the file could
        // not be read as YAML or the problem is the top level itself.
        let topLevel = ["invalid YAML", "environment variable", "duplicate key", "unknown top-level key", "unsupported version",
                        "missing '", "the pipeline file is empty", "expected a map of pipeline settings"]
        for line in found {
            let message = line.components(separatedBy: ": error: ").last ?? line
            let named = topLevel.contains { message.hasPrefix($0) }
                || message.range(of: #"^[a-z_]+(\.[A-Za-z0-9_-]+)*( \(destination '[a-z0-9]+'\))?: "#, options: .regularExpression) != nil
                || message.range(of: #"'[a-z_]+(\.[A-Za-z0-9_-]+)+'"#, options: .regularExpression) != nil
                || message.range(of: #"for '(processors|encoder|decoder|loader|output|metadata|params|serve|variants)'"#, options: .regularExpression) != nil
            #expect(named, "no key path in: \(message)")
        }
    }
}
