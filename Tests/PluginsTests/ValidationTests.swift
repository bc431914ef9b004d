import Foundation
@testable import PipelineKit
import Plugins
import Testing
import TestImages

/// Each broken pipeline gives its exact message at its exact line and column.
@Suite struct ValidationTests {
    let registry = BuiltIns.registry()

    func diagnostics(_ text: String) -> [String] {
        PipelineFile.parse(text: text, file: "p.yaml", registry: registry).1.map(\.description)
    }

    @Test func validPipelineHasNoDiagnostics() {
        let (pipeline, found) = PipelineFile.parse(text: """
            version: 1
            name: ok
            loader:
              http: { timeout: 5s, max_bytes: 10MB }
            processors:
              - resize: { width: 100 }
            encoder: jpeg
            """, file: "p.yaml", registry: registry)
        #expect(found.isEmpty)
        #expect(pipeline?.name == "ok")
        #expect(pipeline?.loader?.options.bytes("max_bytes") == 10_000_000)
        #expect(pipeline?.loader?.options.seconds("timeout") == 5)
        #expect(pipeline?.encoder.options.int("quality") == 82)  // default filled in
        #expect(pipeline?.output.dir == "out/ok")
        #expect(pipeline?.output.name.text == "{stem}-{hash}.{ext}")
    }

    /// A colour ImageMagick would not read is refused at `validate`, where it is written, for a
    /// built-in and for a custom plugin alike (the spec's `.color` kind is all it takes).
    @Test func aBadColourIsRefusedWhereItIsWritten() throws {
        #expect(diagnostics("""
            encoder: png
            processors:
              - border: { width: 5, color: not-a-colour }
            """) == ["p.yaml:3:32: error: 'processors.0.border.color': 'not-a-colour' is not a colour ImageMagick knows "
                        + "(a name such as white, #rrggbb, #rrggbbaa, rgb(255,128,0) or rgba(0,0,0,0.5))"])
        #expect(diagnostics("encoder: png\nprocessors:\n  - border: { width: 5, color: whte }\n").first?
            .contains("did you mean 'white'?") == true)
        #expect(diagnostics("encoder: png\nprocessors:\n  - border: { width: 5, color: \"#ff00\" }\n").isEmpty)
        enum Tinted: PluginBundle {
            static let plugins = [Plugin.processor(PluginSpec(name: "tinted", summary: "Tints.",
                                                              options: [.color("color", default: "white", doc: "The tint.")])) { _ in
                throw PipelineError(.invalidOption, "not built in this test")
            }]
        }
        let custom = try PluginRegistry(bundles: [BuiltIns.self, Tinted.self])
        let found = PipelineFile.parse(text: "encoder: png\nprocessors:\n  - tinted: { color: \"rgb(foo)\" }\n", file: "p.yaml",
                                       registry: custom).1.map(\.description)
        #expect(found == ["p.yaml:3:22: error: 'processors.0.tinted.color': 'rgb(foo)' is not a colour: 'rgb(' must start with a number, "
                            + "as in rgb(255,128,0) or rgb(50%,20%,10%)"])
    }

    /// A file a pipeline reads is named relative to the pipeline file (wherever the command runs);
    /// a directory it writes stays relative to the working directory.
    @Test func filesThePipelineReadsAreRelativeToThePipelineFile() throws {
        let dir = try Fixtures.temporaryDirectory("relative")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("fixtures"), withIntermediateDirectories: true)
        try Fixtures.image("rose:", width: 40, height: 30, format: "PNG").write(to: dir.appendingPathComponent("fixtures/logo.png"))
        let file = dir.appendingPathComponent("cards.yaml")
        try """
            version: 1
            name: cards
            processors:
              - watermark: { file: fixtures/logo.png }
            on_failure: { fallback: fixtures/logo.png }
            encoder: png
            output: { dir: out/cards }
            """.write(to: file, atomically: true, encoding: .utf8)
        let pipeline = try PipelineFile.load(path: file.path, registry: registry)
        let logo = dir.appendingPathComponent("fixtures/logo.png").standardizedFileURL.path
        #expect(pipeline.variants[0].processors[0].options.string("file") == logo)
        #expect(pipeline.onFailure?.string("fallback") == logo)
        #expect(pipeline.output.dir == "out/cards")
        // Named from elsewhere, a missing file is reported where it is written, as the path tried.
        try FileManager.default.removeItem(at: dir.appendingPathComponent("fixtures/logo.png"))
        #expect(throws: PipelineValidationError.self) { try PipelineFile.load(path: file.path, registry: registry) }
        do { _ = try PipelineFile.load(path: file.path, registry: registry) } catch let error as PipelineValidationError {
            #expect(error.diagnostics.contains { $0.line == 4 && $0.message.contains(logo) }, "\(error.diagnostics)")
        }
    }

    @Test func unknownPluginSuggestsNearestName() {
        #expect(diagnostics("""
            encoder:
              jpg:
                quality: 80
            """) == ["p.yaml:2:3: error: encoder: unknown encoder 'jpg'; did you mean 'jpeg'?"])
    }

    @Test func unknownPluginWithNothingCloseListsValidNames() {
        #expect(diagnostics("encoder: tga\n") == ["p.yaml:1:10: error: encoder: unknown encoder 'tga'; expected one of: auto, avif, gif, heic, jpeg, jxl, png, tiff, webp"])
    }

    @Test func pluginInWrongSlotSaysWhatItIs() {
        #expect(diagnostics("encoder: resize\n")
            == ["p.yaml:1:10: error: encoder: 'resize' is a processor; the encoder slot takes one of: auto, avif, gif, heic, jpeg, jxl, png, tiff, webp"])
    }

    @Test func unknownOptionSuggestsNearestName() {
        #expect(diagnostics("""
            encoder:
              jpeg:
                qualty: 80
            """) == ["p.yaml:3:5: error: unknown option 'encoder.jpeg.qualty'; did you mean 'quality'?"])
    }

    @Test func mistypedValues() {
        #expect(diagnostics("""
            loader:
              http:
                max_bytes: big
                timeout: soon
                max_concurrent: many
            encoder: jpeg
            """) == [
                "p.yaml:3:16: error: expected a size such as 50MB for 'loader.http.max_bytes', got 'big'",
                "p.yaml:4:14: error: expected a duration such as 30s for 'loader.http.timeout', got 'soon'",
                "p.yaml:5:21: error: expected an integer for 'loader.http.max_concurrent', got 'many'",
            ])
    }

    @Test func valueOutOfRange() {
        #expect(diagnostics("encoder:\n  jpeg: { quality: 120 }\n")
            == ["p.yaml:2:20: error: 'encoder.jpeg.quality' must be between 1 and 100, got 120"])
    }

    @Test func badEnumValue() {
        #expect(diagnostics("processors:\n  - resize: { width: 10, mode: fits }\nencoder: png\n")
            == ["p.yaml:2:32: error: unknown value 'fits' for 'processors.0.resize.mode'; did you mean 'fit'?"])
    }

    @Test func yamlSyntaxError() {
        #expect(diagnostics("""
            encoder:
              jpeg:
                quality: [80
            """) == [
                "p.yaml:4:1: error: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)",
            ])
    }

    @Test func yamlIndentationError() {
        #expect(diagnostics("encoder: jpeg\n  output: x\n")
            == ["p.yaml:2:9: error: invalid YAML: mapping values are not allowed in this context; line 2 is indented more than line 1, whose key 'encoder' already has a value; to make it a key of the same map, line it up with 'encoder'"])
    }

    @Test func duplicateKeyPointsAtTheSecond() {
        #expect(diagnostics("encoder: jpeg\ndecoder: imagemagick\nencoder: png\n")
            == ["p.yaml:3:1: error: duplicate key 'encoder'"])
    }

    @Test func unknownTopLevelKey() {
        #expect(diagnostics("encoder: jpeg\nprocesors: []\n")
            == ["p.yaml:2:1: error: unknown top-level key 'procesors'; did you mean 'processors'?"])
    }

    @Test func unsupportedVersion() {
        #expect(diagnostics("version: 2\nencoder: jpeg\n") == ["p.yaml:1:10: error: unsupported version 2; this pipelinectl reads version 1"])
    }

    @Test func missingEncoder() {
        #expect(diagnostics("decoder: imagemagick\n") == ["p.yaml:1:1: error: missing 'encoder'; expected one of: auto, avif, gif, heic, jpeg, jxl, png, tiff, webp"])
    }

    @Test func resizeNeedsASize() {
        #expect(diagnostics("processors:\n  - resize: { mode: fill }\nencoder: jpeg\n")
            == ["p.yaml:2:5: error: processors.0.resize: set 'width', 'height' or both"])
    }

    @Test func templateThatEscapesTheOutputDirectory() {
        #expect(diagnostics("encoder: jpeg\noutput:\n  name: \"../{stem}.{ext}\"\n")
            == ["p.yaml:3:9: error: output.name: the name template may not contain empty, '.' or '..' path components"])
        #expect(diagnostics("encoder: jpeg\noutput:\n  name: \"/tmp/{stem}.{ext}\"\n")
            == ["p.yaml:3:9: error: output.name: the name template must be relative to the output directory"])
        #expect(diagnostics("encoder: jpeg\noutput:\n  name: \"{stme}.{ext}\"\n")
            == ["p.yaml:3:9: error: output.name: unknown placeholder '{stme}' in name template; did you mean 'stem'?"])
    }

    @Test func everyProblemInOnePass() {
        let found = diagnostics("""
            version: 1
            loader:
              http: { timeout: soon }
            processors:
              - resise: { width: 10 }
            encoder:
              jpeg: { qualty: 1 }
            """)
        #expect(found == [
            "p.yaml:3:20: error: expected a duration such as 30s for 'loader.http.timeout', got 'soon'",
            "p.yaml:5:5: error: processors.0: unknown processor 'resise'; did you mean 'resize'?",
            "p.yaml:7:11: error: unknown option 'encoder.jpeg.qualty'; did you mean 'quality'?",
        ])
    }

    @Test func environmentInterpolation() {
        let env = ["QUALITY": "70", "EMPTY": "", "DIR": "/tmp/pk-out"]
        let (pipeline, found) = PipelineFile.parse(text: """
            encoder:
              jpeg: { quality: "${QUALITY}" }
            loader:
              http: { timeout: "${TIMEOUT:-5s}", user_agent: "a $${LITERAL} b ${EMPTY:-fallback}" }
            output:
              dir: "${DIR}/thumbs"
            """, file: "p.yaml", registry: registry, environment: env)
        #expect(found.isEmpty)
        #expect(pipeline?.encoder.options.int("quality") == 70)
        #expect(pipeline?.loader?.options.seconds("timeout") == 5)
        #expect(pipeline?.loader?.options.string("user_agent") == "a ${LITERAL} b fallback")
        #expect(pipeline?.output.dir == "/tmp/pk-out/thumbs")
    }

    @Test func interpolatedValuesAreValidatedLikeLiteralOnes() {
        let found = PipelineFile.parse(text: "encoder:\n  jpeg: { quality: \"${Q}\" }\n", file: "p.yaml",
                                       registry: registry, environment: ["Q": "500"]).1.map(\.description)
        #expect(found == ["p.yaml:2:20: error: 'encoder.jpeg.quality' must be between 1 and 100, got 500"])
        let unset = PipelineFile.parse(text: "encoder: jpeg\noutput:\n  dir: out/${WHO}\n", file: "p.yaml",
                                       registry: registry, environment: [:]).1.map(\.description)
        #expect(unset == ["p.yaml:3:12: error: environment variable 'WHO' is not set; set it or write ${WHO:-default}"])
    }

    /// A plugin with a required option and two that exclude each other, registered like any plugin.
    struct Stamp: ImageProcessing {
        var identifier: String { "stamp" }
        func process(_ image: PipelineImage) throws -> PipelineImage { image }
    }

    @Test func requiredAndExclusiveOptions() throws {
        var custom = BuiltIns.registry()
        try custom.register(.processor(PluginSpec(name: "stamp", summary: "Test.", options: [
            .path("file", required: true, doc: "PipelineImage to stamp."),
            .int("opacity", range: 0...100, doc: "Percent."),
            .number("alpha", range: 0...1, doc: "Fraction."),
        ], exclusive: [["opacity", "alpha"]])) { _ in Stamp() })
        let missing = PipelineFile.parse(text: "processors:\n  - stamp: { opacity: 50 }\nencoder: jpeg\n", file: "p.yaml",
                                         registry: custom).1.map(\.description)
        #expect(missing == ["p.yaml:2:5: error: missing required option 'processors.0.stamp.file'"])
        let both = PipelineFile.parse(text: "processors:\n  - stamp: { file: a.png, opacity: 50, alpha: 0.5 }\nencoder: jpeg\n",
                                      file: "p.yaml", registry: custom).1.map(\.description)
        #expect(both == ["p.yaml:2:40: error: 'processors.0.stamp.opacity' and 'processors.0.stamp.alpha' exclude each other; set only one"])
    }

    @Test func pixelCounts() {
        #expect(Units.parsePixels("50MP") == 50_000_000)
        #expect(Units.parsePixels("8000x6000") == 48_000_000)
        #expect(Units.parsePixels("12000") == 12_000)
        #expect(Units.parsePixels("lots") == nil)
        let (pipeline, found) = PipelineFile.parse(text: "decoder:\n  imagemagick: { max_pixels: 4000x3000 }\nencoder: jpeg\n",
                                                   file: "p.yaml", registry: registry)
        #expect(found.isEmpty)
        #expect(pipeline?.decoder.options.int("max_pixels") == 12_000_000)
        #expect(PipelineFile.parse(text: "decoder:\n  imagemagick: { max_pixels: lots }\nencoder: jpeg\n", file: "p.yaml",
                                   registry: registry).1.map(\.description)
            == ["p.yaml:2:30: error: expected a pixel count such as 50MP or 8000x6000 for 'decoder.imagemagick.max_pixels', got 'lots'"])
    }

    @Test func renderedDiagnosticHasCaretUnderColumn() {
        let d = Diagnostic(file: "p.yaml", line: 2, column: 5, message: "x")
        #expect(d.rendered(source: "a\n    qualty: 1\n") == "p.yaml:2:5: error: x\n    qualty: 1\n    ^")
    }
}

@Suite struct UnitsTests {
    @Test func sizes() {
        #expect(Units.parseSize("50MB") == 50_000_000)
        #expect(Units.parseSize("1GiB") == 1_073_741_824)
        #expect(Units.parseSize("512 KB") == 512_000)
        #expect(Units.parseSize("1.5kib") == 1536)
        #expect(Units.parseSize("100") == 100)
        #expect(Units.parseSize("big") == nil)
        #expect(Units.parseSize("-5MB") == nil)
    }

    @Test func durations() {
        #expect(Units.parseDuration("250ms") == 0.25)
        #expect(Units.parseDuration("30s") == 30)
        #expect(Units.parseDuration("5m") == 300)
        #expect(Units.parseDuration("2h") == 7200)
        #expect(Units.parseDuration("7d") == 604_800)
        #expect(Units.parseDuration("soon") == nil)
        #expect(Units.formatDuration(30) == "30s")
        #expect(Units.formatSize(50_000_000) == "50MB")
    }
}

@Suite struct NameTemplateTests {
    @Test func placeholders() throws {
        let template = try NameTemplate("{stem}-{hash8}/{index}.{ext}")
        let source = Source(text: "https://cdn.example.com/a/b/My%20Photo.final.JPG?x=1", index: 7)
        let name = template.render(source: source, cacheKey: "k", fileExtension: "jpg")
        #expect(name == "My_Photo.final-\(Hashing.sha256Hex("k").prefix(8))/7.jpg")
    }

    @Test func stemIsSafe() {
        #expect(NameTemplate.stem(of: "../../etc/passwd") == "passwd")
        #expect(NameTemplate.stem(of: "https://x.test/") == "image")
        #expect(NameTemplate.stem(of: "https://x.test/..%2F..%2Fetc") == "etc")
        #expect(NameTemplate.stem(of: "/tmp/.hidden.png") == "hidden")
        #expect(NameTemplate.stem(of: "data:image/png;base64,AAAA") == "data")
        #expect(NameTemplate.stem(of: "catalog://SKU-1001") == "SKU-1001")  // a custom scheme's id is its host
    }

    @Test func defaultIsCollisionFree() throws {
        #expect(try NameTemplate(NameTemplate.defaultText).isCollisionFree)
        #expect(try !NameTemplate("{stem}.{ext}").isCollisionFree)
    }

    /// Every kind an item can fail with has a row in the failures guide's table.
    @Test func everyItemErrorKindIsDocumented() throws {
        let guide = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../docs/failures.md").standardizedFileURL, encoding: .utf8)
        let rows = guide.split(separator: "\n").filter { $0.hasPrefix("| `") }
        #expect(ErrorKind.itemKinds.count >= 20)
        for kind in ErrorKind.itemKinds {
            #expect(rows.contains { $0.split(separator: "|").first?.contains("`\(kind.rawValue)`") == true },
                    "docs/failures.md has no row for \(kind.rawValue)")
        }
    }
}

/// `serve.breakpoints` and the cache tags: checked against `params:` when the file is read.
extension ValidationTests {
    static let hinted = """
        params: { w: { sets: processors.0.resize.width, min: 100, max: 2000 } }
        processors: [{ resize: { width: 700 } }]
        encoder: jpeg

        """

    @Test func breakpointsAreCheckedAgainstTheirParameter() throws {
        let (parsed, found) = PipelineFile.parse(text: Self.hinted + "serve: { breakpoints: [400, 800, 1600], breakpoint_param: w, hints: redirect }\n",
                                                 file: "p.yaml", registry: registry)
        #expect(found.isEmpty)
        let breakpoints = try #require(parsed?.serve.breakpoints)
        #expect(breakpoints.widths == [400, 800, 1600] && breakpoints.mode == .redirect)
        #expect(breakpoints.defaultWidth == 800)  // the width as written (700), snapped up
        #expect(diagnostics(Self.hinted + "serve: { breakpoints: [400, 800] }\n")
            == ["p.yaml:4:23: error: serve.breakpoints needs serve.breakpoint_param: the params: entry a hinted width sets"])
        #expect(diagnostics(Self.hinted + "serve: { breakpoints: [400], breakpoint_param: width }\n")
            == ["p.yaml:4:23: error: serve.breakpoint_param: no parameter 'width' in params:; expected one of: w"])
        #expect(diagnostics(Self.hinted + "serve: { breakpoints: [50, 400], breakpoint_param: w }\n")
            == ["p.yaml:4:23: error: serve.breakpoints: 50 is not a value of parameter 'w': 'width' must be between 100 and 2000, got 50"])
        #expect(diagnostics(Self.hinted + "serve: { breakpoints: [0, 400], breakpoint_param: w }\n")
            == ["p.yaml:4:23: error: serve.breakpoints: 0 is not a width (1 to 65535)"])
        #expect(diagnostics(Self.hinted + "serve: { breakpoints: [400], breakpoint_param: w, hints: sometimes }\n").count == 1)
        #expect(diagnostics(Self.hinted + "serve: { default_width: 400 }\n")
            == ["p.yaml:4:8: error: serve.breakpoint_param and serve.default_width need serve.breakpoints: the widths hints choose among"])
    }

    @Test func cacheTagSettingsAreChecked() throws {
        let (parsed, found) = PipelineFile.parse(text: Self.hinted + "serve: { cache_tags: [source], cache_tag_headers: [Surrogate-Key], cache_tag_prefix: cdn1- }\n",
                                                 file: "p.yaml", registry: registry)
        #expect(found.isEmpty)
        let tags = try #require(parsed?.serve.cacheTags)
        #expect(tags.kinds == [.source] && tags.headers == ["Surrogate-Key"] && tags.prefix == "cdn1-")
        #expect(diagnostics(Self.hinted + "serve: { cache_tag_headers: [\"Bad Header\"] }\n").count == 1)
        #expect(diagnostics(Self.hinted + "serve: { cache_tag_prefix: \"a b\" }\n").count == 1)
        #expect(diagnostics(Self.hinted + "serve: { cache_tags: [sorce] }\n").count == 1)
    }
}
