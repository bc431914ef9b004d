import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestSupport

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
    static func chunks(_ png: Data) -> [String] {
        let bytes = [UInt8](png)
        var types: [String] = [], at = 8
        while at + 8 <= bytes.count {
            let length = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
            types.append(String(decoding: bytes[(at + 4)..<(at + 8)], as: UTF8.self))
            at += 12 + length
        }
        return types
    }

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
