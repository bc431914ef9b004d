import Foundation
import InMemoryTracing
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport
import Tracing

/// One decode for several sizes of one source asked for at once (the service's parameter sets are
/// runners derived from one another, sharing loads): checked by what the scripted decoder saw,
/// never by the clock.
@Suite struct SharedDecodeTests {
    /// A fake decoder whose decodes wait until the test lets them go (on the worker, as real ones
    /// block), logging `decoding NAME at SIDE` when one starts. It decodes to twice the target, at
    /// most the source (as shrink-on-load does).
    final class HeldDecoder: ImageDecoding, Sendable {
        let log: EventLog
        let fails: Bool
        private let gates = Mutex<[String: DispatchSemaphore]>([:])
        init(log: EventLog, fails: Bool = false) {
            self.log = log
            self.fails = fails
        }

        func gate(_ text: String) -> DispatchSemaphore {
            gates.withLock { gates in
                if let gate = gates[text] { return gate }
                let gate = DispatchSemaphore(value: 0)
                gates[text] = gate
                return gate
            }
        }

        /// Lets one decode of `text` finish.
        func release(_ text: String) { gate(text).signal() }

        func decode(_ data: LoadedData, hint: DecodeHint) throws -> PipelineImage { try prepare(data, hint: hint).decode() }

        func prepare(_ data: LoadedData, hint: DecodeHint) throws -> PreparedDecode {
            let text = String(decoding: data.data, as: UTF8.self)
            let side = Int(text.split(separator: "x").first ?? "") ?? 0
            let decoded = min(side, 2 * (hint.targetSize?.width ?? side))
            let (log, fails, gate) = (self.log, self.fails, self.gate(text))
            return PreparedDecode(estimatedMemory: 1 << 20) {
                log.record("decoding \(text) at \(decoded)")
                gate.wait()
                if fails { throw PipelineError(.decodeFailed, "scripted failure") }
                return PipelineImage(width: decoded, height: decoded, hasAlpha: false, sourceFormat: "FAKE",
                                     storage: FakePixels(width: decoded, height: decoded))
            }
        }
    }

    /// Fits the image in `width` x `width`, and says so in its decode hint.
    struct FakeFit: ImageProcessing {
        let width: Int
        /// What it says it needs besides its images (``ImageProcessing/workingMemory``).
        var working = 0
        var identifier: String { "fake_fit(\(width))" }
        var workingMemory: Int { working }
        var decodeHint: PixelSize? { PixelSize(width: width, height: width) }
        var decodeHintFits: Bool { true }
        func process(_ image: PipelineImage) throws -> PipelineImage {
            let side = min(width, image.width)
            return PipelineImage(width: side, height: side, hasAlpha: false, sourceFormat: image.sourceFormat,
                                 storage: FakePixels(width: side, height: side))
        }
    }

    struct Setup {
        let loader = ScriptedLoader()
        let decoder: HeldDecoder
        let registry: PluginRegistry
        let output: URL

        init(fails: Bool = false) throws {
            decoder = HeldDecoder(log: loader.log, fails: fails)
            var registry = ScriptedStages.registry(loader)
            let decoder = self.decoder
            try registry.register(.decoder(PluginSpec(name: "held", summary: "Decodes when told.")) { _ in decoder })
            try registry.register(.processor(PluginSpec(name: "fake_fit", summary: "Fits in a square.",
                                                        options: [.int("width", default: 100, doc: "The square's side."),
                                                                  .int("working", default: 0, doc: "Working memory, in bytes.")])) {
                FakeFit(width: $0.int("width")!, working: $0.int("working")!)
            })
            self.registry = registry
            output = try Fixtures.temporaryDirectory("shared-decode")
        }

        func pipeline(_ width: Int, working: Int = 0) throws -> Pipeline {
            let yaml = """
                loader: scripted
                decoder: held
                processors:
                  - fake_fit: {width: \(width), working: \(working)}
                encoder: fake
                output:
                  name: "{stem}-\(width).{ext}"
                """
            let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "fit\(width).yaml", registry: registry)
            guard let pipeline else { throw PipelineValidationError(diagnostics: diagnostics, source: yaml) }
            return pipeline
        }

        /// Runners for each width, the first made on its own and the others derived from it.
        func runners(_ widths: [Int], workers: Int = 2, tracer: InMemoryTracer? = nil) throws -> [PipelineRunner] {
            var options = RunOptions()
            options.outputDirectory = output.path
            options.workers = workers
            options.tracer = tracer
            let first = try PipelineRunner(pipeline: try pipeline(widths[0]), registry: registry, options: options)
            return try [first] + widths.dropFirst().map { try first.derived(try pipeline($0), registry: registry) }
        }
    }

    static func item(_ runner: PipelineRunner, _ name: String) -> Task<ItemResult, Never> {
        Task { await runner.runItem(Source(text: "scripted://" + name, index: 1)) }
    }

    /// Starts one item per runner for `name`, all waiting on one held load, then lets the load go.
    static func itemsSharingOneLoad(_ setup: Setup, _ runners: [PipelineRunner], _ name: String) async -> [Task<ItemResult, Never>] {
        setup.loader.script(name, .hold(Data("1000x1000".utf8)))
        let items = runners.map { item($0, name) }
        #expect(await setup.loader.log.wait(for: "started \(name)"))
        for _ in 0..<3000 where runners[0].loadsWaiting < runners.count { try? await Task.sleep(for: .milliseconds(10)) }
        #expect(runners[0].loadsWaiting == runners.count)
        setup.loader.release(name)
        return items
    }

    @Test(arguments: [[100, 300], [300, 100], [100, 300, 200]])
    func sizesThatShareALoadDecodeOnceForTheLargest(_ widths: [Int]) async throws {
        let setup = try Setup()
        let runners = try setup.runners(widths)
        let items = await Self.itemsSharingOneLoad(setup, runners, "a")
        #expect(await setup.loader.log.wait(for: "decoding 1000x1000 at 600"))
        setup.decoder.release("1000x1000")
        var results: [ItemResult] = []
        for item in items { results.append(await item.value) }
        #expect(results.allSatisfy { $0.status == .ok })
        #expect(results.map(\.width) == widths)
        #expect(results.filter(\.decodeShared).count == widths.count - 1)
        #expect(setup.loader.log.events.filter { $0.hasPrefix("decoding") } == ["decoding 1000x1000 at 600"])
        #expect(setup.loader.calls("a") == 1)
        #expect(runners[0].making.budget.available == runners[0].making.budget.total)
    }

    /// What a processor needs besides its images (a face scan's copy) is reserved with the decode
    /// it follows, and given back with it.
    @Test func aProcessorsWorkingMemoryIsReservedWithTheDecode() async throws {
        let setup = try Setup()
        setup.loader.script("a", .bytes(Data("1000x1000".utf8)))
        var options = RunOptions()
        options.outputDirectory = setup.output.path
        let runner = try PipelineRunner(pipeline: try setup.pipeline(100, working: 3 << 20), registry: setup.registry, options: options)
        let budget = runner.making.budget
        let item = Self.item(runner, "a")
        #expect(await setup.loader.log.wait(for: "decoding 1000x1000 at 200"))
        #expect(budget.total - budget.available == (1 << 20) + (3 << 20), "the decode's estimate and the processor's working memory")
        setup.decoder.release("1000x1000")
        #expect(await item.value.status == .ok)
        #expect(budget.available == budget.total)
    }

    @Test func aSourceLoadedOnItsOwnIsDecodedForItsOwnSize() async throws {
        let setup = try Setup()
        setup.loader.script("a", .bytes(Data("1000x1000".utf8)))
        let runners = try setup.runners([100, 300])
        setup.decoder.release("1000x1000")
        setup.decoder.release("1000x1000")
        let small = await runners[0].runItem(Source(text: "scripted://a", index: 1))
        let large = await runners[1].runItem(Source(text: "scripted://a", index: 1))
        #expect(small.status == .ok && large.status == .ok && !small.decodeShared && !large.decodeShared)
        #expect(setup.loader.log.events.filter { $0.hasPrefix("decoding") } == ["decoding 1000x1000 at 200", "decoding 1000x1000 at 600"])
        #expect(runners[0].making.budget.available == runners[0].making.budget.total)
    }

    @Test func theDecodesFailureIsEveryItemsFailure() async throws {
        let setup = try Setup(fails: true)
        let runners = try setup.runners([300, 100])
        let items = await Self.itemsSharingOneLoad(setup, runners, "a")
        #expect(await setup.loader.log.wait(for: "decoding 1000x1000 at 600"))
        setup.decoder.release("1000x1000")
        for item in items {
            let result = await item.value
            #expect(result.status == .failed && result.outputs.isEmpty)
            #expect(result.error?.kind == .decodeFailed && result.error?.stage == .decode)
            #expect(result.error?.message.contains("scripted failure") == true)
        }
        #expect(setup.loader.log.events.filter { $0.hasPrefix("decoding") }.count == 1)
        #expect(runners[0].making.budget.available == runners[0].making.budget.total)
    }

    /// An owner that leaves before its decode ran (cancelled while waiting for memory or a worker)
    /// sends the items waiting for it back to decode, instead of failing them or leaving them waiting.
    @Test func anOwnerThatLeavesSendsItsJoinersBackToDecode() async throws {
        let decodes = SharedDecodes()
        let need = SharedDecodes.Need(group: "g", hint: DecodeHint())
        decodes.settle([need, need])
        guard case .decode(let owned) = decodes.turn("g"), case .join(let joined) = decodes.turn("g") else {
            Issue.record("the first item decodes, the second joins")
            return
        }
        let joiner = Task { try await decodes.image(of: joined) }
        for _ in 0..<3000 where decodes.waiting == 0 { try? await Task.sleep(for: .milliseconds(10)) }
        #expect(decodes.waiting == 1)
        decodes.close(owned)
        await #expect(throws: SharedDecodes.OwnerLeft.self) { try await joiner.value }
        guard case .decode = decodes.turn("g") else {
            Issue.record("after the owner left, the next item decodes")
            return
        }
    }

    /// An item that looks again after its owner left is not counted twice: the image its new
    /// decode makes is kept for the item still to come. And an image no longer kept is never joined
    /// (that would send the caller back for ever): the caller decodes.
    @Test func lookingAgainIsNotComingTwiceAndAnImageNoLongerKeptIsDecodedAgain() async throws {
        let decodes = SharedDecodes()
        let need = SharedDecodes.Need(group: "g", hint: DecodeHint())
        decodes.settle([need, need, need])
        guard case .decode(let first) = decodes.turn("g"), case .join = decodes.turn("g") else {
            Issue.record("the first item decodes, the second joins")
            return
        }
        decodes.close(first)  // the owner left: the second looks again
        guard case .decode(let second) = decodes.turn("g", arriving: false) else {
            Issue.record("the item that looked again decodes")
            return
        }
        let budget = MemoryBudget(bytes: 100)
        try await budget.acquire(10)
        let reservation = DecodeReservation(budget, bytes: 10)
        decodes.publish(second, .success(DecodedImage(PipelineImage(width: 1, height: 1, hasAlpha: false, sourceFormat: "FAKE",
                                                                    storage: FakePixels(width: 1, height: 1)),
                                                      milliseconds: 1, holding: reservation)))
        reservation.releaseUnlessHeld()
        #expect(budget.available == 90)  // the image, kept for the third item, holds it
        guard case .done(let result) = decodes.turn("g") else {
            Issue.record("the third item gets the image kept for it")
            return
        }
        #expect(try result.get().image.width == 1)
        guard case .decode = decodes.turn("g") else {
            Issue.record("once every item came, the image is not kept: a turn more decodes")
            return
        }
        _ = consume result
        #expect(budget.available == 100)
    }

    @Test func theCoveringHintServesEveryHint() {
        let fit = DecodeHint(targetSize: PixelSize(width: 300, height: 100), fit: true)
        let fill = DecodeHint(targetSize: PixelSize(width: 100, height: 200), fit: false, wantsMetadata: true)
        let both = DecodeHint.covering([fit, fill])
        #expect(both == DecodeHint(targetSize: PixelSize(width: 300, height: 200), fit: false, wantsMetadata: true))
        #expect(DecodeHint.covering([fit, fit]) == fit)
        #expect(DecodeHint.covering([fit, DecodeHint()]) == DecodeHint())
    }

    /// The engine's spans (issue 63), on an in-memory tracer: an item run under a request's
    /// context is one trace, its span the request's child and each stage's parent; the item that
    /// takes another's decode has its own decode span, linked to the owner's, not its child.
    @Test func itemsAreSpansAndASharedDecodeIsLinked() async throws {
        let setup = try Setup()
        let tracer = InMemoryTracer()
        let runners = try setup.runners([100, 300], tracer: tracer)
        let request = tracer.startSpan("request")
        setup.loader.script("a", .hold(Data("1000x1000".utf8)))
        let items = runners.map { runner in
            Task { await ServiceContext.$current.withValue(request.context) { await runner.runItem(Source(text: "scripted://a", index: 1)) } }
        }
        #expect(await setup.loader.log.wait(for: "started a"))
        for _ in 0..<3000 where runners[0].loadsWaiting < runners.count { try? await Task.sleep(for: .milliseconds(10)) }
        setup.loader.release("a")
        #expect(await setup.loader.log.wait(for: "decoding 1000x1000 at 600"))
        setup.decoder.release("1000x1000")
        for item in items { #expect(await item.value.status == .ok) }
        request.end()
        let spans = tracer.finishedSpans
        let itemSpans = spans.filter { $0.operationName == "item" }
        #expect(itemSpans.count == 2)
        #expect(Set(spans.map(\.traceID)).count == 1, "one trace: \(spans.map { "\($0.operationName) \($0.traceID)" })")
        #expect(itemSpans.allSatisfy { $0.parentSpanID == request.spanID })
        let decodes = spans.filter { $0.operationName == "decode" }
        #expect(decodes.count == 2)
        let owner = try #require(decodes.first { $0.links.isEmpty })
        let joiner = try #require(decodes.first { !$0.links.isEmpty })
        #expect(joiner.links.first?.context.inMemorySpanContext?.spanID == owner.spanID)
        #expect(owner.attributes["pipelinectl.decode.width"]?.toSpanAttribute() == .int64(600))
        // Every stage of each item is its item's child: load (one, shared), decode, the processor,
        // encode and store.
        for item in itemSpans {
            let children = Set(spans.filter { $0.parentSpanID == item.spanID }.map(\.operationName))
            #expect(children.isSuperset(of: ["decode", "process fake_fit", "encode", "store"]), "\(children)")
        }
        #expect(spans.filter { $0.operationName == "load" }.count == 1)
    }

    /// A failed item's span says why: an error status, the failure's kind and stage.
    @Test func aFailedItemsSpanCarriesItsKind() async throws {
        let setup = try Setup(fails: true)
        let tracer = InMemoryTracer()
        let runner = try setup.runners([100], tracer: tracer)[0]
        setup.loader.script("b", .bytes(Data("500x500".utf8)))
        let item = Self.item(runner, "b")
        #expect(await setup.loader.log.wait(for: "decoding 500x500 at 200"))
        setup.decoder.release("500x500")
        #expect(await item.value.status == .failed)
        let span = try #require(tracer.finishedSpans.first { $0.operationName == "item" })
        #expect(span.status?.code == .error)
        #expect(span.attributes["pipelinectl.error.kind"]?.toSpanAttribute() == .string("decode_failed"))
        #expect(span.attributes["pipelinectl.error.stage"]?.toSpanAttribute() == .string("decode"))
        let decode = try #require(tracer.finishedSpans.first { $0.operationName == "decode" })
        #expect(decode.status?.code == .error && decode.parentSpanID == span.spanID)
    }

    /// A source that carries a trace (a queue message's receive span) starts its item there,
    /// whatever the task's context: the item is that span's child, not the request's.
    @Test func aSourcesTraceIsTheItemsParent() async throws {
        let setup = try Setup()
        let tracer = InMemoryTracer()
        let runner = try setup.runners([100], tracer: tracer)[0]
        let message = tracer.startSpan("process uploads", ofKind: .consumer)
        message.end()
        let other = tracer.startSpan("unrelated")
        setup.loader.script("c", .bytes(Data("500x500".utf8)))
        var source = Source(text: "scripted://c", index: 1)
        source.trace = SourceTrace(message.context)
        #expect(source == Source(text: "scripted://c", index: 1), "the trace is not part of the source's identity")
        let item = Task { await ServiceContext.$current.withValue(other.context) { await runner.runItem(source) } }
        #expect(await setup.loader.log.wait(for: "decoding 500x500 at 200"))
        setup.decoder.release("500x500")
        #expect(await item.value.status == .ok)
        other.end()
        let span = try #require(tracer.finishedSpans.first { $0.operationName == "item" })
        #expect(span.parentSpanID == message.spanID && span.traceID == message.traceID)
    }
}
