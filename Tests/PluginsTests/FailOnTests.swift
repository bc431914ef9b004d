import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// `fail_on` on truncated and corrupt JPEGs and PNGs, through the reduce-on-load paths (a 32x24
/// hint) and through ImageMagick's (no hint): what each level decodes, and how it is marked.
@Suite struct FailOnTests: CodecSuite {
    static let levels = ["warning", "error", "truncated", "none"]
    static let small = DecodeHint(targetSize: PixelSize(width: 32, height: 24))

    /// A 256x192 picture with detail, as `format`.
    static func picture(_ format: String) throws -> Data {
        try Fixtures.image("plasma:fractal", width: 256, height: 192, format: format, quality: 92)
    }

    func decode(_ data: Data, failOn: String, hint: DecodeHint) -> Result<PipelineImage, PipelineError> {
        do {
            let decoder = try decoder(["fail_on": .string(failOn)])
            return .success(try decoder.decode(LoadedData(data: data), hint: hint))
        } catch {
            return .failure(error as? PipelineError ?? PipelineError(.decodeFailed, "\(error)"))
        }
    }

    /// The mean and spread of the grey level over rows `rows` of `image`.
    func rows(_ image: PipelineImage, _ rows: Range<Int>) throws -> (mean: Double, spread: Double) {
        try image.withCopy { wand in
            var values: [Double] = []
            for y in rows { for x in stride(from: 0, to: image.width, by: max(1, image.width / 16)) {
                let p = try wand.pixel(x: x, y: y)
                values.append((p.red + p.green + p.blue) / 3)
            } }
            let mean = values.reduce(0, +) / Double(values.count)
            return (mean, values.map { abs($0 - mean) }.max() ?? 0)
        }
    }

    /// `format`'s picture cut to `percent`% of its bytes: every level but `none` fails with
    /// `reason`; `none` decodes it at full size, marked degraded with `degraded` (`reason` unless
    /// given; and what was read), its top rows the picture's, its last rows flat (of `bottomMean`
    /// when given).
    func expectTruncated(_ format: String, percent: Int, reduced: Bool, reason: String, degraded: String? = nil,
                         bottomMean: Double? = nil) throws {
        let whole = try Self.picture(format)
        let cut = whole.prefix(whole.count * percent / 100)
        let hint = reduced ? Self.small : DecodeHint()
        for level in Self.levels.dropLast() {
            guard case .failure(let error) = decode(cut, failOn: level, hint: hint) else {
                Issue.record("fail_on \(level) decoded a truncated \(format)"); continue
            }
            #expect(error == PipelineError(.decodeFailed, reason), "\(level)")
        }
        let image = try decode(cut, failOn: "none", hint: hint).get()
        #expect(image.degraded?.hasPrefix(degraded ?? reason) == true, "\(image.degraded ?? "not degraded")")
        let full = try decode(whole, failOn: "warning", hint: hint).get()
        #expect(full.degraded == nil)
        #expect(image.width == full.width && image.height == full.height)
        let top = try rows(image, 0..<2), bottom = try rows(image, image.height - 2..<image.height)
        #expect(abs(top.mean - (try rows(full, 0..<2)).mean) < 0.03, "\(top)")
        #expect(bottom.spread < 0.03 && bottomMean.map { bottom.mean == $0 } != false, "bottom \(bottom)")
    }

    /// libjpeg fills what is missing with grey.
    @Test(arguments: [false, true])
    func truncatedJPEG(reduced: Bool) throws {
        try expectTruncated("JPEG", percent: 55, reduced: reduced, reason: "JPEG: Premature end of JPEG file")
    }

    /// libpng's rows as far as the data goes (ImageMagick's coder keeps nothing: libpng reads it
    /// again); the rest black and transparent.
    @Test(arguments: [false, true])
    func truncatedPNG(reduced: Bool) throws {
        try expectTruncated("PNG", percent: 55, reduced: reduced, reason: "PNG: the file ends before the image does", bottomMean: 0)
    }

    /// A lossy WebP cut short: libwebp's incremental decoder gives the rows that are there.
    @Test(arguments: [false, true])
    func truncatedWebP(reduced: Bool) throws {
        // libwebp's reason on the reduce path, ImageMagick's coder's on the other.
        try expectTruncated("WEBP", percent: 60, reduced: reduced,
                            reason: reduced ? "WebP: the file ends before the image does" : "WEBP: insufficient image data in file",
                            degraded: "WebP: the file ends before the image does", bottomMean: 0)
    }

    /// A PNG whose image data has a wrong CRC: an error, decoded past from `truncated` down.
    @Test(arguments: [false, true])
    func pngWithBadCRC(reduced: Bool) throws {
        var bytes = [UInt8](try Self.picture("PNG"))
        // The first IDAT chunk's CRC: after its 4-byte length, 4-byte type and data.
        let idat = (0..<bytes.count - 4).first { bytes[$0..<$0 + 4].elementsEqual("IDAT".utf8) }!
        let length = Int(bytes[idat - 4]) << 24 | Int(bytes[idat - 3]) << 16 | Int(bytes[idat - 2]) << 8 | Int(bytes[idat - 1])
        bytes[idat + 4 + length] ^= 0xFF
        let hint = reduced ? Self.small : DecodeHint()
        for level in ["warning", "error"] {
            let result = decode(Data(bytes), failOn: level, hint: hint)
            guard case .failure(let error) = result else { Issue.record("fail_on \(level) decoded a bad CRC"); continue }
            #expect(error.kind == .decodeFailed && error.message.contains("CRC"), "\(error)")
        }
        for level in ["truncated", "none"] {
            let image = try decode(Data(bytes), failOn: level, hint: hint).get()
            #expect(image.degraded?.contains("CRC") == true, "\(level): \(image.degraded ?? "not degraded")")
        }
    }

    /// A bad CRC in an ancillary chunk (gAMA): libpng drops the chunk and the pixels are whole,
    /// so only `warning` fails it; the others decode it, marked degraded.
    @Test(arguments: [false, true])
    func pngWithBadAncillaryCRC(reduced: Bool) throws {
        var bytes = [UInt8](try Self.picture("PNG"))
        let gama = try #require((0..<bytes.count - 4).first { bytes[$0..<$0 + 4].elementsEqual("gAMA".utf8) })
        bytes[gama + 4 + 4] ^= 0xFF  // gAMA holds 4 bytes; its CRC follows
        let hint = reduced ? Self.small : DecodeHint()
        guard case .failure(let error) = decode(Data(bytes), failOn: "warning", hint: hint) else {
            Issue.record("fail_on warning decoded a bad gAMA CRC"); return
        }
        #expect(error == PipelineError(.decodeFailed, "PNG: gAMA: CRC error"))
        for level in ["error", "truncated", "none"] {
            let image = try decode(Data(bytes), failOn: level, hint: hint).get()
            #expect(image.degraded == "PNG: gAMA: CRC error", "\(level): \(image.degraded ?? "not degraded")")
        }
    }

    @Test func intactImagesAreNeverDegraded() throws {
        for format in ["JPEG", "PNG", "GIF", "WEBP", "TIFF"] {
            for hint in [DecodeHint(), Self.small] {
                let image = try decode(try Self.picture(format), failOn: "none", hint: hint).get()
                #expect(image.degraded == nil, "\(format)")
            }
        }
    }
}
