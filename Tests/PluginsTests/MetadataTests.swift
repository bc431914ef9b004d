import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The `metadata:` policy, end to end through the real decoder and encoders: a photo tagged by
/// exiftool (camera, dates, copyright, orientation, GPS, a thumbnail, XMP with GPS, IPTC) is
/// decoded, the policy applied as the engine applies it, encoded, and read back with exiftool.
@Suite struct MetadataTests {
    static let exiftool = "/usr/bin/exiftool"

    /// A 300x200 JPEG whose EXIF says it is turned (orientation 6), with everything a camera and
    /// a photo agency would write.
    static func taggedPhoto(profile: String? = nil) async throws -> Data {
        let dir = try Fixtures.temporaryDirectory("meta")
        let file = dir.appendingPathComponent("photo.jpg"), thumb = dir.appendingPathComponent("thumb.jpg")
        let wand = Wand()
        try wand.readBuiltIn("plasma:fractal", size: (300, 200))
        if let profile { try wand.setICCProfile(try Data(contentsOf: URL(fileURLWithPath: profile))) }
        try wand.encode(format: "JPEG", quality: 90).write(to: file)
        try Fixtures.image("rose:", format: "JPEG").write(to: thumb)
        let written = try await Command.run(exiftool, [
            "-q", "-overwrite_original", "-Make=Canon", "-Model=Canon EOS R5", "-LensModel=RF24-105mm F4 L IS USM",
            "-DateTimeOriginal=2026:05:04 12:34:56", "-CreateDate=2026:05:04 12:34:56", "-OffsetTimeOriginal=+02:00",
            "-Artist=Ann Example", "-Copyright=(c) 2026 Ann Example", "-Orientation#=6",
            "-GPSLatitude=48.8584", "-GPSLatitudeRef=N", "-GPSLongitude=2.2945", "-GPSLongitudeRef=E",
            "-XMP-dc:Rights=(c) 2026 Ann Example (XMP)", "-XMP-exif:GPSLatitude=48.8584 N", "-XMP-exif:GPSLongitude=2.2945 E",
            "-XMP-tiff:Orientation#=6", "-IPTC:CopyrightNotice=(c) 2026 Ann Example (IPTC)", "-IPTC:By-line=Ann Example",
            "-ThumbnailImage<=\(thumb.path)", file.path,
        ])
        try #require(written.status == 0, "exiftool: \(written.stderr)")
        return try Data(contentsOf: file)
    }

    /// What exiftool reads in `data`, as "Group:Tag" → value (numbers as numbers: `-n`), without
    /// the file's own facts (size, encoding, JFIF, PNG and RIFF structure).
    static func tags(_ data: Data, ext: String) async throws -> [String: String] {
        let file = try Fixtures.temporaryDirectory("meta-out").appendingPathComponent("out.\(ext)")
        try data.write(to: file)
        let read = try await Command.run(exiftool, ["-j", "-G1", "-a", "-n", file.path])
        try #require(read.status == 0, "exiftool: \(read.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [[String: Any]]).first ?? [:]
        let structural = ["ExifTool", "System", "File", "Composite", "JFIF", "PNG", "PNG-pHYs", "RIFF", "ICC-header",
                          "ICC-view", "ICC-meas", "SourceFile"]
        var out: [String: String] = [:]
        for (key, value) in json where !structural.contains(String(key.prefix { $0 != ":" })) { out[key] = "\(value)" }
        return out
    }

    static func groups(_ tags: [String: String]) -> Set<String> { Set(tags.keys.map { String($0.prefix { $0 != ":" }) }) }

    /// Decodes `source` asking for metadata, applies `policy` as the engine does, and encodes.
    static func output(_ source: Data, policy: MetadataPolicy, encoder: String = "jpeg", autoOrient: Bool = true,
                       toSRGB: Bool = true) throws -> (Data, PipelineImage) {
        let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.options(["auto_orient": .bool(autoOrient),
                                                                                      "to_srgb": .bool(toSRGB)]))
        var image = try decoder.decode(LoadedData(data: source),
                                       hint: DecodeHint(targetSize: PixelSize(width: 150, height: 150), fit: true,
                                                        wantsMetadata: policy.needsSource))
        image.metadata = policy.output(for: image.metadata)
        let plugin = try #require(BuiltIns.registry().plugin(encoder, in: .encoder))
        return (try plugin.makeEncoder(plugin.defaultOptions).encode(image), image)
    }

    @Test(arguments: [("jpeg", "jpg"), ("png", "png"), ("webp", "webp")])
    func theDefaultKeepsNothingButTheColourProfile(_ encoder: String, _ ext: String) async throws {
        let photo = try await Self.taggedPhoto(profile: "/usr/share/color/icc/ghostscript/a98.icc")
        // Kept as it is (to_srgb: false): the profile describes the pixels.
        let (kept, _) = try Self.output(photo, policy: .defaults, encoder: encoder, toSRGB: false)
        let tags = try await Self.tags(kept, ext: ext)
        #expect(tags.filter { !$0.key.hasPrefix("ICC") } == [:])
        #expect(tags["ICC_Profile:ProfileDescription"] == "Artifex Software A98 ICC Profile ")
        // Dropped when asked, even from pixels in that profile.
        let (dropped, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["copyright"], drop: []), encoder: encoder,
                                           toSRGB: false)
        #expect(Self.groups(try await Self.tags(dropped, ext: ext)) == ["IFD0"])
    }

    @Test func exifKeepsTheCameraDatesAndCopyrightButNotGPSOrTheThumbnail() async throws {
        let photo = try await Self.taggedPhoto()
        let source = try await Self.tags(photo, ext: "jpg")
        let (data, image) = try Self.output(photo, policy: try MetadataPolicy(keep: ["exif"], drop: []))
        #expect(image.height > image.width, "turned upright on decode")
        let tags = try await Self.tags(data, ext: "jpg")
        // Every main and Exif directory tag of the source but the pixel dimensions, orientation now 1.
        var expected = source.filter { ["IFD0", "ExifIFD"].contains($0.key.prefix { $0 != ":" }) }
        expected["IFD0:Orientation"] = "1"
        for key in ["ExifIFD:ExifImageWidth", "ExifIFD:ExifImageHeight"] { expected[key] = nil }
        #expect(tags == expected)
        #expect(tags["IFD0:Make"] == "Canon" && tags["ExifIFD:LensModel"] == "RF24-105mm F4 L IS USM")
        #expect(tags["ExifIFD:DateTimeOriginal"] == "2026:05:04 12:34:56" && tags["IFD0:Copyright"] == "(c) 2026 Ann Example")
        #expect(source["GPS:GPSLatitude"] != nil && source["IFD1:ThumbnailImage"] != nil, "the source had both")
        // No GPS bytes left anywhere in the file, not even orphaned in the EXIF block.
        #expect(!data.contains(Data("48,51".utf8)))
    }

    @Test func copyrightAloneAndDatesAlone() async throws {
        let photo = try await Self.taggedPhoto()
        let (copyright, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["copyright"], drop: []))
        #expect(try await Self.tags(copyright, ext: "jpg") == ["IFD0:Artist": "Ann Example", "IFD0:Copyright": "(c) 2026 Ann Example"])
        let (dates, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["dates", "icc"], drop: []))
        #expect(try await Self.tags(dates, ext: "jpg") == [
            "ExifIFD:DateTimeOriginal": "2026:05:04 12:34:56", "ExifIFD:CreateDate": "2026:05:04 12:34:56",
            "ExifIFD:OffsetTimeOriginal": "+02:00",
        ])
        // exif without dates: the camera stays, the dates go.
        let (noDates, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["exif"], drop: ["dates"]))
        let tags = try await Self.tags(noDates, ext: "jpg")
        #expect(tags["IFD0:Make"] == "Canon" && tags["ExifIFD:DateTimeOriginal"] == nil && tags["ExifIFD:CreateDate"] == nil)
    }

    @Test func allKeepsXMPAndIPTCWithoutGPSAndGPSOnlyWhenNamed() async throws {
        let photo = try await Self.taggedPhoto()
        let (all, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["all"], drop: []))
        let tags = try await Self.tags(all, ext: "jpg")
        #expect(Self.groups(tags) == ["IFD0", "ExifIFD", "XMP-x", "XMP-dc", "XMP-tiff", "IPTC"])
        #expect(tags["XMP-dc:Rights"] == "(c) 2026 Ann Example (XMP)" && tags["IPTC:CopyrightNotice"] == "(c) 2026 Ann Example (IPTC)")
        #expect(tags["XMP-tiff:Orientation"] == "1", "the pixels were turned upright")
        #expect(!tags.keys.contains { $0.contains("GPS") })

        let (withGPS, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["all", "gps"], drop: []))
        let located = try await Self.tags(withGPS, ext: "jpg")
        #expect(located["GPS:GPSLatitude"] == "48.8584" && located["GPS:GPSLongitudeRef"] == "E")
        #expect(located["XMP-exif:GPSLatitude"] == "48.8584")
        // gps alone: only the GPS block.
        let (gpsOnly, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["gps"], drop: []))
        #expect(Self.groups(try await Self.tags(gpsOnly, ext: "jpg")) == ["GPS"])
    }

    @Test func orientationIsTheSourcesWhenThePixelsStayAsStored() async throws {
        let photo = try await Self.taggedPhoto()
        let (data, image) = try Self.output(photo, policy: try MetadataPolicy(keep: ["orientation"], drop: []), autoOrient: false)
        #expect(image.width > image.height, "left as stored")
        #expect(try await Self.tags(data, ext: "jpg") == ["IFD0:Orientation": "6"])
    }

    @Test(arguments: [("png", "png"), ("webp", "webp")])
    func otherFormatsCarryTheKeptEXIF(_ encoder: String, _ ext: String) async throws {
        let photo = try await Self.taggedPhoto()
        let (data, _) = try Self.output(photo, policy: try MetadataPolicy(keep: ["copyright", "dates"], drop: []), encoder: encoder)
        let tags = try await Self.tags(data, ext: ext)
        #expect(tags["IFD0:Copyright"] == "(c) 2026 Ann Example" && tags["ExifIFD:DateTimeOriginal"] == "2026:05:04 12:34:56")
        #expect(!tags.keys.contains { $0.contains("GPS") || $0.hasPrefix("IFD0:Make") })
        // And nothing by default.
        let (plain, _) = try Self.output(photo, policy: .defaults, encoder: encoder)
        #expect(try await Self.tags(plain, ext: ext) == [:])
    }

    @Test func aPNGSourcesEXIFIsReadToo() async throws {
        let (png, _) = try Self.output(try await Self.taggedPhoto(), policy: try MetadataPolicy(keep: ["exif", "gps"], drop: []),
                                       encoder: "png")
        let (jpeg, _) = try Self.output(png, policy: try MetadataPolicy(keep: ["copyright", "gps"], drop: []))
        let tags = try await Self.tags(jpeg, ext: "jpg")
        #expect(tags["IFD0:Copyright"] == "(c) 2026 Ann Example" && tags["GPS:GPSLatitude"] == "48.8584")
        #expect(tags["IFD0:Make"] == nil)
    }

    /// HEIC keeps EXIF in an item of its own: read through libheif.
    @Test func aHEICSourcesEXIFIsReadThroughLibheif() async throws {
        let file = try Fixtures.temporaryDirectory("meta-heic").appendingPathComponent("photo.heic")
        try Fixtures.image("plasma:fractal", width: 200, height: 100, format: "HEIC").write(to: file)
        let written = try await Command.run(Self.exiftool, ["-q", "-overwrite_original", "-Copyright=(c) HEIC", "-Make=Apple",
                                                            "-GPSLatitude=10", "-GPSLatitudeRef=N", file.path])
        try #require(written.status == 0, "exiftool: \(written.stderr)")
        let (data, _) = try Self.output(try Data(contentsOf: file), policy: try MetadataPolicy(keep: ["exif"], drop: []))
        let tags = try await Self.tags(data, ext: "jpg")
        // exiftool adds the resolution and YCbCr positioning EXIF requires when it makes the block.
        #expect(tags == ["IFD0:Copyright": "(c) HEIC", "IFD0:Make": "Apple", "IFD0:XResolution": "72", "IFD0:YResolution": "72",
                         "IFD0:ResolutionUnit": "2", "IFD0:YCbCrPositioning": "1"], "\(tags)")
    }

    /// WebP keeps EXIF in a chunk; a TIFF in its own first directory, among the picture's layout
    /// tags, which are not copied.
    @Test(arguments: ["WEBP", "TIFF"])
    func webPAndTIFFSourcesEXIFIsRead(_ format: String) async throws {
        let file = try Fixtures.temporaryDirectory("meta-\(format)").appendingPathComponent("photo.\(format.lowercased())")
        try Fixtures.image("plasma:fractal", width: 200, height: 100, format: format).write(to: file)
        let written = try await Command.run(Self.exiftool, ["-q", "-overwrite_original", "-Copyright=(c) \(format)", "-Make=Maker",
                                                            "-DateTimeOriginal=2026:01:02 03:04:05", file.path])
        try #require(written.status == 0, "exiftool: \(written.stderr)")
        let (data, _) = try Self.output(try Data(contentsOf: file), policy: try MetadataPolicy(keep: ["copyright", "dates"], drop: []))
        let tags = try await Self.tags(data, ext: "jpg")
        #expect(tags["IFD0:Copyright"] == "(c) \(format)" && tags["ExifIFD:DateTimeOriginal"] == "2026:01:02 03:04:05", "\(tags)")
        #expect(tags["IFD0:Make"] == nil)
        let (all, _) = try Self.output(try Data(contentsOf: file), policy: try MetadataPolicy(keep: ["exif"], drop: []))
        let allTags = try await Self.tags(all, ext: "jpg")
        #expect(allTags["IFD0:Make"] == "Maker", "\(allTags)")
        #expect(allTags["IFD0:StripOffsets"] == nil && allTags["IFD0:BitsPerSample"] == nil && allTags["IFD0:Compression"] == nil)
    }

    @Test func unknownNamesAreRefusedWithTheirList() throws {
        #expect(throws: PipelineError.self) { try MetadataPolicy(keep: ["gsp"], drop: []) }
        do { _ = try MetadataPolicy(keep: ["icc"], drop: ["exiff"]) } catch let error as PipelineError {
            #expect(error.message == "metadata: unknown drop entry 'exiff'; did you mean 'exif'?")
        }
        #expect(try MetadataPolicy(keep: ["all"], drop: ["exif"]).kept == [.icc, .xmp, .iptc])
        #expect(try MetadataPolicy(keep: ["exif"], drop: []).kept == [.exif, .orientation, .dates, .copyright])
        #expect(MetadataPolicy.defaults.keySuffix == "")
        #expect(try MetadataPolicy(keep: ["gps", "icc"], drop: []).keySuffix == "+metadata(gps,icc)")
    }

    /// EXIF blocks that lie: every offset out of range, counts too large, loops, truncation. The
    /// rewriter keeps what it can read and never reads outside the block.
    @Test func brokenEXIFBlocksAreReadSafely() throws {
        let keepAll: (ExifRewriter.Directory, UInt16) -> Bool = { _, _ in true }
        #expect(ExifRewriter.filter(Data(), keep: keepAll, orientation: 1) == nil)
        #expect(ExifRewriter.filter(Data("MM\0*\0\0\0\u{8}".utf8), keep: keepAll, orientation: 1) == nil)
        // One good ASCII entry (Make) and one pointing past the end; an Exif pointer to itself.
        var block: [UInt8] = [0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8, 0, 3]
        block += [0x01, 0x0F, 0, 2, 0, 0, 0, 4] + Array("Nik\0".utf8)
        block += [0x01, 0x10, 0, 2, 0, 0, 0, 64, 0, 0, 0xFF, 0xF0]
        block += [0x87, 0x69, 0, 4, 0, 0, 0, 1, 0, 0, 0, 8]
        block += [0, 0, 0, 0]
        let filtered = try #require(ExifRewriter.filter(Data(block), keep: keepAll, orientation: 1))
        // Rebuilt: the Make entry, and the Exif directory (a copy of IFD0's readable entries but pointers).
        #expect(filtered.starts(with: [0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8]))
        #expect(filtered.range(of: Data("Nik".utf8)) != nil)
        for cut in stride(from: 0, to: block.count, by: 3) {
            _ = ExifRewriter.filter(Data(block.prefix(cut)), keep: keepAll, orientation: 1)
        }
    }
}
