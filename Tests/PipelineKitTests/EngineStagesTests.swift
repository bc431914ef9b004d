import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// The engine with every slot faked (TestSupport's scripted stages and ``Fakes``): what it asks
/// of the data cache, the image cache, the list and the report, and in what order, checked by what
/// the fakes saw. No disk cache, no network, no codec.
@Suite struct EngineStagesTests {
    func runner(_ loader: ScriptedLoader, _ fakes: Fakes, stages: String = "") throws -> PipelineRunner {
        try ScriptedStages.runner(loader, fakes: fakes, yaml: ScriptedStages.pipeline + "\n" + stages)
    }

    func run(_ runner: PipelineRunner, _ names: [String]) async throws -> ScriptedRun {
        try await ScriptedStages.run(runner, names)
    }

    static func scripted(_ sources: [String: String]) -> ScriptedLoader {
        let loader = ScriptedLoader()
        for (name, size) in sources { loader.script(name, .bytes(Data(size.utf8))) }
        return loader
    }

    // MARK: The data cache

    @Test func aSecondRunTakesTheOriginalFromTheDataCache() async throws {
        let loader = Self.scripted(["a": "40x20", "b": "10x10"])
        let fakes = Fakes(log: loader.log)
        let first = try await run(try runner(loader, fakes, stages: "data_cache: fake"), ["a", "b"])
        #expect(first.summary.ok == 2 && first[1].cacheData == .miss)
        #expect(fakes.dataEntries.withLock { $0.count } == 2, "each original stored once")
        let second = try await run(try runner(loader, fakes, stages: "data_cache: fake"), ["a", "b"])
        #expect(second.summary.ok == 2 && second[1].cacheData == .hit && second[2].cacheData == .hit)
        #expect(loader.calls("a") == 1 && loader.calls("b") == 1, "the second run loaded nothing")
        #expect(loader.log.count("decoded 40x20") == 2, "originals only: the second run decodes again")
    }

    @Test func storedOutputsSpareTheLoadTheDecodeAndTheEncode() async throws {
        let loader = Self.scripted(["a": "40x20"])
        let fakes = Fakes(log: loader.log)
        let stages = "data_cache:\n  fake: { outputs: true }"
        _ = try await run(try runner(loader, fakes, stages: stages), ["a"])
        #expect(loader.log.count("encoded 20x10") == 1)
        let second = try await run(try runner(loader, fakes, stages: stages), ["a"])
        #expect(second.summary.ok == 1)
        #expect(loader.calls("a") == 1 && loader.log.count("decoded 40x20") == 1 && loader.log.count("encoded 20x10") == 1,
                "\(loader.log.events)")
        #expect(try String(contentsOfFile: second[1].outputs[0], encoding: .utf8) == "fake 20x10")
    }

    @Test func aStaleOriginalIsLoadedAgainAndStoredAgain() async throws {
        let loader = Self.scripted(["a": "40x20"])
        let fakes = Fakes(log: loader.log)
        _ = try await run(try runner(loader, fakes, stages: "data_cache: fake"), ["a"])
        fakes.entriesAreFresh.store(false, ordering: .relaxed)
        let second = try await run(try runner(loader, fakes, stages: "data_cache: fake"), ["a"])
        #expect(second.summary.ok == 1 && loader.calls("a") == 2)
        #expect(loader.log.events.filter { $0.hasPrefix("cache stored") }.count == 2)
    }

    @Test func aFailedLoadStoresNothing() async throws {
        let loader = ScriptedLoader()
        loader.script("gone", .fail(PipelineError(.notFound, "HTTP 404")))
        loader.script("junk", .bytes(Data("not an image".utf8)))
        let fakes = Fakes(log: loader.log)
        let result = try await run(try runner(loader, fakes, stages: "data_cache:\n  fake: { outputs: true }"), ["gone", "junk"])
        #expect(result.summary.failed == 2)
        #expect(result[1].error?.kind == .notFound && result[2].error?.kind == .decodeFailed)
        // The undecodable original may be kept (it is what the server sent), but no output is.
        #expect(fakes.dataEntries.withLock { $0.values.allSatisfy { $0.output == nil } })
    }

    // MARK: The image cache

    @Test func anImageCacheHitSparesTheDecode() async throws {
        let loader = Self.scripted(["a": "40x20"])
        let fakes = Fakes(log: loader.log)
        _ = try await run(try runner(loader, fakes, stages: "image_cache: fake"), ["a"])
        #expect(loader.log.events.contains { $0.hasPrefix("image stored") })
        let second = try await run(try runner(loader, fakes, stages: "image_cache: fake"), ["a"])
        #expect(second[1].cacheImage == .hit && loader.log.count("decoded 40x20") == 1, "\(loader.log.events)")
        #expect(try String(contentsOfFile: second[1].outputs[0], encoding: .utf8) == "fake 20x10")
    }

    @Test func withoutCachesNoCacheIsCounted() async throws {
        let loader = Self.scripted(["a": "40x20"])
        let result = try await run(try runner(loader, Fakes(log: loader.log)), ["a"])
        #expect(result[1].cacheData == .off && result[1].cacheImage == .off)
        #expect(!loader.log.events.contains { $0.hasPrefix("cache ") || $0.hasPrefix("image ") })
    }

    // MARK: The list

    /// A queue's message is settled once its item has ended, after its outputs are stored; a
    /// failed one is settled as failed. Items are reported while the list still waits for more.
    @Test func eachItemIsSettledAfterItsOutputsAreStored() async throws {
        let loader = Self.scripted(["a": "40x20", "b": "10x10"])
        loader.script("bad", .bytes(Data("nonsense".utf8)))
        let list = FakeList(log: loader.log)
        let runner = try runner(loader, Fakes(log: loader.log))
        let reported = EventLog()
        list.add("a", "bad")
        let run = Task {
            try await runner.run(SourceCursorSequence(try await list.open(), readsAhead: false), settle: list.settle) { item in
                reported.record("\(item.source) \(item.status.rawValue)")
            }
        }
        // Both ended and were settled while the list waits for its next source.
        #expect(await loader.log.wait(for: "settled scripted://a ok"))
        #expect(await loader.log.wait(for: "settled scripted://bad failed"))
        #expect(await reported.wait(until: { $0.count == 2 }))
        list.add("b")
        list.close()
        let summary = try await run.value
        #expect(summary.ok == 2 && summary.failed == 1)
        let events = loader.log.events
        let wrote = try #require(events.firstIndex { $0.hasPrefix("wrote a-") }, "\(events)")
        #expect(wrote < events.firstIndex(of: "settled scripted://a ok")!, "\(events)")
        #expect(loader.log.count("settled scripted://b ok") == 1)
    }

    // MARK: The report

    /// Every delivery reaches the report once, and the summary's counts are the report's: a line
    /// that repeats a source under the same names is a duplicate delivery, not a second item.
    @Test func theReportHasEveryDeliveryOnceAndTheSummaryAgrees() async throws {
        let loader = Self.scripted(["a": "40x20", "b": "10x10"])
        loader.script("bad", .bytes(Data("nonsense".utf8)))
        let fakes = Fakes(log: loader.log)
        let report = fakes.report
        try report.begin(RunHeader(pipeline: "fakes", fingerprint: "f"))
        let runner = try runner(loader, fakes)
        let items = Mutex<[ItemResult]>([])
        let summary = try await runner.run(AsyncStream { continuation in
            for (i, name) in ["a", "b", "a", "bad"].enumerated() { continuation.yield(Source(text: "scripted://" + name, index: i + 1)) }
            continuation.finish()
        }) { item in
            items.withLock { $0.append(item) }
            try? report.item(item)
        }
        try report.finish(summary: summary, statistics: RunStatistics(items.withLock { $0 }))
        let reported = fakes.reported.withLock { $0 }
        #expect(reported.items.count == 4 && Set(reported.items.map(\.index)) == [1, 2, 3, 4])
        let made = reported.items.filter { !$0.duplicate }
        #expect(reported.summary?.total == 3 && reported.summary?.deliveries == 4)
        #expect(summary.duplicateDeliveries == 1 && reported.items.filter(\.duplicate).count == 1)
        let counted = Dictionary(grouping: made, by: \.status).mapValues(\.count)
        #expect(summary.ok == 2 && counted[.ok] == 2 && summary.failed == 1 && counted[.failed] == 1)
        #expect(loader.calls("a") == 1)
    }
}
