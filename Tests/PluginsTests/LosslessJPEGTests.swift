import Foundation
@testable import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// `jxl: { lossless_jpeg: true }` through the real engine: an untouched JPEG source becomes a JPEG
/// XL that libjxl's `djxl` rebuilds into the source byte for byte (under `keep: [all, gps]`), or
/// into the source with the metadata `metadata:` drops taken out (the same scan); anything else is
/// encoded from its pixels, and the `lossless_jpeg` fact says which.
@Suite struct LosslessJPEGTests {
    let registry = BuiltIns.registry()

    static func tool(_ name: String, _ arguments: [String]) async throws -> String {
        let run = try await Command.run("/usr/bin/\(name)", arguments)
        try #require(run.status == 0, "\(name) \(arguments): \(run.stderr)")
        return run.stdout
    }

    /// A photo-like JPEG with camera EXIF, GPS and XMP; a copy stored sideways (orientation 6); a PNG.
    static func sources(_ dir: URL) async throws -> [URL] {
        let jpeg = dir.appendingPathComponent("a.jpg"), turned = dir.appendingPathComponent("turned.jpg"), png = dir.appendingPathComponent("b.png")
        try Fixtures.image("plasma:", width: 640, height: 480, format: "JPEG", quality: 88).write(to: jpeg)
        _ = try await tool("exiftool", ["-q", "-overwrite_original", "-Make=Probe", "-GPSLatitude=48.85", "-GPSLatitudeRef=N",
                                        "-XMP-dc:Title=Probe", jpeg.path])
        try Data(contentsOf: jpeg).write(to: turned)
        _ = try await tool("exiftool", ["-q", "-overwrite_original", "-Orientation=6", "-n", turned.path])
        try Fixtures.image("plasma:", width: 320, height: 240, format: "PNG").write(to: png)
        return [jpeg, turned, png]
    }

    /// Runs `yaml` over `sources`; for each source's stem, its output and the `lossless_jpeg` fact.
    func run(_ yaml: String, _ sources: [URL], _ out: URL) async throws -> [String: (path: String, rebuilt: Bool?)] {
        let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "jxl.yaml", registry: registry)
        #expect(diagnostics.filter { $0.severity == .error }.isEmpty, "\(diagnostics)")
        var options = RunOptions()
        options.outputDirectory = out.path
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry, options: options)
        let items = Results()
        let summary = try await runner.run(sources.enumerated().map { Source(text: $0.element.path, index: $0.offset + 1) }.stream) { await items.add($0) }
        #expect(summary.ok == sources.count, "\(summary)")
        var found: [String: (String, Bool?)] = [:]
        for item in await items.all {
            var rebuilt: Bool?
            if case .list(let encodings)? = item.facts[StoredOutputsStep.encodingFact], case .object(let first)? = encodings.first,
               case .bool(let value)? = first["lossless_jpeg"] { rebuilt = value }
            found[URL(fileURLWithPath: item.source).deletingPathExtension().lastPathComponent] = (try #require(item.variants.first).path, rebuilt)
        }
        return found
    }

    /// What djxl rebuilds from `jxl`, as a JPEG.
    static func rebuilt(_ jxl: String) async throws -> Data {
        let jpeg = jxl + ".jpg"
        _ = try await tool("djxl", [jxl, jpeg, "--quiet"])
        return try Data(contentsOf: URL(fileURLWithPath: jpeg))
    }

    @Test func anArchiveRebuildsEverySourceByteForByte() async throws {
        let dir = try Fixtures.temporaryDirectory("lossless-jpeg")
        let sources = try await Self.sources(dir)
        let outputs = try await run("""
            metadata: { keep: [all, gps] }
            encoder: { jxl: { lossless_jpeg: true } }
            """, sources, dir.appendingPathComponent("archive"))
        for name in ["a", "turned"] {
            let output = try #require(outputs[name])
            #expect(output.rebuilt == true, "\(name)")
            let original = try Data(contentsOf: dir.appendingPathComponent(name + ".jpg"))
            #expect(try await Self.rebuilt(output.path) == original, "\(name): djxl's JPEG is not the source")
            let size = try Data(contentsOf: URL(fileURLWithPath: output.path)).count
            #expect(size < original.count * 9 / 10, "\(name): \(size) bytes against the JPEG's \(original.count)")
        }
        #expect(outputs["b"]?.rebuilt == false)
        // The PNG is a JPEG XL of its pixels, which djxl decodes.
        _ = try await Self.tool("djxl", [try #require(outputs["b"]).path, dir.appendingPathComponent("b-back.png").path, "--quiet"])
    }

    @Test func theDefaultKeepsTheScanAndDropsTheMetadata() async throws {
        let dir = try Fixtures.temporaryDirectory("lossless-jpeg-default")
        let sources = try await Self.sources(dir)
        let outputs = try await run("encoder: { jxl: { lossless_jpeg: true } }", sources, dir.appendingPathComponent("web"))
        let output = try #require(outputs["a"])
        #expect(output.rebuilt == true)
        let original = try Data(contentsOf: dir.appendingPathComponent("a.jpg")), back = try await Self.rebuilt(output.path)
        let scan = try #require(JPEGMarkers.segments(original)?.scan), backScan = try #require(JPEGMarkers.segments(back)?.scan)
        #expect(back[backScan...] == original[scan...], "the scan data differs")
        let file = dir.appendingPathComponent("back.jpg")
        try back.write(to: file)
        let tags = try await Self.tool("exiftool", ["-s", "-Make", "-GPSLatitude", "-XMP-dc:Title", file.path])
        #expect(tags.isEmpty, "\(tags)")
        // Sideways, the kept metadata would lose the orientation: encoded from its (turned) pixels.
        #expect(outputs["turned"]?.rebuilt == false)
        // A processed JPEG is never rebuilt.
        let resized = try await run("""
            processors: [ { resize: { width: 200 } } ]
            encoder: { jxl: { lossless_jpeg: true } }
            """, [sources[0]], dir.appendingPathComponent("resized"))
        #expect(resized["a"]?.rebuilt == false)
    }
}
