import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The source's facts the decoder adds for `analyze`: EXIF fields written by exiftool, ICC
/// descriptions compared with exiftool's reading of the same profiles (version 2 and 4).
@Suite struct SourceFactsTests {
    let decoder = ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)
    let wanting = DecodeHint(targetSize: PixelSize(width: 64, height: 64), fit: true, wantsSourceFacts: true)

    @Test func exifFieldsOrientationAndGPS() async throws {
        let dir = try Fixtures.temporaryDirectory("exif")
        let file = dir.appendingPathComponent("camera.jpg")
        try Fixtures.image("plasma:fractal", width: 300, height: 200).write(to: file)
        let written = try await Command.run("/usr/bin/exiftool", [
            "-q", "-overwrite_original", "-Make=Canon", "-Model=Canon EOS R5", "-LensModel=RF24-105mm F4 L IS USM",
            "-DateTimeOriginal=2026:05:04 12:34:56", "-GPSLatitude=48.8584", "-GPSLatitudeRef=N", "-GPSLongitude=2.2945",
            "-GPSLongitudeRef=E", "-Orientation#=6", file.path,
        ])
        try #require(written.status == 0, "exiftool: \(written.stderr)")
        let image = try decoder.decode(LoadedData(data: try Data(contentsOf: file)), hint: wanting)
        #expect(image.facts["orientation"] == .int(6))
        #expect(image.facts["colorspace"] == .string("sRGB"))
        #expect(image.facts["exif"] == .object([
            "make": .string("Canon"), "model": .string("Canon EOS R5"), "lens": .string("RF24-105mm F4 L IS USM"),
            "taken": .string("2026:05:04 12:34:56"), "gps": .bool(true),
        ]))
        // Without GPS tags: present and false.
        let noGPS = try await Command.run("/usr/bin/exiftool", ["-q", "-overwrite_original", "-gps:all=", file.path])
        try #require(noGPS.status == 0)
        let stripped = try decoder.decode(LoadedData(data: try Data(contentsOf: file)), hint: wanting)
        #expect(stripped.facts["exif"]?.objectValue?["gps"] == .bool(false))
        // Not asked: nothing read.
        #expect(try decoder.decode(LoadedData(data: try Data(contentsOf: file)), hint: DecodeHint()).facts.isEmpty)
    }

    /// WebP's facts come from its chunks (ImageMagick 6 decodes the whole picture to ping one):
    /// the same facts as the JPEG path gives for the same tags.
    @Test func webPFactsFromItsChunks() async throws {
        let dir = try Fixtures.temporaryDirectory("exif-webp")
        let file = dir.appendingPathComponent("camera.webp")
        let wand = Wand()
        try wand.readBuiltIn("plasma:fractal", size: (300, 200))
        try wand.setICCProfile(try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/a98.icc")))
        try wand.encode(format: "WEBP", quality: 80).write(to: file)
        let written = try await Command.run("/usr/bin/exiftool", [
            "-q", "-overwrite_original", "-Make=Canon", "-Model=Canon EOS R5", "-LensModel=RF24-105mm F4 L IS USM",
            "-DateTimeOriginal=2026:05:04 12:34:56", "-GPSLatitude=48.8584", "-GPSLatitudeRef=N", "-Orientation#=6", file.path,
        ])
        try #require(written.status == 0, "exiftool: \(written.stderr)")
        let image = try decoder.decode(LoadedData(data: try Data(contentsOf: file)), hint: wanting)
        #expect(image.facts["orientation"] == .int(6) && image.facts["colorspace"] == .string("sRGB"))
        #expect(image.facts["icc"] == .string("Artifex Software A98 ICC Profile"))
        #expect(image.facts["exif"] == .object([
            "make": .string("Canon"), "model": .string("Canon EOS R5"), "lens": .string("RF24-105mm F4 L IS USM"),
            "taken": .string("2026:05:04 12:34:56"), "gps": .bool(true),
        ]))
        // Without EXIF: colour space and profile only.
        try #require(try await Command.run("/usr/bin/exiftool", ["-q", "-overwrite_original", "-exif:all=", file.path]).status == 0)
        let bare = try decoder.decode(LoadedData(data: try Data(contentsOf: file)), hint: wanting)
        #expect(bare.facts["exif"] == nil && bare.facts["orientation"] == nil && bare.facts["icc"] != nil)
    }

    @Test(arguments: ["a98", "ps_rgb", "srgb"])
    func iccDescriptionAsExiftoolReadsIt(_ name: String) async throws {
        let path = "/usr/share/color/icc/ghostscript/\(name).icc"
        let profile = try Data(contentsOf: URL(fileURLWithPath: path))
        let exiftool = try await Command.run("/usr/bin/exiftool", ["-s3", "-ProfileDescription", path])
        try #require(exiftool.status == 0)
        #expect(ICCProfile.description(profile) == exiftool.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        // Embedded in a JPEG: the fact, whatever the decode then converts.
        let wand = Wand()
        try wand.readBuiltIn("rose:")
        try wand.setICCProfile(profile)
        let image = try decoder.decode(LoadedData(data: try wand.encode(format: "JPEG")), hint: wanting)
        #expect(image.facts["icc"] == .string(exiftool.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    @Test func brokenProfilesGiveNoDescription() throws {
        var profile = [UInt8](try Data(contentsOf: URL(fileURLWithPath: "/usr/share/color/icc/ghostscript/a98.icc")))
        #expect(ICCProfile.description(Data(profile.prefix(140))) == nil)
        for i in 128..<min(profile.count, 400) { profile[i] = 0xFF }  // the tag table pointing everywhere
        #expect(ICCProfile.description(Data(profile)) == nil)
        #expect(ICCProfile.description(Data()) == nil)
    }
}

extension FactValue {
    var objectValue: [String: FactValue]? { if case .object(let v) = self { v } else { nil } }
}
