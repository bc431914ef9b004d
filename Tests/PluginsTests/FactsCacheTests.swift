import Foundation
@testable import PipelineKit
import Plugins
import Testing
import TestImages

/// Facts-only items (what `/info` answers) with a data cache that keeps outputs: the facts are
/// kept, and asked again they come back without a decode while the source is unchanged; a
/// changed source is decoded again.
@Suite struct FactsCacheTests {
    @Test func knownFactsAreNotDecodedAgain() async throws {
        let dir = try Fixtures.temporaryDirectory("facts-cache")
        let source = dir.appendingPathComponent("a.jpg")
        try Fixtures.image("plasma:", width: 600, height: 400, format: "JPEG").write(to: source)
        let (pipeline, diagnostics) = PipelineFile.parse(text: """
            data_cache: { disk: { path: \(dir.path)/cache, store: processed } }
            processors: [ analyze ]
            encoder: jpeg
            """, file: "f.yaml", registry: BuiltIns.registry())
        #expect(diagnostics.isEmpty, "\(diagnostics)")
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: BuiltIns.registry(), options: RunOptions())
        let first = await runner.process(Source(text: source.path, index: 1), delivery: .factsOnly)
        #expect(first.result.status == .ok && first.facts["blurhash"] != nil)
        #expect(runner.making.decodes.value == 1)
        let again = await runner.process(Source(text: source.path, index: 1), delivery: .factsOnly)
        #expect(again.facts == first.facts && again.result.cacheData == .processedHit)
        #expect(runner.making.decodes.value == 1, "known facts: no decode")
        // New content under the same name: decoded again, its own facts.
        try Fixtures.image("gradient:red-blue", width: 300, height: 100, format: "JPEG").write(to: source)
        let changed = await runner.process(Source(text: source.path, index: 1), delivery: .factsOnly)
        #expect(changed.facts["width"] == .int(300) && runner.making.decodes.value == 2)
    }
}
