import Foundation
import PipelineKit
@testable import Plugins
import Testing
import TestSupport

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

    @Test func htmlIsAnUnsupportedFormat() {
        let html = Data("<!DOCTYPE html><html><body>Not found</body></html>".utf8)
        #expect(failure(html, contentType: "image/jpeg")
            == PipelineError(.unsupportedFormat, "the content is HTML, not an accepted image format (served as image/jpeg)"))
    }

    @Test func plainTextIsAnUnsupportedFormat() {
        #expect(failure(Data("hello, world\n".utf8)) == PipelineError(.unsupportedFormat, "the content is text, not an accepted image format"))
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
        #expect(failure(svg) == PipelineError(.unsupportedFormat, "the content is SVG, not an accepted image format"))
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
        #expect(image.width == 500 && image.height == 375)  // 1/4: the smallest scale >= 256x256
        let small = try Fixtures.image("rose:")
        let rose = try decoder.decode(LoadedData(data: small), hint: DecodeHint(targetSize: PixelSize(width: 256, height: 256)))
        #expect(rose.width == 70 && rose.height == 46)  // never scaled up
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
