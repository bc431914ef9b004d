import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// JPEG XL through libjxl (``JXLReader``, ``JXLEncoder``), against libjxl's own tools: a set made
/// by `cjxl` (lossy, lossless, 16-bit, alpha, grey, a JPEG recompressed) decodes as `djxl` decodes
/// it, the reduced decode stays close to the full one, damaged files fail cleanly, and what the
/// `jxl` encoder writes `djxl` reads back.
@Suite struct JXLDecodeTests: CodecSuite {
    static func tool(_ name: String, _ arguments: [String]) async throws {
        let run = try await Command.run("/usr/bin/\(name)", arguments)
        try #require(run.status == 0, "\(name) \(arguments): \(run.stderr)")
    }

    /// A 600x400 plasma as PNG (`variant` picks 8-bit, 16-bit, grey or alpha), and `cjxl`'s file of it.
    static func made(_ variant: String, _ cjxl: [String]) async throws -> (source: URL, jxl: Data) {
        let folder = try Fixtures.temporaryDirectory("jxl")
        let source = folder.appendingPathComponent(variant == "jpeg" ? "in.jpg" : "in.png"), output = folder.appendingPathComponent("out.jxl")
        let wand = Wand()
        switch variant {
        case "alpha":
            try wand.read(try Fixtures.alphaPNG(600, 400), format: "PNG")
            try wand.encode(format: "PNG32").write(to: source)
        default:
            try wand.readBuiltIn("plasma:", size: (600, 400))
            let format = ["sixteen": "PNG48", "grey": "PNG", "jpeg": "JPEG"][variant] ?? "PNG24"
            if variant == "grey" { try await Self.tool("convert", ["-size", "600x400", "gradient:black-white", "-colorspace", "Gray", source.path]) } else {
                try wand.encode(format: format, quality: 90).write(to: source)
            }
        }
        try await tool("cjxl", [source.path, output.path] + cjxl + ["--quiet"])
        return (source, try Data(contentsOf: output))
    }

    static let kinds: [(String, String, [String])] = [
        ("lossy", "png", ["-q", "80"]), ("lossless", "png", ["-d", "0"]), ("sixteen", "sixteen", ["-d", "0"]),
        ("alpha", "alpha", ["-q", "90"]), ("grey", "grey", ["-d", "0"]), ("recompressed JPEG", "jpeg", []),
    ]

    /// Each kind decodes, at full size, to what `djxl` writes (both read as sRGB through the same
    /// path): identical, or at least 50 dB.
    @Test(arguments: 0..<6)
    func everyKindDecodesAsDjxlDoes(kind: Int) async throws {
        let (label, variant, options) = Self.kinds[kind]
        let (source, jxl) = try await Self.made(variant, options)
        #expect(FormatSniffer.sniff(jxl) == .image(.jxl), "\(label)")
        #expect(JXLFormat.entry.dimensions?(jxl) == PixelSize(width: 600, height: 400) && JXLFormat.entry.dimensions?(jxl.prefix(8)) == nil, "\(label)")
        let ours = try decoder.decode(LoadedData(data: jxl), hint: DecodeHint())
        #expect(ours.sourceFormat == "JXL" && ours.width == 600 && ours.height == 400, "\(label)")
        let reference = source.deletingLastPathComponent().appendingPathComponent("djxl.png")
        try await Self.tool("djxl", [source.deletingLastPathComponent().appendingPathComponent("out.jxl").path, reference.path, "--quiet"])
        let theirs = try decoder.decode(LoadedData(data: try Data(contentsOf: reference)), hint: DecodeHint())
        let score = try psnr(ours, theirs)
        #expect(score >= 50, "\(label): \(score) dB against djxl")
        #expect(ours.hasAlpha == (variant == "alpha"), "\(label)")
    }

    /// Under a 100 px hint a 1200x800 file is averaged to 300x200 after libjxl's decode, within
    /// 40 dB of the full decode's thumbnail; alpha is averaged premultiplied.
    @Test func reducedAndWithin40dBOfTheFullDecode() async throws {
        let folder = try Fixtures.temporaryDirectory("jxl-big")
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (1200, 800))
        try wand.encode(format: "PNG24").write(to: folder.appendingPathComponent("in.png"))
        try await Self.tool("cjxl", [folder.appendingPathComponent("in.png").path, folder.appendingPathComponent("out.jxl").path, "-q", "85", "--quiet"])
        let (reduced, full, decoded) = try thumbnails(try Data(contentsOf: folder.appendingPathComponent("out.jxl")))
        #expect(decoded == PixelSize(width: 300, height: 200))
        #expect(try psnr(reduced, full) >= 40)
        let alpha = Wand()
        try alpha.read(try Fixtures.alphaPNG(1200, 800), format: "PNG")
        try alpha.encode(format: "PNG32").write(to: folder.appendingPathComponent("alpha.png"))
        try await Self.tool("cjxl", [folder.appendingPathComponent("alpha.png").path, folder.appendingPathComponent("alpha.jxl").path, "-d", "0", "--quiet"])
        let square = try decoder.decode(LoadedData(data: try Data(contentsOf: folder.appendingPathComponent("alpha.jxl"))), hint: hint)
        try expectRedSquareWithoutFringes(square, "JXL")
    }

    /// A truncated file, flipped bytes and a picture over the decoder's limits each fail with a
    /// kind the report names, never a crash; the EXIF and XMP of a recompressed JPEG are read
    /// from the container's boxes.
    @Test func damagedFilesFailCleanlyAndBoxesAreRead() async throws {
        let (_, jxl) = try await Self.made("png", ["-q", "80"])
        #expect(throws: PipelineError.self) { _ = try decoder.decode(LoadedData(data: jxl.prefix(jxl.count / 2)), hint: hint) }
        do { _ = try decoder.decode(LoadedData(data: jxl.prefix(jxl.count / 2)), hint: hint) } catch let error as PipelineError {
            #expect(error.kind == .decodeFailed && error.message.hasPrefix("JXL: "), "\(error)")
        }
        survivesBitFlips(jxl, from: 16, times: 40, flips: 4, seed: 62)
        #expect(throws: PipelineError(.tooLarge, "")) {
            do { _ = try decoder(["max_pixels": .int(10_000)]).decode(LoadedData(data: jxl), hint: DecodeHint()) } catch let error as PipelineError {
                throw PipelineError(error.kind, "")
            }
        }
        let (source, _) = try await Self.made("jpeg", [])
        try await Self.tool("exiftool", ["-q", "-overwrite_original", "-Make=Probe", "-XMP-dc:Title=Probe", source.path])
        let tagged = source.deletingLastPathComponent().appendingPathComponent("tagged.jxl")
        try await Self.tool("cjxl", [source.path, tagged.path, "--quiet"])
        let boxes = JXLCodec.metadataBoxes(try Data(contentsOf: tagged))
        #expect(boxes.exif.map { ExifRewriter.text($0, .main, 0x010F) } == "Probe", "\(boxes.exif as Any)")
        #expect(boxes.xmp.map { String(decoding: $0, as: UTF8.self).contains("Probe") } == true)
    }

    /// The `jxl` encoder: lossy files djxl reads back close to the source (smaller at a larger
    /// distance), lossless ones identical, alpha kept.
    @Test func theEncoderWritesWhatDjxlReads() async throws {
        let folder = try Fixtures.temporaryDirectory("jxl-out")
        let source = Wand()
        try source.readBuiltIn("plasma:", size: (600, 400))
        let image = try decoder.decode(LoadedData(data: try source.encode(format: "PNG24")), hint: DecodeHint())
        func written(_ options: [String: OptionValue], _ image: PipelineImage) async throws -> (bytes: Int, back: PipelineImage) {
            let encoder = try JXLEncoder.plugin.makeEncoder(JXLEncoder.plugin.options(options))
            let data = try encoder.encode(image)
            #expect(FormatSniffer.sniff(data) == .image(.jxl))
            // djxl's PNG read as it is: the samples as decoded, its profile not applied.
            let file = folder.appendingPathComponent("w.jxl"), back = folder.appendingPathComponent("w.png")
            try data.write(to: file)
            try await Self.tool("djxl", [file.path, back.path, "--quiet"])
            let wand = Wand()
            try wand.read(try Data(contentsOf: back), format: "PNG")
            return (data.count, PipelineImage(taking: wand, sourceFormat: "PNG"))
        }
        let fine = try await written(["distance": .number(1)], image), coarse = try await written(["distance": .number(4)], image)
        let fineScore = try psnr(fine.back, image)
        // cjxl at the same distance and effort, on the same pixels: the same quality and size.
        let png = folder.appendingPathComponent("source.png"), theirs = folder.appendingPathComponent("cjxl.jxl")
        try source.encode(format: "PNG24").write(to: png)
        try await Self.tool("cjxl", [png.path, theirs.path, "-d", "1", "--quiet"])
        try await Self.tool("djxl", [theirs.path, folder.appendingPathComponent("cjxl.png").path, "--quiet"])
        let back = Wand()
        try back.read(try Data(contentsOf: folder.appendingPathComponent("cjxl.png")), format: "PNG")
        let cjxlScore = try psnr(PipelineImage(taking: back, sourceFormat: "PNG"), image)
        let cjxlBytes = try Data(contentsOf: theirs).count
        #expect(abs(fineScore - cjxlScore) <= 0.5 && abs(fine.bytes - cjxlBytes) <= cjxlBytes / 10,
                "ours \(fineScore) dB in \(fine.bytes) bytes, cjxl's \(cjxlScore) dB in \(cjxlBytes)")
        #expect(coarse.bytes < fine.bytes / 2, "\(fine.bytes) and \(coarse.bytes) bytes")
        let losslessScore = try psnr(try await written(["lossless": .bool(true)], image).back, image)
        #expect(losslessScore.isInfinite, "lossless: \(losslessScore) dB")
        let alpha = try decoder.decode(LoadedData(data: try Fixtures.alphaPNG(300, 200)), hint: DecodeHint())
        let kept = try await written(["lossless": .bool(true), "effort": .int(3)], alpha)
        let keptScore = try psnr(kept.back, alpha)
        #expect(kept.back.hasAlpha && keptScore.isInfinite, "alpha: \(keptScore) dB")
    }

    /// `auto` writes JPEG XL only where `prefer` names it and `allow_formats` lets it (serve
    /// narrows that to the request's Accept), never for an animation, at the quality measured to
    /// look like WebP's, lowered to fit `max_bytes`; a JPEG XL source stays JPEG XL by default.
    @Test func autoWritesJXLOnlyWherePreferredAndAllowed() async throws {
        func auto(_ values: [String: OptionValue]) throws -> any ImageEncoding {
            try AutoEncoder.plugin.makeEncoder(AutoEncoder.plugin.options(values))
        }
        let source = Wand()
        try source.readBuiltIn("plasma:", size: (600, 400))
        let image = try decoder.decode(LoadedData(data: try source.encode(format: "PNG24")), hint: DecodeHint())
        let first: OptionValue = .list([.string("jxl"), .string("avif"), .string("webp")])
        #expect(try auto(["prefer": first]).fileExtension(for: image) == "jxl")
        let written = try auto(["prefer": first, "quality": .int(80)]).encode(image)
        #expect(FormatSniffer.sniff(written) == .image(.jxl))
        let mapped = AutoEncoder.jxlQuality(matching: 80)
        #expect(try written == JXLEncoder(distance: JXLEncoder.distance(quality: Double(mapped))).encode(image), "quality \(mapped)")
        let set = try auto(["prefer": first, "jxl_quality": .int(40)]).encode(image)
        #expect(try set == JXLEncoder(distance: JXLEncoder.distance(quality: 40)).encode(image) && set.count < written.count)
        let withoutJXL: OptionValue = .list(["jpeg", "png", "webp", "avif"].map { .string($0) })
        #expect(try auto(["prefer": first, "allow_formats": withoutJXL]).fileExtension(for: image) == "avif")
        #expect(try auto(["prefer": .list([.string("avif"), .string("webp")])]).fileExtension(for: image) == "avif")
        #expect(try auto([:]).fileExtension(for: image) == "png")
        // max_bytes lowers JPEG XL's quality as it does the others'; too small is too_large.
        let fitted = try auto(["prefer": first, "max_bytes": .int(written.count * 2 / 3)]).encode(image)
        #expect(FormatSniffer.sniff(fitted) == .image(.jxl) && fitted.count <= written.count * 2 / 3, "\(fitted.count) of \(written.count)")
        #expect(throws: PipelineError.self) { try auto(["prefer": first, "max_bytes": .int(1024)]).encode(image) }
        // A JPEG XL source is kept as JPEG XL; an animation is not written as JPEG XL.
        let (_, jxl) = try await Self.made("png", ["-q", "80"])
        #expect(try auto([:]).fileExtension(for: try decoder.decode(LoadedData(data: jxl), hint: DecodeHint())) == "jxl")
        let gif = try Fixtures.temporaryDirectory("jxl-anim").appendingPathComponent("a.gif")
        try await Self.tool("convert", ["-delay", "20", "-size", "60x40", "xc:red", "xc:lime", "-loop", "0", gif.path])
        let magick = try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["max_frames": .int(10)]))
        let animated = try magick.decode(LoadedData(data: try Data(contentsOf: gif)), hint: DecodeHint())
        #expect(animated.frameCount == 2)
        #expect(try auto(["prefer": first]).fileExtension(for: animated) == "avif" || auto(["prefer": first]).fileExtension(for: animated) == "webp")
    }

    /// The EXIF and XMP a pipeline keeps are written as the file's boxes, where exiftool and our
    /// reader find them; an image left as stored (not turned upright) keeps its orientation in
    /// the codestream, so readers turn it.
    @Test func theEncoderWritesKeptMetadataAndOrientation() async throws {
        let (source, _) = try await Self.made("jpeg", [])
        try await Self.tool("exiftool", ["-q", "-overwrite_original", "-Make=Probe", "-XMP-dc:Title=Probe", source.path])
        let tagged = source.deletingLastPathComponent().appendingPathComponent("tagged.jxl")
        try await Self.tool("cjxl", [source.path, tagged.path, "--quiet"])
        let boxes = JXLCodec.metadataBoxes(try Data(contentsOf: tagged))
        let exif = try #require(boxes.exif), xmp = try #require(boxes.xmp)
        var image = try decoder.decode(LoadedData(data: try Data(contentsOf: tagged)), hint: DecodeHint())
        image.metadata = ImageMetadata(exif: exif, xmp: xmp)
        let encoder = JXLEncoder(distance: 1)
        let written = try encoder.encode(image)
        let back = JXLCodec.metadataBoxes(written)
        #expect(back.exif == exif && back.xmp == xmp)
        let file = source.deletingLastPathComponent().appendingPathComponent("ours.jxl")
        try written.write(to: file)
        let read = try await Command.run("/usr/bin/exiftool", ["-s3", "-Make", "-XMP-dc:Title", file.path])
        #expect(read.stdout.split(separator: "\n") == ["Probe", "Probe"], "\(read.stdout) \(read.stderr)")
        // Without metadata: the bare codestream, as before.
        image.metadata = ImageMetadata()
        let bare = try encoder.encode(image)
        #expect(bare.starts(with: [0xFF, 0x0A]) && JXLCodec.metadataBoxes(bare).exif == nil)
        // Stored sideways (orientation 6, not turned): readers turn it upright.
        image.metadata = ImageMetadata(orientation: 6, upright: false)
        let turned = try decoder.decode(LoadedData(data: try encoder.encode(image)), hint: DecodeHint())
        #expect(turned.width == 400 && turned.height == 600, "\(turned.width)x\(turned.height)")
    }

    /// A codestream whose header claims 100,000 x 100,000 (made bit by bit: no tool writes one)
    /// is refused as too large from its header, before any pixel buffer is made, by default
    /// limits; its size is still read for facts.
    @Test func aHeaderClaiming100kBy100kIsRefusedFromTheHeader() throws {
        var bits: [Bool] = []
        func put(_ value: Int, _ count: Int) { for bit in 0..<count { bits.append(value >> bit & 1 == 1) } }
        put(0, 1)           // SizeHeader: not small
        put(2, 2)           // ysize - 1 in 18 bits
        put(99_999, 18)
        put(1, 3)           // ratio 1:1, so xsize = ysize
        put(1, 1)           // ImageMetadata: all default
        var data = Data([0xFF, 0x0A])
        for start in stride(from: 0, to: bits.count, by: 8) {
            data.append(bits[start..<min(start + 8, bits.count)].enumerated().reduce(UInt8(0)) { $0 | ($1.element ? 1 << $1.offset : 0) })
        }
        data.append(Data(count: 64))
        #expect(FormatSniffer.sniff(data) == .image(.jxl))
        #expect(JXLFormat.entry.dimensions?(data) == PixelSize(width: 100_000, height: 100_000))
        do {
            _ = try decoder.decode(LoadedData(data: data), hint: DecodeHint())
            Issue.record("a 100,000 x 100,000 header was decoded")
        } catch let error as PipelineError {
            #expect(error.kind == .tooLarge && error.message.contains("100000x100000"), "\(error)")
        }
    }
}
