import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Golden checks for every processor: the output's size, a sampled pixel, and alpha where a shape cuts.
@Suite struct ProcessorCatalogueTests {
    typealias RGBA = (red: Double, green: Double, blue: Double, alpha: Double)

    func run(_ plugin: Plugin, _ options: [String: OptionValue] = [:], on image: PipelineImage) throws -> PipelineImage {
        try plugin.makeProcessor(plugin.options(options)).process(image)
    }

    /// A solid `color` image.
    func solid(_ width: Int, _ height: Int, _ color: String) throws -> PipelineImage {
        PipelineImage(taking: try Wand.canvas(width: width, height: height, color: color), sourceFormat: "PNG")
    }

    /// `base` with `patch` drawn at x, y.
    func composed(_ base: (Int, Int, String), patch: (Int, Int, String), at x: Int, _ y: Int) throws -> PipelineImage {
        let wand = try Wand.canvas(width: base.0, height: base.1, color: base.2)
        try wand.composite(try Wand.canvas(width: patch.0, height: patch.1, color: patch.2), x: x, y: y)
        return PipelineImage(taking: wand, sourceFormat: "PNG")
    }

    func pixel(_ image: PipelineImage, _ x: Int, _ y: Int) throws -> RGBA {
        try image.withCopy { try $0.pixel(x: x, y: y) }
    }

    func close(_ a: RGBA, _ b: RGBA, within tolerance: Double = 0.02) -> Bool {
        abs(a.red - b.red) <= tolerance && abs(a.green - b.green) <= tolerance && abs(a.blue - b.blue) <= tolerance
            && abs(a.alpha - b.alpha) <= tolerance
    }

    let red: RGBA = (1, 0, 0, 1), blue: RGBA = (0, 0, 1, 1), white: RGBA = (1, 1, 1, 1), clear: RGBA = (0, 0, 0, 0)

    // MARK: Size and geometry

    @Test func resizeFillDownCropsSmallImagesToTheAspectWithoutEnlarging() throws {
        let image = try solid(100, 50, "red")
        let out = try run(Resize.plugin, ["width": .int(200), "height": .int(200), "mode": .string("fill_down")], on: image)
        #expect((out.width, out.height) == (50, 50))
        let large = try run(Resize.plugin, ["width": .int(20), "height": .int(20), "mode": .string("fill_down")], on: image)
        #expect((large.width, large.height) == (20, 20))
    }

    @Test func resizeFillKeepsThePartTheGravityNames() throws {
        // Top third red, the rest blue: north keeps red, south keeps blue.
        let image = try composed((60, 180, "blue"), patch: (60, 60, "red"), at: 0, 0)
        let north = try run(Resize.plugin, ["width": .int(30), "height": .int(30), "mode": .string("fill"), "gravity": .string("north")], on: image)
        let south = try run(Resize.plugin, ["width": .int(30), "height": .int(30), "mode": .string("fill"), "gravity": .string("south")], on: image)
        #expect((north.width, north.height) == (30, 30))
        #expect(try close(pixel(north, 15, 5), red))
        #expect(try close(pixel(south, 15, 25), blue))
    }

    @Test func resizeDPRMultipliesTheBox() throws {
        let out = try run(Resize.plugin, ["width": .int(100), "dpr": .number(2)], on: try solid(1000, 500, "red"))
        #expect((out.width, out.height) == (200, 100))
    }

    @Test func smartGravityFindsTheDetail() throws {
        // Flat grey on the left, a checkerboard on the right: a square smart crop takes the right.
        let wand = try Wand.canvas(width: 400, height: 200, color: "gray50")
        let pattern = Wand()
        try pattern.readBuiltIn("pattern:checkerboard", size: (200, 200))
        try pattern.scale(width: 200, height: 200)
        try wand.composite(pattern, x: 200, y: 0)
        let origin = try Gravity.smart.cropOrigin(PixelSize(width: 200, height: 200), in: wand)
        #expect(origin.x >= 190 && origin.y == 0, "\(origin)")
        // Mirrored, it goes left; a uniform image crops at the centre.
        try wand.flop()
        #expect(try Gravity.smart.cropOrigin(PixelSize(width: 200, height: 200), in: wand).x <= 10)
        let flat = try Wand.canvas(width: 400, height: 200, color: "gray50")
        #expect(try Gravity.smart.cropOrigin(PixelSize(width: 200, height: 200), in: flat).x == 100)
    }

    @Test func cropRectangleAspectAndGravity() throws {
        let image = try composed((200, 100, "white"), patch: (10, 10, "red"), at: 40, 30)
        let rect = try run(Crop.plugin, ["x": .int(40), "y": .int(30), "width": .int(50), "height": .int(20)], on: image)
        #expect((rect.width, rect.height) == (50, 20))
        #expect(try close(pixel(rect, 0, 0), red) && close(pixel(rect, 20, 15), white))
        let wide = try run(Crop.plugin, ["aspect": .string("16:9")], on: try solid(400, 400, "red"))
        #expect((wide.width, wide.height) == (400, 225))
        let west = try run(Crop.plugin, ["width": .int(100), "height": .int(100), "gravity": .string("west")], on: image)
        #expect(try close(pixel(west, 45, 35), red))
        // A rectangle running off the edge is clipped; one starting outside fails.
        let clipped = try run(Crop.plugin, ["x": .int(150), "y": .int(0), "width": .int(100), "height": .int(100)], on: image)
        #expect((clipped.width, clipped.height) == (50, 100))
        #expect(throws: PipelineError(.processFailed, "the crop origin 300,0 is outside the 200x100 image")) {
            try run(Crop.plugin, ["x": .int(300), "y": .int(0), "width": .int(10), "height": .int(10)], on: image)
        }
    }

    @Test func cropOptionsAreChecked() {
        #expect(throws: PipelineError("invalid_option", "'aspect' must be W:H with positive numbers, like 16:9; got '16x9'")) {
            try Crop.plugin.makeProcessor(Crop.plugin.options(["aspect": .string("16x9")]))
        }
        #expect(throws: PipelineError("invalid_option", "set both 'x' and 'y', or neither")) {
            try Crop.plugin.makeProcessor(Crop.plugin.options(["x": .int(1), "width": .int(5)]))
        }
    }

    @Test func trimRemovesUniformBorders() throws {
        let image = try composed((200, 200, "white"), patch: (50, 40, "red"), at: 60, 70)
        let out = try run(Trim.plugin, on: image)
        #expect((out.width, out.height) == (50, 40))
        #expect(try close(pixel(out, 0, 0), red))
    }

    @Test func roundedCornersAreTransparentWithABorder() throws {
        let out = try run(RoundedCorners.plugin, ["radius": .int(20), "border_width": .int(4), "border_color": .string("blue")],
                          on: try solid(100, 80, "red"))
        #expect((out.width, out.height) == (100, 80) && out.hasAlpha)
        #expect(try pixel(out, 0, 0).alpha < 0.01 && pixel(out, 99, 79).alpha < 0.01)
        #expect(try close(pixel(out, 50, 40), red))
        #expect(try close(pixel(out, 50, 1), blue, within: 0.1))
    }

    @Test func circleCropsToASquareAndCutsTheCorners() throws {
        let out = try run(Circle.plugin, ["border_width": .int(6), "border_color": .string("blue")], on: try solid(120, 80, "red"))
        #expect((out.width, out.height) == (80, 80) && out.hasAlpha)
        #expect(try pixel(out, 2, 2).alpha < 0.01 && pixel(out, 77, 77).alpha < 0.01)
        #expect(try close(pixel(out, 40, 40), red))
        #expect(try close(pixel(out, 40, 2), blue, within: 0.1))
    }

    @Test func rotateFlipFlop() throws {
        let image = try composed((100, 50, "white"), patch: (10, 10, "red"), at: 0, 0)
        let turned = try run(Rotate.plugin, ["degrees": .number(90)], on: image)
        #expect((turned.width, turned.height) == (50, 100))
        #expect(try close(pixel(turned, 45, 5), red))  // top-left went to the top-right
        let tilted = try run(Rotate.plugin, ["degrees": .number(45)], on: image)
        #expect(try tilted.width > 100 && tilted.hasAlpha && pixel(tilted, 0, 0).alpha < 0.01)
        #expect(try close(pixel(run(Flip.plugin, on: image), 5, 45), red))
        #expect(try close(pixel(run(Flop.plugin, on: image), 95, 5), red))
    }

    /// A JPEG of `width` x `height` with an EXIF APP1 segment giving `orientation` (6 = turn 90° clockwise).
    static func jpegWithOrientation(_ width: Int, _ height: Int, orientation: UInt8) throws -> Data {
        let plain = try Wand.canvas(width: width, height: height, color: "red").encode(format: "JPEG")
        let tiff: [UInt8] = [0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8,  // big-endian TIFF header, IFD at 8
                             0, 1,  // one entry: Orientation, SHORT, 1, value
                             0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, orientation, 0, 0,
                             0, 0, 0, 0]  // no next IFD
        let payload = Array("Exif".utf8) + [0, 0] + tiff
        let length = payload.count + 2
        let app1: [UInt8] = [0xFF, 0xE1, UInt8(length >> 8), UInt8(length & 0xFF)] + payload
        return Data(plain.prefix(2)) + Data(app1) + Data(plain.dropFirst(2))
    }

    @Test func autoOrientTurnsByExif() throws {
        let data = try Self.jpegWithOrientation(60, 40, orientation: 6)
        let decoder = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["auto_orient": .bool(false)]))
        let image = try decoder.decode(LoadedData(data: data), hint: DecodeHint())
        #expect((image.width, image.height) == (60, 40))
        let upright = try run(AutoOrient.plugin, on: image)
        #expect((upright.width, upright.height) == (40, 60))
        // The decoder does the same by default.
        let decoded = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options())
            .decode(LoadedData(data: data), hint: DecodeHint())
        #expect((decoded.width, decoded.height) == (40, 60))
    }

    @Test func padToASizeByGravityAndByMargins() throws {
        let image = try solid(100, 50, "red")
        let out = try run(Pad.plugin, ["width": .int(200), "height": .int(200), "gravity": .string("north")], on: image)
        #expect((out.width, out.height) == (200, 200))
        #expect(try close(pixel(out, 100, 10), red))
        #expect(try pixel(out, 100, 150).alpha < 0.01)  // transparent by default
        let margins = try run(Pad.plugin, ["top": .int(10), "left": .int(5), "background": .string("blue")], on: image)
        #expect((margins.width, margins.height) == (105, 60))
        #expect(try close(pixel(margins, 2, 2), blue) && close(pixel(margins, 5, 10), red))
        let extended = try run(Pad.extendPlugin, ["width": .int(120)], on: image)
        #expect((extended.width, extended.height) == (120, 50))
    }

    @Test func borderAndBackground() throws {
        let framed = try run(Border.plugin, ["width": .int(5), "color": .string("blue")], on: try solid(100, 50, "red"))
        #expect((framed.width, framed.height) == (110, 60))
        #expect(try close(pixel(framed, 2, 2), blue) && close(pixel(framed, 50, 30), red))
        let transparent = try solid(20, 20, "none")
        let flattened = try run(Background.plugin, ["color": .string("red")], on: transparent)
        #expect(try !flattened.hasAlpha && close(pixel(flattened, 10, 10), red))
    }

    @Test func watermarkIsPlacedScaledAndBlended() throws {
        let dir = try Fixtures.temporaryDirectory()
        let file = dir.appendingPathComponent("mark.png")
        try (try Wand.canvas(width: 40, height: 20, color: "red")).encode(format: "PNG").write(to: file)
        let base = try solid(200, 100, "white")
        let solidMark = try run(Watermark.plugin, ["file": .string(file.path), "opacity": .number(1)], on: base)
        #expect(try close(pixel(solidMark, 170, 80), red) && close(pixel(solidMark, 140, 80), white))
        let faint = try run(Watermark.plugin, ["file": .string(file.path), "opacity": .number(0.5)], on: base)
        #expect(try close(pixel(faint, 170, 80), (1, 0.5, 0.5, 1), within: 0.03))
        let scaled = try run(Watermark.plugin, ["file": .string(file.path), "opacity": .number(1), "scale": .number(0.5),
                                                "gravity": .string("northwest"), "margin": .int(0)], on: base)
        #expect(try close(pixel(scaled, 95, 45), red) && close(pixel(scaled, 105, 55), white))
        // A missing or non-image file is refused when the pipeline is loaded.
        #expect(throws: PipelineError.self) {
            try Watermark.plugin.makeProcessor(Watermark.plugin.options(["file": .string(dir.appendingPathComponent("none.png").path)]))
        }
        let text = dir.appendingPathComponent("mark.txt")
        try Data("not an image".utf8).write(to: text)
        #expect(throws: PipelineError("invalid_option", "the watermark file '\(text.path)' is not usable: not_an_image: the content is text, not an image")) {
            try Watermark.plugin.makeProcessor(Watermark.plugin.options(["file": .string(text.path)]))
        }
    }

    // MARK: Filters and colour

    @Test func blurSoftensAnEdgeAndSharpeningSteepensIt() throws {
        let step = try composed((100, 10, "gray30"), patch: (50, 10, "gray70"), at: 50, 0)
        let blurred = try run(Blur.plugin, ["sigma": .number(4)], on: step)
        #expect(try pixel(blurred, 49, 5).red > 0.35 && pixel(blurred, 50, 5).red < 0.65)
        for plugin in [Sharpen.plugin, Unsharp.plugin] {
            let sharp = try run(plugin, ["sigma": .number(2)], on: step)
            #expect(try pixel(sharp, 48, 5).red < 0.29, "\(plugin.spec.name)")
            #expect(try pixel(sharp, 51, 5).red > 0.71, "\(plugin.spec.name)")
        }
    }

    @Test func colourOperations() throws {
        let redImage = try solid(10, 10, "red")
        let grey = try pixel(try run(Grayscale.plugin, on: redImage), 5, 5)
        #expect(abs(grey.red - grey.green) < 0.01 && abs(grey.green - grey.blue) < 0.01 && grey.red > 0.1)
        let sepia = try pixel(try run(Sepia.plugin, on: try solid(10, 10, "gray60")), 5, 5)
        #expect(sepia.red > sepia.green && sepia.green > sepia.blue)
        let darker = try pixel(try run(Modulate.plugin, ["brightness": .number(50)], on: try solid(10, 10, "white")), 5, 5)
        #expect(abs(darker.red - 0.5) < 0.05)
        let unsaturated = try pixel(try run(Modulate.plugin, ["saturation": .number(0)], on: redImage), 5, 5)
        #expect(abs(unsaturated.red - unsaturated.blue) < 0.01)
        let tinted = try pixel(try run(Tint.plugin, ["color": .string("blue"), "amount": .number(0.5)], on: try solid(10, 10, "white")), 5, 5)
        #expect(close(tinted, (0.5, 0.5, 1, 1), within: 0.03))
        #expect(try close(pixel(run(Negate.plugin, on: redImage), 5, 5), (0, 1, 1, 1)))
        let dark = try pixel(try run(Contrast.plugin, on: try solid(10, 10, "gray25")), 5, 5)
        let light = try pixel(try run(Contrast.plugin, on: try solid(10, 10, "gray75")), 5, 5)
        #expect(dark.red < 0.23 && light.red > 0.77)
        let flatter = try pixel(try run(Contrast.plugin, ["amount": .number(-3)], on: try solid(10, 10, "gray25")), 5, 5)
        #expect(flatter.red > 0.27)
    }

    @Test func stripKeepsTheColourProfileUnlessToldOtherwise() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let path = dir.appendingPathComponent("tagged.jpg").path
        let profile = "/usr/share/color/icc/ghostscript/srgb.icc"
        let made = try await Command.run("/usr/bin/convert", ["-size", "30x20", "xc:red", "-profile", profile,
                                                              "-set", "comment", "secret", path])
        try #require(made.status == 0, "\(made.stderr)")
        let decoder = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["to_srgb": .bool(false)]))
        let image = try decoder.decode(LoadedData(data: try Data(contentsOf: URL(fileURLWithPath: path))), hint: DecodeHint())
        let keep = try JPEGEncoder.plugin.makeEncoder(JPEGEncoder.plugin.options())
        for (keepICC, expected) in [(true, true), (false, false)] {
            let stripped = try run(Strip.plugin, ["keep_icc": .bool(keepICC)], on: image)
            let out = dir.appendingPathComponent("out-\(keepICC).jpg").path
            try keep.encode(stripped).write(to: URL(fileURLWithPath: out))
            let facts = try await Command.run("/usr/bin/identify", ["-format", "%c|%[profiles]", out])
            #expect(!facts.stdout.contains("secret"), "\(facts.stdout)")
            #expect(facts.stdout.contains("icc") == expected, "\(facts.stdout)")
        }
    }

    @Test func magickRunsEveryVettedOperation() throws {
        let image = try PipelineImage(taking: { let w = Wand(); try w.readBuiltIn("plasma:", size: (40, 30)); return w }(), sourceFormat: "PNG")
        for operation in MagickOperation.operations {
            let out = try run(MagickOperation.plugin, ["operation": .string(operation.name)], on: image)
            #expect(out.width == 40 && out.height == (operation.name == "wave" ? 50 : 30), "\(operation.name)")
        }
        let posterized = try run(MagickOperation.plugin, ["operation": .string("posterize"), "levels": .number(2)], on: image)
        let value = try pixel(posterized, 10, 10).red
        #expect(value < 0.01 || value > 0.99)
    }

    @Test func magickRefusesArgumentsOfOtherOperations() {
        #expect(throws: PipelineError("invalid_option", "'levels' is not an argument of swirl; swirl takes degrees")) {
            try MagickOperation.plugin.makeProcessor(MagickOperation.plugin.options(["operation": .string("swirl"), "levels": .number(3)]))
        }
        #expect(throws: PipelineError("invalid_option", "'radius' of oil_paint must be in 0...20; got 50")) {
            try MagickOperation.plugin.makeProcessor(MagickOperation.plugin.options(["operation": .string("oil_paint"), "radius": .number(50)]))
        }
    }

    @Test func identifiersFollowOptions() throws {
        func id(_ plugin: Plugin, _ options: [String: OptionValue]) throws -> String {
            try plugin.makeProcessor(plugin.options(options)).identifier
        }
        #expect(try id(Blur.plugin, ["sigma": .number(2)]) != id(Blur.plugin, ["sigma": .number(3)]))
        #expect(try id(Crop.plugin, ["aspect": .string("1:1")]) != id(Crop.plugin, ["aspect": .string("1:1"), "gravity": .string("smart")]))
        #expect(try id(Resize.plugin, ["width": .int(10), "mode": .string("fill")])
            != id(Resize.plugin, ["width": .int(10), "mode": .string("fill"), "gravity": .string("smart")]))
        #expect(try id(MagickOperation.plugin, ["operation": .string("swirl")]) != id(MagickOperation.plugin, ["operation": .string("swirl"), "degrees": .number(10)]))
    }

    @Test func everyProcessorRunsOnEachFrameOfAnAnimation() throws {
        let wand = Wand()
        for color in ["red", "lime", "blue"] { try wand.readBuiltIn("xc:\(color)", size: (60, 40)) }
        let animation = PipelineImage(taking: wand, sourceFormat: "GIF")
        #expect(animation.frameCount == 3)
        let out = try run(Resize.plugin, ["width": .int(30)], on: animation)
        #expect(out.frameCount == 3 && (out.width, out.height) == (30, 20))
        let frames = try out.withCopy { $0.frames().map { ($0.width, $0.height) } }
        #expect(frames.allSatisfy { $0 == (30, 20) })
    }
}
