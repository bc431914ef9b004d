import FlyingFox
import Foundation
@testable import PipelineKit
import Plugins
import Synchronization
import Testing
import TestImages

/// A processor that counts its runs: registered like any plugin, to see what the engine runs.
struct CountingProcessor: ImageProcessing {
    static let runs = Mutex<[String: Int]>([:])
    static let plugin = Plugin.processor(PluginSpec(name: "count", summary: "Counts its runs.", options: [
        .string("tag", default: "x", doc: "Names the counter."),
    ])) { options in CountingProcessor(tag: options.string("tag")!) }

    let tag: String
    var identifier: String { "count(\(tag))" }
    /// The counts of the tags that start with `prefix`. Suites that count run side by side, so each
    /// uses tags of its own prefix, and reads and resets only those.
    static func counts(_ prefix: String) -> [String: Int] { runs.withLock { $0.filter { $0.key.hasPrefix(prefix) } } }
    static func reset(_ prefix: String) { runs.withLock { $0 = $0.filter { !$0.key.hasPrefix(prefix) } } }

    func process(_ image: PipelineImage) throws -> PipelineImage {
        Self.runs.withLock { $0[tag, default: 0] += 1 }
        return image
    }
}

@Suite(.serialized) struct VariantTests {
    let registry: PluginRegistry = {
        var registry = BuiltIns.registry()
        try! registry.register(CountingProcessor.plugin)
        return registry
    }()

    func parse(_ yaml: String) -> (Pipeline?, [String]) {
        let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "v.yaml", registry: registry)
        return (pipeline, diagnostics.map(\.description))
    }

    static let responsive = """
        loader:
          http: { allow_loopback: true }
        processors:
          - count: { tag: variants.shared }
        image_cache: memory
        variants:
          small:
            processors: [ { resize: { width: 100 } } ]
            encoder: { webp: { quality: 70 } }
          medium:
            processors: [ { count: { tag: variants.medium } }, { resize: { width: 300 } } ]
            encoder: jpeg
          large:
            processors: [ { resize: { width: 600 } } ]
            encoder: png
        """

    @Test func threeVariantsFromOneDownloadAndOneDecode() async throws {
        CountingProcessor.reset("variants.")
        let server = try await TestServer.start()
        server.serve("/photo.jpg", try Fixtures.jpeg(1200, 800))
        let (pipeline, diagnostics) = parse(Self.responsive)
        #expect(diagnostics.isEmpty)
        let output = try Fixtures.temporaryDirectory("variants")
        var options = RunOptions()
        options.outputDirectory = output.path
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry, options: options)
        let item = await runner.runItem(Source(text: server.url("/photo.jpg"), index: 1))
        #expect(item.status == .ok, "\(String(describing: item.error))")
        #expect(server.requests("/photo.jpg") == 1)
        #expect(item.outputs.count == 3)
        let made = try await item.outputs.asyncMap { try await Identified.file($0) }
        #expect(made == [Identified(format: "WEBP", width: 100, height: 67), Identified(format: "JPEG", width: 300, height: 200),
                         Identified(format: "PNG", width: 600, height: 400)])
        #expect(item.outputs[0].hasSuffix("-small.webp") && item.outputs[1].hasSuffix("-medium.jpg"))
        // The shared processor ran once for three variants; the medium one once.
        #expect(CountingProcessor.counts("variants.") == ["variants.shared": 1, "variants.medium": 1])
        #expect(item.bytesIn > 0 && item.cacheImage == .miss)
        // The report names each variant's output: its dimensions, bytes and format.
        #expect(item.variants.map(\.name) == ["small", "medium", "large"])
        #expect(item.variants.map { "\($0.width)x\($0.height) \($0.format)" } == ["100x67 webp", "300x200 jpg", "600x400 png"])
        let sizes = try item.outputs.map { try FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int }
        #expect(item.variants.map(\.bytes) == sizes && item.variants.map(\.path) == item.outputs)
        // The same source again: a duplicate of the first, nothing runs.
        let again = await runner.runItem(Source(text: server.url("/photo.jpg"), index: 2))
        #expect(again.duplicate && again.shared && again.outputs == item.outputs && again.variants == item.variants)
        #expect(server.requests("/photo.jpg") == 1)
        #expect(CountingProcessor.counts("variants.") == ["variants.shared": 1, "variants.medium": 1])
        await server.stop()
    }

    @Test func shrinkOnLoadCoversTheLargestVariant() throws {
        let (pipeline, _) = parse("""
            variants:
              a: { processors: [ { resize: { width: 100, height: 100 } } ], encoder: jpeg }
              b: { processors: [ { resize: { width: 400, height: 300 } } ], encoder: jpeg }
            """)
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry)
        #expect(runner.decodeHint.targetSize == PixelSize(width: 400, height: 300))
        let (mixed, _) = parse("""
            variants:
              a: { processors: [ { resize: { width: 100 } } ], encoder: jpeg }
              b: { encoder: jpeg }
            """)
        #expect(try PipelineRunner(pipeline: try #require(mixed), registry: registry).decodeHint.targetSize == nil)
        // A processor that only reads the image (analyze) does not stop shrink-on-load; one that
        // changes it (grayscale here: it could as well be a crop) does.
        let (reading, _) = parse("""
            processors: [ analyze, { resize: { width: 100, height: 100 } } ]
            encoder: jpeg
            """)
        let hint = try PipelineRunner(pipeline: try #require(reading), registry: registry).decodeHint
        #expect(hint.targetSize == PixelSize(width: 100, height: 100) && hint.fit)
        let (changing, _) = parse("""
            processors: [ grayscale, { resize: { width: 100, height: 100 } } ]
            encoder: jpeg
            """)
        #expect(try PipelineRunner(pipeline: try #require(changing), registry: registry).decodeHint.targetSize == nil)
        // One that only turns it (auto_orient) does not stop it either; the box becomes square,
        // since a quarter turn makes the source's height the width.
        let (turning, _) = parse("""
            processors: [ auto_orient, { resize: { width: 400, height: 100 } } ]
            encoder: jpeg
            """)
        let turned = try PipelineRunner(pipeline: try #require(turning), registry: registry).decodeHint
        #expect(turned.targetSize == PixelSize(width: 400, height: 400) && turned.fit)
    }

    @Test func variantErrors() {
        #expect(parse("""
            output:
              name: "{stem}.{ext}"
            variants:
              a: { encoder: jpeg }
              b: { encoder: jpeg }
            """).1 == [
                "v.yaml:2:9: warning: output.name: '{stem}.{ext}' can give two sources the same name (the second fails as output_collision); add {hash}, {hash8} or {index}",
                "v.yaml:5:3: error: variants.b: variants 'a' and 'b' would write to the same names ('{stem}.{ext}'); add {variant} to output.name or give each variant its own 'name'",
            ])
        #expect(parse("variants:\n  a: { processors: [] }\n").1
            == ["v.yaml:2:3: error: variants.a: no 'encoder', and there is no top-level 'encoder'"])
        #expect(parse("encoder: jpeg\nvariants:\n  a: { encodr: png }\n").1
            == ["v.yaml:3:8: error: unknown key 'encodr' in variant 'a'; did you mean 'encoder'?"])
        #expect(parse("encoder: jpeg\nvariants:\n  \"a b\": {}\n").1
            == ["v.yaml:3:3: error: a variant name may use letters, digits, '_' and '-' only"])
    }

    @Test func variantsInheritTheTopLevelEncoder() throws {
        let (pipeline, diagnostics) = parse("encoder: png\nvariants:\n  thumb: { processors: [ { resize: { width: 10 } } ] }\n  full: {}\n")
        #expect(diagnostics.isEmpty)
        #expect(pipeline?.variants.map(\.encoder.plugin.spec.name) == ["png", "png"])
        #expect(pipeline?.output.name.text == "{stem}-{hash}-{variant}.{ext}")
    }
}
