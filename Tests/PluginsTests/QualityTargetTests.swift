import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Quality by a visual target: our SSIM against scikit-image's (`structural_similarity`, installed
/// by `make test`), the search's result against encodes at every quality, and the options' checks.
@Suite struct QualityTargetTests {
    /// A grey picture and a damaged copy of it: `spec` made `width` x `height`, and its JPEG at
    /// quality 15 decoded again.
    static func pair(_ spec: String, _ width: Int, _ height: Int) throws -> (SSIM.Plane, SSIM.Plane) {
        let wand = Wand()
        try wand.readBuiltIn(spec, size: (width, height))
        let damaged = Wand()
        try damaged.read(try wand.encode(format: "JPEG", quality: 15), format: "JPEG")
        return (try QualityTarget.plane(wand, alpha: false), try QualityTarget.plane(damaged, alpha: false))
    }

    @Test(arguments: [("plasma:fractal", 64, 48), ("gradient:navy-orange", 37, 53), ("plasma:", 200, 11), ("rose:", 70, 46)])
    func ssimMatchesScikitImage(_ spec: String, _ width: Int, _ height: Int) async throws {
        let (original, damaged) = try Self.pair(spec, width, height)
        let ours = try #require(SSIM.score(SSIM.Reference(original), damaged))
        let script = """
            import json, sys, numpy
            from skimage.metrics import structural_similarity
            d = json.load(sys.stdin)
            a = numpy.array(d["a"], dtype=numpy.float64).reshape(d["h"], d["w"])
            b = numpy.array(d["b"], dtype=numpy.float64).reshape(d["h"], d["w"])
            print(structural_similarity(a, b, data_range=255, gaussian_weights=True, sigma=1.5, use_sample_covariance=False))
            """
        let input = try JSONSerialization.data(withJSONObject: ["w": original.width, "h": original.height,
                                                                "a": original.values.map(Double.init), "b": damaged.values.map(Double.init)])
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script], stdin: input)
        try #require(result.status == 0, "python3: \(result.stderr)")
        let theirs = try #require(Double(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(abs(ours - theirs) < 1e-5, "\(spec): ours \(ours), scikit-image \(theirs)")
        #expect(ours < 0.99 && ours > 0.3, "the damage shows")
        #expect(SSIM.score(SSIM.Reference(original), original) == 1)
    }

    @Test func sizesThatDifferHaveNoScore() throws {
        let (a, _) = try Self.pair("plasma:", 20, 20)
        let (b, _) = try Self.pair("plasma:", 20, 21)
        #expect(SSIM.score(SSIM.Reference(a), b) == nil)
        // Smaller than one window: every pixel counts, nothing is cropped.
        let (tiny, tinyDamaged) = try Self.pair("plasma:fractal", 6, 4)
        #expect(SSIM.score(SSIM.Reference(tiny), tinyDamaged).map { $0 > 0 && $0 <= 1 } == true)
    }

    /// An image the encoders get: ImageMagick's rose scaled to 320x240, with some noise as a
    /// photo has (plasma's fractal noise alone is too fine for any quality to reach a target).
    static func photo() throws -> PipelineImage {
        let wand = Wand()
        try wand.readBuiltIn("rose:")
        try wand.resize(width: 320, height: 240)
        return PipelineImage(taking: wand, sourceFormat: "PNG")
    }

    /// What a fixed `quality` scores against the processed image, measured apart from the search
    /// (decoded as the search decodes, which a test below compares with ImageMagick's decoding).
    static func score(_ plugin: Plugin, _ options: [String: OptionValue], quality: Int, format: String, of image: PipelineImage) throws -> Double {
        var fixed = options
        fixed["quality"] = .int(quality)
        let data = try plugin.makeEncoder(plugin.options(fixed)).encode(image)
        let reference = try image.withCopy { wand in
            if ["JPEG"].contains(format) { try wand.flatten(onto: "white") }
            return SSIM.Reference(try QualityTarget.plane(wand, alpha: false))
        }
        return try #require(SSIM.score(reference, try QualityTarget.decodedPlane(data, format: format, alpha: false)))
    }

    /// The chosen quality is the lowest that meets the target: it does, the one below does not.
    @Test(arguments: [("jpeg", "JPEG", 0.97), ("webp", "WEBP", 0.98), ("avif", "AVIF", 0.97)])
    func theSearchFindsTheLowestQualityThatMeetsTheTarget(_ name: String, _ format: String, _ ssim: Double) throws {
        let plugin = try #require(BuiltIns.registry().plugin(name, in: .encoder))
        let image = try Self.photo()
        let target: OptionValue = .map(["target_ssim": .number(ssim), "min": .int(20), "max": .int(95)])
        let encoded = try plugin.makeEncoder(plugin.options(["quality": target])).encoded(image)
        guard case .int(let quality) = encoded.facts["quality"], case .number(let reported) = encoded.facts["ssim"] else {
            Issue.record("no quality or ssim in \(encoded.facts)")
            return
        }
        #expect(encoded.facts["target_met"] == .bool(true), "\(encoded.facts)")
        #expect(quality > 20 && quality < 95, "a target between the bounds: \(quality)")
        let atChosen = try Self.score(plugin, [:], quality: quality, format: format, of: image)
        #expect(atChosen >= ssim && abs(atChosen - reported) < 0.0001, "\(quality): \(atChosen), reported \(reported)")
        #expect(try Self.score(plugin, [:], quality: quality - 1, format: format, of: image) < ssim, "\(quality - 1) would not do")
        #expect(encoded.data == (try plugin.makeEncoder(plugin.options(["quality": .int(quality)])).encode(image)))
    }

    /// The candidates' own decoders (libjpeg-turbo, libwebp) score as ImageMagick's decoding does,
    /// within what two JPEG decoders' rounding allows.
    @Test(arguments: [("JPEG", 70), ("WEBP", 70), ("JPEG", 95)])
    func ownDecodersScoreAsImageMagicksDoes(_ format: String, _ quality: Int) throws {
        let image = try Self.photo()
        let (data, reference) = try image.withCopy { wand in
            (try wand.encode(format: format, quality: quality), SSIM.Reference(try QualityTarget.plane(wand, alpha: false)))
        }
        let ours = try #require(format == "JPEG" ? QualityTarget.jpegPlane(data) : QualityTarget.webPPlane(data, alpha: false))
        let decoded = Wand()
        try decoded.read(data, format: format)
        let theirs = try QualityTarget.plane(decoded, alpha: false)
        let (a, b) = (try #require(SSIM.score(reference, ours)), try #require(SSIM.score(reference, theirs)))
        #expect(abs(a - b) < 0.002, "\(format) q\(quality): libjpeg/libwebp \(a), ImageMagick \(b)")
    }

    @Test func anUnreachableTargetGivesTheMaximumAndSaysSo() throws {
        let plugin = JPEGEncoder.plugin
        let image = try Self.photo()
        let encoded = try plugin.makeEncoder(plugin.options(["quality": .map(["target_ssim": .number(0.9999), "min": .int(30), "max": .int(60)])]))
            .encoded(image)
        #expect(encoded.facts["quality"] == .int(60) && encoded.facts["target_met"] == .bool(false) && encoded.facts["encodes"] == .int(1))
        let easy = try plugin.makeEncoder(plugin.options(["quality": .map(["target_ssim": .number(0.5), "min": .int(30), "max": .int(60)])]))
            .encoded(image)
        #expect(easy.facts["quality"] == .int(30) && easy.facts["target_met"] == .bool(true))
    }

    @Test func autoPicksTheSmallestFormatThatMeetsTheTarget() throws {
        let image = try Self.photo()
        let auto = try AutoEncoder.plugin.makeEncoder(AutoEncoder.plugin.options([
            "quality": .map(["target_ssim": .number(0.97), "min": .int(20), "max": .int(95)]),
            "formats": .list([.string("jpeg"), .string("webp"), .string("avif")]),
        ])).encoded(image)
        guard case .object(let sizes) = auto.facts["bytes_by_format"], case .string(let format) = auto.facts["format"] else {
            Issue.record("no choice in \(auto.facts)")
            return
        }
        #expect(Set(sizes.keys) == ["jpg", "webp", "avif"])
        let smallest = sizes.min { Self.int($0.value) < Self.int($1.value) }!.key
        #expect(format == smallest && auto.fileExtension == smallest && Self.int(sizes[format]!) == auto.data.count)
        // Transparency rules JPEG out.
        let alpha = try PipelineImage(taking: { let w = Wand(); try w.read(try Fixtures.alphaPNG(120, 80), format: "PNG"); return w }(),
                                      sourceFormat: "PNG")
        let transparent = try AutoEncoder.plugin.makeEncoder(AutoEncoder.plugin.options([
            "quality": .map(["target_ssim": .number(0.97)]),
        ])).encoded(alpha)
        #expect(transparent.fileExtension == "webp" && transparent.facts["bytes_by_format"] == .object(["webp": .int(transparent.data.count)]))
    }

    static func int(_ value: FactValue) -> Int { if case .int(let v) = value { v } else { -1 } }

    @Test func badTargetsAreRefusedWithTheirReason() throws {
        func problem(_ plugin: Plugin, _ options: [String: OptionValue]) -> String? {
            do { _ = try plugin.makeEncoder(plugin.options(options)); return nil } catch let error as PipelineError { return error.message } catch {
                return "\(error)"
            }
        }
        #expect(problem(JPEGEncoder.plugin, ["quality": .map(["target_ssim": .number(0.98), "min": .int(80), "max": .int(60)])])
            == "quality: min 80 is above max 60")
        #expect(problem(WebPEncoder.plugin, ["quality": .map(["target_ssim": .number(0.98)]), "lossless": .bool(true)])
            == "a quality target needs lossy WebP: lossless output is always identical")
    }
}
