import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// BlurHash and ThumbHash against the reference implementations on PyPI (`blurhash` 1.1.5,
/// `thumbhash` 0.1.2, installed by `make test`): the same pixels must give the same hash.
@Suite struct PlaceholderHashTests {
    /// Opaque test pictures as 8-bit RGBA: detail, a gradient, a photo-like rose, a flat colour.
    static func pictures() throws -> [(String, RGBAPixels)] {
        try [("plasma", "plasma:fractal", 64, 48), ("gradient", "gradient:navy-orange", 40, 60),
             ("rose", "rose:", nil, nil), ("flat", "xc:#3a7bd5", 20, 20), ("tiny", "plasma:", 3, 2)].map { name, spec, w, h in
            let wand = Wand()
            try wand.readBuiltIn(spec, size: w.flatMap { w in h.map { (w, $0) } })
            let rgb = try wand.rgbBytes()
            var rgba = [UInt8]()
            for i in 0..<(wand.width * wand.height) { rgba += [rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2], 255] }
            return (name, RGBAPixels(width: wand.width, height: wand.height, bytes: rgba))
        }
    }

    /// The reference package's answer for `pixels`, from a Python script reading them as JSON.
    func reference(_ script: String, _ pixels: RGBAPixels) async throws -> String {
        let input = try JSONSerialization.data(withJSONObject: ["w": pixels.width, "h": pixels.height, "rgba": pixels.bytes.map(Int.init)])
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script], stdin: input)
        try #require(result.status == 0, "python3: \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Small pictures where sums land on exact halves and every rounding rule shows: three known
    /// ties, then 120 of random pixels from a fixed seed (the same every run), in six shapes, a
    /// third of them with only five levels per channel.
    static func smallPictures() -> [RGBAPixels] {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt8 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 56)
        }
        // Three where a sum lands exactly on a half (found by comparing the package with itself
        // rounding halves up, as the JavaScript original does): PyPI's rounds them to even.
        let ties = [
            RGBAPixels(width: 1, height: 1, bytes: [255, 85, 255, 255]),
            RGBAPixels(width: 1, height: 1, bytes: [0, 170, 85, 255]),
            RGBAPixels(width: 3, height: 2, bytes: [0, 170, 170, 255, 170, 255, 255, 255, 170, 255, 170, 255,
                                                    85, 255, 85, 255, 85, 170, 0, 255, 255, 0, 170, 255]),
        ]
        let shapes = [(3, 2), (2, 3), (4, 1), (1, 4), (5, 5), (7, 3)]
        return ties + (0..<120).map { index in
            let (w, h) = shapes[index % shapes.count]
            let levels: UInt8 = index % 3 == 0 ? 4 : 255  // a third with only a few values: ties
            var rgba = [UInt8]()
            for _ in 0..<(w * h) { rgba += [next() / (255 / levels) * (255 / levels), next() / (255 / levels) * (255 / levels), next() / (255 / levels) * (255 / levels), 255] }
            return RGBAPixels(width: w, height: h, bytes: rgba)
        }
    }

    /// The reference's answers for many pictures at once, one line each.
    func references(_ script: String, _ pictures: [RGBAPixels]) async throws -> [String] {
        let input = try JSONSerialization.data(withJSONObject: pictures.map { ["w": $0.width, "h": $0.height, "rgba": $0.bytes.map(Int.init)] })
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script], stdin: input)
        try #require(result.status == 0, "python3: \(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init)
    }

    @Test func bothHashesMatchThePyPIPackagesOnSmallPictures() async throws {
        let pictures = Self.smallPictures()
        let thumb = try await references("""
            import json, sys, thumbhash
            for d in json.load(sys.stdin):
                print(bytes(thumbhash.rgba_to_thumb_hash(d["w"], d["h"], d["rgba"])).hex())
            """, pictures)
        let blur = try await references("""
            import json, sys, blurhash
            for d in json.load(sys.stdin):
                w, h, p = d["w"], d["h"], d["rgba"]
                rows = [[p[(y * w + x) * 4:(y * w + x) * 4 + 3] for x in range(w)] for y in range(h)]
                print(" ".join(blurhash.encode(rows, cx, cy) for cx, cy in [(4, 3), (1, 1), (3, 3)]))
            """, pictures)
        #expect(thumb.count == pictures.count && blur.count == pictures.count)
        for (index, pixels) in pictures.enumerated() where index < thumb.count && index < blur.count {
            #expect(ThumbHash.encode(pixels).map { String(format: "%02x", $0) }.joined() == thumb[index], "ThumbHash, picture \(index)")
            #expect([(4, 3), (1, 1), (3, 3)].map { BlurHash.encode(pixels, x: $0.0, y: $0.1) }.joined(separator: " ") == blur[index],
                    "BlurHash, picture \(index)")
        }
    }

    @Test func blurHashMatchesThePyPIPackage() async throws {
        let script = """
            import json, sys, blurhash
            d = json.load(sys.stdin); w, h, p = d["w"], d["h"], d["rgba"]
            rows = [[p[(y * w + x) * 4:(y * w + x) * 4 + 3] for x in range(w)] for y in range(h)]
            print(" ".join(blurhash.encode(rows, cx, cy) for cx, cy in [(4, 3), (1, 1), (9, 9), (5, 2)]))
            """
        for (name, pixels) in try Self.pictures() {
            let ours = [(4, 3), (1, 1), (9, 9), (5, 2)].map { BlurHash.encode(pixels, x: $0.0, y: $0.1) }.joined(separator: " ")
            #expect(ours == (try await reference(script, pixels)), "\(name)")
        }
    }

    @Test func thumbHashMatchesThePyPIPackage() async throws {
        let script = """
            import json, sys, thumbhash
            d = json.load(sys.stdin)
            print(bytes(thumbhash.rgba_to_thumb_hash(d["w"], d["h"], d["rgba"])).hex())
            """
        for (name, pixels) in try Self.pictures() {
            let ours = ThumbHash.encode(pixels).map { String(format: "%02x", $0) }.joined()
            #expect(ours == (try await reference(script, pixels)), "\(name)")
        }
    }

    /// The PyPI package fails on images with alpha (its alpha channel is assigned a tuple); the hash
    /// here follows the JavaScript reference: the alpha flag, the alpha byte, and the aspect ratio
    /// read back as the reference's decoder reads it.
    @Test func thumbHashWithAlpha() throws {
        var rgba = [UInt8]()
        for y in 0..<30 { for x in 0..<40 { rgba += x >= 10 && x < 30 && y >= 8 && y < 22 ? [200, 30, 30, 255] : [0, 0, 0, 0] } }
        let hash = ThumbHash.encode(RGBAPixels(width: 40, height: 30, bytes: rgba))
        #expect(hash[2] & 0x80 != 0)  // has alpha
        let header16 = Int(hash[3]) | Int(hash[4]) << 8
        #expect(header16 >> 15 == 1)  // landscape
        #expect(header16 & 7 == 4)  // ly = round(5 * 30 / 40) = 3.75 -> 4
        let alphaDC = Double(hash[5] & 15) / 15
        #expect(abs(alphaDC - 280.0 / 1200.0) < 0.07, "\(alphaDC)")
    }
}

/// dHash and the median-cut palette: exact on pictures whose answer is known, and near-duplicates
/// near, unrelated pictures far.
@Suite struct ImageFactsAlgorithmTests {
    func pixels(_ spec: String, _ width: Int, _ height: Int, resize: (Int, Int)? = nil, quality: Int? = nil) throws -> RGBAPixels {
        let wand = Wand()
        try wand.readBuiltIn(spec, size: (width, height))
        var image = wand
        if let quality {  // a JPEG round trip
            image = Wand()
            try image.read(try wand.encode(format: "JPEG", quality: quality), format: "JPEG")
        }
        if let resize { try image.resize(width: resize.0, height: resize.1) }
        let rgb = try image.rgbBytes()
        var rgba = [UInt8]()
        for i in 0..<(image.width * image.height) { rgba += [rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2], 255] }
        return RGBAPixels(width: image.width, height: image.height, bytes: rgba)
    }

    @Test func differenceHashOfAGradient() throws {
        // Brightness rises left to right: every neighbour comparison is "brighter", all 64 bits set.
        var ramp = [UInt8]()
        for _ in 0..<80 { for x in 0..<90 { let v = UInt8(x * 255 / 89); ramp += [v, v, v, 255] } }
        #expect(DifferenceHash.encode(RGBAPixels(width: 90, height: 80, bytes: ramp)) == "ffffffffffffffff")
        #expect(DifferenceHash.encode(try pixels("xc:gray", 90, 80)) == "0000000000000000")
    }

    @Test func nearDuplicatesAreNearAndOthersFar() throws {
        let original = try pixels("logo:", 640, 480)
        let smaller = try pixels("logo:", 640, 480, resize: (320, 240))
        let recompressed = try pixels("logo:", 640, 480, quality: 40)
        let other = try pixels("rose:", 70, 46)
        let hash = DifferenceHash.encode(original)
        #expect(DifferenceHash.distance(hash, DifferenceHash.encode(smaller))! <= 4)
        #expect(DifferenceHash.distance(hash, DifferenceHash.encode(recompressed))! <= 4)
        #expect(DifferenceHash.distance(hash, DifferenceHash.encode(other))! >= 16)
    }

    @Test func paletteOfKnownColours() throws {
        // Three quarters red, one quarter blue, and a transparent column that does not count.
        var rgba = [UInt8]()
        for _ in 0..<10 { for x in 0..<9 { rgba += x == 8 ? [0, 255, 0, 0] : x < 6 ? [255, 0, 0, 255] : [0, 0, 255, 255] } }
        let swatches = Palette.swatches(RGBAPixels(width: 9, height: 10, bytes: rgba), count: 5)
        #expect(swatches == [Palette.Swatch(hex: "#ff0000", share: 0.75), Palette.Swatch(hex: "#0000ff", share: 0.25)])
        #expect(Palette.swatches(RGBAPixels(width: 1, height: 1, bytes: [9, 9, 9, 0])).isEmpty)
    }

    @Test func paletteOfAPhotoHasTheAskedCountAndShares() throws {
        let swatches = Palette.swatches(try pixels("rose:", 70, 46), count: 5)
        #expect(swatches.count == 5)
        #expect(abs(swatches.map(\.share).reduce(0, +) - 1) < 0.01)
        #expect(swatches.map(\.share) == swatches.map(\.share).sorted(by: >))
    }
}

