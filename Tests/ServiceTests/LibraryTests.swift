import Foundation
import MagickKit
@testable import PipelineKit
import Plugins
import Testing
import TestImages

/// ``ImagePipelines``, the object app code keeps: pipeline files loaded once, sources and uploads
/// processed into outputs handed back as values (or stored, or facts only), typed errors, signed
/// paths. Real ImageMagick; the cancellation cases use the scripted loader, waiting on its events.
@Suite struct LibraryTests {
    /// A directory of pipeline files, and where their `output:` goes.
    struct Setup {
        let dir: URL
        let output: URL
        var pipelines: URL { dir.appendingPathComponent("pipelines") }

        init() throws {
            dir = try Fixtures.temporaryDirectory("library")
            output = dir.appendingPathComponent("out")
            try FileManager.default.createDirectory(at: pipelines, withIntermediateDirectories: true)
        }

        func write(_ name: String, _ yaml: String) throws {
            try yaml.write(to: pipelines.appendingPathComponent(name + ".yaml"), atomically: true, encoding: .utf8)
        }

        /// `thumbs` (one JPEG), `sizes` (two WebP variants and a width parameter) and `facts`.
        func standard() throws {
            try write("thumbs", """
                version: 1
                name: thumbs
                serve:
                  sources: ["\(dir.path)/"]
                processors:
                  - resize: { width: 64, height: 64, mode: fit }
                encoder: { jpeg: { quality: 80 } }
                output:
                  dir: \(output.path)
                  name: "{stem}-{hash8}.{ext}"
                """)
            try write("sizes", """
                version: 1
                name: sizes
                params:
                  q: { sets: variants.small.encoder.webp.quality, min: 10, max: 90 }
                  w: { sets: variants.large.processors.0.resize.width, min: 16, max: 2000 }
                variants:
                  small:
                    processors: [ { resize: { width: 32 } } ]
                    encoder: { webp: { quality: 70 } }
                  large:
                    processors: [ { resize: { width: 96 } } ]
                    encoder: { webp: { quality: 70 } }
                output:
                  dir: \(output.path)
                """)
            try write("facts", """
                version: 1
                name: facts
                processors:
                  - analyze: { blurhash: 4x3 }
                encoder: png
                """)
        }
    }

    @Test func anUploadComesBackAsOutputsInMemoryAndNothingIsWritten() async throws {
        let setup = try Setup()
        try setup.standard()
        let images = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry())
        #expect(images.names == ["facts", "sizes", "thumbs"])
        let made = try await images.process(bytes: try Fixtures.jpeg(640, 480), name: "cat.jpg", pipeline: "thumbs")
        #expect(made.outputs.count == 1)
        let output = try #require(made.outputs.first)
        #expect(output.mediaType == "image/jpeg" && output.fileExtension == "jpg")
        #expect(output.size == PixelSize(width: 64, height: 48))
        #expect(output.name.hasPrefix("cat-") && output.name.hasSuffix(".jpg"))
        let bytes = try output.data()
        #expect(bytes.count == output.byteCount && bytes.starts(with: [0xFF, 0xD8]))
        #expect(try await Identified.data(bytes).description == "JPEG 64x48")
        #expect(made.result.status == .ok && made.result.outputs == [output.name])
        // Nothing was stored: values are a sink of their own.
        #expect(!FileManager.default.fileExists(atPath: setup.output.path))
        // The same bytes again: the same fingerprint (the ETag the service sends).
        let again = try await images.process(bytes: try Fixtures.jpeg(640, 480), name: "cat.jpg", pipeline: "thumbs")
        #expect(again.outputs.first?.fingerprint == output.fingerprint)
    }

    @Test func variantsParamsAndAcceptAreCheckedAsTheServiceChecksThem() async throws {
        let setup = try Setup()
        try setup.standard()
        let images = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry())
        let upload = try Fixtures.jpeg(400, 200)
        let both = try await images.process(bytes: upload, pipeline: "sizes")
        #expect(both.outputs.map(\.variant) == ["small", "large"])
        #expect(both.outputs.map(\.size.width) == [32, 96])
        let small = try await images.process(bytes: upload, pipeline: "sizes", variant: "small", params: ["q": "40"])
        #expect(small.outputs.map(\.variant) == ["small"] && small.outputs[0].mediaType == "image/webp")
        // A lower quality is other bytes: another recipe, another fingerprint.
        #expect(small.outputs[0].fingerprint != both.outputs[0].fingerprint)
        await #expect(throws: PipelineError.self) { try await images.process(bytes: upload, pipeline: "sizes", variant: "huge") }
        do {
            _ = try await images.process(bytes: upload, pipeline: "sizes", variant: "small", params: ["q": "400"])
            Issue.record("a quality of 400 was accepted")
        } catch let failure as PipelineError {
            #expect(failure.message.contains("q") && failure.message.contains("400"), "\(failure.message)")
        }
        do {
            _ = try await images.process(bytes: upload, pipeline: "thumb")
            Issue.record("an unknown pipeline was accepted")
        } catch let failure as PipelineError {
            #expect(failure.kind == .notFound && failure.message.contains("did you mean 'thumbs'"), "\(failure.message)")
        }
    }

    @Test func storeWritesWithThePipelinesOwnOutputAndFactsOnlyEncodesNothing() async throws {
        let setup = try Setup()
        try setup.standard()
        let images = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry())
        let photo = setup.dir.appendingPathComponent("photo.jpg")
        try Fixtures.jpeg(300, 300).write(to: photo)
        let stored = try await images.process(photo.path, pipeline: "thumbs", delivery: .store)
        #expect(stored.outputs.isEmpty && stored.result.status == .ok)
        let path = try #require(stored.result.outputs.first)
        #expect(path.hasSuffix(".jpg") && FileManager.default.fileExists(atPath: path), "\(path)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: setup.output.path).filter { $0.hasSuffix(".jpg") }.count == 1)
        #expect(try await Identified.file(path).description == "JPEG 64x64")

        let facts = try await images.process(bytes: try Fixtures.jpeg(120, 80), pipeline: "facts", delivery: .factsOnly)
        #expect(facts.outputs.isEmpty && facts.result.outputs.isEmpty)
        #expect(facts.result.width == 120 && facts.result.height == 80)
        #expect(facts.facts["blurhash"] != nil, "\(facts.facts)")
        let byPath = try await images.facts(photo.path, pipeline: "thumbs")
        #expect(byPath.isEmpty)  // thumbs analyses nothing
    }

    @Test func badBytesAndBombsAreTypedErrorsAndSourcesKeepToTheBoundary() async throws {
        let setup = try Setup()
        try setup.standard()
        let images = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry())
        func kind(_ body: () async throws -> ProcessedItem) async -> ErrorKind? {
            do { _ = try await body(); return nil } catch { return (error as? PipelineError)?.kind }
        }
        #expect(await kind { try await images.process(bytes: Data("<html>hello</html>".utf8), pipeline: "thumbs") } == .notAnImage)
        #expect(await kind { try await images.process(bytes: Data(), pipeline: "thumbs") } == .decodeFailed)
        // A PNG header claiming 20000 x 20000 (400 MP) and nothing more: refused from its header,
        // before any pixel is decoded (the decoder's max_pixels, 50 MP by default).
        let bomb = Fixtures.pngHeader(width: 20000, height: 20000)
        do {
            _ = try await images.process(bytes: bomb, pipeline: "thumbs")
            Issue.record("a 400 MP header was decoded")
        } catch let failure as PipelineError {
            #expect(failure.kind == .tooLarge && failure.stage == .decode, "\(failure.kind): \(failure.message)")
        }
        // A path outside serve.sources: refused before anything is read.
        #expect(await kind { try await images.process("/etc/passwd", pipeline: "thumbs") } == .sourceNotAllowed)
        #expect(await kind { try await images.process(setup.dir.path + "/%2e%2e/etc/passwd", pipeline: "thumbs") } == .sourceNotAllowed)
        #expect(await kind { try await images.process(setup.dir.path + "/missing.jpg", pipeline: "thumbs") } == .notFound)
    }

    @Test func aDestinationIsBuiltOnlyWhenSomethingIsStoredInIt() async throws {
        let setup = try Setup()
        // An S3 output without credentials: loading and values work; storing fails, typed.
        try setup.write("bucket", "version: 1\nname: bucket\nencoder: jpeg\noutput:\n  dir: s3://nowhere/thumbs\n")
        let images = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry())
        let made = try await images.process(bytes: try Fixtures.jpeg(50, 40), pipeline: "bucket")
        #expect(made.outputs.count == 1)
        do {
            _ = try await images.process(bytes: try Fixtures.jpeg(50, 40), pipeline: "bucket", delivery: .store)
            Issue.record("an output was stored without credentials")
        } catch let failure as PipelineError {
            #expect(failure.stage == .output && failure.message.contains("credentials"), "\(failure.kind): \(failure.message)")
        }
    }

    @Test func everyProblemOfEveryFileIsThrownAtOnceInValidatesWords() throws {
        let setup = try Setup()
        try setup.write("one", "version: 1\nname: one\nprocessors:\n  - resize: { widht: 10 }\nencoder: jpeg\n")
        try setup.write("two", "version: 1\nname: two\nencoder: { jpeg: { qualty: 80 } }\n")
        try setup.write("three", "version: 1\nname: same\nencoder: png\n")
        try setup.write("four", "version: 1\nname: same\nencoder: png\n")
        do {
            _ = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry())
            Issue.record("invalid files were loaded")
        } catch let invalid as PipelineLoadError {
            let text = invalid.description
            #expect(text.contains("one.yaml:4:") && text.contains("did you mean 'width'"), "\(text)")
            #expect(text.contains("two.yaml:3:") && text.contains("did you mean 'quality'"), "\(text)")
            #expect(text.contains("a pipeline named 'same' is already loaded"), "\(text)")
            #expect(invalid.diagnostics.count == 3)
        }
        let empty = try Fixtures.temporaryDirectory("library-empty")
        #expect(throws: PipelineLoadError.self) { try ImagePipelines(paths: [empty.path], registry: BuiltIns.registry()) }
    }

    @Test func aLargeOutputIsHandedBackInAFileThatGoesWithIt() async throws {
        let setup = try Setup()
        try setup.standard()
        var options = ImagePipelines.Options()
        options.spoolThreshold = 100
        options.spoolDirectory = setup.dir.path
        let images = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry(), options: options)
        /// The spooled file's path, once the output holding it is gone.
        func spooled() async throws -> String? {
            let made = try await images.process(bytes: try Fixtures.jpeg(640, 480), pipeline: "thumbs")
            guard case .file(let file)? = made.outputs.first?.body else {
                Issue.record("a \(made.outputs.first?.byteCount ?? 0)-byte output was kept in memory past a 100-byte threshold")
                return nil
            }
            #expect(file.path.hasPrefix(setup.dir.path) && FileManager.default.fileExists(atPath: file.path))
            #expect(try made.outputs[0].data().count == file.byteCount && file.byteCount > 100)
            return file.path
        }
        let path = try #require(try await spooled())
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func signedPathsAndSrcsetAreWhatTheServiceVerifies() throws {
        let setup = try Setup()
        try setup.standard()
        var options = ImagePipelines.Options()
        options.keys = try SigningKeys(parsing: "main:" + String(repeating: "ab", count: 32), origin: "test")
        let images = try ImagePipelines(paths: [setup.pipelines.path], registry: BuiltIns.registry(), options: options)
        let path = try images.signedPath(pipeline: "sizes", source: "https://img.example.com/a.jpg", variant: "small", params: ["q": "50"])
        let request = try ServeRequest(target: path) { images.pipelines[$0]?.hasVariants }
        #expect(request.pipeline == "sizes" && request.variant == "small" && request.source == "https://img.example.com/a.jpg")
        #expect(options.keys!.verify(request.signature, of: request.signed) != nil)
        #expect(throws: PipelineError.self) { try images.signedPath(pipeline: "sizes", source: "https://x/a.jpg", params: ["nope": "1"]) }
        #expect(throws: PipelineError.self) { try images.signedPath(pipeline: "thumbs", source: "/etc/passwd") }

        let srcset = try images.srcset(pipeline: "sizes", source: "https://img.example.com/a.jpg", base: "https://cdn.example.com")
        let entries = srcset.components(separatedBy: ", ")
        #expect(entries.count == 2 && entries[0].hasSuffix(" 32w") && entries[1].hasSuffix(" 96w"), "\(srcset)")
        #expect(entries.allSatisfy { $0.hasPrefix("https://cdn.example.com/") })
        let byParam = try images.srcset(pipeline: "sizes", source: "https://img.example.com/a.jpg", variant: "large",
                                        widthParam: "w", widths: [100, 200])
        #expect(byParam.hasSuffix(" 200w") && byParam.contains("w=100") && byParam.contains("/large/"), "\(byParam)")
        // A width the parameter's spec refuses is refused here too.
        #expect(throws: PipelineError.self) {
            try images.srcset(pipeline: "sizes", source: "https://img.example.com/a.jpg", variant: "large", widthParam: "w", widths: [4000])
        }
    }

    // MARK: Cancellation (scripted loads, waited on by their events)

    func scripted(_ loader: ScriptedLoader) throws -> ImagePipelines {
        let setup = try Setup()
        try setup.write("scripted", "version: 1\nname: scripted\n" + ScriptedStages.pipeline + "\noutput:\n  dir: \(setup.output.path)\n")
        return try ImagePipelines(paths: [setup.pipelines.path], registry: ScriptedStages.registry(loader))
    }

    @Test func aCancelledCallerStopsItsOwnLoad() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("40x20".utf8)))
        let images = try scripted(loader)
        let task = Task { try await images.process("scripted://a", pipeline: "scripted") }
        #expect(await loader.log.wait(for: "started a"))
        task.cancel()
        #expect(await loader.log.wait(for: "cancelled a"))
        do {
            _ = try await task.value
            Issue.record("a cancelled call returned outputs")
        } catch let failure as PipelineError {
            #expect(failure.kind == .cancelled, "\(failure.kind)")
        }
    }

    @Test func workAnotherCallerSharesGoesOnWhenOneIsCancelled() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("40x20".utf8)))
        let images = try scripted(loader)
        let leaving = Task { try await images.process("scripted://a", pipeline: "scripted") }
        #expect(await loader.log.wait(for: "started a"))
        let staying = Task { try await images.process("scripted://a", pipeline: "scripted") }
        // The second caller joins the work in flight (one load, not two): wait until it has.
        let runner = try images.runner(pipeline: "scripted")
        let deadline = ContinuousClock.now + .seconds(60)
        while runner.itemWork.subscribers("scripted://a\u{1}values") < 2, ContinuousClock.now < deadline { await Task.yield() }
        #expect(runner.itemWork.subscribers("scripted://a\u{1}values") == 2)
        leaving.cancel()
        await #expect(throws: (any Error).self) { try await leaving.value }
        loader.release("a")
        let made = try await staying.value
        #expect(try made.outputs.first?.data() == Data("fake 20x10".utf8))
        #expect(loader.calls("a") == 1 && loader.log.count("cancelled a") == 0)
    }
}
