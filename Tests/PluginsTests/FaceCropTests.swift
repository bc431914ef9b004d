import Foundation
import MagickKit
@testable import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// `gravity: faces` and `detect_faces` through the real engine, ImageMagick and dlib, on a face set
/// built from public test photos (Fixtures/faces/make-face-set.py lists them: face_recognition
/// 1.3.0's test images from PyPI, fetched by `make test-deps`, and scikit-image's astronaut):
/// 54 faces in 22 images, among them groups, faces of 40 pixels, faces far off centre, every EXIF
/// orientation and a 12 MP photo.
@Suite struct FaceCropTests {
    let registry = BuiltIns.registry()

    /// One image of the set: its upright size and its faces' boxes (upright pixels).
    struct Truth: Decodable {
        let file: String
        let width: Int
        let height: Int
        let orientation: Int
        let faces: [[Int]]
    }

    /// Where `make test-deps` unpacks face_recognition's sdist.
    static let photos = Fixtures.packageRoot.appendingPathComponent(".build/test-data/face_recognition-1.3.0/tests/test_images")

    /// Builds the set into a fresh directory.
    static func faceSet() async throws -> (dir: URL, truth: [Truth]) {
        guard FileManager.default.fileExists(atPath: photos.appendingPathComponent("obama.jpg").path) else {
            throw CommandError(message: "the face photos are missing at \(photos.path): `make test-deps` fetches them")
        }
        let skimage = try await Command.run("/usr/bin/env", ["python3", "-c", "import os, skimage.data; print(os.path.dirname(skimage.data.__file__))"])
        let dir = try Fixtures.temporaryDirectory("face-set")
        let script = Fixtures.packageRoot.appendingPathComponent("Tests/PluginsTests/Fixtures/faces/make-face-set.py").path
        let made = try await Command.run("/usr/bin/env", ["python3", script, photos.path, skimage.stdout.trimmingCharacters(in: .whitespacesAndNewlines), dir.path])
        guard made.status == 0 else { throw CommandError(message: "make-face-set.py failed: \(made.stderr)") }
        let truth = try JSONDecoder().decode([Truth].self, from: Data(contentsOf: dir.appendingPathComponent("truth.json")))
        return (dir, truth)
    }

    func run(_ yaml: String, on files: [URL]) async throws -> [String: ItemResult] {
        let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "faces.yaml", registry: registry)
        #expect(diagnostics.filter { $0.severity == .error }.isEmpty, "\(diagnostics)")
        var options = RunOptions()
        options.outputDirectory = try Fixtures.temporaryDirectory("face-out").path
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry, options: options)
        let items = Results()
        let summary = try await runner.run(files.enumerated().map { Source(text: $0.element.path, index: $0.offset + 1) }.stream) {
            await items.add($0)
        }
        #expect(summary.failed == 0)
        return Dictionary(await items.all.map { (URL(fileURLWithPath: $0.source).lastPathComponent, $0) }) { first, _ in first }
    }

    static func fill(_ gravity: String, size: Int = 256) -> String {
        """
        decoder: imagemagick
        processors:
          - resize: { width: \(size), height: \(size), mode: fill, gravity: \(gravity) }
        encoder: jpeg
        """
    }

    /// The `crop` fact's window, in the pixels of the scaled image it was cut from, and that image's size.
    static func window(_ facts: ImageFacts) -> (rule: String, x: Int, y: Int, side: Int, ofWidth: Int)? {
        guard case .object(let crop)? = facts["crop"], let rule = crop["rule"]?.string,
              case .int(let x)? = crop["x"], case .int(let y)? = crop["y"], case .int(let w)? = crop["width"],
              case .int(let of)? = crop["of_width"] else { return nil }
        return (rule, x, y, w, of)
    }

    /// Faces kept whole by each item's crop, of the faces it could keep: all of them when one
    /// square of the image's short side holds them all, else the largest.
    static func kept(_ results: [String: ItemResult], _ truth: [Truth]) -> (kept: Int, counted: Int, missed: [String]) {
        var kept = 0, counted = 0
        var missed: [String] = []
        for image in truth {
            let side = min(image.width, image.height)
            let union = (image.faces.map { $0[0] }.min()!, image.faces.map { $0[1] }.min()!,
                         image.faces.map { $0[0] + $0[2] }.max()!, image.faces.map { $0[1] + $0[3] }.max()!)
            let holdsAll = union.2 - union.0 <= side && union.3 - union.1 <= side
            let faces = holdsAll ? image.faces : [image.faces.max { $0[2] * $0[3] < $1[2] * $1[3] }!]
            counted += faces.count
            if image.width == image.height {  // already square: scaled, not cropped
                kept += faces.count
                continue
            }
            guard let facts = results[image.file]?.facts, let window = window(facts) else {
                missed.append("\(image.file): no crop fact")
                continue
            }
            let factor = Double(window.ofWidth) / Double(image.width)
            for face in faces {
                // A pixel of slack for rounding at the scaled size.
                let inside = Double(face[0]) * factor >= Double(window.x) - 1 && Double(face[1]) * factor >= Double(window.y) - 1
                    && Double(face[0] + face[2]) * factor <= Double(window.x + window.side) + 1
                    && Double(face[1] + face[3]) * factor <= Double(window.y + window.side) + 1
                if inside { kept += 1 } else { missed.append("\(image.file): \(face) (window \(window))") }
            }
        }
        return (kept, counted, missed)
    }

    /// At least 95% of the faces a 1:1 fill could keep are kept whole by `gravity: faces`; the same
    /// crop by `smart` is reported beside it.
    @Test func aSquareFillKeepsTheFacesOfTheSet() async throws {
        let (dir, truth) = try await Self.faceSet()
        #expect(truth.count >= 20 && truth.flatMap(\.faces).count >= 50)
        let files = truth.map { dir.appendingPathComponent($0.file) }
        let faces = try await run(Self.fill("faces"), on: files)
        let smart = try await run(Self.fill("smart"), on: files)
        let byFaces = Self.kept(faces, truth), bySmart = Self.kept(smart, truth)
        print("faces crop: \(byFaces.kept)/\(byFaces.counted) faces kept whole; smart crop: \(bySmart.kept)/\(bySmart.counted)")
        #expect(Double(byFaces.kept) >= 0.95 * Double(byFaces.counted), "missed: \(byFaces.missed)")
        for image in truth where image.width != image.height {
            let facts = try #require(faces[image.file]?.facts)
            #expect(Self.window(facts)?.rule == "faces", "\(image.file): \(facts["crop"] as Any)")
        }
    }

    /// Every EXIF orientation: the faces the detector reports are where an upright view shows them.
    @Test func facesAreFoundWhereTheUprightImageShowsThem() async throws {
        let (dir, truth) = try await Self.faceSet()
        let turned = truth.filter { $0.orientation != 1 }
        #expect(Set(turned.map(\.orientation)) == Set(2...8))
        let results = try await run("""
            decoder: imagemagick
            processors: [ detect_faces ]
            encoder: jpeg
            """, on: turned.map { dir.appendingPathComponent($0.file) })
        for image in turned {
            let facts = try #require(results[image.file]?.facts)
            let scan = try #require(FaceScan(fact: facts["faces"], size: PixelSize(width: image.width, height: image.height)),
                                    "\(image.file): \(facts["faces"] as Any)")
            for face in image.faces {
                let best = scan.faces.map { Self.overlap($0, face) }.max() ?? 0
                #expect(best >= 0.5, "\(image.file) (orientation \(image.orientation)): \(face) not among \(scan.faces)")
            }
        }
    }

    /// A crop at the corner of an upright image is the same picture for every EXIF orientation (the
    /// transverse one, 7, once left a canvas offset and the crop came out 1x1).
    @Test func aCropAfterEveryOrientationCutsTheUprightPicture() async throws {
        let (dir, truth) = try await Self.faceSet()
        let turned = truth.filter { $0.orientation != 1 }
        let results = try await run("""
            decoder: imagemagick
            processors: [ { crop: { x: 40, y: 180, width: 200, height: 200 } }, detect_faces ]
            encoder: png
            """, on: turned.map { dir.appendingPathComponent($0.file) })
        for image in turned {
            let item = try #require(results[image.file])
            #expect(item.width == 200 && item.height == 200, "\(image.file): \(item.width)x\(item.height)")
            // The obama3 face at 60,200 (150 px) is at 20,20 of the crop.
            let scan = FaceScan(fact: item.facts["faces"], size: PixelSize(width: 200, height: 200))
            #expect(scan?.faces.contains { Self.overlap($0, [20, 20, 150, 150]) >= 0.5 } == true, "\(image.file): \(scan?.faces as Any)")
        }
    }

    /// The grey copy a scan reads is the same picture whoever holds the pixels (a wand, or 8-bit
    /// rows), smaller or larger, and is made without copying the image first.
    @Test func theScannedGreyCopyIsTheSamePictureForEveryStorage() throws {
        let wand = Wand()
        try wand.readBuiltIn("radial-gradient:white-navy", size: (300, 200))
        let rows = PipelineImage(pixels: RGB8Pixels(width: 300, height: 200, hasAlpha: false, bytes: try wand.rgbBytes()), sourceFormat: "PNG")
        let held = PipelineImage(taking: wand.clone(), sourceFormat: "PNG")
        for (width, height) in [(150, 100), (97, 61), (600, 400), (300, 200)] {
            let a = try held.greyScaled(width: width, height: height), b = try rows.greyScaled(width: width, height: height)
            #expect(a.count == width * height && b.count == width * height)
            let difference = zip(a, b).map { abs(Int($0) - Int($1)) }.reduce(0, +) / (width * height)
            #expect(difference <= 3, "\(width)x\(height): mean difference \(difference)")
            // Bright in the middle, dark at the corners: the picture, not noise.
            #expect(a[(height / 2) * width + width / 2] > a[0] + 100, "\(width)x\(height)")
        }
        #expect(held.width == 300 && held.height == 200, "the image itself is only read")
    }

    /// The scan's scale: `min_face` to the 80-pixel window, through the decoder's reduction (by
    /// area, so a header that gives the size turned counts the same), at most 2x, at most the
    /// megapixels.
    @Test func theScanIsScaledSoTheSmallestFaceFillsTheWindow() {
        let detector = FaceDetector(megapixels: 64, minFace: 100)
        #expect(detector.scale(for: PixelSize(width: 300, height: 400), source: PixelSize(width: 400, height: 300)) == 0.8)
        #expect(detector.scale(for: PixelSize(width: 500, height: 375), source: PixelSize(width: 4000, height: 3000)) == 2, "reduced 8x: 12.5 px faces, at most 2x")
        #expect(FaceDetector().scale(for: PixelSize(width: 4000, height: 3000), source: nil) == (1.0 / 12).squareRoot())
        #expect(FaceDetector().scale(for: PixelSize(width: 200, height: 150), source: nil) == 2)
    }

    /// Intersection over union of a found box and a true one.
    static func overlap(_ box: FocusBox, _ face: [Int]) -> Double {
        let w = max(0, min(box.x + box.width, face[0] + face[2]) - max(box.x, face[0]))
        let h = max(0, min(box.y + box.height, face[1] + face[3]) - max(box.y, face[1]))
        let inter = Double(w * h)
        return inter / (Double(box.area + face[2] * face[3]) - inter)
    }

    /// No face: the crop falls back to `smart`, and the facts say so (with an empty list of faces).
    @Test func withoutAFaceTheCropIsSmartAndSaysSo() async throws {
        let dir = try Fixtures.temporaryDirectory("no-face")
        let file = dir.appendingPathComponent("plasma.jpg")
        try Fixtures.image("plasma:", width: 900, height: 600, format: "JPEG", quality: 90).write(to: file)
        let results = try await run(Self.fill("faces"), on: [file])
        let facts = try #require(results["plasma.jpg"]?.facts)
        #expect(Self.window(facts)?.rule == "smart")
        #expect(FaceScan(fact: facts["faces"], size: PixelSize(width: 900, height: 600))?.faces == [])
    }

    /// A 50 MP photo: the detector scans a copy of at most a megapixel, whatever the source.
    @Test func aFiftyMegapixelPhotoIsScannedReduced() async throws {
        let dir = try Fixtures.temporaryDirectory("fifty-mp")
        let file = dir.appendingPathComponent("large.jpg")
        try Fixtures.image("gradient:tan-navy", width: 8000, height: 6250, format: "JPEG", quality: 80).write(to: file)
        let results = try await run("""
            decoder: imagemagick
            processors:
              - detect_faces
              - resize: { width: 400, height: 400, mode: fill, gravity: faces }
            encoder: jpeg
            """, on: [file])
        let facts = try #require(results["large.jpg"]?.facts)
        guard case .object(let fields)? = facts["faces"], let scanned = fields["scanned"]?.string else {
            Issue.record("no faces fact: \(facts)")
            return
        }
        let sides = scanned.split(separator: "x").compactMap { Int($0) }
        #expect(sides.count == 2 && sides[0] * sides[1] <= 1_000_000, "\(scanned)")
        #expect(Self.window(facts)?.rule == "smart")
    }

    /// `detect_faces` changes no pixel, and a faces crop after it on the same image uses its faces.
    @Test func detectFacesOnlyAddsFactsAndTheCropUsesThem() throws {
        let image = try PipelineImage(taking: { let w = Wand(); try w.readBuiltIn("plasma:", size: (300, 200)); return w }(), sourceFormat: "PNG")
        let detect = try DetectFaces.plugin.makeProcessor(DetectFaces.plugin.options([:]))
        let found = try detect.process(image)
        #expect(found.width == 300 && found.height == 200 && found.storage === image.storage)
        var planted = found
        let box = FocusBox(x: 220, y: 60, width: 60, height: 60, score: 2)
        planted.facts["faces"] = FaceScan(faces: [box], image: PixelSize(width: 300, height: 200),
                                          scanned: PixelSize(width: 300, height: 200), smallest: 72).fact
        let crop = try Crop.plugin.makeProcessor(Crop.plugin.options(["aspect": .string("1:1"), "gravity": .string("faces")]))
        let cropped = try crop.process(planted)
        #expect(cropped.width == 200 && cropped.height == 200)
        let window = try #require(Self.window(cropped.facts))
        #expect(window.rule == "faces" && window.x == 100, "the window holds the planted face at 220-280: \(window)")
    }

    /// OpenCV's Haar cascades (Fixtures/faces/cascade-faces.py, Debian's python3-opencv): the
    /// faces they find in each file, in upright pixels.
    static func cascadeFaces(_ files: [URL]) async throws -> [String: [[Int]]] {
        let script = Fixtures.packageRoot.appendingPathComponent("Tests/PluginsTests/Fixtures/faces/cascade-faces.py").path
        let found = try await Command.run("/usr/bin/python3", [script] + files.map(\.path))
        guard found.status == 0 else { throw CommandError(message: "cascade-faces.py failed: \(found.stderr)") }
        let boxes = try JSONDecoder().decode([String: [[Int]]].self, from: Data(found.stdout.utf8))
        return Dictionary(uniqueKeysWithValues: boxes.map { (URL(fileURLWithPath: $0.key).lastPathComponent, $0.value) })
    }

    /// Whether any of `found` covers half of a true face (intersection over union).
    static func finds(_ found: [[Int]], _ face: [Int]) -> Bool {
        found.contains { overlap(FocusBox(x: $0[0], y: $0[1], width: $0[2], height: $0[3]), face) >= 0.3 }
    }

    /// `redact`, in both modes, leaves no face that dlib's detector or OpenCV's cascades find
    /// again, on every image of the set (the cascades find most of them before).
    @Test(arguments: ["pixelate", "blur"])
    func redactedFacesAreFoundByNeitherDetector(mode: String) async throws {
        let (dir, truth) = try await Self.faceSet()
        let before = try await Self.cascadeFaces(truth.map { dir.appendingPathComponent($0.file) })
        let seen = truth.flatMap { image in image.faces.filter { Self.finds(before[image.file] ?? [], $0) } }.count
        #expect(seen >= truth.flatMap(\.faces).count / 2, "the cascades find \(seen) faces before: a check they could not fail")
        let out = try Fixtures.temporaryDirectory("redacted")
        var options = RunOptions()
        options.outputDirectory = out.path
        let (pipeline, _) = PipelineFile.parse(text: """
            decoder: imagemagick
            processors: [ { redact: { mode: \(mode) } } ]
            encoder: png
            output: { name: "{stem}.{ext}" }
            """, file: "redact.yaml", registry: registry)
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry, options: options)
        let items = Results()
        let summary = try await runner.run(truth.enumerated().map { Source(text: dir.appendingPathComponent($0.element.file).path, index: $0.offset + 1) }.stream) {
            await items.add($0)
        }
        #expect(summary.ok == truth.count)
        for item in await items.all {
            let name = URL(fileURLWithPath: item.source).lastPathComponent
            let image = try #require(truth.first { $0.file == name })
            let count: Int? = if case .int(let n)? = item.facts["redacted"] { n } else { nil }
            #expect((count ?? 0) >= image.faces.count, "\(name): \(count as Any) redacted of \(image.faces.count) faces")
        }
        let redacted = truth.map { out.appendingPathComponent(($0.file as NSString).deletingPathExtension + ".png") }
        let after = try await Self.cascadeFaces(redacted)
        let again = try await run("""
            decoder: imagemagick
            processors: [ { detect_faces: { face_threshold: -0.3 } } ]
            encoder: png
            """, on: redacted)
        for image in truth {
            let png = (image.file as NSString).deletingPathExtension + ".png"
            let dlib = FaceScan(fact: again[png]?.facts["faces"], size: PixelSize(width: image.width, height: image.height))?.faces ?? []
            for face in image.faces {
                #expect(!Self.finds(after[png] ?? [], face), "\(png): OpenCV still finds \(face) after \(mode)")
                #expect(!Self.finds(dlib.map { [$0.x, $0.y, $0.width, $0.height] }, face), "\(png): dlib still finds \(face) after \(mode)")
            }
        }
    }
}
