import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The decoder's `formats` allowlist: each opt-in format recognised from its content, refused by
/// default as `unsupported_format` naming the entry that allows it, decoded once allowed; and
/// content that is no image at all kept apart as `not_an_image`.
@Suite struct FormatAllowlistTests {
    static let optIn = ["jp2", "pnm", "tga", "pcx", "psd", "sgi", "sun", "dds", "fits", "xbm", "xpm"]

    /// `rose:` (70x46) written by ImageMagick as `coder`, with coder options.
    static func rose(_ coder: String, _ options: [String: String] = [:]) throws -> Data {
        let wand = Wand()
        try wand.readBuiltIn("rose:")
        return try wand.encode(format: coder, options: options)
    }

    /// Every opt-in fixture: (label, bytes, the coder the sniffer names, the `formats` entry).
    static func fixtures() throws -> [(String, Data, String, String)] {
        [
            ("JP2", try rose("JP2"), "JP2", "jp2"),
            ("J2K codestream", try rose("J2K"), "J2K", "jp2"),
            ("PPM binary", try rose("PPM"), "PNM", "pnm"),
            ("PGM binary", try rose("PGM"), "PNM", "pnm"),
            ("PBM binary", try rose("PBM"), "PNM", "pnm"),
            ("PPM plain", Data("P3\n2 1\n255\n255 0 0 0 0 255\n".utf8), "PNM", "pnm"),
            ("PBM plain", Data("P1\n# a comment\n4 2\n1 0 1 0\n0 1 0 1\n".utf8), "PNM", "pnm"),
            ("PAM", try rose("PAM"), "PNM", "pnm"),
            ("PFM", try rose("PFM"), "PNM", "pnm"),
            ("TGA 2.0 (footer)", try rose("TGA") + tgaFooter, "TGA", "tga"),
            ("PCX", try rose("PCX"), "PCX", "pcx"),
            ("PSD", try rose("PSD"), "PSD", "psd"),
            ("SGI", try rose("SGI"), "SGI", "sgi"),
            ("Sun raster", try rose("SUN"), "SUN", "sun"),
            ("DCX", try rose("DCX"), "DCX", "pcx"),
            ("DDS", try rose("DDS", ["dds:compression": "none"]), "DDS", "dds"),
            ("FITS", try rose("FITS"), "FITS", "fits"),
            ("XPM", try rose("XPM"), "XPM", "xpm"),
            ("XBM", try rose("XBM"), "XBM", "xbm"),
        ]
    }

    static let tgaFooter = Data(repeating: 0, count: 8) + Data("TRUEVISION-XFILE.".utf8) + Data([0])

    func decoder(_ formats: [String]? = nil) throws -> any ImageDecoding {
        var options: [String: OptionValue] = [:]
        if let formats { options["formats"] = .list(formats.map { .string($0) }) }
        return try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(options))
    }

    func failure(_ data: Data, _ decoder: any ImageDecoding) -> PipelineError? {
        do { _ = try decoder.decode(LoadedData(data: data), hint: DecodeHint()); return nil } catch { return error as? PipelineError }
    }

    @Test func eachOptInFormatIsRecognisedByContent() throws {
        for (label, data, coder, _) in try Self.fixtures() {
            #expect(FormatSniffer.sniff(data) == .image(ImageFormat(rawValue: coder)!), "\(label)")
        }
        // BigTIFF, as ImageMagick writes it.
        #expect(FormatSniffer.sniff(try Self.rose("TIFF64")) == .image(ImageFormat(rawValue: "TIFF")!))
    }

    @Test func refusedByDefaultNamingTheOption() throws {
        let decoder = try decoder()
        for (label, data, coder, name) in try Self.fixtures() {
            #expect(failure(data, decoder) == PipelineError(.unsupportedFormat,
                "the content is \(coder), an image format this decoder does not accept; add \(name) to the decoder's 'formats' to accept it"),
                "\(label)")
        }
    }

    @Test func decodedOnceAllowed() throws {
        let decoder = try decoder(ImageMagickDecoder.defaultFormats + Self.optIn)
        let reference = Wand()
        try reference.readBuiltIn("rose:")
        for (label, data, coder, _) in try Self.fixtures() {
            let image = try decoder.decode(LoadedData(data: data), hint: DecodeHint())
            #expect(image.sourceFormat == coder, "\(label)")
            if label.hasSuffix("plain") { continue }
            #expect(image.width == 70 && image.height == 46, "\(label): \(image.width)x\(image.height)")
            // PBM, XBM and PGM are black and white or grey, XPM and FITS reduced: only their size is compared.
            if ["PBM", "PGM", "XBM", "XPM", "FITS"].contains(where: label.hasPrefix) { continue }
            let score = try image.withCopy { try $0.psnr(against: reference) }
            #expect(score > 30, "\(label): \(score) dB")
        }
    }

    /// An opt-in format's decode counts in the memory budget: its size comes from ImageMagick's
    /// reading of the header, as the others' from ours.
    @Test func optInFormatsCountInTheMemoryBudget() throws {
        let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.options(["formats": .list(Self.optIn.map { .string($0) })]))
        for (label, data, _, _) in try Self.fixtures() where !label.hasSuffix("plain") {
            let estimate = try #require(decoder.estimatedMemory(LoadedData(data: data), hint: DecodeHint()), "\(label)")
            #expect(estimate >= 70 * 46 * 8, "\(label): \(estimate)")
        }
        // Not allowed: nothing to count (it is refused before decoding).
        let tga = try Self.rose("TGA") + Self.tgaFooter
        #expect(ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions).estimatedMemory(LoadedData(data: tga), hint: DecodeHint()) == nil)
    }

    /// TGA has no magic number: a file that only its header rules match is no image unless TGA
    /// is allowed, and then it is one.
    @Test func tgaWithoutFooterOnlyWhenAllowed() throws {
        let tga = try Self.rose("TGA")
        #expect(FormatSniffer.sniff(tga) == .unknown)
        #expect(FormatSniffer.sniff(tga, tga: true) == .image(ImageFormat(rawValue: "TGA")!))
        #expect(failure(tga, try decoder())?.kind == .notAnImage)
        let image = try decoder(["tga"]).decode(LoadedData(data: tga), hint: DecodeHint())
        #expect(image.width == 70 && image.height == 46 && image.sourceFormat == "TGA")
    }

    @Test func bigTIFFDecodes() throws {
        let image = try decoder().decode(LoadedData(data: try Self.rose("TIFF64")), hint: DecodeHint())
        #expect(image.width == 70 && image.height == 46 && image.sourceFormat == "TIFF")
        let reduced = try decoder().decode(LoadedData(data: try Self.rose("TIFF64")), hint: DecodeHint(targetSize: PixelSize(width: 8, height: 8)))
        #expect(reduced.width <= 70 && reduced.sourceFormat == "TIFF")
    }

    @Test func aFormatNotInTheListIsRefusedEvenWhenDefault() throws {
        let png = try Self.rose("PNG")
        #expect(failure(png, try decoder(["jpeg"])) == PipelineError(.unsupportedFormat,
            "the content is PNG, an image format this decoder does not accept; add png to the decoder's 'formats' to accept it"))
    }

    /// Image formats recognised but read by nothing here are named as such, not called "not an image".
    @Test func knownFormatsThatCannotBeReadAreNamed() throws {
        let decoder = try decoder()
        let cases: [(Data, String)] = [
            (Data("qoif".utf8) + Data(repeating: 0, count: 20), "QOI"),
            (Data("icns".utf8) + Data(repeating: 0, count: 20), "ICNS"),
            (Data([0, 0, 0, 0, 0x12, 0xAF]) + Data(repeating: 0, count: 20), "FLIC"),
            (Data("gimp xcf v011".utf8), "XCF"),
        ]
        for (data, name) in cases {
            #expect(failure(data, decoder) == PipelineError(.unsupportedFormat, "the content is \(name), an image format this decoder cannot read"))
        }
        // JPEG XL is read (libjxl), so a file that only starts like one is a damaged JPEG XL.
        #expect(failure(Data([0xFF, 0x0A, 0xFA, 0x7F]), decoder)?.kind == .decodeFailed)
    }

    /// A cursor is an icon with a hot spot: read as the icons are.
    @Test func cursorsAreIcons() throws {
        let ico = [UInt8](try Self.rose("ICO"))
        var cur = ico
        cur[2] = 2
        #expect(FormatSniffer.sniff(Data(cur)) == .image(ImageFormat(rawValue: "CUR")!))
        let image = try decoder().decode(LoadedData(data: Data(cur)), hint: DecodeHint())
        #expect(image.width == 70 && image.height == 46 && image.sourceFormat == "CUR")
    }

    @Test func documentsAreNotImages() throws {
        let decoder = try decoder()
        #expect(failure(Data("<!DOCTYPE html><html><body>Not found</body></html>".utf8), decoder)
            == PipelineError(.notAnImage, "the content is HTML, not an image"))
        #expect(failure(Data("{\"error\": \"not found\"}".utf8), decoder) == PipelineError(.notAnImage, "the content is JSON, not an image"))
        #expect(failure(Data("hello, world\n".utf8), decoder) == PipelineError(.notAnImage, "the content is text, not an image"))
        #expect(failure(Data("%PDF-1.4\n".utf8), decoder) == PipelineError(.unsupportedFormat,
            "the content is PDF, which is never decoded (its ImageMagick coder runs another program or reads other files)"))
    }
}
