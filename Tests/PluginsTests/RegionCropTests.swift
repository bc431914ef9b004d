import Foundation
import MagickKit
@testable import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Regions people mark in XMP (MWG `mwg-rs:Regions`, IPTC Image Regions), as exiftool writes them,
/// through the real engine and ImageMagick: `gravity: regions`, a marked face beating the
/// detector in `gravity: faces`, `redact` of marked regions, every EXIF orientation, the steps
/// that carry regions, and metadata that is bad in every way the issue names. The set is made by
/// Fixtures/faces/make-region-set.py: one upright 600x400 scene whose red square at
/// (470, 250, 60, 60) is the region, and a fine checkerboard on the left where `smart` would crop.
@Suite struct RegionCropTests {
    let registry = BuiltIns.registry()
    static let square = (x: 470, y: 250, side: 60)

    static func regionSet() async throws -> URL {
        let dir = try Fixtures.temporaryDirectory("region-set")
        let script = Fixtures.packageRoot.appendingPathComponent("Tests/PluginsTests/Fixtures/faces/make-region-set.py").path
        let made = try await Command.run("/usr/bin/env", ["python3", script, dir.path])
        guard made.status == 0 else { throw CommandError(message: "make-region-set.py failed: \(made.stderr)") }
        return dir
    }

    /// Runs `processors` (YAML flow list) on `files`, writing PNGs named by stem.
    func run(_ processors: String, on files: [URL], decoder: String = "imagemagick") async throws -> (results: [String: ItemResult], out: URL) {
        let yaml = """
            decoder: \(decoder)
            processors: \(processors)
            encoder: png
            output: { name: "{stem}.{ext}" }
            """
        let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "regions.yaml", registry: registry)
        #expect(diagnostics.filter { $0.severity == .error }.isEmpty, "\(diagnostics)")
        let out = try Fixtures.temporaryDirectory("region-out")
        var options = RunOptions()
        options.outputDirectory = out.path
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry, options: options)
        let items = Results()
        let summary = try await runner.run(files.enumerated().map { Source(text: $0.element.path, index: $0.offset + 1) }.stream) {
            await items.add($0)
        }
        let all = await items.all
        #expect(summary.failed == 0 && summary.ok == files.count, "\(all.compactMap(\.error))")
        let results = Dictionary(all.map { (URL(fileURLWithPath: $0.source).lastPathComponent, $0) }) { first, _ in first }
        return (results, out)
    }

    static func rule(_ facts: ImageFacts) -> String? {
        guard case .object(let crop)? = facts["crop"] else { return nil }
        return crop["rule"]?.string
    }

    /// Whether the output PNG of `file` is red all over `box` (a pixel in from its edges).
    static func isRed(_ box: FocusBox, in out: URL, _ file: String) throws -> Bool {
        let wand = Wand()
        try wand.read(Data(contentsOf: out.appendingPathComponent((file as NSString).deletingPathExtension + ".png")), format: "PNG")
        let inset = max(1, min(box.width, box.height) / 6)
        for (x, y) in [(box.x + inset, box.y + inset), (box.x + box.width - 1 - inset, box.y + inset),
                       (box.x + inset, box.y + box.height - 1 - inset), (box.x + box.width - 1 - inset, box.y + box.height - 1 - inset),
                       (box.x + box.width / 2, box.y + box.height / 2)] {
            let p = try wand.pixel(x: x, y: y)
            if p.red < 0.7 || p.green > 0.3 || p.blue > 0.3 { return false }
        }
        return true
    }

    static let marked = ["mwg-1.jpg", "mwg-2.jpg", "mwg-3.jpg", "mwg-4.jpg", "mwg-5.jpg", "mwg-6.jpg", "mwg-7.jpg", "mwg-8.jpg",
                         "mwg-stored-6.jpg", "iptc-1.jpg", "iptc-6.jpg", "iptc-circle.png", "mwg.webp", "face-1.jpg", "face-6.jpg"]

    /// In every orientation and both standards, in JPEG, PNG and WebP, a square crop by
    /// `regions` keeps the marked square (where `smart` goes to the checkerboard), the facts say
    /// the regions decided, and the carried box is where the square is in the output.
    @Test func aRegionsCropKeepsTheMarkedSquareInEveryOrientation() async throws {
        let dir = try await Self.regionSet()
        let files = Self.marked.map { dir.appendingPathComponent($0) }
        let (results, out) = try await run("[ { crop: { aspect: \"1:1\", gravity: regions } } ]", on: files)
        let (smart, smartOut) = try await run("[ { crop: { aspect: \"1:1\", gravity: smart } } ]", on: files)
        for file in Self.marked {
            let item = try #require(results[file])
            #expect(item.width == 400 && item.height == 400, "\(file)")
            #expect(Self.rule(item.facts) == "regions", "\(file): \(item.facts["crop"] as Any)")
            let regions = try #require(MarkedRegions(fact: item.facts["regions"]), "\(file): \(item.facts)")
            #expect(regions.image == PixelSize(width: 400, height: 400) && regions.regions.count == 1 && regions.warnings.isEmpty, "\(file): \(regions)")
            let box = try #require(regions.regions.first?.box)
            #expect(abs(box.width - 60) <= 2 && abs(box.height - 60) <= 2, "\(file): \(box)")
            #expect(try Self.isRed(box, in: out, file), "\(file): the square is not at \(box) of the output")
            // The same crop by detail loses it (the check could fail).
            #expect(smart[file].map { Self.rule($0.facts) } == "smart")
            #expect(try !Self.isRed(box, in: smartOut, file), "\(file): smart kept the square too")
        }
        let iptc = try #require(MarkedRegions(fact: results["iptc-1.jpg"]?.facts["regions"])?.regions.first)
        #expect(iptc.standard == "iptc" && iptc.kind == "human" && iptc.isFace)
        let mwg = try #require(MarkedRegions(fact: results["mwg-6.jpg"]?.facts["regions"])?.regions.first)
        #expect(mwg.standard == "mwg" && mwg.kind == "focus" && mwg.name == "Square" && !mwg.isFace)
    }

    /// A fill scales the regions with the image; steps that move pixels carry them (an exact crop,
    /// a flip, a quarter turn, `auto_orient` after a decoder that does not turn), and a step that
    /// reshapes the image without carrying them makes them unused, with a warning.
    @Test func stepsCarryTheRegionsOrSayTheyCannot() async throws {
        let dir = try await Self.regionSet()
        let files = ["mwg-6.jpg", "iptc-1.jpg", "mwg-3.jpg"].map { dir.appendingPathComponent($0) }
        for processors in ["[ { resize: { width: 200, height: 200, mode: fill, gravity: regions } } ]",
                           "[ { crop: { x: 100, y: 40, width: 500, height: 360 } }, { resize: { width: 150, height: 150, mode: fill, gravity: regions } } ]",
                           "[ flip, { rotate: { degrees: 90 } }, flop, { crop: { aspect: \"1:1\", gravity: regions } } ]",
                           "[ { crop: { aspect: \"1:1\", gravity: regions } }, { rotate: { degrees: -90 } } ]"] {
            let (results, out) = try await run(processors, on: files)
            for file in files.map(\.lastPathComponent) {
                let item = try #require(results[file])
                let regions = try #require(MarkedRegions(fact: item.facts["regions"]), "\(processors) \(file): \(item.facts)")
                #expect(regions.image == PixelSize(width: item.width ?? 0, height: item.height ?? 0) && regions.warnings.isEmpty)
                let box = try #require(regions.regions.first?.box, "\(processors) \(file)")
                #expect(try Self.isRed(box, in: out, file), "\(processors) \(file): the square is not at \(box)")
            }
        }
        // Not turned by the decoder: regions map to the stored picture, then auto_orient turns them.
        for processors in ["[ auto_orient, { crop: { aspect: \"1:1\", gravity: regions } } ]", "[ { crop: { width: 300, height: 300, gravity: regions } }, auto_orient ]"] {
            let turned = ["mwg-5.jpg", "mwg-6.jpg", "mwg-8.jpg"].map { dir.appendingPathComponent($0) }
            let (results, out) = try await run(processors, on: turned, decoder: "{ imagemagick: { auto_orient: false } }")
            for file in turned.map(\.lastPathComponent) {
                let box = try #require(MarkedRegions(fact: results[file]?.facts["regions"])?.regions.first?.box, "\(processors) \(file)")
                #expect(try Self.isRed(box, in: out, file), "\(processors) \(file): the square is not at \(box)")
            }
        }
        // A pad reshapes without carrying: the crop after it does not use stale boxes.
        let (padded, _) = try await run("[ { crop: { x: 0, y: 0, width: 600, height: 400 } }, { pad: { width: 700, height: 400 } }, { crop: { aspect: \"1:1\", gravity: regions } } ]",
                                        on: [dir.appendingPathComponent("mwg-1.jpg")])
        let item = try #require(padded["mwg-1.jpg"])
        #expect(Self.rule(item.facts) == "smart", "\(item.facts)")
        let regions = try #require(MarkedRegions(fact: item.facts["regions"]))
        #expect(regions.regions.isEmpty && regions.warnings.contains { $0.contains("they are not used") }, "\(regions)")
    }

    /// `gravity: faces` takes a face a person marked over the detector (which then does not run):
    /// on a portrait whose real face dlib finds, a marked face elsewhere decides the crop. A marked
    /// region that is not a face does not.
    @Test func aMarkedFaceBeatsTheDetector() async throws {
        let photo = FaceCropTests.photos.appendingPathComponent("obama.jpg")
        guard FileManager.default.fileExists(atPath: photo.path) else {
            throw CommandError(message: "the face photos are missing at \(photo.path): `make test-deps` fetches them")
        }
        let dir = try Fixtures.temporaryDirectory("marked-face")
        let marked = dir.appendingPathComponent("marked.jpg"), focus = dir.appendingPathComponent("focus.jpg")
        for (file, type) in [(marked, "Face"), (focus, "Focus")] {
            try FileManager.default.copyItem(at: photo, to: file)
            // obama.jpg's face is at 366,136 (259 px); the marked one is at the lower left corner.
            let tagged = try await Command.run("/usr/bin/env", ["exiftool", "-q", "-overwrite_original",
                                                                "-XMP-mwg-rs:RegionInfo={RegionList=[{Area={X=0.12,Y=0.85,W=0.1,H=0.15,Unit=normalized},Type=\(type)}]}", file.path])
            #expect(tagged.status == 0, "\(tagged.stderr)")
        }
        let (results, _) = try await run("[ { resize: { width: 128, height: 128, mode: fill, gravity: faces } } ]", on: [marked, focus, photo])
        let byRegion = try #require(results["marked.jpg"])
        #expect(Self.rule(byRegion.facts) == "regions" && byRegion.facts["faces"] == nil, "\(byRegion.facts)")
        guard case .object(let crop)? = byRegion.facts["crop"], case .int(let x)? = crop["x"] else { Issue.record("no crop fact"); return }
        #expect(x == 0, "the window is at the left, where the marked face is: \(crop)")
        for file in ["focus.jpg", "obama.jpg"] {
            let facts = try #require(results[file]?.facts)
            #expect(Self.rule(facts) == "faces" && facts["faces"] != nil, "\(file): \(facts)")
        }
    }

    /// `redact` covers the faces people marked (and with `marked: all` every region), besides the
    /// detected ones; `marked: none` leaves them.
    @Test func redactCoversMarkedRegions() async throws {
        let dir = try await Self.regionSet()
        let files = ["face-6.jpg", "mwg-1.jpg"].map { dir.appendingPathComponent($0) }
        func redacted(_ options: String) async throws -> [String: Int] {
            let (results, _) = try await run("[ { redact: \(options) } ]", on: files)
            return results.mapValues { if case .int(let n)? = $0.facts["redacted"] { n } else { -1 } }
        }
        #expect(try await redacted("{}") == ["face-6.jpg": 1, "mwg-1.jpg": 0])
        #expect(try await redacted("{ marked: all }") == ["face-6.jpg": 1, "mwg-1.jpg": 1])
        #expect(try await redacted("{ marked: none }") == ["face-6.jpg": 0, "mwg-1.jpg": 0])
        // The noise around the square is pixelated: blocks of one colour where there was grain.
        let (_, out) = try await run("[ { redact: { block: 0.5 } } ]", on: [files[0]])
        let wand = Wand()
        try wand.read(Data(contentsOf: out.appendingPathComponent("face-6.png")), format: "PNG")
        // The square grown by the margin (0.3 of 60 px; twice above) starts at 452,214, in cells of 30 px.
        let row = try (0..<14).map { try wand.pixel(x: 455 + $0, y: 225).red }
        #expect(Set(row.map { ($0 * 255).rounded() }).count <= 3, "\(row)")
    }

    /// Metadata that is malformed, out of the picture, enormous or hostile: the item succeeds, the
    /// good regions are used, and the facts say what was wrong.
    @Test func badRegionMetadataIsIgnoredWithAWarning() async throws {
        let dir = try await Self.regionSet()
        let files = ["malformed.webp", "malformed-jpeg.jpg", "outside.jpg", "many.png", "entities.webp", "no-area.jpg"]
        let (results, out) = try await run("[ { crop: { aspect: \"1:1\", gravity: regions } } ]", on: files.map { dir.appendingPathComponent($0) })
        func warnings(_ file: String) -> [String] { MarkedRegions(fact: results[file]?.facts["regions"])?.warnings ?? [] }
        #expect(warnings("malformed.webp").contains { $0.contains("not well-formed XML") }, "\(warnings("malformed.webp"))")
        #expect(warnings("entities.webp").contains { $0.contains("DTD") }, "\(warnings("entities.webp"))")
        #expect(warnings("outside.jpg") == ["MWG region 1: outside the picture (x 1.65, y 2.45)"])
        #expect(warnings("many.png") == ["10000 regions; the first 256 are used"])
        #expect(warnings("no-area.jpg") == ["MWG region 1: no Area", "IPTC region 1: unit 'furlong', not 'relative' or 'pixel'"])
        // ImageMagick drops a malformed packet from a JPEG itself: no regions, nothing to warn of.
        #expect(results["malformed-jpeg.jpg"]?.facts["regions"] == nil)
        for file in ["malformed.webp", "malformed-jpeg.jpg", "entities.webp", "no-area.jpg"] {
            #expect(results[file].map { Self.rule($0.facts) } == "smart", "\(file)")
        }
        for file in ["outside.jpg", "many.png"] {
            let facts = try #require(results[file]?.facts)
            #expect(Self.rule(facts) == "regions", "\(file)")
            let box = try #require(MarkedRegions(fact: facts["regions"])?.regions.first?.box)
            #expect(try Self.isRed(box, in: out, file), "\(file): \(box)")
        }
    }

    /// The reader on packets as tools write them: every structure form RDF allows, names matched
    /// by namespace whatever the prefix, points, circles and polygons, and MWG regions drawn on a
    /// turned picture's stored pixels.
    @Test func theReaderTakesEveryFormRDFAllows() {
        func packet(_ body: String, namespaces: String = "") -> Data {
            Data(("<x:xmpmeta xmlns:x='adobe:ns:meta/'><rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'>"
                + "<rdf:Description rdf:about='' \(namespaces)>\(body)</rdf:Description></rdf:RDF></x:xmpmeta>").utf8)
        }
        let mwg = "xmlns:r='http://www.metadataworkinggroup.com/schemas/regions/' xmlns:a='http://ns.adobe.com/xmp/sType/Area#'"
        // Nested rdf:Description structures and attributes, with other prefixes than exiftool's.
        let nested = XMPRegions.read(packet("<r:Regions><rdf:Description><r:RegionList><rdf:Bag><rdf:li><rdf:Description r:Type='Face' r:Name='N'>"
                                            + "<r:Area a:x='0.5' a:y='0.5' a:w='0.2' a:h='0.4'/></rdf:Description></rdf:li>"
                                            + "<rdf:li rdf:parseType='Resource'><r:Type>Focus</r:Type><r:Area rdf:parseType='Resource'><a:x>0.1</a:x><a:y>0.2</a:y></r:Area></rdf:li>"
                                            + "</rdf:Bag></r:RegionList></rdf:Description></r:Regions>", namespaces: mwg),
                                     orientation: 1, stored: nil)
        #expect(nested.warnings.isEmpty)
        #expect(nested.regions.map { [$0.x, $0.y, $0.width, $0.height].map { ($0 * 1000).rounded() / 1000 } } == [[0.4, 0.3, 0.2, 0.4], [0.1, 0.2, 0, 0]])
        #expect(nested.regions.map(\.kind) == ["face", "focus"] && nested.regions.map(\.name) == ["N", nil])
        // A name in another namespace is not a region, whatever its prefix says.
        let impostor = XMPRegions.read(packet("<mwg-rs:Regions rdf:parseType='Resource'/>", namespaces: "xmlns:mwg-rs='http://example.com/'"),
                                       orientation: 1, stored: nil)
        #expect(impostor.regions.isEmpty && impostor.warnings.isEmpty)
        // Drawn on the stored 400x600 picture of an orientation-6 one (AppliedToDimensions says so):
        // its upper left quarter is the upright picture's upper right.
        let stored = XMPRegions.read(packet("<r:Regions rdf:parseType='Resource'><r:AppliedToDimensions xmlns:d='http://ns.adobe.com/xap/1.0/sType/Dimensions#' d:w='400' d:h='600'/>"
                                            + "<r:RegionList><rdf:Bag><rdf:li r:Type='Pet'><r:Area a:x='0.25' a:y='0.25' a:w='0.5' a:h='0.5'/></rdf:li></rdf:Bag></r:RegionList></r:Regions>",
                                            namespaces: mwg), orientation: 6, stored: PixelSize(width: 400, height: 600))
        #expect(stored.regions.map { [$0.x, $0.y, $0.width, $0.height] } == [[0.5, 0, 0.5, 0.5]], "\(stored)")
        // IPTC: a polygon's bounding box, a circle in pixels (its radius in the width's unit).
        let iptc = "xmlns:i='http://iptc.org/std/Iptc4xmpExt/2008-02-29/'"
        let shapes = XMPRegions.read(packet("<i:ImageRegion><rdf:Bag><rdf:li rdf:parseType='Resource'><i:RegionBoundary rdf:parseType='Resource'>"
                                            + "<i:rbShape>polygon</i:rbShape><i:rbUnit>relative</i:rbUnit><i:rbVertices><rdf:Seq>"
                                            + "<rdf:li i:rbX='0.1' i:rbY='0.2'/><rdf:li i:rbX='0.3' i:rbY='0.1'/><rdf:li i:rbX='0.2' i:rbY='0.4'/></rdf:Seq></i:rbVertices>"
                                            + "</i:RegionBoundary></rdf:li><rdf:li rdf:parseType='Resource'><i:RegionBoundary i:rbShape='circle' i:rbUnit='pixel' i:rbX='300' i:rbY='200' i:rbRx='60'/>"
                                            + "</rdf:li></rdf:Bag></i:ImageRegion>", namespaces: iptc), orientation: 1, stored: PixelSize(width: 600, height: 400))
        #expect(shapes.warnings.isEmpty, "\(shapes.warnings)")
        let boxes = shapes.regions.map { [$0.x, $0.y, $0.width, $0.height].map { ($0 * 1000).rounded() / 1000 } }
        #expect(boxes == [[0.1, 0.1, 0.2, 0.3], [0.4, 0.35, 0.2, 0.3]], "\(boxes)")
        // Not XML at all, and a packet over the size limit.
        #expect(XMPRegions.read(Data("not xml".utf8), orientation: 1, stored: nil).warnings.first?.contains("not well-formed") == true)
        #expect(XMPRegions.read(Data(count: XMPRegions.maxBytes + 1), orientation: 1, stored: nil).warnings.first?.contains("over") == true)
    }
}
