import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Every encoder written and every accepted format decoded, checked by ImageMagick's own
/// `identify` (not our wrappers); encoder options; animations; hostile inputs with their exact kinds.
@Suite struct FormatCatalogueTests {
    let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)

    func decode(_ data: Data, _ options: [String: OptionValue] = [:]) throws -> PipelineImage {
        try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(options)).decode(LoadedData(data: data), hint: DecodeHint())
    }

    func failure(_ data: Data, _ options: [String: OptionValue] = [:]) -> PipelineError? {
        do { _ = try decode(data, options); return nil } catch { return error as? PipelineError }
    }

    /// Writes `data` to a temporary file and asks `identify` for `format` (an -format string).
    func identify(_ data: Data, _ format: String, name: String = "out") async throws -> String {
        let path = try Fixtures.temporaryDirectory().appendingPathComponent(name).path
        try data.write(to: URL(fileURLWithPath: path))
        let result = try await Command.run("/usr/bin/identify", ["-format", format, path])
        try #require(result.status == 0, "\(result.stderr)")
        return result.stdout
    }

    func encode(_ plugin: Plugin, _ options: [String: OptionValue] = [:], _ image: PipelineImage) throws -> Data {
        try plugin.makeEncoder(plugin.options(options)).encode(image)
    }

    @Test func everyEncoderWritesItsFormat() async throws {
        let image = try decode(try Fixtures.alphaPNG(120, 80))
        let expected: [(Plugin, String, String)] = [
            (JPEGEncoder.plugin, "JPEG", "\u{FF}\u{D8}"), (PNGEncoder.plugin, "PNG", "\u{89}PNG"), (WebPEncoder.plugin, "WEBP", "RIFF"),
            (GIFEncoder.plugin, "GIF", "GIF8"), (TIFFEncoder.plugin, "TIFF", "MM"), (HEIFEncoder.avifPlugin, "HEIC", ""),
            (HEIFEncoder.heicPlugin, "HEIC", ""),
        ]
        for (plugin, format, _) in expected {
            let data = try encode(plugin, [:], image)
            #expect(try await identify(data, "%m %w %h") == "\(format) 120 80", "\(plugin.spec.name)")
        }
        // AVIF and HEIC differ by their brand, which our sniffer reads back.
        #expect(try FormatSniffer.sniff(encode(HEIFEncoder.avifPlugin, [:], image)) == .image(ImageFormat(rawValue: "AVIF")!))
        #expect(try FormatSniffer.sniff(encode(HEIFEncoder.heicPlugin, [:], image)) == .image(ImageFormat(rawValue: "HEIC")!))
    }

    @Test func everyAcceptedFormatDecodes() throws {
        let source = try decode(try Fixtures.image("plasma:", width: 48, height: 32))
        for (plugin, format) in [(JPEGEncoder.plugin, "JPEG"), (PNGEncoder.plugin, "PNG"), (WebPEncoder.plugin, "WEBP"), (GIFEncoder.plugin, "GIF"),
                                 (TIFFEncoder.plugin, "TIFF"), (HEIFEncoder.avifPlugin, "AVIF"), (HEIFEncoder.heicPlugin, "HEIC")] {
            let image = try decode(try encode(plugin, [:], source))
            #expect((image.width, image.height, image.sourceFormat) == (48, 32, format))
        }
        for format in ["BMP", "ICO"] {
            let image = try decode(try Fixtures.image("plasma:", width: 48, height: 32, format: format))
            #expect((image.width, image.height, image.sourceFormat) == (48, 32, format))
        }
    }

    @Test func jpegOptions() async throws {
        let image = try decode(try Fixtures.image("plasma:", width: 200, height: 150))
        #expect(try await identify(try encode(JPEGEncoder.plugin, ["progressive": .bool(true)], image), "%[interlace]") == "JPEG")
        #expect(try await identify(try encode(JPEGEncoder.plugin, [:], image), "%[interlace]") == "None")
        #expect(try await identify(try encode(JPEGEncoder.plugin, ["subsampling": .string("4:4:4")], image), "%[jpeg:sampling-factor]") == "1x1,1x1,1x1")
        #expect(try await identify(try encode(JPEGEncoder.plugin, ["quality": .int(95)], image), "%[jpeg:sampling-factor]") == "2x2,1x1,1x1")
        #expect(try await identify(try encode(JPEGEncoder.plugin, ["quality": .int(40)], image), "%Q") == "40")
        // A progressive source is written baseline unless asked.
        let progressive = try decode(try encode(JPEGEncoder.plugin, ["progressive": .bool(true)], image))
        #expect(try await identify(try encode(JPEGEncoder.plugin, [:], progressive), "%[interlace]") == "None")
    }

    @Test func pngPaletteAndWebpLossless() async throws {
        let image = try decode(try Fixtures.image("plasma:", width: 200, height: 150, format: "PNG"))
        let full = try encode(PNGEncoder.plugin, [:], image)
        let palette = try encode(PNGEncoder.plugin, ["palette": .bool(true), "colors": .int(16)], image)
        #expect(palette.count < full.count / 2)
        #expect(try await identify(palette, "%[png:IHDR.color-type-orig] %k") == "3 16")  // indexed colour, 16 colours
        let lossless = try encode(WebPEncoder.plugin, ["lossless": .bool(true)], image)
        let back = try decode(lossless)
        let (a, b) = (try image.withCopy { try $0.pixel(x: 33, y: 44) }, try back.withCopy { try $0.pixel(x: 33, y: 44) })
        #expect(abs(a.red - b.red) < 0.005 && abs(a.green - b.green) < 0.005 && abs(a.blue - b.blue) < 0.005)
    }

    @Test func maxBytesLowersQualityUntilTheOutputFits() throws {
        let image = try decode(try Fixtures.image("plasma:", width: 800, height: 600, format: "PNG"))
        let unlimited = try encode(JPEGEncoder.plugin, ["quality": .int(95)], image)
        let limit = unlimited.count / 3
        let fitted = try encode(JPEGEncoder.plugin, ["quality": .int(95), "max_bytes": .int(limit)], image)
        #expect(fitted.count <= limit && fitted.count > limit / 4)
        #expect(throws: PipelineError.self) { try encode(JPEGEncoder.plugin, ["max_bytes": .int(1024)], image) }
        do { _ = try encode(JPEGEncoder.plugin, ["max_bytes": .int(1024)], image) } catch let error as PipelineError {
            #expect(error.kind == .tooLarge && error.message.contains("even at quality 10"), "\(error)")
        }
        do { _ = try encode(PNGEncoder.plugin, ["max_bytes": .int(1024)], image) } catch let error as PipelineError {
            #expect(error.kind == .tooLarge && error.message.contains("has no quality to lower"), "\(error)")
        }
    }

    @Test func autoKeepsTheSourceFormatOrFallsBack() throws {
        let auto = try AutoEncoder.plugin.makeEncoder(AutoEncoder.plugin.options())
        let jpeg = try decode(try Fixtures.jpeg(60, 40))
        #expect(try auto.fileExtension(for: jpeg) == "jpg" && FormatSniffer.sniff(auto.encode(jpeg)) == .image(ImageFormat(rawValue: "JPEG")!))
        let png = try decode(try Fixtures.alphaPNG(60, 40))
        #expect(try auto.fileExtension(for: png) == "png" && FormatSniffer.sniff(auto.encode(png)) == .image(ImageFormat(rawValue: "PNG")!))
        let webp = try decode(try encode(WebPEncoder.plugin, [:], png))
        #expect(auto.fileExtension(for: webp) == "webp")
        // A JPEG that gained transparency becomes PNG; a BMP becomes JPEG.
        let round = try Circle.plugin.makeProcessor(Circle.plugin.options()).process(jpeg)
        #expect(try auto.fileExtension(for: round) == "png" && FormatSniffer.sniff(auto.encode(round)) == .image(ImageFormat(rawValue: "PNG")!))
        let bmp = try decode(try Fixtures.image("plasma:", width: 30, height: 20, format: "BMP"))
        #expect(try auto.fileExtension(for: bmp) == "jpg" && FormatSniffer.sniff(auto.encode(bmp)) == .image(ImageFormat(rawValue: "JPEG")!))
    }

    /// `prefer` writes the first allowed format instead of the source's: AVIF at the quality that
    /// looks like WebP's, up to `avif_max_pixels`, never for an animation; `allow_formats` keeps
    /// it from any format the client did not accept.
    @Test func autoWritesThePreferredFormatWithinItsLimits() async throws {
        func auto(_ values: [String: OptionValue]) throws -> any ImageEncoding {
            try AutoEncoder.plugin.makeEncoder(AutoEncoder.plugin.options(values))
        }
        let jpeg = try decode(try Fixtures.jpeg(60, 40))
        let both: OptionValue = .list([.string("avif"), .string("webp")])
        #expect(try auto(["prefer": both]).fileExtension(for: jpeg) == "avif")
        #expect(try FormatSniffer.sniff(auto(["prefer": both]).encode(jpeg)) == .image(ImageFormat(rawValue: "AVIF")!))
        #expect(try auto(["prefer": .list([.string("webp"), .string("avif")])]).fileExtension(for: jpeg) == "webp")
        #expect(try auto(["prefer": both, "avif_max_pixels": .int(60 * 40 - 1)]).fileExtension(for: jpeg) == "webp")
        #expect(try auto(["prefer": both, "avif_max_pixels": .int(60 * 40)]).fileExtension(for: jpeg) == "avif")
        #expect(try auto(["prefer": both, "allow_formats": .list([.string("jpeg"), .string("png"), .string("webp")])]).fileExtension(for: jpeg) == "webp")
        #expect(try auto(["prefer": both, "allow_formats": .list([.string("jpeg"), .string("png")])]).fileExtension(for: jpeg) == "jpg")
        #expect(try auto([:]).fileExtension(for: jpeg) == "jpg")  // no preference: the source's format
        let animated = try decode(try await animation(), ["max_frames": .int(10)])
        // An animation becomes an AVIF sequence, unless avif_animations is false or its frames
        // together are over avif_max_pixels.
        #expect(try auto(["prefer": both]).fileExtension(for: animated) == "avif")
        let sequence = try auto(["prefer": both]).encoded(animated)
        #expect(sequence.fileExtension == "avif" && sequence.facts["frames"] == .int(3))
        #expect(AVIFEditList.boxes(sequence.data, 0..<sequence.data.count)?.contains { $0.type == "moov" } == true)
        #expect(try auto(["prefer": both, "avif_animations": .bool(false)]).fileExtension(for: animated) == "webp")
        #expect(try auto(["prefer": both, "avif_max_pixels": .int(60 * 40 * 2)]).fileExtension(for: animated) == "webp")
        // AVIF's quality: measured to look like WebP's (bench/avif-quality.py), or as set.
        #expect(AutoEncoder.avifQuality(matching: 80) == 65 && AutoEncoder.avifQuality(matching: 82) == 70)
        #expect(AutoEncoder.avifQuality(matching: 60) == 50 && AutoEncoder.avifQuality(matching: 100) == 100)
        let mapped = try auto(["prefer": both, "quality": .int(80)]).encode(jpeg)
        #expect(try mapped == AVIFEncoderProbe.encode(jpeg, quality: 65))
        #expect(try auto(["prefer": both, "quality": .int(80), "avif_quality": .int(40)]).encode(jpeg) == AVIFEncoderProbe.encode(jpeg, quality: 40))
        #expect(try mapped != AVIFEncoderProbe.encode(jpeg, quality: 80))
    }

    /// A three-frame GIF animation, 60x40, red, green, blue.
    func animation() async throws -> Data {
        let path = try Fixtures.temporaryDirectory().appendingPathComponent("anim.gif").path
        let made = try await Command.run("/usr/bin/convert", ["-delay", "20", "-size", "60x40", "xc:red", "xc:lime", "xc:blue", "-loop", "0", path])
        try #require(made.status == 0, "\(made.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    @Test func animationsAreKeptWithMaxFramesAndWrittenAsGIFAndWebP() async throws {
        let data = try await animation()
        let first = try decode(data)
        #expect(first.frameCount == 1)
        let all = try decode(data, ["max_frames": .int(10)])
        #expect(all.frameCount == 3)
        let small = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(30)])).process(all)
        let gif = try encode(GIFEncoder.plugin, [:], small)
        #expect(try await identify(gif, "%m %w %h %T\n") == "GIF 30 20 20\nGIF 30 20 20\nGIF 30 20 20\n")
        let webp = try encode(WebPEncoder.plugin, [:], small)
        #expect(try decode(webp, ["max_frames": .int(10)]).frameCount == 3)
        // An encoder without animation writes the first frame.
        #expect(try await identify(try encode(PNGEncoder.plugin, [:], small), "%m %w %h\n") == "PNG 30 20\n")
        // More frames than allowed fails at once.
        #expect(failure(data, ["max_frames": .int(2)]) == PipelineError(.tooLarge, "the animation has more than 2 frames (max_frames 2)"))
    }

    /// Frames of 200, 500 and 300 ms keep their times in GIF and WebP outputs, as libwebp's own
    /// webpinfo reads them (ImageMagick 6 alone gives each WebP frame the next one's time).
    @Test func animatedOutputsKeepEachFramesTime() async throws {
        let path = try Fixtures.temporaryDirectory().appendingPathComponent("timed.gif").path
        let made = try await Command.run("/usr/bin/convert", ["-size", "60x40", "-delay", "20", "xc:red", "-delay", "50", "xc:lime",
                                                              "-delay", "30", "xc:blue", "-loop", "0", path])
        try #require(made.status == 0, "\(made.stderr)")
        let image = try decode(try Data(contentsOf: URL(fileURLWithPath: path)), ["max_frames": .int(10)])
        #expect(try await identify(try encode(GIFEncoder.plugin, [:], image), "%T ") == "20 50 30 ")
        for options: [String: OptionValue] in [[:], ["lossless": .bool(true)], ["quality": .int(40)]] {
            let webp = try encode(WebPEncoder.plugin, options, image)
            let file = try Fixtures.temporaryDirectory().appendingPathComponent("timed.webp")
            try webp.write(to: file)
            let info = try await Command.run("/usr/bin/webpinfo", [file.path])
            let durations = info.stdout.split(separator: "\n").filter { $0.contains("Duration:") }.map { $0.split(separator: " ").last ?? "" }
            #expect(durations == ["200", "500", "300"], "\(options): \(info.stdout)")
            #expect(try decode(webp, ["max_frames": .int(10)]).frameCount == 3)
        }
    }

    @Test func largePNGsAreReducedWhileRead() throws {
        let png = try Fixtures.alphaPNG(1200, 800)  // transparent, a red 600x400 square in the middle
        // 60x60: a shrink of 13.3, blocks of 4 (the averages keep three times the target).
        let hint = DecodeHint(targetSize: PixelSize(width: 60, height: 60))
        let reduced = try decoder.decode(LoadedData(data: png), hint: hint)
        #expect((reduced.width, reduced.height, reduced.hasAlpha, reduced.sourceFormat) == (300, 200, true, "PNG"))  // blocks of 4
        let (corner, centre, edge) = try reduced.withCopy { (try $0.pixel(x: 2, y: 2), try $0.pixel(x: 150, y: 100), try $0.pixel(x: 75, y: 100)) }
        #expect(corner.alpha < 0.01 && centre.red > 0.99 && centre.alpha > 0.99)
        // The square's edge: fully red where it is opaque (colour averaged premultiplied, no dark fringe).
        #expect(edge.red > 0.99 && edge.green < 0.01)
        // The same thumbnail as from a full decode, within rounding.
        let resize = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(100), "height": .int(100)]))
        let full = try decode(png, ["shrink_on_load": .string("false")])
        let (a, b) = (try resize.process(reduced), try resize.process(full))
        #expect((a.width, a.height) == (b.width, b.height))
        for (x, y) in [(50, 33), (30, 20), (70, 45), (25, 17)] {
            let (p, q) = (try a.withCopy { try $0.pixel(x: x, y: y) }, try b.withCopy { try $0.pixel(x: x, y: y) })
            #expect(abs(p.red - q.red) < 0.03 && abs(p.alpha - q.alpha) < 0.03, "\(x),\(y): \(p) vs \(q)")
        }
        // A truncated or corrupted one fails with libpng's reason (libpng's errors never reach
        // Swift as a longjmp); an interlaced one goes through ImageMagick.
        #expect(throws: PipelineError(.decodeFailed, "PNG: the file ends before the image does")) {
            try decoder.decode(LoadedData(data: png.prefix(png.count / 2)), hint: hint)
        }
        let idat = try #require(png.range(of: Data("IDAT".utf8)))
        let length = png[(idat.lowerBound - 4)..<idat.lowerBound].reduce(0) { $0 << 8 | Int($1) }
        var badCRC = png, badData = png
        badCRC[idat.upperBound + length] ^= 0x55
        #expect(throws: PipelineError(.decodeFailed, "PNG: IDAT: CRC error")) {
            try decoder.decode(LoadedData(data: badCRC), hint: hint)
        }
        badData[idat.upperBound + length / 2] ^= 0x55
        let error = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: badData), hint: hint) }
        #expect(error.kind == .decodeFailed && error.message.hasPrefix("PNG: "), "\(error)")
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (1200, 800))
        wand.setProgressive(true)  // Adam7
        let interlaced = try decoder.decode(LoadedData(data: try wand.encode(format: "PNG")), hint: hint)
        #expect((interlaced.width, interlaced.height) == (1200, 800))  // not reduced: resize does it
    }

    @Test func profiledPNGsAreReducedWhenTheProfileIsSRGB() throws {
        let hint = DecodeHint(targetSize: PixelSize(width: 60, height: 60))  // blocks of 4
        func tagged(_ profile: String) throws -> Data {
            let wand = Wand()
            try wand.readBuiltIn("plasma:", size: (1200, 800))
            try wand.setICCProfile(try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/" + profile)))
            return try wand.encode(format: "PNG")
        }
        let srgb = try tagged("srgb.icc")
        let reduced = try decoder.decode(LoadedData(data: srgb), hint: hint)
        #expect((reduced.width, reduced.height) == (300, 200))
        #expect(try reduced.withCopy { $0.iccProfile == nil })  // sRGB: dropped, as the ImageMagick path does
        let kept = try decode(srgb, ["to_srgb": .bool(false)])
        #expect(try kept.withCopy { $0.iccProfile != nil })
        let keptReduced = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["to_srgb": .bool(false)]))
            .decode(LoadedData(data: srgb), hint: hint)
        let keptHasICC = try keptReduced.withCopy { $0.iccProfile != nil }
        #expect(keptReduced.width == 300 && keptHasICC)
        // Another profile goes through ImageMagick, which converts through it.
        let adobe = try decoder.decode(LoadedData(data: try tagged("a98.icc")), hint: hint)
        #expect((adobe.width, adobe.height) == (1200, 800))
    }

    @Test func sixteenBitSourcesAreWrittenWithEightBits() async throws {
        let wand = Wand()
        try wand.readBuiltIn("gradient:black-white", size: (64, 64))
        let deep = try wand.encode(format: "PNG", depth: 16)
        #expect(try await identify(deep, "%z") == "16")
        let image = try decode(deep)
        for plugin in [PNGEncoder.plugin, TIFFEncoder.plugin, WebPEncoder.plugin] {
            #expect(try await identify(try encode(plugin, [:], image), "%z") == "8", "\(plugin.spec.name)")
        }
    }

    @Test func cmykIsConvertedToSRGB() async throws {
        let path = try Fixtures.temporaryDirectory().appendingPathComponent("cmyk.jpg").path
        let made = try await Command.run("/usr/bin/convert", ["-size", "40x30", "xc:red", "-colorspace", "CMYK", path])
        try #require(made.status == 0, "\(made.stderr)")
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let image = try decode(data)
        let colour = try image.withCopy { ($0.colorspaceName == "sRGB", try $0.pixel(x: 5, y: 5)) }
        #expect(colour.0 && colour.1.red > 0.9 && colour.1.green < 0.1)
        let kept = try decode(data, ["to_srgb": .bool(false)])
        #expect(try kept.withCopy { $0.colorspaceName == "CMYK" })
    }

    @Test func iccProfiledImagesAreConvertedThroughTheirProfile() async throws {
        // Adobe RGB pixels, tagged: converting through the profile changes the numbers (a formula would not).
        let dir = try Fixtures.temporaryDirectory()
        let path = dir.appendingPathComponent("adobe.png").path
        let made = try await Command.run("/usr/bin/convert", ["-size", "20x20", "xc:rgb(100,150,200)", "-profile",
                                                              "/usr/share/color/icc/ghostscript/a98.icc", path])
        try #require(made.status == 0, "\(made.stderr)")
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let converted = try decode(data)
        let green = try converted.withCopy { ($0.iccProfile, try $0.pixel(x: 5, y: 5)) }
        #expect(green.0 == nil)  // dropped after conversion
        // What ImageMagick's own `convert a98.png -profile srgb.icc` gives: 25.9%, 59.4%, 79.6% (a formula would keep 39.2%).
        #expect(abs(green.1.red - 0.259) < 0.01 && abs(green.1.green - 0.594) < 0.01 && abs(green.1.blue - 0.796) < 0.01, "\(green.1)")
        let kept = try decode(data, ["to_srgb": .bool(false)])
        #expect(try kept.withCopy { $0.iccProfile != nil })
    }

    // MARK: Hostile inputs: each fails alone with its kind

    @Test func hostileInputsFailWithTheirKinds() throws {
        let cases: [(String, Data, PipelineError)] = [
            ("MVG named .jpg", Data("push graphic-context\nviewbox 0 0 640 480\nimage over 0,0 0,0 'text:/etc/passwd'\npop graphic-context\n".utf8),
             PipelineError(.unsupportedFormat, "the content is MVG, which is never decoded (its ImageMagick coder runs another program or reads other files)")),
            ("MSL", Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<image>\n<read filename=\"/etc/passwd\" />\n<write filename=\"/tmp/pwned.png\" />\n</image>\n".utf8),
             PipelineError(.unsupportedFormat, "the content is MSL, which is never decoded (its ImageMagick coder runs another program or reads other files)")),
            ("SVG with an external entity", Data("<?xml version=\"1.0\"?><!DOCTYPE svg [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><text>&x;</text></svg>".utf8),
             PipelineError(.unsupportedFormat, "the content is SVG, which this decoder does not accept; set the decoder's allow_svg: true to render self-contained SVG")),
            ("text: pseudo-file", Data("text:/etc/passwd\n".utf8), PipelineError(.notAnImage, "the content is text, not an image")),
            ("HTML", Data("<!doctype html><html><body><img src=x></body></html>".utf8),
             PipelineError(.notAnImage, "the content is HTML, not an image")),
            ("PostScript", Data("%!PS-Adobe-3.0\n(/etc/passwd) (r) file\n".utf8), PipelineError(.unsupportedFormat, "the content is PostScript, which is never decoded (its ImageMagick coder runs another program or reads other files)")),
            ("PDF", Data("%PDF-1.4\n1 0 obj\n".utf8), PipelineError(.unsupportedFormat, "the content is PDF, which is never decoded (its ImageMagick coder runs another program or reads other files)")),
            ("zero bytes", Data(), PipelineError(.decodeFailed, "empty input (0 bytes)")),
        ]
        for (name, data, expected) in cases {
            #expect(failure(data) == expected, "\(name)")
        }
        // Truncated and bit-flipped JPEGs: decode_failed with ImageMagick's reason.
        let jpeg = try Fixtures.image("logo:")  // a built-in, so the flips below always land on the same bytes
        let truncated = failure(jpeg.prefix(jpeg.count / 3))
        #expect(truncated?.kind == .decodeFailed && truncated?.message.isEmpty == false)
        var flipped = [UInt8](jpeg)
        for i in stride(from: 700, to: flipped.count - 2, by: 97) { flipped[i] ^= 0xFF }
        #expect(failure(Data(flipped))?.kind == .decodeFailed)
    }

    @Test func svgOnlyWhenAllowedAndOnlySelfContained() throws {
        let allow: [String: OptionValue] = ["allow_svg": .bool(true)]
        let plain = Data("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"40\" height=\"30\"><rect width=\"40\" height=\"30\" fill=\"red\"/></svg>".utf8)
        #expect(failure(plain)?.kind == .unsupportedFormat)
        let image = try decode(plain, allow)
        #expect((image.width, image.height) == (40, 30))
        let refused: [(String, String)] = [
            ("<?xml version=\"1.0\"?><!DOCTYPE svg [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><svg xmlns=\"http://www.w3.org/2000/svg\"><text>&x;</text></svg>",
             "the SVG declares entities or an external DTD; only self-contained SVG is accepted"),
            ("<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\"><image xlink:href=\"file:///etc/passwd\" width=\"10\" height=\"10\"/></svg>",
             "the SVG refers to 'file:///etc/passwd' (only #fragment references are allowed); only self-contained SVG is accepted"),
            ("<svg xmlns=\"http://www.w3.org/2000/svg\"><image href=\"text:/etc/passwd\"/></svg>",
             "the SVG refers to 'text:/etc/passwd' (only #fragment references are allowed); only self-contained SVG is accepted"),
            ("<svg xmlns=\"http://www.w3.org/2000/svg\"><rect style=\"fill:url(https://evil.example/x)\"/></svg>",
             "the SVG refers to url(https://evil.example/x); only self-contained SVG is accepted"),
        ]
        for (svg, message) in refused {
            #expect(failure(Data(svg.utf8), allow) == PipelineError(.unsupportedFormat, message))
        }
        // A huge declared size is refused before rendering.
        let huge = Data("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100000\" height=\"100000\"></svg>".utf8)
        #expect(failure(huge, allow)?.kind == .tooLarge)
    }

    @Test func dangerousCodersAreForbiddenEvenWhenNamedExplicitly() {
        for coder in ["MSL", "TEXT", "EPHEMERAL", "URL", "HTTPS", "PS", "PDF"] {
            #expect(!Magick.canRead(coder), "\(coder)")
        }
        let wand = Wand()
        #expect(throws: PipelineError.self) { try wand.read(Data("/etc/passwd".utf8), format: "TEXT") }
        #expect(wand.frameCount == 0)
    }
}

/// The avif encoder at a given quality, to compare auto's AVIF with.
enum AVIFEncoderProbe {
    static func encode(_ image: PipelineImage, quality: Int) throws -> Data {
        try HEIFEncoder.avifPlugin.makeEncoder(HEIFEncoder.avifPlugin.options(["quality": .int(quality)])).encode(image)
    }
}
