import Foundation
import PipelineKit
import Plugins
import Synchronization
import Testing
import TestImages

/// Custom plugins, registered through the public API, and what the engine does when they misbehave.
@Suite struct PluginAPITests {
    struct Failing: ImageProcessing {
        struct HouseStyleError: Error, CustomStringConvertible {
            var description: String { "the image has no house style" }
        }
        var identifier: String { "failing" }
        func process(_ image: PipelineImage) throws -> PipelineImage { throw HouseStyleError() }
    }

    struct Hanging: ImageProcessing {
        /// Signalled by the test once it has seen the item cut off.
        static let release = DispatchSemaphore(value: 0)
        /// `started` once the processor runs.
        static let events = EventLog()
        var identifier: String { "hanging" }
        func process(_ image: PipelineImage) throws -> PipelineImage {
            Hanging.events.record("started")
            _ = Hanging.release.wait(timeout: .now() + 60)  // blocks its worker thread, as a stuck C call would
            return image
        }
    }

    /// Records what `StageContext.current` says while it runs on a CPU worker.
    struct Recording: ImageProcessing {
        static let seen = Mutex<[String]>([])
        var identifier: String { "recording" }
        func process(_ image: PipelineImage) throws -> PipelineImage {
            let context = StageContext.current
            Self.seen.withLock { $0.append("\(context?.source.index ?? -1) \(context?.cacheKey.hasPrefix("file://") ?? false) \(context?.deadline != nil)") }
            return image
        }
    }

    enum Custom: PluginBundle {
        static let plugins = [
            Plugin.processor(PluginSpec(name: "recording", summary: "Records its context.")) { _ in Recording() },
            Plugin.processor(PluginSpec(name: "failing", summary: "Always throws.")) { _ in Failing() },
            Plugin.processor(PluginSpec(name: "hanging", summary: "Never finishes in time.")) { _ in Hanging() },
        ]
    }

    func runOne(_ processor: String, timeout: Double? = 300, workers: Int? = nil,
                timers: ManualTimers? = nil) async throws -> ItemResult {
        let registry = try PluginRegistry(bundles: [BuiltIns.self, Custom.self])
        let (pipeline, diagnostics) = PipelineFile.parse(text: "processors: [ \(processor) ]\nencoder: png\n", file: "p.yaml",
                                                         registry: registry)
        #expect(diagnostics.isEmpty)
        let dir = try Fixtures.temporaryDirectory("api")
        try Fixtures.jpeg(40, 30).write(to: dir.appendingPathComponent("in.jpg"))
        var options = RunOptions()
        options.outputDirectory = dir.appendingPathComponent("out").path
        options.itemTimeout = timeout
        if let workers { options.workers = workers }
        if let timers { options.timers = timers }
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry, options: options)
        return await runner.runItem(Source(text: dir.appendingPathComponent("in.jpg").path, index: 1))
    }

    @Test func aPluginThatThrowsFailsItsItemWithItsNameAndMessage() async throws {
        let item = try await runOne("failing")
        #expect(item.error == ItemError(stage: .process, kind: .processFailed, message: "the image has no house style",
                                        plugin: "failing"))
    }

    /// The limit is counted by a clock the test moves once the processor hangs: it strikes in the
    /// process stage however long a loaded machine took to get there, and the item ends while the
    /// processor still holds its worker.
    @Test func aPluginThatHangsIsCutOffByTheItemTimeLimit() async throws {
        let timers = ManualTimers()
        // Its own pool (a worker count no other test uses): this test blocks a worker until it ends.
        let running = Task { try await runOne("hanging", timeout: 20, workers: 7, timers: timers) }
        #expect(await Hanging.events.wait(for: "started"))
        timers.advance(by: .seconds(20))
        let item = try await running.value
        Hanging.release.signal()
        #expect(item.error == ItemError(stage: .process, kind: .timeout,
                                        message: "the item did not finish within the item time limit (20s)"))
    }

    @Test func stagesSeeTheirItemsContext() async throws {
        let item = try await runOne("recording")
        #expect(item.status == .ok)
        #expect(Recording.seen.withLock { $0 } == ["1 true true"])
        #expect(StageContext.current == nil)  // outside a run
    }

    @Test func twoPluginsWithOneNameFailAtStartUpNamingBoth() {
        enum Clash: PluginBundle {
            static let plugins = [Plugin.processor(PluginSpec(name: "resize", summary: "Another resize.")) { _ in Failing() }]
        }
        #expect(throws: PipelineError("duplicate_plugin",
                                      "two plugins named 'resize' were registered as a processor: one from BuiltIns, one from Clash")) {
            try PluginRegistry(bundles: [BuiltIns.self, Clash.self])
        }
    }

    @Test func theRegistryHasEveryBuiltIn() {
        let registry = BuiltIns.registry()
        let names = Slot.allCases.flatMap { slot in registry.plugins(in: slot).map { "\(slot.rawValue)/\($0.spec.name)" } }
        #expect(registry.destination(forScheme: "s3") != nil)
        #expect(names == ["loader/data", "loader/file", "loader/http", "loader/s3", "data_cache/disk", "data_cache/s3", "decoder/imagemagick",
                          "processor/analyze", "processor/auto_orient", "processor/background", "processor/blur", "processor/border",
                          "processor/circle", "processor/contrast", "processor/crop", "processor/detect_faces", "processor/extend", "processor/flip",
                          "processor/flop", "processor/grayscale", "processor/magick", "processor/modulate", "processor/negate",
                          "processor/pad", "processor/redact", "processor/resize", "processor/rotate", "processor/rounded_corners", "processor/sepia",
                          "processor/sharpen", "processor/strip", "processor/tint", "processor/trim", "processor/unsharp",
                          "processor/watermark", "image_cache/memory", "encoder/auto", "encoder/avif", "encoder/gif",
                          "encoder/heic", "encoder/jpeg", "encoder/jxl", "encoder/png", "encoder/tiff", "encoder/webp",
                          "destination/local", "destination/s3", "list/file", "list/postgres", "list/s3", "list/sqs", "report/html", "report/json", "report/jsonl", "report/text",
                          "purger/cloudflare", "purger/cloudfront", "purger/fastly", "purger/varnish",
                          "notifier/sns", "notifier/sqs", "notifier/webhook"])
        #expect(registry.origin(of: "resize", in: .processor) == "BuiltIns")
    }

    /// Plugins is a separate module, so it can only reach PipelineKit's public API, unless it opts
    /// out with @testable or @_spi imports. It must not.
    @Test func pluginsUseOnlyThePublicAPI() throws {
        let root = Fixtures.packageRoot.appendingPathComponent("Sources/Plugins")
        let files = try #require(FileManager.default.enumerator(atPath: root.path)).compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }
        #expect(files.count >= 10)
        for file in files {
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            #expect(!text.contains("@testable"), "\(file)")
            #expect(!text.contains("@_spi"), "\(file)")
        }
    }
}
