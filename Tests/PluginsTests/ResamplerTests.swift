import CMagickWand
import CResample
import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Our Lanczos-3 resampler (``Resampler``) against ImageMagick's own `LanczosFilter` resize, on
/// colour, grey, 16-bit and alpha images, shrinking and enlarging; what it leaves to ImageMagick;
/// and what the image keeps. Synchronous ImageMagick work: a codec suite (Makefile).
@Suite struct ResamplerTests {
    /// An image made by ImageMagick's `convert` from `arguments` (the output file is appended).
    func made(_ arguments: [String], format: String = "png") throws -> Wand {
        let file = try Fixtures.temporaryDirectory("resampler").appendingPathComponent("input.\(format)")
        let result = try Command.runBlocking("/usr/bin/convert", arguments + [file.path])
        #expect(result.status == 0, "\(result.stderr)")
        let wand = Wand()
        try wand.read(try Data(contentsOf: file), format: format.uppercased())
        return wand
    }

    /// Ours and ImageMagick's resize of `source` to `width` x `height`, compared.
    func compare(_ source: Wand, _ width: Int, _ height: Int) throws -> (ours: Wand, theirs: Wand, psnr: Double) {
        let ours = source.clone(), theirs = source.clone()
        #expect(try Resampler.resize(ours, width: width, height: height))
        try theirs.resize(width: width, height: height, filter: LanczosFilter)
        #expect((ours.width, ours.height) == (width, height))
        return (ours, theirs, try ours.psnr(against: theirs))
    }

    static let detailed = ["logo:", "-resize", "640x480!"]

    /// An opaque image stays opaque, whatever the memory its new pixels land in held before.
    /// ImageMagick 6 keeps an opacity sample for every pixel even without an alpha channel, and
    /// importing RGB samples leaves it as it was: a run of items side by side recycles memory, so
    /// before the fix some pixels of a resized photo read as transparent when exported as RGBA
    /// (a south-gravity crop test failed 2 runs in 3; ThumbHash placeholders read them too).
    /// Freed memory is filled with 0xFF here, which is an opacity of "fully transparent".
    @Test func anOpaqueImageStaysOpaqueWhateverTheMemoryHeld() throws {
        for _ in 0..<20 {
            let source = try Wand.canvas(width: 60, height: 180, color: "blue")
            for size in [30 * 90 * 8, 30 * 90 * 8 + 64, 32_768] {
                let block = malloc(size)!
                memset(block, 0xFF, size)
                free(block)
            }
            #expect(try Resampler.resize(source, width: 30, height: 90))
            #expect(!source.hasAlpha)
            let rgba = try source.rgbaBytes()
            let clear = stride(from: 3, to: rgba.count, by: 4).filter { rgba[$0] != 255 }.count
            #expect(clear == 0, "\(clear) of \(rgba.count / 4) pixels read as not opaque")
        }
    }


    /// ImageMagick stores its first pass in 16-bit pixels, clipping the ringing at the logo's hard
    /// black-and-white edges that we keep in floats: 47.8 dB at the worst size here. A different
    /// kernel is far off: Lanczos-2 or Catrom instead of Lanczos-3 score 41 dB, Mitchell 34 dB.
    @Test(arguments: [(256, 192), (100, 75), (37, 23), (1, 1), (1000, 750), (640, 1)])
    func matchesImageMagicksLanczosOnColour(size: (Int, Int)) throws {
        let source = try made(Self.detailed)
        let result = try compare(source, size.0, size.1)
        #expect(result.psnr >= 46, "\(size): \(result.psnr) dB against ImageMagick's Lanczos")
        // Without hard edges to clip, the two agree closer still.
        let smooth = try made(["rose:", "-resize", "480x320!", "-blur", "0x2"])
        let smoothResult = try compare(smooth, max(1, size.0 / 2), max(1, size.1 / 2))
        #expect(smoothResult.psnr >= 55, "\(size): \(smoothResult.psnr) dB on a smooth picture")
    }

    @Test func matchesOnFineDetailGreyAndSixteenBits() throws {
        let checker = try made(["-size", "333x217", "pattern:checkerboard", "(", "rose:", "-resize", "333x217!", ")",
                                "-compose", "multiply", "-composite"])
        #expect(try compare(checker, 100, 65).psnr >= 50)
        let grey = try made(Self.detailed + ["-colorspace", "Gray"], format: "jpg")
        #expect(grey.colorspace == GRAYColorspace)
        let greyResult = try compare(grey, 200, 150)
        #expect(greyResult.psnr >= 50)
        #expect(greyResult.ours.colorspace == GRAYColorspace)
        // A 16-bit gradient keeps its 16-bit steps: an 8-bit round trip would cost about 10 dB here.
        let deep = try made(["-size", "300x200", "gradient:#000000-#ffffff", "-depth", "16"])
        #expect(try compare(deep, 120, 80).psnr >= 70)
        // An extreme aspect ratio, down to one row.
        let strip = try made(["-size", "1000x3", "gradient:red-blue", "-rotate", "0"])
        #expect(try compare(strip, 100, 1).psnr >= 50)
    }

    @Test func sameSizeReproducesThePixels() throws {
        let source = try made(Self.detailed)
        let copy = source.clone()
        #expect(try Resampler.resize(copy, width: 640, height: 480))
        #expect(try copy.psnr(against: source) >= 80)
    }

    /// Colour under fully transparent pixels (green here) never bleeds into the opaque ones, and
    /// the alpha edge matches ImageMagick's (which weighs colour by alpha too).
    @Test func transparentColourDoesNotBleed() throws {
        let source = try made(["-size", "50x50", "xc:red", "-size", "50x50", "xc:rgba(0,255,0,0)", "+append"])
        #expect(source.hasAlpha)
        let result = try compare(source, 37, 19)
        #expect(result.psnr >= 50)
        for y in 0..<19 {
            for x in 0..<37 {
                let p = try result.ours.pixel(x: x, y: y)
                if p.alpha > 0.01 {
                    #expect(p.green <= 0.01 && p.red >= 0.99, "(\(x), \(y)): \(p)")
                }
            }
        }
        // And a smooth alpha ramp over a detailed picture.
        let ramp = try made(Self.detailed + ["(", "-size", "640x480", "gradient:white-black", ")", "-alpha", "off",
                                             "-compose", "CopyOpacity", "-composite"])
        #expect(ramp.hasAlpha)
        #expect(try compare(ramp, 213, 160).psnr >= 50)
    }

    @Test func theImageKeepsItsProfileAndOrientation() throws {
        let source = try made(Self.detailed)
        let profile = try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/a98.icc"))
        try source.setICCProfile(profile)
        source.orientation = 6
        #expect(try Resampler.resize(source, width: 64, height: 48))
        #expect(source.iccProfile == profile)
        #expect(source.orientation == 6)
        #expect(source.frameCount == 1)
    }

    /// CMYK is ImageMagick's to resize; `resize` still gives the size asked for.
    @Test func otherColourSpacesGoToImageMagick() throws {
        let cmyk = try made(Self.detailed + ["-colorspace", "CMYK"], format: "jpg")
        #expect(cmyk.colorspace == CMYKColorspace)
        #expect(!Resampler.accepts(cmyk))
        #expect(try !Resampler.resize(cmyk.clone(), width: 10, height: 10))
        let image = PipelineImage(taking: cmyk, sourceFormat: "JPEG")
        let resized = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(64), "height": .int(64)])).process(image)
        #expect((resized.width, resized.height) == (64, 48))
        #expect(try resized.withCopy { $0.colorspace } == CMYKColorspace)
    }

    /// Each source row is asked for once, in order, and only those the kernel reaches; the rows
    /// kept at once are bounded by the vertical kernel, not by the image.
    @Test func rowsAreStreamedOnceInOrder() throws {
        var asked = [Int]()
        let output = Resampler.resample(width: 12, height: 4000, to: 6, 20, channels: 3) { (y, row: inout [UInt16]) in
            asked.append(y)
            for i in row.indices { row[i] = UInt16(truncatingIfNeeded: y * 16) }
        }
        #expect(output.count == 6 * 20 * 3)
        #expect(asked == Array(asked.sorted()) && Set(asked).count == asked.count)
        #expect(asked.first == 0 && asked.last == 3999)
        let vertical = Resampler.Axis(source: 4000, target: 20)
        #expect(vertical.maxCount <= 2 * 3 * 200 + 2)
        for y in 0..<20 {
            let weights = vertical.weights[(y * vertical.maxCount)..<(y * vertical.maxCount + vertical.counts[y])]
            #expect(abs(weights.reduce(0, +) - 1) < 1e-4)
        }
        // Upscaling: every output's taps sum to 1 and stay inside the image.
        let up = Resampler.Axis(source: 5, target: 17)
        for x in 0..<17 {
            #expect(up.starts[x] >= 0 && up.starts[x] + up.counts[x] <= 5)
            let sum = up.weights[(x * up.maxCount)..<(x * up.maxCount + up.counts[x])].reduce(0, +)
            #expect(abs(sum - 1) < 1e-4)
        }
    }

    /// `resize`'s block average before the filter leaves it at least three times the target, and
    /// on a sharp picture stays close to the filter alone: a rotated checkerboard fitted 8 times
    /// smaller reads 62 dB against it, 48 when the blocks left twice the target (as before).
    @Test func aPreShrinkLeavesTheFilterThreeTimesTheTarget() throws {
        #expect(Resize.preShrinkBlock(from: PixelSize(width: 1080, height: 1920), to: PixelSize(width: 288, height: 512)) == nil)
        #expect(Resize.preShrinkBlock(from: PixelSize(width: 3840, height: 2160), to: PixelSize(width: 512, height: 288)) == 2)
        #expect(Resize.preShrinkBlock(from: PixelSize(width: 5120, height: 2880), to: PixelSize(width: 512, height: 288)) == 3)
        let source = try made(["-size", "1200x1200", "pattern:checkerboard", "-rotate", "17", "-gravity", "center", "-crop", "1200x1200+0+0", "+repage"])
        func resized(_ preShrink: Bool) throws -> Wand {
            let resize = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(150), "height": .int(150), "pre_shrink": .bool(preShrink)]))
            return try resize.process(PipelineImage(taking: source.clone(), sourceFormat: "PNG")).withCopy { $0.clone() }
        }
        let score = try resized(true).psnr(against: try resized(false))
        #expect(score >= 55, "\(score) dB")
    }
}

/// The resampler's C loops: the AVX2 version (where this CPU has it) and the plain one give the
/// same floats, so outputs do not depend on the machine that made them.
@Suite(.serialized) struct ResamplerKernelTests {
    @Test func avx2AndPlainLoopsGiveTheSameBytes() throws {
        // A width whose rows end inside the vector loops' last step, and one shorter than a step.
        for (sourceWidth, sourceHeight) in [(641, 401), (5, 3)] {
            let wand = Wand()
            try wand.readBuiltIn("plasma:", size: (sourceWidth, sourceHeight))
            var rgba = try wand.bytes(channels: "RGBA")
            for i in stride(from: 3, to: rgba.count, by: 4) { rgba[i] = UInt8(i / 4 % 251) }
            for (bytes, alpha) in [(try wand.bytes(channels: "RGB"), false), (rgba, true)] {
                let pixels = RGB8Pixels(width: sourceWidth, height: sourceHeight, hasAlpha: alpha, bytes: bytes)
                for (width, height) in [(256, 160), (203, 127), (1000, 625)] {
                    pk_resample_force_plain(0)
                    let fast = Resampler.resize(pixels, width: width, height: height)
                    pk_resample_force_plain(1)
                    let plain = Resampler.resize(pixels, width: width, height: height)
                    pk_resample_force_plain(0)
                    #expect(fast.bytes == plain.bytes, "\(sourceWidth) to \(width)x\(height), alpha \(alpha), AVX2: \(pk_resample_uses_avx2())")
                }
            }
        }
    }
}
