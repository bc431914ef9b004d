import CTIFF
import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The TIFF reduce-on-load path (libtiff's RGBA interface, averaged before ImageMagick), checked
/// against ImageMagick's full decode of the same file, and fed hostile input.
@Suite struct TIFFDecodeTests: CodecSuite {

    /// A 1200x800 TIFF made by ImageMagick's convert with `options` (compression, depth, alpha...).
    static func tiff(_ options: [String], source: String = "plasma:") async throws -> Data {
        let path = try Fixtures.temporaryDirectory("tiff").appendingPathComponent("t.tif").path
        let made = try await Command.run("/usr/bin/convert", ["-size", "1200x800", source] + options + [path])
        try #require(made.status == 0, "\(made.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    @Test(arguments: [["-compress", "zip"], ["-compress", "lzw"], ["-compress", "jpeg", "-quality", "95"], ["-depth", "16", "-compress", "zip"],
                      ["-compress", "none"], ["-colors", "200", "-type", "Palette"], ["-orient", "bottom-right"],
                      // Read in bands of a strip or a tile row: strips of 16 rows, and 128x128 tiles
                      // (edge tiles partial), deflate and JPEG-in-TIFF.
                      ["-define", "tiff:rows-per-strip=16", "-compress", "lzw"], ["-define", "tiff:rows-per-strip=7", "-compress", "zip"],
                      ["-define", "tiff:tile-geometry=128x128", "-compress", "zip"],
                      ["-define", "tiff:tile-geometry=256x128", "-compress", "jpeg", "-quality", "95"]])
    func reducedAndWithin40dBOfImageMagicksFullDecode(options: [String]) async throws {
        let data = try await Self.tiff(options)
        let (reduced, full, decoded) = try thumbnails(data)
        #expect(decoded == PixelSize(width: 300, height: 200), "\(options)")  // blocks of 4
        let score = try psnr(reduced, full)
        #expect(score >= 40, "\(options): \(score) dB")
    }

    /// A pyramidal TIFF (ImageMagick's PTIF: levels of half size as reduced-resolution
    /// directories): the smallest level that leaves the resize its headroom is read, not the full
    /// image; the thumbnail matches the full decode's.
    @Test func aPyramidIsReadAtTheLevelItNeeds() async throws {
        let path = try Fixtures.temporaryDirectory("ptif").appendingPathComponent("p.tif").path
        let made = try await Command.run("/usr/bin/convert", ["-size", "2400x1600", "plasma:", "-define", "tiff:tile-geometry=256x256",
                                                              "-compress", "zip", "ptif:" + path])
        try #require(made.status == 0, "\(made.stderr)")
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let (reduced, full, decoded) = try thumbnails(data)
        // Levels 1200x800, 600x400, 300x200, 150x100: the fit to 100x100 may shrink 24 times and
        // leaves 3 for the resize, so 300x200 is read as it is.
        #expect(decoded == PixelSize(width: 300, height: 200))
        let score = try psnr(reduced, full)
        #expect(score >= 40, "\(score) dB")
    }

    @Test func alphaIsAveragedWithoutDarkFringes() async throws {
        // Transparent black around an opaque red square, unassociated alpha.
        let data = try await Self.tiff(["-fill", "red", "-draw", "rectangle 300,200 899,599", "-compress", "zip"], source: "xc:none")
        let reduced = try decoder.decode(LoadedData(data: data), hint: hint)
        try expectRedSquareWithoutFringes(reduced)
        let (a, b, _) = try thumbnails(data)
        #expect(try psnr(a, b) >= 40)
    }

    /// 8-bit RGB strips are read raw (no RGBA packing); the same picture in tiles goes through
    /// libtiff's RGBA interface. Both reduce to exactly the same pixels.
    @Test func rawStripsReduceToThePixelsOfTheRGBAInterface() async throws {
        let strips = try await Self.tiff(["-depth", "8", "-define", "tiff:rows-per-strip=24", "-compress", "lzw"])
        // The same pixels in tiles (lossless from the strips).
        let folder = try Fixtures.temporaryDirectory("tiff-raw")
        try strips.write(to: folder.appendingPathComponent("s.tif"))
        let made = try await Command.run("/usr/bin/convert", [folder.appendingPathComponent("s.tif").path, "-define", "tiff:tile-geometry=128x128",
                                                              "-compress", "zip", folder.appendingPathComponent("t.tif").path])
        try #require(made.status == 0, "\(made.stderr)")
        let tiles = try Data(contentsOf: folder.appendingPathComponent("t.tif"))
        let raw = try TIFFReducer.withReader(.memory(strips)) { try TIFFReducer.layout($0, hint: hint, headroom: 2, keepsPages: false) }
        #expect(raw?.raw == true)
        let packed = try TIFFReducer.withReader(.memory(tiles)) { try TIFFReducer.layout($0, hint: hint, headroom: 2, keepsPages: false) }
        #expect(packed?.raw == false)
        let a = try decoder.decode(LoadedData(data: strips), hint: hint), b = try decoder.decode(LoadedData(data: tiles), hint: hint)
        #expect((a.width, a.height) == (300, 200) && (b.width, b.height) == (300, 200))
        #expect(try psnr(a, b).isInfinite)
        // A strip cut short fails with libtiff's reason, as on the RGBA path.
        let cut = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: strips.prefix(strips.count / 2)), hint: hint) }
        #expect(cut.kind == .decodeFailed && cut.message.contains("TIFF"), "\(cut)")
    }

    /// A pyramid level read as it is (no block) is copied with alpha divided out: the same bytes
    /// a box of one pixel makes, semi-transparent pixels included.
    @Test func aLevelReadAsItIsMatchesABoxOfOne() async throws {
        let data = try await Self.tiff(["-alpha", "set", "-channel", "A", "-evaluate", "set", "60%", "+channel",
                                        "-define", "tiff:rows-per-strip=16", "-compress", "zip"])
        let size = PixelSize(width: 1200, height: 800)
        func rows(_ factor: Int) throws -> [UInt8] {
            try TIFFReducer.withReader(.memory(data)) { reader in
                #expect(pk_tiff_band_begin(reader) != 0)
                var buffer = [UInt32](repeating: 0, count: size.width * 16)
                if factor == 1 { return try TIFFReducer.copyRows(reader, size: size, band: 16, rows: 0..<800, buffer: &buffer) }
                var box = BoxReducer(width: size.width, height: size.height, factor: 1, alpha: true)
                box.premultiplied = true
                var y = 0
                return try box.reduce { row in
                    if y % 16 == 0 {
                        let read = buffer.withUnsafeMutableBufferPointer { pk_tiff_band_read(reader, $0.baseAddress, UInt32(y), 16) }
                        #expect(read != 0)
                    }
                    buffer.withUnsafeBytes { pixels in
                        row.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: pixels[((y % 16) * 1200 * 4)..<((y % 16 + 1) * 1200 * 4)])) }
                    }
                    y += 1
                }
            }
        }
        let copied = try rows(1), boxed = try rows(0)
        #expect(copied == boxed)
        #expect(copied[3] > 100 && copied[3] < 200)  // semi-transparent, as made
    }

    @Test func anICCProfileIsConvertedToSRGBOrKept() async throws {
        let data = try await Self.tiff(["-profile", "/usr/share/color/icc/ghostscript/a98.icc", "-compress", "zip"])
        let (converted, full, _) = try thumbnails(data)
        #expect(try converted.withCopy { $0.iccProfile == nil })
        #expect(try psnr(converted, full) >= 40)
        let kept = try thumbnails(data, ["to_srgb": .bool(false)])
        #expect(try kept.reduced.withCopy { $0.iccProfile != nil })
        #expect(try psnr(converted, kept.reduced) < 40)  // converted, not only dropped
        #expect(try psnr(kept.reduced, kept.full) >= 40)
    }

    @Test func metadataComesThroughAsImageMagicksPathHasIt() async throws {
        let folder = try Fixtures.temporaryDirectory("tiff-xmp")
        let xmp = folder.appendingPathComponent("x.xmp")
        try Data(#"<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:rights>Example</dc:rights></rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end="w"?>"#.utf8).write(to: xmp)
        let data = try await Self.tiff(["-profile", "xmp:" + xmp.path, "-compress", "zip"])
        var hint = hint
        hint.wantsMetadata = true
        let reduced = try decoder.decode(LoadedData(data: data), hint: hint)
        let full = try decoder(["shrink_on_load": .string("false")]).decode(LoadedData(data: data), hint: hint)
        #expect(reduced.width == 300)  // the reduced path
        #expect(reduced.metadata == full.metadata)
        let packet = String(decoding: reduced.metadata?.xmp ?? Data(), as: UTF8.self)
        #expect(packet.contains("<dc:rights>Example</dc:rights>"))
    }

    @Test func greyCMYKAndTransposedOrientationsStayWithImageMagick() async throws {
        for options in [["-colorspace", "Gray"], ["-colorspace", "CMYK"], ["-orient", "left-top"]] {
            let data = try await Self.tiff(options + ["-compress", "zip"])
            #expect(try TIFFReducer.decode(.memory(data), hint: hint, headroom: 2, keepsPages: false) == nil, "\(options)")
            let (reduced, full, _) = try thumbnails(data)
            #expect(try psnr(reduced, full) >= 40, "\(options)")
        }
    }

    @Test func truncatedCorruptAndHugeFilesFailWithTheirKind() async throws {
        let data = try await Self.tiff(["-compress", "zip"])
        let cut = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: data.prefix(data.count / 2)), hint: hint) }
        #expect(cut.kind == .decodeFailed, "\(cut)")
        survivesBitFlips(data, from: 8, times: 20, flips: 20, seed: 9)
        // The first directory claims 60000x60000: refused from the header before any strip is read.
        let huge = try await Self.tiff(["-compress", "zip"], source: "xc:white")
        let error = try #require(throws: PipelineError.self) { try decoder.decode(LoadedData(data: Self.claiming(huge, 60000, 60000)), hint: hint) }
        #expect(error.kind == .tooLarge || error.kind == .decodeFailed, "\(error)")
    }

    /// `tiff` (little-endian, as ImageMagick writes it) with its first directory's width and height
    /// entries rewritten.
    static func claiming(_ tiff: Data, _ width: UInt32, _ height: UInt32) -> Data {
        var b = [UInt8](tiff)
        func u16(_ i: Int) -> Int { Int(b[i]) | Int(b[i + 1]) << 8 }
        let ifd = Int(b[4]) | Int(b[5]) << 8 | Int(b[6]) << 16 | Int(b[7]) << 24
        for e in 0..<u16(ifd) {
            let at = ifd + 2 + e * 12, tag = u16(at)
            guard tag == 256 || tag == 257 else { continue }
            let value = tag == 256 ? width : height
            if u16(at + 2) == 3 { b[at + 8] = UInt8(value & 0xFF); b[at + 9] = UInt8(value >> 8 & 0xFF) } else {
                for k in 0..<4 { b[at + 8 + k] = UInt8(value >> (8 * k) & 0xFF) }
            }
        }
        return Data(b)
    }
}

@Suite struct TIFFHeaderTests: CodecSuite {
    @Test func dimensionsFromClassicAndBigTIFFInBothByteOrders() async throws {
        let folder = try Fixtures.temporaryDirectory("tiff-header")
        for (name, prefix, options) in [("le.tif", "TIFF:", ["-endian", "LSB"]), ("be.tif", "TIFF:", ["-endian", "MSB"]),
                                        ("big.tif", "TIFF64:", ["-endian", "LSB"]), ("bigbe.tif", "TIFF64:", ["-endian", "MSB"])] {
            let path = folder.appendingPathComponent(name).path
            let made = try await Command.run("/usr/bin/convert", ["-size", "1200x800", "plasma:", "-compress", "zip"] + options + [prefix + path])
            try #require(made.status == 0, "\(made.stderr)")
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(FormatSniffer.sniff(data) == .image(ImageFormat(rawValue: "TIFF")!), "\(name)")
            #expect(TIFFFormat.dimensions(data) == PixelSize(width: 1200, height: 800), "\(name)")
            // And decoded, reduced on load like any TIFF.
            let image = try decoder.decode(LoadedData(data: data), hint: hint)
            #expect((image.width, image.height) == (300, 200), "\(name)")
        }
        // Offsets that point outside the file give no size, never a crash.
        #expect(TIFFFormat.dimensions(Data([0x49, 0x49, 0x2A, 0, 0xFF, 0xFF, 0xFF, 0x7F] + [UInt8](repeating: 0, count: 16))) == nil)
        #expect(TIFFFormat.dimensions(Data([0x49, 0x49, 0x2B, 0, 8, 0, 0, 0] + [UInt8](repeating: 0xFF, count: 16))) == nil)
    }
}
