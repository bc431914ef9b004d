import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The AVIF and HEIC reduce-on-load path (libheif to 8 bits, averaged before ImageMagick), checked
/// against ImageMagick's full decode of the same file, and fed hostile input.
@Suite struct HEIFDecodeTests: CodecSuite {

    static func encoded(_ format: String, _ wand: Wand) throws -> Data {
        try wand.encode(format: format, quality: 90)
    }

    static func plasma(_ width: Int, _ height: Int) throws -> Wand {
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (width, height))
        return wand
    }

    @Test(arguments: ["HEIC", "AVIF"])
    func reducedAndWithin40dBOfImageMagicksFullDecode(format: String) throws {
        let data = try Self.encoded(format, try Self.plasma(1200, 800))
        let (reduced, full, decoded) = try thumbnails(data)
        #expect(decoded == PixelSize(width: 300, height: 200))  // blocks of 4: twice the 100x67 it fits to
        #expect(reduced.sourceFormat == format)
        let score = try psnr(reduced, full)
        #expect(score >= 40, "\(format): \(score) dB")
        // Under twice the target: ImageMagick decodes it whole, as before.
        let small = try Self.encoded(format, try Self.plasma(300, 200))
        #expect(try decoder.decode(LoadedData(data: small), hint: hint).width == 300)
    }

    /// `source` losslessly encoded by the format's reference encoder (heif-enc for HEIC, avifenc for
    /// AVIF), which keep alpha and the ICC profile (ImageMagick's HEIF writer drops both, and its
    /// HEIF reader ignores both: the reference for these is the source, fully decoded).
    static func reference(_ format: String, _ source: Wand) async throws -> Data {
        let folder = try Fixtures.temporaryDirectory("heif")
        let input = folder.appendingPathComponent("in.png"), output = folder.appendingPathComponent("out." + format.lowercased())
        try source.clone().encode(format: source.hasAlpha ? "PNG32" : "PNG24").write(to: input)
        let made = format == "HEIC"
            ? try await Command.run("/usr/bin/heif-enc", ["-L", "-p", "chroma=444", "--matrix_coefficients=0", input.path, "-o", output.path])
            : try await Command.run("/usr/bin/avifenc", ["--lossless", "-s", "9", input.path, output.path])
        try #require(made.status == 0, "\(made.stderr)")
        return try Data(contentsOf: output)
    }

    @Test(arguments: ["HEIC", "AVIF"])
    func alphaIsAveragedPremultiplied(format: String) async throws {
        let source = Wand()
        try source.read(try Fixtures.alphaPNG(1200, 800), format: "PNG")
        let data = try await Self.reference(format, source)
        let reduced = try decoder.decode(LoadedData(data: data), hint: hint)
        // Lossless, but through YUV: a little slack.
        try expectRedSquareWithoutFringes(reduced, slack: 0.04, format)
        let reference = try thumbnails(try source.encode(format: "PNG32")).full
        let (a, _, _) = try thumbnails(data)
        #expect(try psnr(a, reference) >= 40, "\(format)")
    }

    @Test(arguments: ["HEIC", "AVIF"])
    func anICCProfileIsConvertedToSRGBOrKept(format: String) async throws {
        let source = try Self.plasma(1200, 800)
        let profile = try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/a98.icc"))
        try source.setICCProfile(profile)
        let data = try await Self.reference(format, source)
        let plan = try HEIFReducer.File(data).plan
        #expect(plan.profile == profile)
        let (converted, _, _) = try thumbnails(data)
        #expect(try converted.withCopy { $0.iccProfile == nil })
        // Against the source PNG fully decoded (converted through its profile by lcms).
        let reference = try thumbnails(try source.encode(format: "PNG")).full
        #expect(try psnr(converted, reference) >= 40, "\(format)")
        let kept = try thumbnails(data, ["to_srgb": .bool(false)])
        #expect(try kept.reduced.withCopy { $0.iccProfile == profile })
        #expect(try psnr(converted, kept.reduced) < 40)  // converted, not only dropped
    }

    @Test(arguments: [("HEIC", ["-q", "80"]), ("AVIF", ["-d", "12"])])
    func deeperSamplesComeOutAs8Bits(format: String, options: [String]) async throws {
        // heif-enc writes 10 bits a sample by default; avifenc -d 12 writes 12.
        let folder = try Fixtures.temporaryDirectory("heif-deep")
        let input = folder.appendingPathComponent("in.png"), output = folder.appendingPathComponent("out." + format.lowercased())
        let source = try Self.plasma(1200, 800)
        try source.encode(format: "PNG24").write(to: input)
        let made = format == "HEIC"
            ? try await Command.run("/usr/bin/heif-enc", options + [input.path, "-o", output.path])
            : try await Command.run("/usr/bin/avifenc", options + [input.path, output.path])
        try #require(made.status == 0, "\(made.stderr)")
        let (reduced, _, decoded) = try thumbnails(try Data(contentsOf: output))
        #expect(decoded == PixelSize(width: 300, height: 200))
        let reference = try thumbnails(try source.encode(format: "PNG")).full
        let score = try psnr(reduced, reference)
        #expect(score >= 35, "\(format) \(options): \(score) dB against the source (a lossy encode)")
    }

    @Test(arguments: ["HEIC", "AVIF"])
    func truncatedAndCorruptFilesFailAsDecodeFailed(format: String) throws {
        let data = try Self.encoded(format, try Self.plasma(1200, 800))
        let cut = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: data.prefix(data.count * 2 / 3)), hint: hint) }
        #expect(cut.kind == .decodeFailed, "\(cut)")
        survivesBitFlips(data, from: 0, times: 20, flips: 20, seed: 5, kinds: [.decodeFailed, .tooLarge, .notAnImage, .unsupportedFormat])
    }

    @Test func aHeaderThatUnderstatesTheSizeDoesNotGetPastTheLimits() throws {
        // 'ispe' rewritten to 300x200 over a coded 1200x800 image: within max_pixels 100000 as
        // claimed, 960000 pixels as decoded.
        let data = try Self.encoded("HEIC", try Self.plasma(1200, 800))
        var bytes = [UInt8](data)
        let ispe = try #require(data.range(of: Data("ispe".utf8)))
        let at = ispe.upperBound + 4
        for (i, value) in [UInt32(300), UInt32(200)].enumerated() {
            for k in 0..<4 { bytes[at + i * 4 + k] = UInt8(value >> (24 - 8 * k) & 0xFF) }
        }
        let limited = try decoder(["max_pixels": .int(100_000)])
        #expect(throws: PipelineError(.tooLarge, "HEIF: the image decodes to 1200x800, beyond the limits; its header said 300x200")) {
            try limited.decode(LoadedData(data: Data(bytes)), hint: hint)
        }
    }

    @Test func aHugeDeclaredSizeIsRefusedBeforeDecoding() throws {
        // The image spatial extents ('ispe') rewritten to 30000x30000: refused from the header.
        let data = try Self.encoded("HEIC", try Self.plasma(600, 400))
        var bytes = [UInt8](data)
        let ispe = try #require(data.range(of: Data("ispe".utf8)))
        let at = ispe.upperBound + 4  // version and flags
        for (i, value) in [UInt32(30000), UInt32(30000)].enumerated() {
            for k in 0..<4 { bytes[at + i * 4 + k] = UInt8(value >> (24 - 8 * k) & 0xFF) }
        }
        let error = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: Data(bytes)), hint: hint) }
        #expect(error.kind == .tooLarge || error.kind == .decodeFailed, "\(error)")
    }
}
