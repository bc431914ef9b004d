import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// Each step of an item on its own, on the scripted stages and fakes: given its input value, what
/// it returns, what it asks of the stages, and how it names a failure.
@Suite struct EngineStepTests {
    /// A runner of the scripted stages (whose steps the tests call one at a time).
    func runner(_ loader: ScriptedLoader, _ fakes: Fakes? = nil, stages: String = "", processors: String = "[fake_half]",
                configure: (inout RunOptions) -> Void = { _ in }) throws -> PipelineRunner {
        try ScriptedStages.runner(loader, fakes: fakes, yaml: "loader: scripted\ndecoder: fake\nprocessors: \(processors)\nencoder: fake\n" + stages,
                                  configure: configure)
    }

    static func loader(_ sources: [String: String]) -> ScriptedLoader {
        let loader = ScriptedLoader()
        for (name, bytes) in sources { loader.script(name, .bytes(Data(bytes.utf8))) }
        return loader
    }

    // MARK: LoadStep

    @Test func loadTakesAFreshOriginalFromTheCacheAndStoresAMiss() async throws {
        let loader = Self.loader(["a": "40x20"])
        let fakes = Fakes(log: loader.log)
        let step = try runner(loader, fakes, stages: "data_cache: fake").loading
        let plan = try runner(loader, fakes, stages: "data_cache: fake").makePlan(Source(text: "scripted://a", index: 1))
        let first = try await step.load(plan)
        #expect(first.cache == .miss && String(decoding: first.data.data, as: UTF8.self) == "40x20")
        #expect(loader.log.count("cache stored \(plan.key)") == 1)
        let second = try await step.load(plan)
        #expect(second.cache == .hit && loader.calls("a") == 1)
    }

    @Test func loadsOfOneSourceAtOnceAreOne() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("40x20".utf8)))
        let runner = try runner(loader)
        let plan = try runner.makePlan(Source(text: "scripted://a", index: 1))
        async let first = runner.loading.load(plan)
        async let second = runner.loading.load(plan)
        #expect(await loader.log.wait(for: "started a"))
        loader.release("a")
        let (one, two) = try await (first, second)
        #expect(one.data.data == two.data.data && loader.calls("a") == 1)
    }

    @Test func aLoaderFailureIsTheLoadStagesNamingTheLoader() async throws {
        let loader = ScriptedLoader()
        loader.script("gone", .fail(PipelineError(.notFound, "HTTP 404")))
        let runner = try runner(loader)
        let plan = try runner.makePlan(Source(text: "scripted://gone", index: 1))
        let failure = await #expect(throws: PipelineError.self) { try await runner.loading.load(plan) }
        #expect(failure?.kind == .notFound && failure?.stage == .load && failure?.plugin == "scripted")
    }

    // MARK: DecodeStep

    @Test func decodeRunsEachSharedPrefixOnceAndNamesAFailingVariant() async throws {
        let loader = Self.loader(["a": "64x32"])
        let runner = try runner(loader, stages: """
            variants:
              half: { processors: [fake_half] }
              quarter: { processors: [fake_half, fake_half] }
            """, processors: "[]")
        let plan = try runner.makePlan(Source(text: "scripted://a", index: 1))
        let loads = Atomic(0)
        // The quarter's chain starts from the half's image: the prefix is made once.
        let made = try await runner.making.images(plan, needed: [0, 1], preloaded: nil, digest: nil, tracker: StageTracker()) {
            loads.add(1, ordering: .relaxed)
            return try await runner.loading.load(plan)
        }
        #expect(made.images[0]?.size == PixelSize(width: 32, height: 16) && made.images[1]?.size == PixelSize(width: 16, height: 8))
        #expect(loads.load(ordering: .relaxed) == 1 && loader.log.count("decoded 64x32") == 1)
        #expect(made.images[0]?.sourceIdentity != nil, "the source's identity is on every image made from it")
        // Bytes the decoder cannot read: decode_failed at decode, naming the decoder.
        let junk = LoadedData(data: Data("junk".utf8))
        let failure = await #expect(throws: PipelineError.self) {
            _ = try await runner.making.decodeAndProcess(junk, identity: "x", pending: [0], tracker: StageTracker())
        }
        #expect(failure?.kind == .decodeFailed && failure?.stage == .decode && failure?.plugin == "fake")
    }

    @Test func anImageCacheHitNeedsNoLoad() async throws {
        let loader = Self.loader(["a": "40x20"])
        let fakes = Fakes(log: loader.log)
        let runner = try runner(loader, fakes, stages: "image_cache: fake")
        let plan = try runner.makePlan(Source(text: "scripted://a", index: 1))
        let loads = Atomic(0)
        for _ in 0..<2 {
            _ = try await runner.making.images(plan, needed: [0], preloaded: nil, digest: nil, tracker: StageTracker()) {
                loads.add(1, ordering: .relaxed)
                return try await runner.loading.load(plan)
            }
        }
        #expect(loads.load(ordering: .relaxed) == 1 && loader.log.count("decoded 40x20") == 1)
    }

    // MARK: EncodeStep

    @Test func encodeMakesTheBytesAndNamesAFailingVariant() async throws {
        let runner = try runner(ScriptedLoader(), stages: "variants:\n  small: { processors: [] }", processors: "[]")
        let image = PipelineImage(width: 8, height: 4, hasAlpha: false, sourceFormat: "FAKE", storage: FakePixels(width: 8, height: 4))
        let encoded = try await runner.encoding.encode(image, runner.variants[0])
        #expect(String(decoding: encoded.data, as: UTF8.self) == "fake 8x4" && encoded.size == PixelSize(width: 8, height: 4))
        #expect(encoded.chosenExtension == nil)
        // The fake encoder fails on an empty image; the failure is the variant's.
        let empty = PipelineImage(width: 0, height: 0, hasAlpha: false, sourceFormat: "FAKE", storage: FakePixels(width: 0, height: 0))
        let failure = await #expect(throws: PipelineError.self) { _ = try await runner.encoding.encode(empty, runner.variants[0]) }
        #expect(failure?.kind == .encodeFailed && failure?.stage == .encode && failure?.message.hasPrefix("variant 'small': ") == true)
    }

    // MARK: OutputStore

    @Test func storeKeepsReplacesOrReportsStaleAsOutputExistingSays() async throws {
        let loader = ScriptedLoader()
        for (existing, expected) in [("replace_if_changed", [OutputState.written, .kept, .written]),
                                     ("keep", [.written, .kept, .stale]), ("replace", [.written, .written, .written])] {
            let store = try runner(loader, stages: "output:\n  existing: \(existing)").output
            let name = "x-\(existing).fake"
            let same = OutputFingerprint(recipe: "r1", source: "s"), other = OutputFingerprint(recipe: "r2", source: "s")
            var states: [OutputState] = []
            for fingerprint in [same, same, other] {
                states.append(try await store.store(OutputFile(relative: name, data: Data("v".utf8), fingerprint: fingerprint)))
            }
            #expect(states == expected, "\(existing)")
        }
    }

    @Test func twoSourcesCannotClaimOneName() throws {
        let runner = try runner(ScriptedLoader(), stages: "output:\n  name: \"{stem}.{ext}\"")
        try runner.output.claim("a.fake", key: "scripted://x/a", source: Source(text: "scripted://x/a", index: 1))
        try runner.output.claim("a.fake", key: "scripted://x/a", source: Source(text: "scripted://x/a", index: 3))  // the same source again
        let failure = #expect(throws: PipelineError.self) {
            try runner.output.claim("a.fake", key: "scripted://y/a", source: Source(text: "scripted://y/a", index: 7))
        }
        #expect(failure?.kind == .outputCollision && failure?.message.contains("line 1 of the list") == true)
    }

    @Test func resumeFindsOutputsOnlyByTheSameRecipe() async throws {
        let loader = Self.loader(["a": "40x20"])
        let runner = try runner(loader) { $0.resume = true }
        let plan = try runner.makePlan(Source(text: "scripted://a", index: 1))
        #expect(try await runner.output.alreadyWritten(plan, recipes: runner.variants.map(\.recipe)) == nil)
        _ = await runner.runItem(Source(text: "scripted://a", index: 1))
        let done = try await runner.output.alreadyWritten(plan, recipes: runner.variants.map(\.recipe))
        #expect(done == plan.planned)
        #expect(try await runner.output.alreadyWritten(plan, recipes: ["another recipe"]) == nil)
    }

    // MARK: StoredOutputsStep

    @Test func storedOutputsAreValidOnlyForTheSameSourceBytes() async throws {
        let loader = Self.loader(["a": "40x20"])
        let fakes = Fakes(log: loader.log)
        let stages = "data_cache:\n  fake: { outputs: true }"
        let first = try runner(loader, fakes, stages: stages)
        _ = await first.runItem(Source(text: "scripted://a", index: 1))
        let step = try #require(first.storedOutputs)
        let plan = try first.makePlan(Source(text: "scripted://a", index: 1))
        #expect(try await step.lookUp(plan).entries.count == 1)
        // Stale, and the source now sends other bytes: the stored output is not used.
        fakes.entriesAreFresh.store(false, ordering: .relaxed)
        loader.script("a", .bytes(Data("80x40".utf8)))
        let changed = try await step.lookUp(plan)
        #expect(changed.entries.isEmpty && changed.loaded != nil && changed.digest != nil)
    }
}
