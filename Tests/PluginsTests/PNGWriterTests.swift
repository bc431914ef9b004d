import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// PNG outputs written by libpng: exactly the image's 8-bit pixels, only the chunks the pipeline
/// keeps, and ImageMagick's writer for what this path does not cover.
@Suite struct PNGWriterTests {
    static func decode(_ data: Data) throws -> PipelineImage {
        try ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions).decode(LoadedData(data: data), hint: DecodeHint())
    }

    static func plasma() throws -> PipelineImage {
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (300, 200))
        return PipelineImage(taking: wand)
    }

    /// The chunk types of a PNG, in order.
    static func chunks(_ png: Data) -> [String] { PNGInflatedCopyTests.chunks(png).map(\.type) }

    static func pixels(_ image: PipelineImage) throws -> [UInt8] {
        try image.withCopy { try $0.bytes(channels: image.hasAlpha ? "RGBA" : "RGB") }
    }

    @Test(arguments: [false, true])
    func theImagesOwnPixelsAndNoOtherChunks(alpha: Bool) throws {
        let image = alpha ? try Self.decode(try Fixtures.alphaPNG(300, 200)) : try Self.plasma()
        #expect(image.hasAlpha == alpha)
        let encoder = try PNGEncoder(options: PNGEncoder.plugin.defaultOptions)
        let png = try encoder.encode(image)
        #expect(png == (try PNGWriter.write(image, level: 5, filter: .adaptive)))  // the encoder's path, at its default level
        #expect(Set(Self.chunks(png)) == ["IHDR", "IDAT", "IEND"], "\(Self.chunks(png))")
        let back = try Self.decode(png)
        #expect(back.hasAlpha == alpha)
        #expect(try Self.pixels(back) == Self.pixels(image))
        if alpha {  // a PNG source: `auto` keeps PNG and writes it the same way
            #expect(image.sourceFormat == "PNG")
            let auto = try AutoEncoder.plugin.makeEncoder(AutoEncoder.plugin.defaultOptions).encode(image)
            #expect(auto == png)
        }
        // Another filter and level: other bytes, the same pixels.
        let none = try #require(try PNGWriter.write(image, level: 1, filter: .none))
        #expect(none != png)
        #expect(try Self.pixels(Self.decode(none)) == Self.pixels(image))
        let sub = try PNGEncoder(options: PNGEncoder.plugin.options(["filter": .string("sub"), "compression": .int(9)])).encode(image)
        #expect(try Self.pixels(Self.decode(sub)) == Self.pixels(image))
    }

    /// Pixels that do not compress (a seeded generator): image data of several MiB.
    static func noise(_ count: Int) -> [UInt8] {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        return (0..<count).map { _ in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 56)
        }
    }

    /// Small images go through libdeflate whole, large ones through libpng's zlib stream: every
    /// filter and level, both channel counts, give the image's own pixels either way.
    @Test(arguments: [3, 4])
    func libdeflatesImageDataAndLibpngsStreamGiveTheSamePixels(channels: Int) throws {
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (301, 199))  // an odd width: rows that do not align
        let pixels = try wand.bytes(channels: channels == 4 ? "RGBA" : "RGB")
        let image = try Self.decode(#require(try PNGWriter.write(pixels, width: 301, height: 199, channels: channels, profile: nil,
                                                                 level: 0, filter: .none, wholeLimit: 0)))
        #expect(try Self.pixels(image) == pixels)
        for filter in PNGWriter.Filter.allCases {
            for level in [0, 1, 5, 9] {
                let whole = try #require(try PNGWriter.write(pixels, width: 301, height: 199, channels: channels, profile: nil,
                                                             level: level, filter: filter))
                let streamed = try #require(try PNGWriter.write(pixels, width: 301, height: 199, channels: channels, profile: nil,
                                                                level: level, filter: filter, wholeLimit: 0))
                #expect(whole != streamed, "\(filter) \(level): libdeflate and zlib write other bytes")
                #expect(Self.chunks(whole) == ["IHDR", "IDAT", "IEND"])
                let back = try Self.decode(whole)
                #expect(back.hasAlpha == (channels == 4))
                #expect(try Self.pixels(back) == pixels, "\(filter) at level \(level)")
                if level == 5, filter == .adaptive {
                    // As small as zlib's at the same level, give or take (plasma: 2.6% smaller in
                    // RGB, 1.7% larger in RGBA); level 0 by mistake would be three times larger.
                    #expect(Double(whole.count) <= Double(streamed.count) * 1.05, "\(whole.count) against \(streamed.count)")
                }
            }
        }
    }

    /// Image data over 1 MiB is split into IDAT chunks of 1 MiB, which every reader joins.
    @Test func imageDataOverOneMiBIsSplitIntoIDATChunks() throws {
        let (width, height) = (1000, 800)
        let pixels = Self.noise(width * height * 3)
        let png = try #require(try PNGWriter.write(pixels, width: width, height: height, channels: 3, profile: nil,
                                                   level: 5, filter: .adaptive))
        #expect(Self.chunks(png) == ["IHDR", "IDAT", "IDAT", "IDAT", "IEND"], "\(Self.chunks(png))")
        #expect(try Self.pixels(Self.decode(png)) == pixels)
    }

    @Test func anICCProfileIsKeptAsAniCCPChunkUnlessTheMetadataDropsIt() throws {
        let profile = try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/a98.icc"))
        var image = try Self.plasma().transformed { try $0.setICCProfile(profile) }
        let kept = try #require(try PNGWriter.write(image, level: 6, filter: .adaptive))
        #expect(Self.chunks(kept).contains("iCCP"))
        let asStored = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["to_srgb": .bool(false)]))
        let back = try asStored.decode(LoadedData(data: kept), hint: DecodeHint())
        #expect(try back.withCopy { $0.iccProfile } == profile)
        image.metadata = ImageMetadata(keepsICC: false)
        let dropped = try #require(try PNGWriter.write(image, level: 6, filter: .adaptive))
        #expect(!Self.chunks(dropped).contains("iCCP"))
    }

    @Test func exifPaletteAndMaxBytesStayWithImageMagick() throws {
        var image = try Self.plasma()
        // EXIF (a TIFF structure with no entries) to keep: ImageMagick writes it as eXIf.
        image.metadata = ImageMetadata(exif: Data([0x49, 0x49, 0x2A, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]))
        #expect(try PNGWriter.write(image, level: 6, filter: .adaptive) == nil)
        let withExif = try PNGEncoder(options: PNGEncoder.plugin.defaultOptions).encode(image)
        #expect(Self.chunks(withExif).contains("eXIf"), "\(Self.chunks(withExif))")
        let palette = try PNGEncoder(options: PNGEncoder.plugin.options(["palette": .bool(true)])).encode(try Self.plasma())
        let decoded = try Self.decode(palette)
        #expect((decoded.width, decoded.height) == (300, 200))
        #expect(Self.chunks(palette).contains("PLTE"))
        #expect(throws: PipelineError.self) {
            try PNGEncoder(options: PNGEncoder.plugin.options(["max_bytes": .int(1024)])).encode(try Self.plasma())
        }
    }
}
