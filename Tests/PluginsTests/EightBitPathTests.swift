import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing

/// 8-bit pixels kept out of ImageMagick (``RGB8Pixels``) from the JPEG decoder through the Lanczos
/// resize to the JPEG and PNG writers: each step checked against what the same pixels give
/// through a wand, which is what every image went through before.
@Suite struct EightBitPathTests: CodecSuite {
    /// A plasma picture as 8-bit pixels (RGB, or RGBA with an alpha ramp).
    static func pixels(_ width: Int, _ height: Int, alpha: Bool = false, grey: Bool = false) throws -> RGB8Pixels {
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (width, height))
        var bytes = try wand.bytes(channels: "RGB")
        if grey { for i in stride(from: 0, to: bytes.count, by: 3) { bytes[i + 1] = bytes[i]; bytes[i + 2] = bytes[i] } }
        guard alpha else { return RGB8Pixels(width: width, height: height, hasAlpha: false, bytes: bytes) }
        var rgba = [UInt8]()
        for i in 0..<(width * height) {
            rgba += bytes[(i * 3)..<(i * 3 + 3)]
            rgba.append(UInt8(i % width * 255 / max(1, width - 1)))
        }
        return RGB8Pixels(width: width, height: height, hasAlpha: true, bytes: rgba)
    }

    /// The same pixels in the two forms an image may take.
    static func both(_ pixels: RGB8Pixels) throws -> (eight: PipelineImage, wand: PipelineImage) {
        (PipelineImage(pixels: pixels, sourceFormat: "JPEG"), PipelineImage(taking: try pixels.wand(), sourceFormat: "JPEG"))
    }

    static func bytes(_ image: PipelineImage) throws -> [UInt8] {
        if let pixels = image.rgb8 { return pixels.bytes }
        return try image.withCopy { try $0.bytes(channels: image.hasAlpha ? "RGBA" : "RGB") }
    }

    @Test func aPlainColourJPEGIsDecodedTo8BitPixels() throws {
        let data = try JPEGDecodeTests.plasma().encode(format: "JPEG", quality: 92)
        let image = try decoder.decode(LoadedData(data: data), hint: hint)
        let pixels = try #require(image.rgb8)
        #expect((pixels.width, pixels.height, pixels.hasAlpha) == (400, 200, false))
        // Without a hint to reduce for, ImageMagick decodes it as before.
        #expect(try decoder.decode(LoadedData(data: data), hint: DecodeHint()).rgb8 == nil)
        // An orientation to keep (auto_orient: false) needs a wand to carry it.
        let turned = JPEGDecodeTests.oriented(data, 6)
        let kept = try decoder(["auto_orient": .bool(false)]).decode(LoadedData(data: turned), hint: hint)
        #expect(kept.rgb8 == nil)
        #expect(try kept.withCopy { $0.orientation } == 6)
        let upright = try decoder.decode(LoadedData(data: turned), hint: hint)
        #expect(try #require(upright.rgb8).width == 200)
    }

    /// WebP reduced on load stays 8-bit too, alpha included; and resized from there, it is the
    /// wand's resize of the same decode.
    @Test func webPIsDecodedTo8BitPixels() throws {
        let format = "WEBP"
        let source = try JPEGDecodeTests.plasma()
        try source.ensureAlpha()
        try source.multiplyAlpha(0.5)
        let data = try source.encode(format: format, quality: 90)
        let image = try decoder.decode(LoadedData(data: data), hint: hint)
        let pixels = try #require(image.rgb8, "\(format)")
        #expect(pixels.hasAlpha)
        let resize = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(100), "height": .int(100)]))
        let a = try resize.process(image)
        let b = try resize.process(PipelineImage(taking: try pixels.wand(), sourceFormat: format))
        #expect(zip(try Self.bytes(a), try Self.bytes(b)).allSatisfy { abs(Int($0) - Int($1)) <= 1 })
    }

    /// A PNG's block averages are not rounded to 8 bits: on a smooth gradient the rounding makes
    /// bands that the resize after it keeps. Reduced on load and resized, the thumbnail is the
    /// one Lanczos on every pixel makes, to the 8-bit value, almost everywhere (0.8% of samples
    /// one off here, where averages rounded to 8 bits put 6-8% one off). Blocks of 2: 1536x768
    /// fitted to 256 is a shrink of 6.
    @Test(arguments: [false, true])
    func aPNGsBlockAveragesKeepTheirFractions(alpha: Bool) throws {
        let source = Wand()
        try source.readBuiltIn("gradient:#1040c0-#f0a020", size: (1536, 768))
        if alpha {
            try source.ensureAlpha()
            try source.multiplyAlpha(0.7)
        }
        let data = try source.encode(format: "PNG", quality: 90)
        let fit = DecodeHint(targetSize: PixelSize(width: 256, height: 256), fit: true)
        let reduced = try decoder.decode(LoadedData(data: data), hint: fit)
        #expect((reduced.width, reduced.height, reduced.rgb16 != nil) == (768, 384, true))
        let full = try decoder(["shrink_on_load": .string("false")]).decode(LoadedData(data: data), hint: fit)
        let exact = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(256), "height": .int(256), "pre_shrink": .bool(false)]))
        let (a, b) = (try Self.bytes(try exact.process(reduced)), try Self.bytes(try exact.process(full)))
        #expect(a.count == b.count && zip(a, b).allSatisfy { abs(Int($0) - Int($1)) <= 1 })
        let off = zip(a, b).filter { $0 != $1 }.count
        #expect(off * 100 < a.count * 3, "\(off) of \(a.count) samples differ")
    }

    @Test(arguments: 1...8)
    func orientingIn8BitsIsImageMagicksAutoOrient(orientation: Int) throws {
        let pixels = try Self.pixels(7, 5)
        let wand = try pixels.wand()
        wand.orientation = orientation
        try wand.autoOrient()
        let turned = pixels.oriented(orientation)
        #expect((turned.width, turned.height) == (wand.width, wand.height))
        #expect(turned.bytes == (try wand.bytes(channels: "RGB")), "orientation \(orientation)")
    }

    /// Fit, fill by a compass gravity, and with alpha: the 8-bit resize rounds once where the wand's
    /// rounds to 16 bits and then to 8, so a sample may differ by one level, never more.
    @Test(arguments: [(["width": OptionValue.int(256), "height": .int(256)], false),
                      (["width": .int(200), "height": .int(200), "mode": .string("fill"), "gravity": .string("north_east")], false),
                      (["width": .int(300)], true)])
    func resizingIn8BitsIsTheWandsResize(options: [String: OptionValue], alpha: Bool) throws {
        let resize = try Resize.plugin.makeProcessor(Resize.plugin.options(options))
        let (eight, wand) = try Self.both(try Self.pixels(640, 400, alpha: alpha))
        let a = try resize.process(eight), b = try resize.process(wand)
        #expect(a.rgb8 != nil && b.rgb8 == nil)
        #expect((a.width, a.height, a.hasAlpha) == (b.width, b.height, b.hasAlpha))
        let (x, y) = (try Self.bytes(a), try Self.bytes(b))
        #expect(x.count == y.count)
        #expect(zip(x, y).allSatisfy { abs(Int($0) - Int($1)) <= 1 })
        #expect(zip(x, y).filter { $0 != $1 }.count * 100 < x.count, "most samples are equal")
    }

    /// A shrink of 4x or more averages blocks first (as the wand's path does with ImageMagick's
    /// scale) in 8 bits: blocks that divide the image are the wand's picture within two levels
    /// (the block average is rounded to 8 bits once more); where no block fits within a twentieth
    /// of an output pixel, the filter reads every pixel, still in 8 bits.
    @Test(arguments: [(640, 400), (641, 401)])
    func aBlockAverageFirstStaysIn8Bits(width: Int, height: Int) throws {
        let resize = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(64)]))
        let (eight, wand) = try Self.both(try Self.pixels(width, height))
        let a = try resize.process(eight), b = try resize.process(wand)
        #expect(a.rgb8 != nil && b.rgb8 == nil)
        #expect((a.width, a.height) == (b.width, b.height))
        let (x, y) = (try Self.bytes(a), try Self.bytes(b))
        let squared = zip(x, y).reduce(0.0) { $0 + pow(Double(Int($1.0) - Int($1.1)), 2) } / Double(x.count)
        let psnr = 10 * log10(255 * 255 / max(squared, 1e-9))
        #expect(psnr >= 45, "\(width)x\(height): \(psnr) dB against the wand's resize")
        if width % 5 == 0, height % 5 == 0 {
            #expect(zip(x, y).allSatisfy { abs(Int($0) - Int($1)) <= 2 })
        }
    }

    /// Where the 8-bit resize does not apply (another filter, a smart crop), the wand's path
    /// takes the image.
    @Test func otherResizesGoThroughAWand() throws {
        let (eight, _) = try Self.both(try Self.pixels(640, 400))
        for options: [String: OptionValue] in [["width": .int(256), "filter": .string("mitchell")],
                                                ["width": .int(100), "height": .int(100), "mode": .string("fill"), "gravity": .string("smart")]] {
            let resized = try Resize.plugin.makeProcessor(Resize.plugin.options(options)).process(eight)
            #expect(resized.rgb8 == nil, "\(options)")
        }
    }

    /// The JPEG written from 8-bit pixels is the file ImageMagick writes from the same pixels, byte
    /// for byte, under every option that reaches libjpeg.
    @Test(arguments: [[String: OptionValue](), ["quality": .int(95), "subsampling": .string("4:4:4"), "progressive": .bool(true)],
                      ["quality": .int(40), "subsampling": .string("4:2:2"), "optimize": .bool(false)]])
    func theJPEGWriterWritesWhatImageMagickWrites(options: [String: OptionValue]) throws {
        let encoder = try JPEGEncoder.plugin.makeEncoder(JPEGEncoder.plugin.options(options))
        for pixels in [try Self.pixels(300, 200), try Self.pixels(301, 199, grey: true)] {
            let (eight, wand) = try Self.both(pixels)
            let direct = try encoder.encode(eight), magick = try encoder.encode(wand)
            #expect(direct == magick, "\(options), grey \(pixels.isGrey): \(direct.count) and \(magick.count) bytes")
        }
        // auto, which keeps JPEG as JPEG.
        let auto = try AutoEncoder.plugin.makeEncoder(AutoEncoder.plugin.defaultOptions)
        let (eight, wand) = try Self.both(try Self.pixels(300, 200))
        #expect(try auto.encode(eight) == auto.encode(wand))
    }

    @Test func maxBytesLowersTheDirectWritersQualityAsImageMagicksPath() throws {
        let (eight, wand) = try Self.both(try Self.pixels(300, 200))
        let full = try JPEGEncoder.plugin.makeEncoder(JPEGEncoder.plugin.defaultOptions).encode(eight)
        let limited = try JPEGEncoder.plugin.makeEncoder(JPEGEncoder.plugin.options(["max_bytes": .int(full.count * 2 / 3)]))
        let direct = try limited.encode(eight)
        #expect(direct.count <= full.count * 2 / 3)
        #expect(direct == (try limited.encode(wand)))
        let tiny = try JPEGEncoder.plugin.makeEncoder(JPEGEncoder.plugin.options(["max_bytes": .int(1024)]))
        #expect(throws: PipelineError.self) { try tiny.encode(eight) }
    }

    @Test func alphaAndMetadataGoThroughImageMagicksWriter() throws {
        // Alpha is flattened onto the background by ImageMagick: the same file either way.
        let encoder = try JPEGEncoder.plugin.makeEncoder(JPEGEncoder.plugin.defaultOptions)
        let (eight, wand) = try Self.both(try Self.pixels(120, 80, alpha: true))
        #expect(try encoder.encode(eight) == encoder.encode(wand))
        // EXIF to keep: written by ImageMagick.
        var kept = eight
        kept.metadata = ImageMetadata(exif: Data("II*\0\u{8}\0\0\0\0\0".utf8))
        let settings = MagickEncoding(format: "JPEG", quality: 80).directJPEG(kept, try #require(kept.rgb8))
        #expect(settings == nil)
    }

    @Test func pngFrom8BitPixelsIsThePNGOfTheWand() throws {
        for pixels in [try Self.pixels(120, 80), try Self.pixels(120, 80, alpha: true)] {
            let (eight, wand) = try Self.both(pixels)
            let a = try #require(try PNGWriter.write(eight, level: 6, filter: .adaptive))
            let b = try #require(try PNGWriter.write(wand, level: 6, filter: .adaptive))
            #expect(a == b)
        }
        // All grey: ImageMagick writes it, as a grey PNG, from either form.
        let (grey, _) = try Self.both(try Self.pixels(120, 80, grey: true))
        #expect(try PNGWriter.write(grey, level: 6, filter: .adaptive) == nil)
        let png = try PNGEncoder.plugin.makeEncoder(PNGEncoder.plugin.defaultOptions).encode(grey)
        #expect(png[25] == 0, "PNG colour type \(png[25])")
    }

    /// Every other processor gets a wand of the 8-bit pixels, as it did before.
    @Test func otherProcessorsWorkOnAWandOfThePixels() throws {
        let (eight, wand) = try Self.both(try Self.pixels(64, 48))
        let flop = try Flop.plugin.makeProcessor(Flop.plugin.defaultOptions)
        #expect(try Self.bytes(flop.process(eight)) == Self.bytes(flop.process(wand)))
        let orient = try AutoOrient.plugin.makeProcessor(AutoOrient.plugin.defaultOptions)
        #expect(try orient.process(eight).rgb8 === eight.rgb8)
    }
}
