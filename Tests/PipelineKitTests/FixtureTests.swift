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
    }
}
