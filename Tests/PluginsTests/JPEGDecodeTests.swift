import CJPEGMemory
import CMagickWand
import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The JPEG reduce-on-load path (libjpeg-turbo's DCT scaling and block averaging, without
/// ImageMagick's coder), checked against ImageMagick's full decode of the same file, and fed
/// hostile input.
@Suite struct JPEGDecodeTests: CodecSuite {

    static func plasma(_ width: Int = 1600, _ height: Int = 800) throws -> Wand {
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (width, height))
        return wand
    }

    /// `jpeg` with an EXIF block holding only the orientation tag, inserted after SOI.
    static func oriented(_ jpeg: Data, _ orientation: UInt8) -> Data {
        let tiff: [UInt8] = Array("II".utf8) + [0x2A, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, orientation, 0, 0, 0, 0, 0, 0, 0]
        let payload = Array("Exif".utf8) + [0, 0] + tiff
        let length = payload.count + 2
        return Data([0xFF, 0xD8, 0xFF, 0xE1, UInt8(length >> 8), UInt8(length & 0xFF)] + payload + [UInt8](jpeg.dropFirst(2)))
    }

    @Test func reducedWithoutImageMagicksCoderAndWithin40dB() throws {
        let data = try Self.plasma().encode(format: "JPEG", quality: 92)
        let (reduced, full, decoded) = try thumbnails(data)
        // 8x to the 100x100 box on the short side: 1/4 by DCT scaling keeps twice it.
        #expect(decoded == PixelSize(width: 400, height: 200))
        // With a fit hint only the long side counts (16x): 1/4, then blocks of 2.
        let fit = try decoder.decode(LoadedData(data: data), hint: DecodeHint(targetSize: PixelSize(width: 100, height: 100), fit: true))
        #expect((fit.width, fit.height) == (200, 100))
        #expect(reduced.sourceFormat == "JPEG")
        #expect(try psnr(reduced, full) >= 40)
    }

    /// At 1/8 only the DC coefficients count (libjpeg's 1x1 inverse DCT reads nothing else): a
    /// progressive JPEG is read without its AC scans, to the very same pixels.
    /// With 4:2:0 chroma (quality 75 here) libjpeg reads chroma with a 2x2 DCT at 1/8: its AC
    /// scans stay.
    @Test(arguments: [92, 75])
    func aProgressiveJPEGReadAtAnEighthSkipsItsACScansForTheSamePixels(quality: Int) throws {
        let wand = try Self.plasma(1600, 800)
        wand.setProgressive(true)
        let data = try wand.encode(format: "JPEG", quality: quality)
        let hint = DecodeHint(targetSize: PixelSize(width: 50, height: 50), fit: true)
        let plan = try #require(JPEGReducer.plan(PixelSize(width: 1600, height: 800), hint: hint, headroom: 2))
        #expect(plan.denominator == 8)
        let dc = try #require(JPEGReducer.dcScansOnly(data))
        #expect(dc.count < data.count * (quality == 92 ? 1 : 3) / 4, "\(dc.count) of \(data.count) bytes")
        let skipped = try #require(try JPEGReducer.decode(data, plan: plan, toSRGB: true, autoOrient: true))
        let whole = try #require(try JPEGReducer.decode(data, plan: plan, toSRGB: true, autoOrient: true, skipACScans: false))
        #expect(skipped.damage == nil)
        let (a, b) = (try skipped.pixels.wand(), try whole.pixels.wand())
        #expect((a.width, a.height) == (b.width, b.height))
        #expect(try Self.rows(a) == Self.rows(b))

        // Baseline, or cut short anywhere (damage is then seen as before): the file is read whole.
        let baseline = try Self.plasma(1600, 800).encode(format: "JPEG", quality: 92)
        #expect(JPEGReducer.dcScansOnly(baseline) == nil)
        for cut in [data.count - 2, data.count - 300, data.count / 2, 40] {
            #expect(JPEGReducer.dcScansOnly(data.prefix(cut)) == nil, "cut at \(cut)")
        }
        #expect(throws: PipelineError(.decodeFailed, "JPEG: Premature end of JPEG file")) {
            try JPEGReducer.decode(data.prefix(data.count - 300), plan: plan, toSRGB: true, autoOrient: true)
        }
        // Damaged anywhere: a result or an error, never a read outside the file.
        var generator = SplitMix64(seed: 34)
        for _ in 0..<300 {
            var bytes = [UInt8](data)
            for _ in 0..<8 { bytes[Int.random(in: 2..<bytes.count, using: &generator)] ^= UInt8.random(in: 1...255, using: &generator) }
            if let rewritten = JPEGReducer.dcScansOnly(Data(bytes)) { #expect(rewritten.count <= bytes.count) }
            do { _ = try JPEGReducer.decode(Data(bytes), plan: plan, toSRGB: true, autoOrient: true, failOn: .none) } catch is PipelineError {}
        }
    }

    /// libjpeg's large blocks (here the coefficients of a progressive file, 2.6 MB a component) come from
    /// blocks kept from earlier decodes (Sources/CJPEGMemory): the replacement functions are the
    /// ones libjpeg calls, and a block used before, full of another image's coefficients, gives
    /// the same pixels as a fresh one.
    @Test func largeBlocksAreReusedForTheSamePixels() throws {
        func progressive(_ seed: Int) throws -> Data {
            let wand = try Self.plasma(1600, 800 + seed)
            wand.setProgressive(true)
            return try wand.encode(format: "JPEG", quality: 92)
        }
        let (first, other) = (try progressive(0), try progressive(8))
        let hint = DecodeHint(targetSize: PixelSize(width: 400, height: 200), fit: true)
        let plan = try #require(JPEGReducer.plan(PixelSize(width: 1600, height: 800), hint: hint, headroom: 2))
        func decode(_ data: Data) throws -> [UInt8] {
            let decoded = try #require(try JPEGReducer.decode(data, plan: plan, toSRGB: true, autoOrient: true))
            guard case .pixels(let pixels) = decoded.pixels else { throw PipelineError(.decodeFailed, "not 8-bit") }
            return pixels.bytes
        }
        let before = pk_jpeg_pool_read_stats()
        let expected = try decode(first)
        // Other tests decode at the same time and may take a kept block first: a few tries.
        var reused = false
        for _ in 0..<20 where !reused {
            _ = try decode(other)
            let again = pk_jpeg_pool_read_stats().reused
            #expect(try decode(first) == expected)
            reused = pk_jpeg_pool_read_stats().reused > again
        }
        #expect(pk_jpeg_pool_read_stats().requested > before.requested, "libjpeg did not call the replacement functions")
        #expect(reused)
        #expect(pk_jpeg_pool_read_stats().kept_bytes <= 32 * 256 << 20)
    }

    /// Every row's 16-bit RGB samples.
    static func rows(_ wand: Wand) throws -> [[UInt16]] {
        try (0..<wand.height).map { y in
            var row = [UInt16](repeating: 0, count: wand.width * 3)
            try wand.exportRow(y, channels: "RGB", into: &row)
            return row
        }
    }

    @Test func theFrameHeaderGivesSizeComponentsAndProgressive() throws {
        let baseline = try Self.plasma(640, 480).encode(format: "JPEG", quality: 90)
        #expect(JPEGFormat.frame(baseline) == JPEGFormat.Frame(size: PixelSize(width: 640, height: 480), components: 3, progressive: false))
        let wand = try Self.plasma(640, 480)
        wand.setProgressive(true)
        #expect(JPEGFormat.frame(try wand.encode(format: "JPEG", quality: 90))?.progressive == true)
        try wand.grayscale()
        wand.setProgressive(false)
        #expect(JPEGFormat.frame(try wand.encode(format: "JPEG", quality: 90))?.components == 1)
        // Cut inside the markers, or not a JPEG at all: nothing, never a read past the end.
        #expect(JPEGFormat.frame(baseline.prefix(12)) == nil)
        #expect(JPEGFormat.frame(Data([0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0])) == nil)
    }

    @Test(arguments: 1...8)
    func everyEXIFOrientationIsApplied(orientation: Int) throws {
        let data = Self.oriented(try Self.plasma().encode(format: "JPEG", quality: 92), UInt8(orientation))
        let (reduced, full, _) = try thumbnails(data)
        #expect((reduced.width, reduced.height) == (full.width, full.height), "orientation \(orientation)")
        #expect((reduced.width, reduced.height) == (orientation >= 5 ? (50, 100) : (100, 50)))
        #expect(try psnr(reduced, full) >= 40, "orientation \(orientation)")
        // auto_orient: false leaves the pixels as stored.
        let stored = try thumbnails(data, ["auto_orient": .bool(false)])
        #expect((stored.reduced.width, stored.reduced.height) == (100, 50))
    }

    @Test func metadataComesThroughAsImageMagicksPathHasIt() throws {
        // EXIF (orientation 1), XMP (set as a profile, written by ImageMagick as APP1) and an APP13
        // Photoshop block with one IPTC record: the reduced path attaches the same profiles.
        let source = try Self.plasma()
        let xmp = Data(#"<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:rights>Example</dc:rights></rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end="w"?>"#.utf8)
        try source.setProfile("xmp", xmp)
        let jpeg = Self.oriented(try source.encode(format: "JPEG", quality: 92), 1)
        let iptc: [UInt8] = [0x1C, 0x02, 0x74, 0x00, 0x07] + Array("Example".utf8)
        let resource: [UInt8] = Array("8BIM".utf8) + [0x04, 0x04, 0x00, 0x00] + [0, 0, 0, UInt8(iptc.count)] + iptc + (iptc.count % 2 == 1 ? [0] : [])
        let app13 = Array("Photoshop 3.0".utf8) + [0] + resource
        let length = app13.count + 2
        let data = Data([0xFF, 0xD8, 0xFF, 0xED, UInt8(length >> 8), UInt8(length & 0xFF)] + app13 + [UInt8](jpeg.dropFirst(2)))
        var hint = hint
        hint.wantsMetadata = true
        let reduced = try decoder.decode(LoadedData(data: data), hint: hint)
        let full = try decoder(["shrink_on_load": .string("false")]).decode(LoadedData(data: data), hint: hint)
        #expect(reduced.width == 400)  // the reduced path
        #expect(reduced.metadata == full.metadata)
        let packet = String(decoding: reduced.metadata?.xmp ?? Data(), as: UTF8.self)
        #expect(packet.contains("<dc:rights>Example</dc:rights>"))
        #expect(reduced.metadata?.iptc == Data(iptc))
        let exif = reduced.metadata?.exif ?? Data()
        #expect(exif.starts(with: Data("MM\0*".utf8)) || exif.starts(with: Data("II*\0".utf8)))
    }

    @Test func anICCProfileIsConvertedToSRGBOrKept() throws {
        let source = try Self.plasma()
        let profile = try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/a98.icc"))
        try source.setICCProfile(profile)
        let data = try source.encode(format: "JPEG", quality: 92)
        let (converted, full, _) = try thumbnails(data)
        #expect(try converted.withCopy { $0.iccProfile == nil })
        #expect(try psnr(converted, full) >= 40)
        let kept = try thumbnails(data, ["to_srgb": .bool(false)])
        #expect(try kept.reduced.withCopy { $0.iccProfile == profile })
        #expect(try psnr(converted, kept.reduced) < 40)  // converted, not only dropped
        #expect(try psnr(kept.reduced, kept.full) >= 40)
    }

    @Test func cmykStaysWithImageMagick() async throws {
        let plan = try #require(JPEGReducer.plan(PixelSize(width: 1600, height: 800), hint: hint, headroom: 2))
        let data = try await Self.converted("CMYK")
        #expect(try JPEGReducer.decode(data, plan: plan, toSRGB: true, autoOrient: true) == nil)
        let (reduced, full, decoded) = try thumbnails(data)
        #expect(decoded == PixelSize(width: 400, height: 200))  // ImageMagick's jpeg:size, 1/4
        #expect(try psnr(reduced, full) >= 40)
    }

    /// A greyscale JPEG is read by libjpeg as RGB with equal channels, and written as ImageMagick
    /// wrote it when it decoded such files: a one-channel JPEG, a grey PNG.
    @Test func greyIsReducedIn8BitsAndWrittenGrey() async throws {
        let data = try await Self.converted("Gray")
        let (reduced, full, decoded) = try thumbnails(data)
        #expect(decoded == PixelSize(width: 400, height: 200))
        #expect(try decoder.decode(LoadedData(data: data), hint: hint).rgb8 != nil)
        #expect(try psnr(reduced, full) >= 40)
        let jpeg = try JPEGEncoder.plugin.makeEncoder(JPEGEncoder.plugin.defaultOptions).encode(reduced)
        let png = try PNGEncoder.plugin.makeEncoder(PNGEncoder.plugin.defaultOptions).encode(reduced)
        let written = Wand()
        try written.read(jpeg, format: "JPEG")
        #expect(written.colorspaceName == "Gray")
        #expect(png[25] == 0, "PNG colour type \(png[25]): grey")
    }

    /// A 1600x800 plasma JPEG converted to `space` by ImageMagick's command line.
    static func converted(_ space: String) async throws -> Data {
        let path = try Fixtures.temporaryDirectory("jpeg-space").appendingPathComponent("t.jpg").path
        let made = try await Command.run("/usr/bin/convert", ["-size", "1600x800", "plasma:", "-colorspace", space, "-quality", "92", path])
        try #require(made.status == 0, "\(made.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    @Test func truncatedCorruptLyingAndHugeFilesFailWithTheirKind() throws {
        let data = try Self.plasma().encode(format: "JPEG", quality: 92)
        #expect(throws: PipelineError(.decodeFailed, "JPEG: Premature end of JPEG file")) {
            try decoder.decode(LoadedData(data: data.prefix(data.count / 2)), hint: hint)
        }
        survivesBitFlips(data, from: 20, times: 40, flips: 30, seed: 21)
        // The frame header claims 3200x1600 over data for 1600x800: the data runs out.
        let lying = Self.withFrameSize(data, 3200, 1600)
        let error = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: lying), hint: hint) }
        #expect(error.kind == .decodeFailed && error.message.hasPrefix("JPEG: "), "\(error)")
        // 60000x60000: refused from the header, before libjpeg allocates anything.
        let huge = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: Self.withFrameSize(data, 60000, 60000)), hint: hint) }
        #expect(huge.kind == .tooLarge)
    }

    /// Read whole (no resize reduces it), an image over ImageMagick's area limit from the
    /// machine's policy.xml is too large for that reason, and the message says so.
    @Test func anImageOverImageMagicksAreaLimitSaysSo() throws {
        let area = Magick.resourceLimit(AreaResource)
        try #require(area < 16000 * 9000, "this machine's policy.xml allows \(area) pixels")
        let data = Self.withFrameSize(try Self.plasma().encode(format: "JPEG", quality: 92), 16000, 9000)
        let trusting = try decoder(["max_pixels": .int(400_000_000), "max_width": .int(40000), "max_height": .int(40000)])
        let error = try #require(throws: PipelineError.self) { try trusting.decode(LoadedData(data: data), hint: DecodeHint()) }
        #expect(error.kind == .tooLarge)
        #expect(error.message.contains("16000x9000") && error.message.contains("policy.xml"), "\(error.message)")
    }

    /// `jpeg` with its start-of-frame's size rewritten.
    static func withFrameSize(_ jpeg: Data, _ width: Int, _ height: Int) -> Data {
        var b = [UInt8](jpeg)
        var i = 2
        while i + 9 < b.count {
            let marker = b[i + 1]
            if (0xC0...0xCF).contains(marker), ![0xC4, 0xC8, 0xCC].contains(marker) {
                b[i + 5] = UInt8(height >> 8); b[i + 6] = UInt8(height & 0xFF)
                b[i + 7] = UInt8(width >> 8); b[i + 8] = UInt8(width & 0xFF)
                break
            }
            i += 2 + (Int(b[i + 2]) << 8 | Int(b[i + 3]))
        }
        return Data(b)
    }
}
