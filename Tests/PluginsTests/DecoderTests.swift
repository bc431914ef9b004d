import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

@Suite struct DecoderTests {
    let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)

    func failure(_ data: Data, contentType: String? = nil) -> PipelineError? {
        do {
            _ = try decoder.decode(LoadedData(data: data, contentType: contentType), hint: DecodeHint())
            return nil
        } catch {
            return error as? PipelineError
        }
    }

    @Test func decodesEveryDefaultFormat() throws {
        for format in ["JPEG", "PNG", "GIF", "WEBP", "TIFF", "BMP"] {
            let data = try Fixtures.image("gradient:red-blue", width: 40, height: 30, format: format)
            let image = try decoder.decode(LoadedData(data: data), hint: DecodeHint())
            #expect(image.width == 40 && image.height == 30, "\(format)")
            #expect(image.sourceFormat == format)
        }
    }

    @Test func zeroBytes() {
        #expect(failure(Data()) == PipelineError(.decodeFailed, "empty input (0 bytes)"))
    }

    @Test func htmlIsNotAnImage() {
        let html = Data("<!DOCTYPE html><html><body>Not found</body></html>".utf8)
        #expect(failure(html, contentType: "image/jpeg")
            == PipelineError(.notAnImage, "the content is HTML, not an image (served as image/jpeg)"))
    }

    @Test func plainTextIsNotAnImage() {
        #expect(failure(Data("hello, world\n".utf8)) == PipelineError(.notAnImage, "the content is text, not an image"))
    }

    @Test func binaryNoiseIsNotAnImage() {
        #expect(failure(Data([0x00, 0x13, 0x37, 0xFE, 0x01, 0x02, 0x03, 0x04, 0x99, 0x00]))?.kind == .notAnImage)
    }

    @Test func mvgNamedJpegIsRefused() {
        // ImageTragick-style: vector drawing commands that read a local file.
        let mvg = Data("push graphic-context\nviewbox 0 0 640 480\nimage over 0,0 0,0 'text:/etc/passwd'\npop graphic-context\n".utf8)
        #expect(failure(mvg)?.kind == .unsupportedFormat)
    }

    @Test func svgIsRefused() {
        let svg = Data("<?xml version=\"1.0\"?><!DOCTYPE svg [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><svg xmlns=\"http://www.w3.org/2000/svg\">&x;</svg>".utf8)
        #expect(failure(svg) == PipelineError(.unsupportedFormat,
            "the content is SVG, which this decoder does not accept; set the decoder's allow_svg: true to render self-contained SVG"))
    }

    @Test func hugeHeaderFailsBeforeDecoding() throws {
        // A valid PNG signature and IHDR claiming 100000x100000: refused from the header alone.
        let error = failure(Fixtures.pngHeader(width: 100_000, height: 100_000))
        #expect(error?.kind == .tooLarge)
        #expect(error?.message.hasPrefix("100000x100000 exceeds the limits") == true)
    }

    @Test func truncatedJPEGFailsAsDecodeFailed() throws {
        let jpeg = try Fixtures.image("plasma:", width: 400, height: 300)
        let error = failure(jpeg.prefix(jpeg.count / 2))
        #expect(error?.kind == .decodeFailed)
    }

    @Test func corruptedJPEGNeverCrashes() throws {
        let jpeg = try Fixtures.image("plasma:", width: 200, height: 150)
        var generator = SplitMix64(seed: 42)  // fixed, so a failure can be replayed
        for _ in 0..<40 {
            var bytes = [UInt8](jpeg)
            for _ in 0..<30 { bytes[Int.random(in: 20..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            // Decodes (some flips are harmless), fails as decode_failed, or, when a flip lands in the
            // frame header's size, as too_large; never crashes, never anything else.
            if let error = failure(Data(bytes)) { #expect([.decodeFailed, .tooLarge].contains(error.kind), "\(error)") }
        }
    }

    @Test func shrinkOnLoadDecodesJPEGAtReducedScale() throws {
        let jpeg = try Fixtures.image("plasma:", width: 2000, height: 1500)
        let image = try decoder.decode(LoadedData(data: jpeg), hint: DecodeHint(targetSize: PixelSize(width: 256, height: 256)))
        #expect(image.width == 1000 && image.height == 750)  // 1/2: the smallest scale that keeps twice 256x256
        let small = try Fixtures.image("rose:")
        let rose = try decoder.decode(LoadedData(data: small), hint: DecodeHint(targetSize: PixelSize(width: 256, height: 256)))
        #expect(rose.width == 70 && rose.height == 46)  // never scaled up
    }

    /// A large grey PNG is reduced on load like a colour one: its decode is estimated (and so
    /// admitted) at rows and a copy, not the 392 MB of 16-bit pixels ImageMagick's whole decode of
    /// 7000x7000 takes, and it comes out grey: the same pixels as the whole decode's resize, and a
    /// grey PNG when written.
    @Test func aLargeGreyPNGIsReducedOnLoadAndStaysGrey() async throws {
        let dir = try Fixtures.temporaryDirectory("grey-png")
        let path = dir.appendingPathComponent("grey.png").path
        let made = try await Command.run("/usr/bin/convert", ["-size", "7000x7000", "gradient:gray20-gray80", "-colorspace", "Gray", "-depth", "8", "PNG:" + path])
        try #require(made.status == 0, "\(made.stderr)")
        let png = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(png[25] == 0, "the fixture is a grey PNG (colour type \(png[25]))")
        let hint = DecodeHint(targetSize: PixelSize(width: 256, height: 256), fit: true)
        let estimate = try #require(decoder.estimatedMemory(LoadedData(data: png), hint: hint))
        #expect(estimate < 64 << 20, "estimated \(estimate) bytes")
        let image = try decoder.decode(LoadedData(data: png), hint: hint)
        #expect(image.width < 7000 && image.width >= 256, "\(image.width)x\(image.height)")
        let written = try PNGEncoder.plugin.makeEncoder(PNGEncoder.plugin.defaultOptions).encode(image)
        #expect(written[25] == 0, "written as colour type \(written[25]), not grey")
    }

    /// The block averages' division by a multiply is the division, for every block size up to
    /// 4095 pixels wide (divisors up to 4095 squared) and totals up to 65536 times the divisor.
    @Test func theAveragesDivisionByAMultiplyIsExact() {
        var random = SplitMix64(seed: 7)
        for _ in 0..<200_000 {
            let d = UInt64.random(in: 1...(4095 * 4095), using: &random)
            let x = UInt64.random(in: 0...(d * 65536), using: &random)
            #expect(BoxReducer.Divisor(d).divide(x) == x / d, "\(x) / \(d)")
        }
        for d in [1, 2, 3, 4, 9, 36, 4095 * 4095] as [UInt64] {
            for x in [0, d - 1, d, d + 1, d * 65535 + d / 2, d * 65536] { #expect(BoxReducer.Divisor(d).divide(x) == x / d) }
        }
    }
}

/// A small seeded generator, so randomised tests repeat exactly.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite struct ShrinkOnLoadQualityTests {
    /// A 1680x1050 q100 JPEG whose detail sits just under a quarter of its resolution (noise at
    /// 420x263 enlarged 4x): what DCT scaling at 1/4 aliases worst, like a photo of fine grass.
    static func fineDetailJPEG() throws -> Data {
        var generator = SplitMix64(seed: 7)
        let noise = (0..<(420 * 263 * 3)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let wand = try Wand.fromPixels(noise, width: 420, height: 263, hasAlpha: false)
        try wand.resize(width: 1680, height: 1050)
        return try wand.encode(format: "JPEG", quality: 100)
    }

    func thumbnail(_ jpeg: Data, _ shrink: String) throws -> (decoded: PixelSize, thumbnail: PipelineImage) {
        let decoder = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["shrink_on_load": .string(shrink)]))
        let resize = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(256), "height": .int(160)]))
        let decoded = try decoder.decode(LoadedData(data: jpeg), hint: DecodeHint(targetSize: PixelSize(width: 256, height: 160)))
        return (PixelSize(width: decoded.width, height: decoded.height), try resize.process(decoded))
    }

    func psnr(_ a: PipelineImage, _ b: PipelineImage) throws -> Double {
        try a.withCopy { x in try b.withCopy { y in try x.psnr(against: y) } }
    }

    @Test func theDefaultKeepsTwiceTheTargetAndStaysWithin40dBOfAFullDecode() throws {
        let jpeg = try Self.fineDetailJPEG()
        let full = try thumbnail(jpeg, "false")
        let reduced = try thumbnail(jpeg, "true")
        let fast = try thumbnail(jpeg, "fast")
        #expect(full.decoded == PixelSize(width: 1680, height: 1050))
        // 6.6x to the target: 1/2 (not 1/4, nor libjpeg's 3/8), the filter does the rest.
        #expect(reduced.decoded == PixelSize(width: 840, height: 525))
        #expect(fast.decoded == PixelSize(width: 420, height: 263))
        let kept = try psnr(reduced.thumbnail, full.thumbnail)
        #expect(kept >= 40, "default shrink-on-load: \(kept) dB against a full decode")
        // What `fast` trades: the detail is aliased away.
        let lost = try psnr(fast.thumbnail, full.thumbnail)
        #expect(lost < 35, "fast: \(lost) dB")
    }

    @Test func theScaleIsOneOverOneTwoFourOrEightAndNeverLessThanTwiceTheTarget() throws {
        // The DCT scale the JPEG reader plans, and the size libjpeg decodes at with it.
        func scaled(_ w: Int, _ h: Int, _ tw: Int, _ th: Int, fit: Bool = false) -> PixelSize? {
            guard let d = JPEGReducer.plan(PixelSize(width: w, height: h), hint: DecodeHint(targetSize: PixelSize(width: tw, height: th), fit: fit),
                                           headroom: 2)?.denominator else { return nil }
            return PixelSize(width: (w + d - 1) / d, height: (h + d - 1) / d)
        }
        #expect(scaled(1680, 1050, 256, 160) == PixelSize(width: 840, height: 525))
        #expect(scaled(1680, 1050, 420, 263) == PixelSize(width: 1680, height: 1050))  // under 4x: decoded whole (1/1)
        #expect(scaled(1680, 1050, 2000, 2000) == PixelSize(width: 1680, height: 1050))  // an enlargement: whole too
        #expect(scaled(5120, 2880, 256, 256) == PixelSize(width: 1280, height: 720))  // 11x on the height: 1/4
        #expect(scaled(8000, 8000, 256, 256) == PixelSize(width: 1000, height: 1000))  // 31x: 1/8
        #expect(scaled(4001, 3001, 100, 100) == PixelSize(width: 501, height: 376))  // rounded up, as libjpeg does
        // Fit: only the limiting side has to reach the box (5120x2880 into 256x256 ends 256x144).
        let fit = DecodeHint(targetSize: PixelSize(width: 256, height: 256), fit: true)
        #expect(fit.maxShrink(from: PixelSize(width: 5120, height: 2880)) == 20)
        #expect(DecodeHint(targetSize: PixelSize(width: 256, height: 256)).maxShrink(from: PixelSize(width: 5120, height: 2880)) == 11.25)
        #expect(JPEGReducer.plan(PixelSize(width: 5120, height: 2880), hint: fit, headroom: 2)
            == JPEGReducer.Plan(denominator: 8, block: 1, size: PixelSize(width: 640, height: 360)))
        #expect(JPEGReducer.plan(PixelSize(width: 8000, height: 8000), hint: DecodeHint(targetSize: PixelSize(width: 100, height: 100)), headroom: 2)
            == JPEGReducer.Plan(denominator: 8, block: 5, size: PixelSize(width: 200, height: 200)))
        func fits(_ options: [String: OptionValue]) throws -> Bool {
            try Resize.plugin.makeProcessor(Resize.plugin.options(options)).decodeHintFits
        }
        #expect(try fits(["width": .int(256), "height": .int(256)]))
        #expect(try !fits(["width": .int(256), "height": .int(256), "mode": .string("fill")]))
        #expect(try !fits(["width": .int(256)]))
        // Blocks that divide the picture: a partial last block would stretch it (3840 in blocks of 7).
        #expect(BoxReducer.blockSize(for: PixelSize(width: 3840, height: 2160), shrink: 15, headroom: 2) == 6)
        #expect(BoxReducer.blockSize(for: PixelSize(width: 1200, height: 800), shrink: 8, headroom: 2) == 4)
        #expect(BoxReducer.blockSize(for: PixelSize(width: 1000, height: 700), shrink: 3.9, headroom: 2) == nil)
        // Odd sizes: the largest block whose padding is within a twentieth of an output pixel (3 pads
        // 4001 by 1 and 3001 by 2: 2/40); 5003x3001 has none, so the one that pads least (2: by 1,
        // 1/13 of a pixel); 1200x675 fitted 4.7x has only 2, padding 0.21 of a pixel: none.
        #expect(BoxReducer.blockSize(for: PixelSize(width: 4001, height: 3001), shrink: 40, headroom: 2) == 3)
        #expect(BoxReducer.blockSize(for: PixelSize(width: 5003, height: 3001), shrink: 13, headroom: 2) == 2)
        #expect(BoxReducer.blockSize(for: PixelSize(width: 1200, height: 675), shrink: 4.6875, headroom: 2) == nil)
        // resize's own box average before the filter: whole blocks of a third of the shrink, or none.
        #expect(Resize.preShrinkBlock(from: PixelSize(width: 1680, height: 1050), to: PixelSize(width: 256, height: 160)) == 2)
        #expect(Resize.preShrinkBlock(from: PixelSize(width: 840, height: 525), to: PixelSize(width: 256, height: 160)) == nil)
        for (w, h, tw, th) in [(1000, 700, 120, 80), (3000, 2000, 700, 700), (640, 480, 1, 1), (9999, 17, 4, 4)] {
            if let size = scaled(w, h, tw, th) {
                #expect(size.width >= 2 * tw && size.height >= 2 * th, "\(w)x\(h) to \(tw)x\(th): \(size)")
            }
        }
    }

    /// Block averages of pixels already in memory, cut into parts that idle threads share, are the
    /// ones made row by row: heights that are and are not whole blocks, fewer output rows than
    /// parts, one block; on this thread (in no pool) and on a pool with an idle thread.
    @Test func boxAveragesInPartsAreTheRowByRowOnes() async throws {
        let pool = WorkerPool(threads: 2, name: "pk-test")
        for (width, height, factor) in [(400, 250, 2), (1001, 71, 3), (37, 5, 2), (9, 3, 4), (640, 480, 8), (16, 16, 16)] {
            let pixels = (0..<(width * height * 3)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
            let box = BoxReducer(width: width, height: height, factor: factor, alpha: false)
            let rowByRow = try box.reduce(feeding: { y, take in
                pixels.withUnsafeBufferPointer { take(UnsafeBufferPointer(rebasing: $0[(y * width * 3)..<((y + 1) * width * 3)])) }
            })
            #expect(box.reduceInParts(pixels) == rowByRow, "\(width)x\(height) / \(factor)")
            let shared = try await pool.run { box.reduceInParts(pixels) }
            #expect(shared == rowByRow, "\(width)x\(height) / \(factor), on a pool")
        }
    }
}
