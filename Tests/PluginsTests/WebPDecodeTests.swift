import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The WebP reduce-on-load path (libwebp decoding straight to a reduced size), checked against
/// ImageMagick's full decode of the same file, and fed the hostile cases the PNG path gets.
@Suite struct WebPDecodeTests: CodecSuite {

    func webp(_ wand: Wand, lossless: Bool = false, quality: Int = 90) throws -> Data {
        try wand.encode(format: "WEBP", quality: quality, options: lossless ? ["webp:lossless": "true"] : [:])
    }

    func plasma(_ width: Int, _ height: Int) throws -> Wand {
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (width, height))
        return wand
    }

    @Test func lossyAndLosslessAreDecodedAtTwiceTheTarget() throws {
        for lossless in [false, true] {
            let data = try webp(try plasma(1200, 800), lossless: lossless)
            #expect(try WebPReducer.plan(data, keepsFrames: false)?.lossless == lossless)
            let (reduced, full, decoded) = try thumbnails(data)
            #expect(decoded == PixelSize(width: 300, height: 200), "lossless \(lossless)")
            #expect((reduced.width, reduced.height) == (100, 67))
            let score = try psnr(reduced, full)
            #expect(score >= 40, "lossless \(lossless): \(score) dB against ImageMagick's full decode")
        }
        // A size in the picture's proportion (libwebp maps the whole picture onto it).
        let wide = WebPReducer.Plan(width: 3840, height: 2160, alpha: false, lossless: false, payload: 0..<1, profile: nil)
        let fit = DecodeHint(targetSize: PixelSize(width: 256, height: 256), fit: true)
        #expect(WebPReducer.scaledSize(wide, hint: fit, headroom: 2) == PixelSize(width: 512, height: 288))
        let odd = WebPReducer.Plan(width: 4000, height: 2999, alpha: false, lossless: false, payload: 0..<1, profile: nil)
        let size = try #require(WebPReducer.scaledSize(odd, hint: fit, headroom: 2))
        #expect(size.width >= 512 && size.height >= 383)
        // No width within 32 gives a whole height for 4000x2999; the closest is 0.11 pixel off.
        #expect(abs(Double(size.width) * 2999 / 4000 - Double(size.height)) <= 0.12)
        // Less than twice the target: ImageMagick decodes it whole, as before.
        let small = try webp(try plasma(300, 150))
        #expect(try decoder.decode(LoadedData(data: small), hint: hint).width == 300)
    }

    @Test func alphaIsAveragedPremultipliedWithoutDarkFringes() throws {
        // Transparent black around an opaque red square: a plain average would pull the square's
        // edge towards black.
        let png = try Fixtures.alphaPNG(1200, 800)
        let source = Wand()
        try source.read(png, format: "PNG")
        let data = try webp(source, lossless: true)
        let reduced = try decoder.decode(LoadedData(data: data), hint: hint)
        try expectRedSquareWithoutFringes(reduced)
        let (a, b, _) = try thumbnails(data)
        #expect(try psnr(a, b) >= 40)
    }

    @Test func anICCProfileIsConvertedToSRGBOrKept() throws {
        let source = try plasma(1200, 800)
        let profile = try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/a98.icc"))
        try source.setICCProfile(profile)
        let data = try webp(source, lossless: true)
        #expect(try WebPReducer.plan(data, keepsFrames: false)?.profile == profile)
        let (converted, full, _) = try thumbnails(data)
        #expect(try converted.withCopy { $0.iccProfile == nil })
        #expect(try psnr(converted, full) >= 40)
        // Converted, not only dropped: different from the pixels read as they are.
        let kept = try thumbnails(data, ["to_srgb": .bool(false)])
        #expect(try kept.reduced.withCopy { $0.iccProfile == profile })
        #expect(try psnr(converted, kept.reduced) < 40)
        #expect(try psnr(kept.reduced, kept.full) >= 40)
    }

    @Test func greyStaysGreyEnough() throws {
        let source = try plasma(1200, 800)
        try source.grayscale()
        let (reduced, full, _) = try thumbnails(try webp(source, lossless: true))
        #expect(try psnr(reduced, full) >= 40)
    }

    @Test func anAnimationsFirstFrameIsReducedUnlessFramesAreKept() async throws {
        let path = try Fixtures.temporaryDirectory("webp-anim").appendingPathComponent("a.webp").path
        let made = try await Command.run("/usr/bin/convert", ["-delay", "20", "-size", "900x600", "plasma:", "xc:red", "xc:blue", "-loop", "0", path])
        try #require(made.status == 0, "\(made.stderr)")
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let plan = try #require(try WebPReducer.plan(data, keepsFrames: false))
        #expect(plan.payload.count < data.count)  // the first frame's bitstream only
        #expect(try WebPReducer.plan(data, keepsFrames: true) == nil)
        let (reduced, full, decoded) = try thumbnails(data)
        #expect(decoded == PixelSize(width: 300, height: 200))
        #expect(try psnr(reduced, full) >= 40)
        #expect(try decoder(["max_frames": .int(5)]).decode(LoadedData(data: data), hint: hint).frameCount == 3)
    }

    @Test func exifGoesThroughImageMagickForItsOrientation() throws {
        // A VP8X file with an EXIF chunk: the plan declines it.
        let data = try webp(try plasma(1200, 800))
        let exif = Self.chunk("EXIF", [UInt8]("II*\0\u{8}\0\0\0\0\0\0\0\0\0".utf8))
        #expect(try WebPReducer.plan(Self.extended(data, flags: 0x08, extra: exif), keepsFrames: false) == nil)
    }

    // MARK: Hostile input

    @Test func truncatedCorruptAndLyingFilesFailWithTheirKind() throws {
        let data = try webp(try plasma(1200, 800))
        #expect(throws: PipelineError(.decodeFailed, "WebP: the file ends before the image does")) {
            try decoder.decode(LoadedData(data: data.prefix(data.count * 2 / 3)), hint: hint)
        }
        // Bitstream damage: a clear decode failure (or, where libwebp cannot tell, an image), never a crash.
        survivesBitFlips(data, from: 40, times: 30, flips: 20, seed: 11)
        // A header that lies: the VP8 frame says 1200x800, the VP8X canvas claims 1300x900.
        let lying = Self.extended(data, flags: 0, canvas: (1300, 900))
        #expect(throws: PipelineError(.decodeFailed, "WebP: corrupt bitstream")) {
            try decoder.decode(LoadedData(data: lying), hint: hint)
        }
        // A huge declared size is refused from the header, before libwebp allocates anything.
        let huge = Self.extended(data, flags: 0, canvas: (16384, 16384))
        let refused = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: huge), hint: hint) }
        #expect(refused.kind == .tooLarge, "\(refused)")
    }

    /// A RIFF chunk: four-character tag, little-endian length, payload, padding to even.
    static func chunk(_ tag: String, _ payload: [UInt8]) -> [UInt8] {
        let n = UInt32(payload.count)
        return Array(tag.utf8) + [UInt8(n & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 24)] + payload
            + (payload.count % 2 == 1 ? [0] : [])
    }

    /// `simple` (a RIFF/WEBP file with one VP8 chunk) rewritten as VP8X with `flags`, a canvas
    /// size (by default the bitstream's), and `extra` chunks after the image.
    static func extended(_ simple: Data, flags: UInt8, canvas: (Int, Int)? = nil, extra: [UInt8] = []) -> Data {
        let bytes = [UInt8](simple)
        let image = Array(bytes[12...])
        let width = canvas?.0 ?? (Int(bytes[26]) | Int(bytes[27]) << 8) & 0x3FFF
        let height = canvas?.1 ?? (Int(bytes[28]) | Int(bytes[29]) << 8) & 0x3FFF
        func le24(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF)] }
        let header = chunk("VP8X", [flags, 0, 0, 0] + le24(width - 1) + le24(height - 1))
        let body = Array("WEBP".utf8) + header + image + extra
        let n = UInt32(body.count)
        return Data(Array("RIFF".utf8) + [UInt8(n & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 24)] + body)
    }
}
