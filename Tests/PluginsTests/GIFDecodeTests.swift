import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The GIF reduce-on-load path (giflib's first image, averaged before ImageMagick), checked against
/// ImageMagick's full decode of the same file, and fed hostile input.
@Suite struct GIFDecodeTests: CodecSuite {

    static func gif(_ arguments: [String]) async throws -> Data {
        let path = try Fixtures.temporaryDirectory("gif").appendingPathComponent("t.gif").path
        let made = try await Command.run("/usr/bin/convert", arguments + [path])
        try #require(made.status == 0, "\(made.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    @Test(arguments: [["-size", "1200x800", "plasma:", "-colors", "200"],
                      ["-size", "1200x800", "plasma:", "-colors", "64", "-interlace", "GIF"],
                      ["-size", "1200x800", "xc:none", "-fill", "red", "-draw", "rectangle 300,200 899,599"]])
    func reducedAndWithin40dBOfImageMagicksFullDecode(arguments: [String]) async throws {
        let data = try await Self.gif(arguments)
        let (reduced, full, decoded) = try thumbnails(data)
        #expect(decoded == PixelSize(width: 300, height: 200), "\(arguments)")
        #expect(reduced.hasAlpha == full.hasAlpha)
        let score = try psnr(reduced, full)
        #expect(score >= 40, "\(arguments): \(score) dB")
    }

    @Test func transparencyIsAveragedWithoutDarkFringes() async throws {
        let data = try await Self.gif(["-size", "1200x800", "xc:none", "-fill", "red", "-draw", "rectangle 300,200 899,599"])
        let reduced = try decoder.decode(LoadedData(data: data), hint: hint)
        let (corner, edge) = try reduced.withCopy { (try $0.pixel(x: 2, y: 2), try $0.pixel(x: 75, y: 100)) }
        #expect(reduced.hasAlpha && corner.alpha < 0.01)
        #expect(edge.alpha > 0.2 && edge.red > 0.99 && edge.green < 0.01, "\(edge)")
    }

    @Test func anAnimationsFirstFrameUnlessFramesAreKept() async throws {
        let data = try await Self.gif(["-delay", "10", "-size", "1200x800", "plasma:", "xc:red", "xc:blue", "-loop", "0"])
        let (reduced, full, decoded) = try thumbnails(data)
        #expect(decoded == PixelSize(width: 300, height: 200))
        #expect(try psnr(reduced, full) >= 40)
        let kept = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["max_frames": .int(5)]))
            .decode(LoadedData(data: data), hint: hint)
        #expect(kept.frameCount == 3)
        // A first image smaller than the screen: ImageMagick's (it places the frame on the screen).
        let offset = try await Self.gif(["-size", "600x400", "plasma:", "-repage", "1200x800+100+100"])
        #expect(try GIFReducer.decode(offset, factor: 4) == nil)
    }

    @Test func truncatedAndCorruptFilesFailAsDecodeFailed() async throws {
        let data = try await Self.gif(["-size", "1200x800", "plasma:", "-colors", "200"])
        let cut = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: data.prefix(data.count / 2)), hint: hint) }
        #expect(cut.kind == .decodeFailed && cut.message.hasPrefix("GIF: "), "\(cut)")
        survivesBitFlips(data, from: 13, times: 30, flips: 20, seed: 3)
        // A logical screen of 65535x65535: refused from the header.
        var huge = [UInt8](data)
        huge[6] = 0xFF; huge[7] = 0xFF; huge[8] = 0xFF; huge[9] = 0xFF
        let refused = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: Data(huge)), hint: hint) }
        #expect(refused.kind == .tooLarge, "\(refused)")
    }
}
