import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The format table: one row per format, from which the decoder's readers and `formats` names,
/// the header probes, the built-in encoders and the fuzz targets are all read.
@Suite struct FormatTableTests {
    @Test func everyRecognisedFormatHasARow() {
        for format in ImageFormat.allCases {
            #expect(FormatTable.entry(for: format) != nil, "\(format) has no row in FormatTable")
        }
        let rows = FormatTable.entries.flatMap(\.formats)
        #expect(rows.count == Set(rows).count, "a format is in two rows")
    }

    /// The `formats` option's names and defaults are what pipeline files have always used.
    @Test func formatNamesAndDefaultsAreUnchanged() {
        #expect(ImageMagickDecoder.defaultFormats == ["jpeg", "png", "gif", "webp", "tiff", "bmp", "ico", "heic", "avif", "jxl"])
        #expect(ImageMagickDecoder.formatNames.map(\.name) == [
            "jpeg", "png", "gif", "webp", "tiff", "bmp", "ico", "heic", "avif", "jxl", "jp2", "pnm", "tga", "pcx", "psd", "sgi",
            "sun", "dds", "fits", "xbm", "xpm", "video",
        ])
        #expect(ImageMagickDecoder.formatName(of: .j2k) == "jp2")
        #expect(ImageMagickDecoder.formatName(of: .cur) == "ico")
        #expect(ImageMagickDecoder.formatName(of: .svg) == nil, "SVG is allowed by allow_svg, not by formats")
    }

    /// Each header probe reads the size ImageMagick's own ping reads, on a file ImageMagick wrote.
    @Test func headerProbesAgreeWithImageMagick() throws {
        var probed: [ImageFormat] = []
        // A format ImageMagick cannot write (JPEG XL) has its probe checked by its own suite.
        for entry in FormatTable.entries where !entry.readsItself {
            guard let dimensions = entry.dimensions, let format = entry.formats.first else { continue }
            let data = try Fixtures.image("plasma:fractal", width: 37, height: 23, format: format.coder)
            #expect(dimensions(data) == PixelSize(width: 37, height: 23), "\(format)")
            #expect(try ImageMagickDecoder.pingedSize(data, format: format) == PixelSize(width: 37, height: 23), "\(format)")
            #expect(dimensions(data.prefix(8)) == nil, "\(format): a cut header gives no size")
            probed.append(format)
        }
        #expect(Set(probed) == [.jpeg, .png, .gif, .webp, .tiff, .bmp])
    }

    /// The built-in encoders and fuzz targets are the table's: a format's row brings them.
    @Test func encodersAndFuzzTargetsComeFromTheTable() {
        let builtIn = Set(BuiltIns.plugins.map(\.spec.name))
        for plugin in FormatTable.encoders { #expect(builtIn.contains(plugin.spec.name), "\(plugin.spec.name)") }
        #expect(Set(FormatTable.encoders.map(\.spec.name)) == ["jpeg", "png", "gif", "webp", "tiff", "heic", "avif", "jxl"])
        // The names the harness in Fuzz/ and the regression fixtures use.
        #expect(Set(FuzzTargets.all.keys) == ["sniffer", "header-probe", "png", "jpeg", "webp", "heif", "tiff", "gif", "svg", "icc", "exif", "xmp-regions", "jxl", "video"])
    }
}
