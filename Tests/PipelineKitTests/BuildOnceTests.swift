import Foundation
import PipelineKit
import Synchronization
import Testing
import TestSupport

/// A validated pipeline is turned into its stages once: validation builds what it checks and the
/// run uses that; a stage shared by variants is one instance; a loader no source needs is never
/// built, and loaders and destinations are checked, not built, by validation.
@Suite struct BuildOnceTests {
    /// How many times each plugin's factory ran, and each check.
    final class Counts: Sendable {
        private let counts = Mutex<[String: Int]>([:])
        func add(_ name: String) { counts.withLock { $0[name, default: 0] += 1 } }
        subscript(_ name: String) -> Int { counts.withLock { $0[name] ?? 0 } }
        var all: [String: Int] { counts.withLock { $0 } }
    }

    func registry(_ counts: Counts, loader: ScriptedLoader) throws -> PluginRegistry {
        let log = loader.log
        var registry = PluginRegistry()
        try registry.register(.loader(PluginSpec(name: "scripted", summary: "Scripted loads."), schemes: ["scripted"],
                                      check: { _ in counts.add("check scripted") }) { _ in counts.add("scripted"); return loader })
        try registry.register(.loader(PluginSpec(name: "unused", summary: "No source needs it."), schemes: ["unused"],
                                      check: { _ in counts.add("check unused") }) { _ in counts.add("unused"); return ScriptedLoader() })
        try registry.register(.decoder(PluginSpec(name: "fake", summary: "Sizes from text.")) { _ in counts.add("decoder"); return FakeDecoder(log: log) })
        try registry.register(.processor(PluginSpec(name: "shared", summary: "Halves.")) { _ in counts.add("shared"); return FakeHalf() })
        try registry.register(.processor(PluginSpec(name: "own", summary: "Halves.")) { _ in counts.add("own"); return FakeHalf() })
        try registry.register(.encoder(PluginSpec(name: "fake", summary: "Writes the size.")) { _ in counts.add("encoder"); return FakeEncoder(log: log) })
        try registry.register(.destination(PluginSpec(name: "files", summary: "Plain files."), schemes: [""],
                                           check: { _ in counts.add("check files") }) { options in
            counts.add("destination")
            return ScriptedDirectory(path: options.string("dir") ?? "out", log: log)
        })
        return registry
    }

    @Test func everyStageOfARunIsBuiltOnceAndAnUnneededLoaderNever() async throws {
        let counts = Counts()
        let loader = ScriptedLoader()
        for name in ["a", "b", "c"] { loader.script(name, .bytes(Data("8x8".utf8))) }
        let registry = try registry(counts, loader: loader)
        let out = try Fixtures.temporaryDirectory("once")
        let text = """
            loader: scripted
            decoder: fake
            processors: [shared]
            encoder: fake
            variants:
              small: { processors: [own] }
              large: {}
            output: { dir: \(out.path) }
            """
        let (parsed, diagnostics) = PipelineFile.parse(text: text, file: "once.yaml", registry: registry)
        let pipeline = try #require(parsed, "\(diagnostics)")
        // Validation built the stages it checks, and only checked the loader.
        #expect(counts.all == ["decoder": 1, "shared": 1, "own": 1, "encoder": 1, "check scripted": 1, "check files": 1])
        let runner = try PipelineRunner(pipeline: pipeline, registry: registry)
        let sources = ["a", "b", "c"].enumerated().map { Source(text: "scripted://\($0.element)", index: $0.offset + 1) }
        let summary = try await runner.run(sources.async) { _ in }
        #expect(summary.ok == 3)
        // The run built the destination and the loader its sources need, once; nothing twice.
        #expect(counts.all == ["decoder": 1, "shared": 1, "own": 1, "encoder": 1, "check scripted": 1, "check files": 1,
                               "destination": 1, "scripted": 1])
        #expect(counts["unused"] == 0)
    }

    @Test func aLoaderThatCannotBeBuiltFailsTheItemsItWouldServeAndNoOthers() async throws {
        var registry = PluginRegistry()
        let loader = ScriptedLoader()
        loader.script("ok", .bytes(Data("4x4".utf8)))
        let log = loader.log
        try registry.register(.loader(PluginSpec(name: "scripted", summary: "Scripted."), schemes: ["scripted"]) { _ in loader })
        try registry.register(.loader(PluginSpec(name: "broken", summary: "Needs what is not there."), schemes: ["broken"]) { _ in
            throw PipelineError(.invalidOption, "needs credentials")
        })
        try registry.register(.decoder(PluginSpec(name: "fake", summary: "")) { _ in FakeDecoder(log: log) })
        try registry.register(.encoder(PluginSpec(name: "fake", summary: "")) { _ in FakeEncoder(log: log) })
        try registry.register(.destination(PluginSpec(name: "files", summary: ""), schemes: [""]) { options in
            ScriptedDirectory(path: options.string("dir") ?? "out", log: log)
        })
        let out = try Fixtures.temporaryDirectory("broken-loader")
        let (parsed, diagnostics) = PipelineFile.parse(text: "decoder: fake\nencoder: fake\noutput: { dir: \(out.path) }\n",
                                                       file: "p.yaml", registry: registry)
        let runner = try PipelineRunner(pipeline: try #require(parsed, "\(diagnostics)"), registry: registry)
        let results = Mutex<[Int: ItemResult]>([:])
        _ = try await runner.run([Source(text: "broken://x", index: 1), Source(text: "scripted://ok", index: 2),
                                  Source(text: "broken://y", index: 3)].async) { item in results.withLock { $0[item.index] = item } }
        let all = results.withLock { $0 }
        #expect(all[2]?.status == .ok)
        for index in [1, 3] {
            #expect(all[index]?.error == ItemError(stage: .load, kind: .invalidOption, message: "loader 'broken': needs credentials", plugin: "broken"))
        }
    }
}

extension Array where Element: Sendable {
    /// The elements as an AsyncSequence.
    var async: AsyncStream<Element> {
        AsyncStream { continuation in
            for element in self { continuation.yield(element) }
            continuation.finish()
        }
    }
}
