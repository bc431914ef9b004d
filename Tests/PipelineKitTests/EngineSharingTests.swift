import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// The engine driven by scripted stages: sharing, run-wide de-duplication, cancellation and time
/// limits, checked by what the stages saw (events), never by sleeping.
@Suite struct EngineSharingTests {
    func run(_ loader: ScriptedLoader, _ lines: [String], name: String = "{stem}.{ext}",
             configure: (inout RunOptions) -> Void = { _ in },
             onRunner: (PipelineRunner) -> Void = { _ in }) async throws -> ScriptedRun {
        let runner = try ScriptedStages.runner(loader, yaml: ScriptedStages.pipeline + "\noutput:\n  name: \"\(name)\"\n",
                                               configure: configure)
        onRunner(runner)
        return try await ScriptedStages.run(runner, lines)
    }

    @Test func aSourceRepeatedAfterItFinishedIsNotLoadedAgain() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .bytes(Data("40x20".utf8)))
        loader.script("b", .bytes(Data("10x10".utf8)))
        // One item at a time: each 'a' after the first comes when the first has long finished.
        let run = try await run(loader, ["a", "b", "a", "a"], name: "{index}-{stem}.{ext}") { $0.maxInFlight = 1 }
        // Under names of their own ({index}), the later lines are items, made from shared work.
        #expect(run.summary.ok == 4 && run.summary.shared == 2 && run.summary.duplicateDeliveries == 0)
        #expect(loader.calls("a") == 1)
        #expect(loader.log.count("decoded 40x20") == 1)
        // No cache was asked for them: shared work is not a cache hit.
        #expect(run[3].shared && !run[3].duplicate && run[3].cacheData == .off && run[3].cacheImage == .off && run[3].bytesIn == 0)
        // Each line has its own output (its own name), with the same bytes.
        let outputs = [1, 3, 4].map { run[$0].outputs[0] }
        #expect(Set(outputs).count == 3)
        #expect(try outputs.map { try String(contentsOfFile: $0, encoding: .utf8) } == Array(repeating: "fake 20x10", count: 3))
    }

    @Test func withoutTheWindowARepeatedSourceIsLoadedAgain() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .bytes(Data("40x20".utf8)))
        let run = try await run(loader, ["a", "a"], name: "{index}.{ext}") {
            $0.maxInFlight = 1
            $0.dedupeWindow = 0
        }
        #expect(run.summary.ok == 2)
        #expect(loader.calls("a") == 2)
    }

    @Test func aSourcesFailureIsReusedButNotRetriedPerLine() async throws {
        let loader = ScriptedLoader()
        loader.script("gone", .fail(PipelineError(.httpStatus, "404 Not Found")))
        loader.script("junk", .bytes(Data("not an image".utf8)))
        let run = try await run(loader, ["gone", "junk", "gone", "junk"], name: "{index}.{ext}") { $0.maxInFlight = 1 }
        // Two items failed; the repeated lines are duplicates of them, failed as they failed.
        #expect(run.summary.failed == 2 && run.summary.duplicateDeliveries == 2)
        #expect(run[3].duplicate && run[4].duplicate && run[3].status == .failed)
        #expect(loader.calls("gone") == 1 && loader.calls("junk") == 1)
        #expect(run[3].error?.kind == .httpStatus && run[3].error?.stage == .load)
        #expect(run[4].error?.kind == .decodeFailed && run[4].error?.stage == .decode)
    }

    @Test func linesInFlightTogetherShareOneLoad() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("8x8".utf8)))
        let released = Task {
            await loader.log.wait(for: "started a")
            loader.release("a")
        }
        let run = try await run(loader, Array(repeating: "a", count: 10))
        await released.value
        // One item; nine duplicate deliveries (same source, same names), nothing written for them.
        #expect(run.summary.ok == 1 && run.summary.total == 1 && run.summary.duplicateDeliveries == 9)
        #expect(run.summary.outputsWritten == 1 && run.summary.deliveries == 10)
        #expect(run.items.filter(\.duplicate).count == 9)
        #expect(loader.calls("a") == 1)
        #expect(Set(run.items.map(\.outputs)).count == 1)  // same name, written once
    }

    /// The limits are counted by a clock the test moves: they strike when it says, however busy
    /// the machine, and the test waits on no real time.
    @Test func theTimeLimitCancelsTheLoadEvenWhenShared() async throws {
        let loader = ScriptedLoader()
        loader.script("hung", .hold(Data()))
        loader.script("ok", .bytes(Data("4x4".utf8)))
        let timers = ManualTimers()
        let running = Task { try await self.run(loader, ["hung", "hung", "ok"]) { $0.itemTimeout = 60; $0.timers = timers } }
        // The good item is done and the shared load is under way before the limit strikes.
        #expect(await loader.log.wait(for: "encoded 2x2"))
        #expect(await loader.log.wait(for: "started hung"))
        // The good item has settled when its clock's timer is gone (bounded against a hang).
        for _ in 0..<6000 where timers.pending != 2 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(timers.pending == 2)
        timers.advance(by: .seconds(59))
        #expect(loader.log.count("cancelled hung") == 0, "not yet")
        timers.advance(by: .seconds(1))
        let result = try await running.value
        #expect(result[1].error?.kind == .timeout && result[2].error?.kind == .timeout)
        #expect(result[3].status == .ok, "\(String(describing: result[3].error))")
        #expect(loader.calls("hung") == 1)
        // The last line waiting for it left, so the load itself was cancelled.
        #expect(await loader.log.wait(for: "cancelled hung"))
    }

    @Test func waitingForALoadSlotIsNotCountedByTheTimeLimit() async throws {
        let loader = ScriptedLoader(maxConcurrentLoads: 1)
        loader.script("hung", .hold(Data()))
        loader.script("queued", .bytes(Data("4x4".utf8)))
        let timers = ManualTimers()
        let runner = try ScriptedStages.runner(loader) { $0.itemTimeout = 15; $0.timers = timers }
        let slot = try #require(try runner.loader(for: Source(text: "scripted://queued", index: 2)))
        // 'hung' takes the only slot first; 'queued', listed once it has, waits for the slot for
        // as long as 'hung' holds it: more than its whole limit.
        let list = FakeList(log: loader.log)
        let items = EventLog()
        let running = Task {
            try await runner.run(SourceCursorSequence(try await list.open(), readsAhead: false)) { items.record("\($0.index) \($0.status.rawValue)") }
        }
        list.add("hung")
        #expect(await loader.log.wait(for: "started hung"))
        list.add("queued")
        list.close()
        // Until 'queued' is seen waiting for the slot (an event, bounded against a hang).
        for _ in 0..<6000 where slot.limit.waiting == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(slot.limit.waiting == 1)
        timers.advance(by: .seconds(15))  // 'hung' runs out; 'queued' has waited all of it
        let summary = try await running.value
        #expect(summary.failed == 1 && summary.ok == 1)
        #expect(items.events.sorted() == ["1 failed", "2 ok"])
        let events = loader.log.events
        let cancelled = events.firstIndex(of: "cancelled hung"), started = events.firstIndex(of: "started queued")
        #expect(cancelled != nil && started != nil && cancelled! < started!, "\(events)")
    }

    @Test func anUnknownSchemeFailsAloneWithTheSchemesServed() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .bytes(Data("4x4".utf8)))
        let registry = ScriptedStages.registry(loader)
        let (pipeline, _) = PipelineFile.parse(text: ScriptedStages.pipeline, file: "s.yaml", registry: registry)
        var options = RunOptions()
        options.outputDirectory = try Fixtures.temporaryDirectory("sharing").path
        let runner = try PipelineRunner(pipeline: pipeline!, registry: registry, options: options)
        let item = await runner.runItem(Source(text: "ftp://host/a.jpg", index: 1))
        #expect(item.error?.kind == .blockedProtocol)
        #expect(item.error?.message == "no loader serves 'ftp' sources; this run loads: scripted")
    }
}

@Suite struct FinishedSourcesTests {
    @Test func outcomesComeBackAsTheyWereRecorded() {
        var outcome = ItemOutcome()
        outcome.planned = ["a/1.jpg", "a very long relative path/with é and 漢字/2.webp"]
        outcome.written = ["a/1.jpg", ""]
        outcome.chosenExtensions = [nil, "avif"]
        outcome.size = PixelSize(width: 256, height: 144)
        outcome.bytesIn = 123_456_789
        outcome.bytesOut = 4096
        outcome.cacheData = .revalidated
        outcome.cacheImage = .processedHit
        outcome.timings = StageTimings(load: 1.5, decode: 22.25, process: 0.125, encode: 3)
        let finished = FinishedSources(capacity: 10)
        finished.record(.made(outcome), for: "https://example.com/x.jpg")
        finished.record(.failed(PipelineError(.httpStatus, "HTTP 404")), for: "https://example.com/y.jpg")
        guard case .made(let back)? = finished.entry(for: "https://example.com/x.jpg") else {
            Issue.record("not remembered")
            return
        }
        #expect(back.planned == outcome.planned && back.written == outcome.written && back.chosenExtensions == outcome.chosenExtensions)
        #expect(back.size == outcome.size && back.bytesIn == outcome.bytesIn && back.bytesOut == outcome.bytesOut)
        #expect(back.cacheData == .revalidated && back.cacheImage == .processedHit && back.timings == outcome.timings)
        guard case .failed(let failure)? = finished.entry(for: "https://example.com/y.jpg") else {
            Issue.record("failure not remembered")
            return
        }
        #expect(failure.kind == .httpStatus)
        #expect(finished.entry(for: "https://example.com/z.jpg") == nil)
    }

    @Test func twoGenerationsBoundWhatIsRemembered() {
        let finished = FinishedSources(capacity: 4)
        for i in 0..<10 { finished.record(.made(ItemOutcome()), for: "k\(i)") }
        #expect(finished.count <= 4)
        #expect(finished.entry(for: "k9") != nil)
        #expect(finished.entry(for: "k0") == nil)
    }
}
