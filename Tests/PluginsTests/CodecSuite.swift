import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing

/// What the codec suites share: the decoder with its defaults and other options, a 100x100 hint,
/// thumbnails made through a reduce-on-load path and through a full decode, and PSNR between two.
protocol CodecSuite {}

extension CodecSuite {
    var decoder: ImageMagickDecoder { ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions) }
    var hint: DecodeHint { DecodeHint(targetSize: PixelSize(width: 100, height: 100)) }

    func decoder(_ options: [String: OptionValue]) throws -> any ImageDecoding {
        try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(options))
    }

    /// Both thumbnails (fit 100x100) of `data`: decoded under the hint (reduced where the format's
    /// path reduces) and with `shrink_on_load: false`, with the size the reduced decode came out at.
    func thumbnails(_ data: Data, _ options: [String: OptionValue] = [:]) throws -> (reduced: PipelineImage, full: PipelineImage, decoded: PixelSize) {
        let resize = try Resize.plugin.makeProcessor(Resize.plugin.options(["width": .int(100), "height": .int(100)]))
        let reduced = try decoder(options).decode(LoadedData(data: data), hint: hint)
        var fullOptions = options
        fullOptions["shrink_on_load"] = .string("false")
        let full = try decoder(fullOptions).decode(LoadedData(data: data), hint: hint)
        return (try resize.process(reduced), try resize.process(full), PixelSize(width: reduced.width, height: reduced.height))
    }

    /// Decodes a 2600x1600 plasma encoded as `format` on this thread (in no pool) and on a pool
    /// of two threads with one idle: the second must take the reader that shares the idle thread
    /// (`taken` counts its decodes) and give the first's pixels exactly.
    func expectSharedOnAnIdlePool(format: String, taken: () -> Int, _ reader: String) async throws {
        let wand = Wand()
        try wand.readBuiltIn("plasma:", size: (2600, 1600))
        let data = try wand.encode(format: format, quality: 90)
        let decoder = self.decoder
        let hint = DecodeHint(targetSize: PixelSize(width: 100, height: 100), fit: true)
        let serial = try decoder.decode(LoadedData(data: data), hint: hint)  // this thread is in no pool
        let pool = WorkerPool(threads: 2, name: "pk-test")
        let before = taken()
        // Another test's read may hold a reader's one place in the process (PNG's) for a moment: a few tries.
        var shared = try await pool.run { try decoder.decode(LoadedData(data: data), hint: hint) }
        for _ in 0..<10 where taken() == before { shared = try await pool.run { try decoder.decode(LoadedData(data: data), hint: hint) } }
        #expect(taken() > before, "decoded by \(reader) alone")
        #expect((serial.width, serial.height) == (shared.width, shared.height))
        #expect(try psnr(serial, shared).isInfinite)
    }

    func psnr(_ a: PipelineImage, _ b: PipelineImage) throws -> Double {
        try a.withCopy { x in try b.withCopy { y in try x.psnr(against: y) } }
    }

    /// Checks a 300x200 reduced image of an opaque red square on transparent black (the middle half
    /// of the picture): the corner transparent, the centre red and opaque, and the square's edge
    /// red where it is opaque, never pulled towards the black behind it. `slack` widens the
    /// bounds for lossy codecs.
    func expectRedSquareWithoutFringes(_ reduced: PipelineImage, slack: Double = 0, _ label: String = "") throws {
        #expect(reduced.hasAlpha && reduced.width == 300, "\(label)")
        let (corner, centre, edge) = try reduced.withCopy { (try $0.pixel(x: 2, y: 2), try $0.pixel(x: 150, y: 100), try $0.pixel(x: 75, y: 100)) }
        #expect(corner.alpha < 0.01 + slack / 4 && centre.red > 0.99 - slack && centre.alpha > 0.99 - slack / 4, "\(label)")
        #expect(edge.alpha > 0.2 && edge.red > 0.97 - slack && edge.green < 0.02 + slack * 3 / 4, "\(label): \(edge)")
    }

    /// Decodes `data` `times` times with `generator`'s random bytes flipped after `from`: each
    /// decodes or fails with one of `kinds`, never anything else, never a crash.
    func survivesBitFlips(_ data: Data, from: Int, times: Int, flips: Int, seed: UInt64,
                          kinds: [ErrorKind] = [.decodeFailed, .tooLarge], using: (any ImageDecoding)? = nil) {
        var generator = SplitMix64(seed: seed)
        for _ in 0..<times {
            var bytes = [UInt8](data)
            for _ in 0..<flips { bytes[Int.random(in: from..<bytes.count, using: &generator)] ^= UInt8.random(in: 1...255, using: &generator) }
            do { _ = try (using ?? decoder).decode(LoadedData(data: Data(bytes)), hint: hint) } catch let error as PipelineError {
                #expect(kinds.contains(error.kind), "\(error)")
            } catch {
                Issue.record("not a PipelineError: \(error)")
            }
        }
    }
}
