import Foundation
@testable import PipelineKit
import Plugins
import Testing
import TestImages

/// Breakpoints by bytes through the real engine, ImageMagick and libwebp: widths chosen per
/// image, one decode per source, a srcset manifest beside the facts sidecar.
@Suite struct BytesBreakpointsRunTests {
    let registry = BuiltIns.registry()

    func pipeline(_ yaml: String) throws -> Pipeline {
        let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "bytes.yaml", registry: registry)
        #expect(diagnostics.filter { $0.severity == .error }.isEmpty, "\(diagnostics)")
        return try #require(pipeline)
    }

    /// `trial_time` is long: what is checked is where the search lands, not how fast it is on a
    /// debug build with the cores taken (a spent budget keeps unrefined estimates, and says so).
    static let yaml = """
        decoder: imagemagick
        variants:
          web:
            breakpoints: { min_width: 160, max_width: 1400, bytes_step: 12KB, max_images: 8, trial_time: 10m }
            encoder: { webp: { quality: 80 } }
          thumb:
            processors: [ { resize: { width: 120 } } ]
            encoder: jpeg
        output:
          name: "{stem}-{variant}.{ext}"
          facts_sidecar: true
        """

    /// Detailed, flat and small sources: each gets its own widths, each is decoded once.
    @Test func widthsFollowEachImagesBytes() async throws {
        let dir = try Fixtures.temporaryDirectory("bytes-run")
        let sources = [("detailed", "plasma:", 1600, 1000), ("flat", "gradient:navy-orange", 1600, 1000), ("small", "plasma:", 300, 200)]
        for (name, spec, width, height) in sources {
            try Fixtures.image(spec, width: width, height: height, format: "JPEG", quality: 92)
                .write(to: dir.appendingPathComponent(name + ".jpg"))
        }
        var options = RunOptions()
        options.outputDirectory = dir.appendingPathComponent("out").path
        let runner = try PipelineRunner(pipeline: try pipeline(Self.yaml), registry: registry, options: options)
        let items = Results()
        let summary = try await runner.run(sources.enumerated().map { Source(text: dir.appendingPathComponent($0.element.0 + ".jpg").path, index: $0.offset + 1) }.stream) {
            await items.add($0)
        }
        #expect(summary.ok == 3 && summary.failed == 0)
        #expect(summary.decodes == 3, "one decode per source for every width and variant")
        for item in await items.all {
            let name = URL(fileURLWithPath: item.source).deletingPathExtension().lastPathComponent
            let web = item.variants.filter { $0.name == "web" }
            let facts = try #require(Self.byBytes(item.facts)["web"], "\(name): the choice is in the facts")
            #expect(web.map(\.width) == facts.widths, "\(name)")
            #expect(web.count <= 8 && !web.isEmpty)
            #expect(web.map(\.width) == web.map(\.width).sorted())
            // Each output is what its name says, and a real WebP of that width.
            for output in web {
                #expect(output.path.hasSuffix("\(name)-web-\(output.width)w.webp"), "\(output.path)")
                #expect(try await Identified.file(output.path) == Identified(format: "WEBP", width: output.width, height: output.height))
            }
            let steps = zip(web.map(\.bytes), web.map(\.bytes).dropFirst()).map { Double($1 - $0) }.dropLast()
            for step in steps where !facts.capped {
                #expect(abs(step - Double(facts.step)) <= 0.35 * Double(facts.step), "\(name): \(web.map(\.bytes))")
            }
            switch name {
            case "detailed": #expect(web.count >= 4 && web.last?.width == 1400, "\(web.map(\.width))")
            case "flat": #expect(web.map(\.width) == [1400], "a gradient saves less than a step at any width")
            default: #expect(web.map(\.width) == [300], "never wider than the source")
            }
            // The srcset manifest, beside the facts sidecar, names exactly these files.
            let manifestPath = try #require(item.outputs.first { $0.hasSuffix(".srcset.json") })
            #expect(item.outputs.contains(manifestPath.replacingOccurrences(of: ".srcset.json", with: ".json")))
            let manifest = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: manifestPath))) as? [String: Any])
            let entry = try #require((manifest["variants"] as? [String: Any])?["web"] as? [String: Any])
            let images = try #require(entry["images"] as? [[String: Any]])
            #expect(images.map { $0["width"] as? Int } == web.map(\.width))
            let srcset = try #require(entry["srcset"] as? String)
            #expect(srcset == web.map { "\(URL(fileURLWithPath: $0.path).lastPathComponent) \($0.width)w" }.joined(separator: ", "))
            let img = try #require(entry["img"] as? String)
            #expect(img.hasPrefix("<img src=\"\(URL(fileURLWithPath: web.last!.path).lastPathComponent)\" srcset=\"\(srcset)\" sizes=\"100vw\""))
            #expect(item.facts["srcset_manifest"]?.string == manifestPath)
        }
    }

    /// A second line for the same source under other names gets copies named for it, and a
    /// manifest that names the copies.
    @Test func aSecondNameForTheSameSourceGetsItsOwnWidths() async throws {
        let dir = try Fixtures.temporaryDirectory("bytes-copy")
        let source = dir.appendingPathComponent("p.jpg")
        try Fixtures.image("plasma:", width: 1200, height: 800, format: "JPEG", quality: 92).write(to: source)
        var options = RunOptions()
        options.outputDirectory = dir.appendingPathComponent("out").path
        let yaml = Self.yaml.replacingOccurrences(of: "\"{stem}-{variant}.{ext}\"", with: "\"{index}/{stem}-{variant}.{ext}\"")
            .replacingOccurrences(of: "facts_sidecar: true", with: "facts_sidecar: true\n  facts_name: \"{index}/{stem}.json\"")
        let runner = try PipelineRunner(pipeline: try pipeline(yaml), registry: registry, options: options)
        let items = Results()
        let summary = try await runner.run([Source(text: source.path, index: 1), Source(text: source.path, index: 2)].stream) { await items.add($0) }
        #expect(summary.ok == 2 && summary.decodes == 1)
        let all = await items.all.sorted { $0.index < $1.index }
        let first = all[0].variants.filter { $0.name == "web" }, second = all[1].variants.filter { $0.name == "web" }
        #expect(first.map(\.width) == second.map(\.width) && first.count > 1)
        #expect(second.allSatisfy { $0.path.contains("/out/2/") && FileManager.default.fileExists(atPath: $0.path) })
        let manifest = try #require(all[1].outputs.first { $0.hasSuffix(".srcset.json") })
        #expect(manifest.hasSuffix("/out/2/p.srcset.json"))
        let text = try String(contentsOfFile: manifest, encoding: .utf8)
        #expect(text.contains("2/p-web-\(second[0].width)w.webp") && !text.contains("1/p-web"))
    }

    /// Outputs handed back as values (the service, the library): every width, narrowest first.
    @Test func valuesCarryEveryWidth() async throws {
        let dir = try Fixtures.temporaryDirectory("bytes-values")
        let source = dir.appendingPathComponent("p.jpg")
        try Fixtures.image("plasma:", width: 1200, height: 800, format: "JPEG", quality: 92).write(to: source)
        let runner = try PipelineRunner(pipeline: try pipeline(Self.yaml).restricted(toVariant: "web"), registry: registry,
                                        options: RunOptions())
        let made = await runner.process(Source(text: source.path, index: 1), delivery: .values)
        #expect(made.result.status == .ok, "\(String(describing: made.result.error))")
        #expect(made.outputs.count > 1 && made.outputs.allSatisfy { $0.variant == "web" })
        #expect(made.outputs.map(\.size.width) == made.outputs.map(\.size.width).sorted())
    }

    @Test func badBreakpointsAreRefusedWhereTheyAreWritten() {
        func errors(_ yaml: String) -> [String] {
            PipelineFile.parse(text: yaml, file: "b.yaml", registry: registry).1.filter { $0.severity == .error }.map(\.description)
        }
        #expect(errors("""
            encoder: webp
            output: { name: "{stem}-{width}w.{ext}" }
            """) == ["b.yaml:2:17: error: output.name: {width} names the widths of breakpoints by bytes, which a variant declares (variants.NAME.breakpoints)"])
        #expect(errors("""
            encoder: webp
            variants:
              web:
                name: "{stem}-{width}.{ext}"
            """) == ["b.yaml:4:11: error: variants.web: {width} names the widths of breakpoints by bytes; this variant has no 'breakpoints'"])
        #expect(errors("""
            encoder: webp
            variants:
              web:
                breakpoints: { max_width: 800 }
                name: "{stem}-web.{ext}"
            """) == ["b.yaml:5:11: error: variants.web.name: breakpoints by bytes make one output per width; put {width} in the name (for example '{stem}-{hash8}-{width}w.{ext}')"])
        #expect(errors("""
            encoder: webp
            variants:
              web:
                breakpoints: { min_width: 900, max_width: 800 }
            """) == ["b.yaml:4:31: error: variants.web.breakpoints: min_width (900) is larger than max_width (800)"])
        #expect(errors("""
            encoder: webp
            variants:
              web:
                breakpoints: { max_widht: 800, bytes_step: lots }
            """).count == 2)
        #expect(errors("""
            encoder: webp
            variants:
              web:
                breakpoints: [320, 640]
            """) == ["b.yaml:4:18: error: variants.web.breakpoints: expected a map with min_width, max_width, bytes_step and max_images, got a list (the widths `serve` snaps hints to are serve.breakpoints)"])
    }

    /// The name a variant inherits gets `-{width}w` before its extension.
    @Test func anInheritedNameGetsTheWidth() throws {
        let made = try pipeline("""
            encoder: webp
            variants:
              web: { breakpoints: { max_width: 800 } }
            """)
        #expect(made.variants[0].template.text == "{stem}-{hash}-{variant}-{width}w.{ext}")
        // The chain ends at the widest width, so the decode can shrink on load.
        #expect(made.variants[0].processors.last?.options.int("width") == 800)
    }

    /// `breakpoints.by_bytes.VARIANT` from an item's facts.
    static func byBytes(_ facts: ImageFacts?) -> [String: (widths: [Int], step: Int, capped: Bool)] {
        guard case .object(let breakpoints)? = facts?["breakpoints"], case .object(let variants)? = breakpoints["by_bytes"] else { return [:] }
        var out: [String: (widths: [Int], step: Int, capped: Bool)] = [:]
        for (name, value) in variants {
            guard case .object(let fields) = value, case .list(let widths)? = fields["widths"], case .int(let step)? = fields["step"],
                  case .bool(let capped)? = fields["capped"] else { continue }
            out[name] = (widths.compactMap { if case .int(let w) = $0 { w } else { nil } }, step, capped)
        }
        return out
    }
}

/// Item results collected from `onItem`.
actor Results {
    var all: [ItemResult] = []
    func add(_ item: ItemResult) { all.append(item) }
}
