import CPNGImageData
import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// A PNG's image data inflated by libdeflate and stored again for libpng to read
/// (``PNGReducer/inflatedCopy(_:sharedParts:)``): every kind of PNG gives libpng's own pixels,
/// and what the copy cannot carry exactly is declined. Damaged files: PNGPartsTests.
@Suite struct PNGInflatedCopyTests {
    /// A 600x400 plasma written by ImageMagick as `format` (PNG24, PNG32, PNG8, PNG48, PNG64...):
    /// image data of several stored blocks and several IDAT chunks.
    static func png(_ format: String, _ extra: [String] = []) async throws -> Data {
        let out = try Fixtures.temporaryDirectory("png-copy").appendingPathComponent("\(UUID().uuidString).png").path
        let made = try await Command.run("/usr/bin/convert", ["-seed", "5", "-size", "600x400", "plasma:"] + extra + ["\(format):\(out)"])
        try #require(made.status == 0, "convert: \(made.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: out))
    }

    static func copy(_ data: Data, limit: Int = 24 << 20) -> Data? {
        var length = 0
        let copy = data.withUnsafeBytes { pk_png_inflated_copy($0.bindMemory(to: UInt8.self).baseAddress, $0.count, limit, &length) }
        return copy.map { Data(bytesNoCopy: $0, count: length, deallocator: .free) }
    }

    /// Every pixel, 16 bits a sample, as ImageMagick (libpng) decodes the file.
    static func pixels(_ data: Data) throws -> [UInt16] {
        let wand = Wand()
        try wand.read(data, format: "PNG")
        var all: [UInt16] = [], row = [UInt16](repeating: 0, count: wand.width * 4)
        for y in 0..<wand.height {
            try wand.exportRow(y, channels: "RGBA", into: &row)
            all += row
        }
        return all
    }

    /// The chunks of a PNG, in order.
    static func chunks(_ png: Data) -> [(type: String, body: Data)] {
        let bytes = [UInt8](png)
        var chunks: [(type: String, body: Data)] = [], at = 8
        while at + 12 <= bytes.count {
            let length = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
            chunks.append((String(decoding: bytes[at + 4..<at + 8], as: UTF8.self), Data(bytes[at + 8..<at + 8 + length])))
            at += 12 + length
        }
        return chunks
    }

    /// A PNG of `chunks` (CRCs computed).
    static func file(_ chunks: [(type: String, body: Data)]) -> Data {
        var out = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        for (type, body) in chunks {
            let length = UInt32(body.count)
            out += Data([UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)])
            out += Data(type.utf8) + body + Data([0, 0, 0, 0])
        }
        return PNGPartsTests.fixingCRCs(out)
    }

    @Test(arguments: [
        ("PNG24", [String]()), ("PNG32", ["-alpha", "set", "-channel", "A", "-evaluate", "set", "60%"]), ("PNG8", ["-colors", "200"]),
        ("PNG8", ["-colors", "200", "-fuzz", "10%", "-transparent", "white"]), ("PNG48", []), ("PNG64", ["-alpha", "set"]),
        ("PNG", ["-colorspace", "Gray"]), ("PNG", ["-colorspace", "Gray", "-depth", "4"]),
    ])
    func theCopyDecodesToTheFilesOwnPixels(format: String, extra: [String]) async throws {
        let original = try await Self.png(format, extra)
        let copy = try #require(Self.copy(original), "\(format) \(extra): declined")
        #expect(copy != original)
        #expect(try Self.pixels(copy) == Self.pixels(original), "\(format) \(extra)")
        // The reducer (colour PNGs) gives the same from the copy as from libpng's read of the file.
        let input = EncodedInput.memory(original)
        if PNGReducer.takes(input, toSRGB: true) {
            let before = PNGReducer.inflatedCopies.load(ordering: .relaxed)
            let viaCopy = try #require(try PNGReducer.decode(input, factor: 3, toSRGB: true, sharedParts: false))
            #expect(PNGReducer.inflatedCopies.load(ordering: .relaxed) > before)
            let direct = try #require(try PNGReducer.decode(input, factor: 3, toSRGB: true, sharedParts: false, inflating: false))
            guard case .pixels16(let a) = viaCopy.pixels, case .pixels16(let b) = direct.pixels else {
                Issue.record("\(format): not 16-bit pixels")
                return
            }
            #expect(a.samples == b.samples && a.width == b.width && a.height == b.height)
            #expect(viaCopy.damage == nil && direct.damage == nil)
        }
    }

    /// A PNG the loader left in a file is read whole for the copy, and decodes as from memory.
    @Test func aFileIsCopiedAsMemoryIs() async throws {
        let data = try await Self.png("PNG24")
        let path = try Fixtures.temporaryDirectory("png-copy").appendingPathComponent("file.png").path
        try data.write(to: URL(fileURLWithPath: path))
        let descriptor = open(path, O_RDONLY)
        try #require(descriptor >= 0)
        let file = LocalFile(descriptor: descriptor, size: data.count, path: path)
        let before = PNGReducer.inflatedCopies.load(ordering: .relaxed)
        let fromFile = try #require(try PNGReducer.decode(.file(file), factor: 3, toSRGB: true))
        #expect(PNGReducer.inflatedCopies.load(ordering: .relaxed) > before)
        let fromMemory = try #require(try PNGReducer.decode(.memory(data), factor: 3, toSRGB: true, inflating: false))
        guard case .pixels16(let a) = fromFile.pixels, case .pixels16(let b) = fromMemory.pixels else {
            Issue.record("not 16-bit pixels")
            return
        }
        #expect(a.samples == b.samples)
    }

    @Test func interlacedLargeForeignAndScatteredFilesAreDeclined() async throws {
        #expect(Self.copy(try await Self.png("PNG24", ["-interlace", "PNG"])) == nil)
        let plain = try await Self.png("PNG24")
        #expect(Self.copy(plain, limit: 600 * 400 * 3) == nil)  // a filter byte a row over the limit
        #expect(Self.copy(plain, limit: 600 * 400 * 3 + 400) != nil)
        #expect(Self.copy(Data("not a PNG at all, but long enough to look at".utf8)) == nil)
        #expect(Self.copy(plain.prefix(plain.count / 2)) == nil)
        // An ancillary chunk between two IDAT chunks: libpng's to judge.
        let parts = Self.chunks(plain)
        let data = parts.filter { $0.type == "IDAT" }.reduce(Data()) { $0 + $1.body }
        let half = data.count / 2
        var scattered = parts.filter { $0.type != "IDAT" && $0.type != "IEND" }
        scattered += [("IDAT", data.prefix(half)), ("tEXt", Data("A\0b".utf8)), ("IDAT", data.dropFirst(half)), ("IEND", Data())]
        let file = Self.file(scattered)
        #expect(Self.copy(file) == nil)
        #expect(PNGPartsTests.outcome(file, shared: false, inflating: true) == PNGPartsTests.outcome(file, shared: false))
        // The same chunks with the IDATs together: taken.
        let together = Self.file(scattered.filter { $0.type != "tEXt" })
        #expect(Self.copy(together) != nil)
    }
}
