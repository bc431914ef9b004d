import Foundation
@testable import PipelineKit
import Plugins
import Testing

/// The top level of a pipeline file is declared once, in `PipelineFileSpec`; parsing, the schema,
/// `explain` and the reference all follow it.
extension ValidationTests {
    @Test func parserAcceptsExactlyTheDeclaredKeys() {
        #expect(PipelineFile.topLevelKeys == PipelineFileSpec.keys.map(\.name))
        #expect(diagnostics("encoder: jpeg\noutptu: {dir: x}\n")
            == ["p.yaml:2:1: error: unknown top-level key 'outptu'; did you mean 'output'?"])
    }

    @Test func schemaHasOnePropertyPerDeclaredKeyAndOption() throws {
        let schema = PipelineSchema.jsonSchema(registry)
        let properties = try #require(schema["properties"] as? [String: Any])
        #expect(Set(properties.keys) == Set(PipelineFileSpec.keyNames))
        let output = try #require(properties["output"] as? [String: Any])
        let outputOptions = try #require(output["properties"] as? [String: Any])
        // The options every destination takes, and each destination's own.
        let destinations = registry.plugins(in: .destination).flatMap { $0.spec.options.map(\.name) }
        #expect(Set(outputOptions.keys) == Set(PipelineFileSpec.output.map(\.name) + destinations))
        for key in PipelineFileSpec.keys {
            let entry = try #require(properties[key.name] as? [String: Any])
            #expect(entry["description"] as? String == key.doc)
        }
    }

    @Test func outputOptionsAreParsedFromTheirSpecs() {
        #expect(diagnostics("encoder: jpeg\noutput:\n  dri: x\n")
            == ["p.yaml:3:3: error: unknown option 'output.dri'; did you mean 'dir'?"])
        #expect(diagnostics("encoder: jpeg\noutput:\n  dir: [a, b]\n")
            == ["p.yaml:3:8: error: expected a string for 'output.dir', got a list"])
        #expect(diagnostics("encoder: jpeg\noutput: [x]\n")
            == ["p.yaml:2:9: error: output: expected a map of options, got a list"])
        #expect(diagnostics("version: x\nencoder: jpeg\n")
            == ["p.yaml:1:10: error: expected an integer for 'version', got 'x'"])
    }

    /// A parameter with one bound (or none) refuses a value outside it with a message, never a
    /// crash: an open bound used to be formatted as an infinite integer. A parameter over an option
    /// written as a value or a map (`frame`, `quality`) takes the single value.
    @Test func aParameterWithOneBoundRefusesValuesOutsideIt() throws {
        let (parsed, found) = PipelineFile.parse(text: """
            params:
              t: { sets: decoder.imagemagick.frame, max: 60 }
              q: { sets: encoder.jpeg.quality, min: 50 }
            decoder: { imagemagick: { formats: [jpeg, video] } }
            encoder: jpeg
            """, file: "p.yaml", registry: registry)
        #expect(found.isEmpty, "\(found)")
        let pipeline = try #require(parsed)
        let cases: [([String: String], String?)] = [
            (["t": "90"], "parameter 't': 'frame' must be between 0ms and 1m, got 90s"), (["t": "30s"], nil), (["t": "soon"], "parameter 't'"),
            (["q": "20"], "parameter 'q': 'quality' must be between 50 and 100, got 20"), (["q": "70"], nil), (["q": "{ target_ssim: 0.9 }"], "parameter 'q'"),
        ]
        for (values, message) in cases {
            do {
                _ = try pipeline.applying(values)
                #expect(message == nil, "\(values) was taken")
            } catch let error as PipelineError {
                #expect(message.map { error.message.contains($0) } == true, "\(values): \(error.message)")
            }
        }
    }

    @Test func explainWritesEveryDeclaredKeyThatIsSet() throws {
        let (parsed, found) = PipelineFile.parse(text: """
            name: spec
            description: all keys
            sources: ["https://img.example.com/", "/srv/images/"]
            loader: { http: { timeout: 5s } }
            data_cache: none
            processors: [{ resize: { width: 10 } }]
            encoder: png
            output: { dir: out/x }
            on_failure: { kinds: [not_found], alternatives: ["{url}.orig"] }
            metadata: { keep: [all, gps], drop: [dates] }
            params: { w: { sets: processors.0.resize.width, min: 8, max: 64 } }
            serve: { sources: ["https://img.example.com/"], breakpoints: [8, 16], breakpoint_param: w }
            purge: [{ varnish: { url: "http://127.0.0.1:6081/" } }]
            notify: [{ webhook: { url: "http://127.0.0.1:9/hook" } }]
            """, file: "p.yaml", registry: registry)
        #expect(found.isEmpty)
        let pipeline = try #require(parsed)
        let text = PipelineExplain.yaml(pipeline)
        let written = Set(text.split(separator: "\n").compactMap { line -> String? in
            guard let first = line.first, first.isLetter else { return nil }
            return String(line.prefix { $0 != ":" })
        })
        let expected = Set(PipelineFileSpec.keyNames).subtracting(["variants", "tests"])
        #expect(written == expected)
        #expect(text.contains("  dir: \"out/x\""))
        #expect(text.contains("  name: \"\(NameTemplate.defaultText)\""))
        let (again, problems) = PipelineFile.parse(text: text, file: "e.yaml", registry: registry)
        #expect(again?.params["w"]?.option.range == 8...64 && again?.serve.sources == ["https://img.example.com/"])
        #expect(problems.isEmpty, "\(problems)")
        #expect(again?.serve.breakpoints == pipeline.serve.breakpoints && again?.purgers.count == 1)
        #expect(again?.output.options == pipeline.output.options)
        #expect(again?.metadataPolicy == pipeline.metadataPolicy)
        #expect(pipeline.metadataPolicy.kept == [.icc, .exif, .orientation, .copyright, .xmp, .iptc, .gps])
    }

    /// An option that is a number or a map of typed fields (`quality`) is written back as it was read.
    @Test func explainWritesAQualityTargetBackAsItReadsIt() throws {
        for encoder in ["jpeg: { quality: { target_ssim: 0.975, max: 90 } }", "webp: { quality: 70 }"] {
            let (parsed, found) = PipelineFile.parse(text: "encoder:\n  \(encoder)\n", file: "q.yaml", registry: registry)
            #expect(found.isEmpty, "\(found)")
            let pipeline = try #require(parsed)
            let text = PipelineExplain.yaml(pipeline)
            let (again, problems) = PipelineFile.parse(text: text, file: "e.yaml", registry: registry)
            #expect(problems.isEmpty, "\(problems)\n\(text)")
            #expect(again?.encoder.options == pipeline.encoder.options, "\(text)")
        }
        let (parsed, _) = PipelineFile.parse(text: "encoder:\n  jpeg: { quality: { target_ssim: 0.975, max: 90 } }\n", file: "q.yaml",
                                             registry: registry)
        #expect(try #require(parsed).encoder.options.map("quality") == ["target_ssim": .number(0.975), "min": .int(40), "max": .int(90)])
        #expect(PipelineExplain.yaml(try #require(parsed)).contains("quality: { target_ssim: 0.975, min: 40, max: 90 }"))
    }

    /// Pixels left as stored with the orientation dropped: valid, with a warning at `metadata:`;
    /// keeping the orientation silences it.
    @Test func aDroppedOrientationOfPixelsLeftAsStoredIsWarnedAbout() throws {
        let text = "decoder: { imagemagick: { auto_orient: false } }\nencoder: jpeg\nmetadata: { keep: [copyright] }\n"
        let (parsed, found) = PipelineFile.parse(text: text, file: "o.yaml", registry: registry)
        #expect(parsed != nil)
        #expect(found.map(\.description) == [
            "o.yaml:3:11: warning: metadata.keep: the decoder's auto_orient is false and metadata does not keep orientation: "
                + "outputs of rotated sources will be shown as stored; add orientation to keep",
        ])
        let kept = text.replacingOccurrences(of: "[copyright]", with: "[copyright, orientation]")
        #expect(PipelineFile.parse(text: kept, file: "o.yaml", registry: registry).1.isEmpty)
    }

    /// resize's advice: `fill` without upscale leaves a small source smaller than the box, which
    /// surprises; validation says so at the processor's key path, unless the file chose upscale.
    @Test func fillThatCannotReachTheBoxIsWarnedAbout() throws {
        let text = "processors:\n  - resize: { width: 1200, height: 630, mode: fill }\nencoder: jpeg\n"
        let (parsed, found) = PipelineFile.parse(text: text, file: "f.yaml", registry: registry)
        #expect(parsed != nil)
        #expect(found.count == 1)
        #expect(found.first?.description.hasPrefix("f.yaml:2:5: warning: processors.0.resize: a source smaller than 1200x630 is not enlarged") == true,
                "\(found.map(\.description))")
        for quiet in ["mode: fill, upscale: false", "mode: fill, upscale: true", "mode: fill_down", "mode: fit"] {
            let other = text.replacingOccurrences(of: "mode: fill", with: quiet)
            #expect(PipelineFile.parse(text: other, file: "f.yaml", registry: registry).1.isEmpty, "\(quiet)")
        }
    }

    @Test func referenceDocumentsEveryKey() {
        let markdown = PluginReference.markdown(registry)
        for key in PipelineFileSpec.keys { #expect(markdown.contains("| `\(key.name)` |")) }
        for option in PipelineFileSpec.output { #expect(markdown.contains("| `\(option.name)` |")) }
    }
}
