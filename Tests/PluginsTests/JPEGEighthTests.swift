import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// A baseline JPEG at 1/8 decoded in parts side by side (``JPEGEighth``) against libjpeg's own
/// read of the same file: the same pixels byte for byte in every sampling and colour space it
/// takes, with and without restart markers; and for a damaged file the same outcome, pixels or
/// error, as libjpeg alone.
@Suite struct JPEGEighthTests: CodecSuite {
    /// A 1203x811 plasma (odd sizes: partial MCUs on both edges) written by libjpeg-turbo's cjpeg
    /// with `options`.
    static func cjpeg(_ options: [String]) async throws -> Data {
        let directory = try Fixtures.temporaryDirectory("jpeg-eighth")
        let ppm = directory.appendingPathComponent("source.ppm").path
        if !FileManager.default.fileExists(atPath: ppm) {
            let made = try await Command.run("/usr/bin/convert", ["-seed", "3", "-size", "1203x811", "plasma:", ppm])
            try #require(made.status == 0, "\(made.stderr)")
        }
        let out = directory.appendingPathComponent(UUID().uuidString + ".jpg").path
        let made = try await Command.run("/usr/bin/cjpeg", options + ["-outfile", out, ppm])
        try #require(made.status == 0, "cjpeg \(options): \(made.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: out))
    }

    static let plan = JPEGReducer.plan(PixelSize(width: 1203, height: 811), hint: DecodeHint(targetSize: PixelSize(width: 50, height: 50), fit: true), headroom: 2)!

    /// The decode's pixels, or its error, with libjpeg alone or shared.
    static func outcome(_ data: Data, shared: Bool) -> String {
        do {
            guard let decoded = try JPEGReducer.decode(data, plan: plan, toSRGB: true, autoOrient: true, sharedEighth: shared) else { return "not taken" }
            guard case .pixels(let pixels) = decoded.pixels else { return "a wand" }
            return "\(pixels.width)x\(pixels.height) \(pixels.bytes.hashValue) \(decoded.damage.map { "\($0)" } ?? "undamaged")"
        } catch {
            return "\(error)"
        }
    }

    static func pixels(_ data: Data, shared: Bool) throws -> [UInt8] {
        let decoded = try #require(try JPEGReducer.decode(data, plan: plan, toSRGB: true, autoOrient: true, sharedEighth: shared))
        guard case .pixels(let pixels) = decoded.pixels else { throw PipelineError(.decodeFailed, "not 8-bit") }
        #expect(decoded.damage == nil)
        return pixels.bytes
    }

    @Test(arguments: [
        ["-sample", "2x2"], ["-sample", "2x1"], ["-sample", "1x2"], ["-sample", "1x1"], ["-sample", "4x1"],
        ["-sample", "2x2,1x1,2x2"], ["-grayscale"], ["-rgb"], ["-sample", "2x2", "-optimize"],
        ["-sample", "2x2", "-quality", "100"], ["-sample", "2x2", "-quality", "5"],
        ["-sample", "2x2", "-restart", "1"], ["-sample", "2x1", "-restart", "5B"], ["-grayscale", "-restart", "2"],
    ])
    func sharedReadsGiveLibjpegsPixels(options: [String]) async throws {
        #expect(Self.plan.denominator == 8)
        let data = try await Self.cjpeg(options)
        let eighth = try #require(JPEGEighth.decode(data), "\(options): not taken, or not finished")
        #expect((eighth.width, eighth.height) == (151, 102))
        let shared = eighth.pixels
        let alone = try Self.pixels(data, shared: false)
        #expect(try Self.pixels(data, shared: true) == alone)
        #expect(shared == alone, "\(options): \(zip(shared, alone).filter { $0 != $1 }.count) bytes differ")
    }

    /// Progressive and arithmetic-coded files are libjpeg's: the shared read declines them and
    /// the decode still gives libjpeg's pixels.
    @Test(arguments: [["-progressive"], ["-arithmetic"]])
    func filesItDoesNotTakeAreLeftToLibjpeg(options: [String]) async throws {
        let data = try await Self.cjpeg(options)
        #expect(JPEGEighth.decode(data) == nil)
        #expect(try Self.pixels(data, shared: true) == Self.pixels(data, shared: false))
    }

    /// Cut short, bytes left over before the end marker, bytes flipped anywhere in the data:
    /// the shared read gives libjpeg's outcome every time (the same pixels and damage, or the same
    /// error), because it declines whatever it could not finish exactly as libjpeg does.
    @Test(arguments: [["-sample", "2x2"], ["-sample", "2x1", "-restart", "3B"]])
    func damagedFilesComeOutAsLibjpegSays(options: [String]) async throws {
        let data = try await Self.cjpeg(options)
        var cases: [(String, Data)] = [
            ("cut short", data.prefix(data.count * 2 / 3)),
            ("cut before the end marker", data.prefix(data.count - 2)),
            ("bytes before the end marker", data.prefix(data.count - 2) + Data([0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0, 0x11]) + Data([0xFF, 0xD9])),
        ]
        var generator = SplitMix64(seed: 34)
        for index in 0..<60 {
            var bytes = [UInt8](data)
            for _ in 0..<(index % 3 + 1) { bytes[Int.random(in: 700..<bytes.count - 2, using: &generator)] ^= UInt8.random(in: 1...255, using: &generator) }
            cases.append(("flipped \(index)", Data(bytes)))
        }
        var finished = 0
        for (label, bytes) in cases {
            #expect(Self.outcome(bytes, shared: true) == Self.outcome(bytes, shared: false), "\(options) \(label)")
            if JPEGEighth.decode(bytes) != nil { finished += 1 }
        }
        // Some damage decodes to other pixels without a warning from libjpeg: those the shared
        // read finishes too (and must match).
        #expect(finished > 0)
    }

    /// On a worker with an idle neighbour a large baseline JPEG takes the shared read by itself,
    /// and the decoder's result is the one the libjpeg read gives.
    @Test func aLargeJPEGOnAWorkerWithAnIdleNeighbourIsShared() async throws {
        try await expectSharedOnAnIdlePool(format: "JPEG", taken: { JPEGEighth.count.load(ordering: .relaxed) }, "libjpeg")
    }
}
