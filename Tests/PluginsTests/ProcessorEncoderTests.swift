import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

@Suite struct ResizeTests {
    func resize(_ values: [String: OptionValue]) throws -> Resize {
        var all = Resize.plugin.defaultOptions.values
        for (k, v) in values { all[k] = v }
        return try Resize(options: PluginOptions(all))
    }

    @Test func fitKeepsAspectRatio() throws {
        let r = try resize(["width": .int(256), "height": .int(256)])
        #expect(r.plan(for: 4000, 3000).scaled == PixelSize(width: 256, height: 192))
        #expect(r.plan(for: 3000, 4000).scaled == PixelSize(width: 192, height: 256))
        #expect(r.plan(for: 100, 50).scaled == PixelSize(width: 100, height: 50))  // no upscale by default
    }

    @Test func fillCoversThenCrops() throws {
        let r = try resize(["width": .int(128), "height": .int(128), "mode": .string("fill")])
        let plan = r.plan(for: 4000, 3000)
        #expect(plan.scaled == PixelSize(width: 171, height: 128))
        #expect(plan.crop == PixelSize(width: 128, height: 128))
    }

    @Test func widthOnlyFollowsAspect() throws {
        let r = try resize(["width": .int(1000)])
        #expect(r.plan(for: 4000, 3000).scaled == PixelSize(width: 1000, height: 750))
    }

    @Test func processesPixels() throws {
        let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)
        let image = try decoder.decode(LoadedData(data: try Fixtures.jpeg(800, 600)), hint: DecodeHint())
        let filled = try resize(["width": .int(100), "height": .int(100), "mode": .string("fill")]).process(image)
        #expect(filled.width == 100 && filled.height == 100)
        #expect(image.width == 800)  // the input is unchanged
        let stretched = try resize(["width": .int(50), "height": .int(200), "mode": .string("stretch")]).process(image)
        #expect(stretched.width == 50 && stretched.height == 200)
    }

    @Test func identifierChangesWithOptions() throws {
        let a = try resize(["width": .int(100)]).identifier
        let b = try resize(["width": .int(101)]).identifier
        let c = try resize(["width": .int(100), "filter": .string("mitchell")]).identifier
        #expect(Set([a, b, c]).count == 3)
    }
}

@Suite struct EncoderTests {
    let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)

    func roundTrip(_ plugin: Plugin, _ input: Data) async throws -> Identified {
        let image = try decoder.decode(LoadedData(data: input), hint: DecodeHint())
        let encoder = PipelineKit.StageConfig(plugin: plugin, options: plugin.defaultOptions,
                                                  position: SourcePosition(line: 1, column: 1))
        let made = try Self.make(encoder)
        let data = try made.encode(image)
        let dir = try Fixtures.temporaryDirectory()
        let path = dir.appendingPathComponent("out.\(made.fileExtension)").path
        try data.write(to: URL(fileURLWithPath: path))
        return try await Identified.file(path)
    }

    static func make(_ config: StageConfig) throws -> any ImageEncoding {
        switch config.plugin.spec.name {
        case "jpeg": return try JPEGEncoder(options: config.options)
        case "png": return try PNGEncoder(options: config.options)
        default: return try WebPEncoder(options: config.options)
        }
    }

    @Test func everyEncoderWritesItsFormat() async throws {
        let source = try Fixtures.alphaPNG(120, 80)
        #expect(try await roundTrip(JPEGEncoder.plugin, source) == Identified(format: "JPEG", width: 120, height: 80))
        #expect(try await roundTrip(PNGEncoder.plugin, source) == Identified(format: "PNG", width: 120, height: 80))
        #expect(try await roundTrip(WebPEncoder.plugin, source) == Identified(format: "WEBP", width: 120, height: 80))
    }

    /// ImageMagick keeps 16 bits a channel; its PNG writer truncates them to 8 bits in Debian's
    /// Q16 build, which left every PNG it wrote from resized pixels half a level darker on average
    /// (about 2 dB of PSNR). Values must round to the nearest level through each writer the
    /// encoders use and the PNG encoder's grey path.
    @Test func eightBitOutputsRoundSixteenBitValues() throws {
        // 128.70, 100.30 and exactly 102 levels: rounding differs from truncating on the first and
        // from rounding up on the second, and must leave the third as it is.
        let percents = [50.4707, 39.3332, 40.0]
        let levels = percents.map { ($0 / 100 * 65535).rounded() / 257 }
        #expect(levels[0].rounded() != levels[0].rounded(.down) && levels[1].rounded() != levels[1].rounded(.up))
        let expected = levels.map { Int($0.rounded()) }
        func channels(_ data: Data) throws -> [Int] {
            let back = try decoder.decode(LoadedData(data: data), hint: DecodeHint())
            let pixel = try back.withCopy { try $0.pixel(x: 3, y: 2) }
            return [pixel.red, pixel.green, pixel.blue].map { Int(($0 * 255).rounded()) }
        }
        let colour = Wand()
        try colour.readBuiltIn("xc:rgb(\(percents.map { "\($0)%" }.joined(separator: ",")))", size: (8, 4))
        for format in ["PNG", "TIFF", "GIF", "BMP"] {
            #expect(try channels(colour.clone().encode(format: format)) == expected, "\(format)")
        }
        // The same wand written twice (a size limit's retries) is written the same.
        let twice = colour.clone()
        #expect(try twice.encode(format: "PNG") == (try twice.encode(format: "PNG")))
        let lossless = try colour.clone().encode(format: "WEBP", options: ["webp:lossless": "true"])
        #expect(try channels(lossless) == expected, "WEBP")
        let grey = Wand()
        try grey.readBuiltIn("xc:gray(\(percents[0])%)", size: (8, 4))
        let png = try PNGEncoder(options: PNGEncoder.plugin.defaultOptions).encode(PipelineImage(taking: grey))
        #expect(try channels(png) == Array(repeating: expected[0], count: 3))
    }

    @Test func jpegFlattensAlphaOntoWhite() throws {
        let image = try decoder.decode(LoadedData(data: try Fixtures.alphaPNG(40, 40)), hint: DecodeHint())
        #expect(image.hasAlpha)
        let jpeg = try JPEGEncoder(options: JPEGEncoder.plugin.defaultOptions).encode(image)
        let back = try decoder.decode(LoadedData(data: jpeg), hint: DecodeHint())
        #expect(!back.hasAlpha)
        let corner = try back.withCopy { try $0.pixel(x: 1, y: 1) }
        // White, not black: (240, 255, 249) here, the red square's chroma rings across its 16x16 block.
        #expect(corner.red > 0.9 && corner.green > 0.9 && corner.blue > 0.9)
        let centre = try back.withCopy { try $0.pixel(x: 20, y: 20) }
        #expect(centre.red > 0.9 && centre.green < 0.1)  // the red square
    }
}
