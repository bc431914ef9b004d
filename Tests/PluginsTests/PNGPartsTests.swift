import CPNG
import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// A PNG's zlib stream inflated in parts side by side (``PNGParts``) against libpng's own read of
/// the same file: the same rows byte for byte for every zlib level, strategy, memory level and IDAT
/// size, every row filter, RGB and RGBA, with parts small enough that most guesses are wrong and
/// large enough that they are right; and for a damaged file the same outcome as libpng alone.
@Suite struct PNGPartsTests: CodecSuite {
    static let width = 1203, height = 811

    /// A plasma with noise (odd sizes), written by ImageMagick (libpng, adaptive row filters) as
    /// 8-bit RGB or RGBA (alpha a gradient).
    static func source(alpha: Bool) async throws -> Data {
        let directory = try Fixtures.temporaryDirectory("png-parts")
        let out = directory.appendingPathComponent(alpha ? "rgba.png" : "rgb.png").path
        var arguments = ["-seed", "3", "-size", "\(width)x\(height)", "plasma:", "-attenuate", "0.4", "+noise", "Gaussian"]
        if alpha { arguments += ["(", "-size", "\(width)x\(height)", "gradient:", ")", "-alpha", "off", "-compose", "CopyOpacity", "-composite"] }
        arguments.append((alpha ? "PNG32:" : "PNG24:") + out)
        let made = try await Command.run("/usr/bin/convert", arguments)
        try #require(made.status == 0, "convert: \(made.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: out))
    }

    /// `png` with its image data inflated and compressed again by Python's zlib with `options`
    /// (level, memory level, strategy, window bits), cut into IDATs of `idat` bytes (0: one), and
    /// the row filter bytes replaced by `filter` first when it is not nil (the rows are then no
    /// longer the picture, but are still rows libpng must unfilter).
    static func recompressed(_ png: Data, level: Int, memLevel: Int = 8, strategy: String = "Z_DEFAULT_STRATEGY",
                             idat: Int, filter: Int? = nil, tail: String = "") async throws -> Data {
        let script = """
        import sys, zlib, struct
        data = sys.stdin.buffer.read()
        pos, chunks, idat = 8, [], b""
        while pos < len(data):
            n, = struct.unpack(">I", data[pos:pos + 4]); kind = data[pos + 4:pos + 8]; body = data[pos + 8:pos + 8 + n]
            if kind == b"IDAT": idat += body
            else: chunks.append((kind, body))
            pos += 12 + n
        raw = bytearray(zlib.decompress(idat))
        w, h = struct.unpack(">II", chunks[0][1][:8]); bpp = 4 if chunks[0][1][9] == 6 else 3
        filt = \(filter.map(String.init) ?? "None")
        if filt is not None:
            for y in range(h): raw[y * (w * bpp + 1)] = filt
        c = zlib.compressobj(\(level), zlib.DEFLATED, 15, \(memLevel), zlib.\(strategy))
        z = c.compress(bytes(raw)) + c.flush()
        \(tail)
        size = \(idat) or len(z)
        def chunk(kind, body): return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        out = data[:8]
        for kind, body in chunks:
            if kind == b"IEND":
                for i in range(0, len(z), size): out += chunk(b"IDAT", z[i:i + size])
            out += chunk(kind, body)
        open(sys.argv[1], "wb").write(out)
        """
        let out = try Fixtures.temporaryDirectory("png-parts").appendingPathComponent("recompressed.png")
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script, out.path], stdin: png)
        try #require(result.status == 0, "python3: \(result.stderr)")
        return try Data(contentsOf: out)
    }

    /// libpng's rows (8-bit, expanded as the reducer asks), or its error.
    static func libpngRows(_ data: Data) -> Result<[UInt8], PipelineError> {
        do {
            let rows = try PNGReducer.withReader(.memory(data)) { reader -> [UInt8]? in
                let rowBytes = pk_png_start(reader)
                guard rowBytes > 0 else { throw PNGReducer.failure(reader) }
                var all = [UInt8](), row = [UInt8](repeating: 0, count: rowBytes)
                for _ in 0..<Int(png_get_image_height(reader.pointee.png, reader.pointee.info)) {
                    try PNGReducer.readRow(reader, &row)
                    all += row
                }
                return all
            }
            return .success(rows ?? [])
        } catch let error as PipelineError {
            return .failure(error)
        } catch {
            return .failure(PipelineError(.decodeFailed, "\(error)"))
        }
    }

    /// The rows of the reader in parts, or nil when it declined.
    static func partRows(_ data: Data, partBytes: Int) -> [UInt8]? {
        var all = [UInt8]()
        let finished = PNGParts.rows(.memory(data), partBytes: partBytes) { all += $0 } != nil
        return finished ? all : nil
    }

    @Test(arguments: [
        // (alpha, level, memLevel, strategy, idat bytes, filter)
        (false, 6, 8, "Z_DEFAULT_STRATEGY", 8192, nil), (true, 6, 8, "Z_DEFAULT_STRATEGY", 8192, nil),
        (false, 9, 9, "Z_DEFAULT_STRATEGY", 100, nil), (true, 1, 8, "Z_DEFAULT_STRATEGY", 0, nil),
        (false, 0, 8, "Z_DEFAULT_STRATEGY", 65536, nil), (false, 6, 1, "Z_DEFAULT_STRATEGY", 8192, nil),
        (false, 6, 8, "Z_FILTERED", 8192, nil), (false, 6, 8, "Z_HUFFMAN_ONLY", 8192, nil),
        (false, 6, 8, "Z_RLE", 8192, nil), (true, 6, 8, "Z_FIXED", 8192, nil),
        (false, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 0), (true, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 1),
        (false, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 2), (true, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 3),
        (false, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 4), (true, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 4),
        (false, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 1), (false, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 3),
        (true, 6, 8, "Z_DEFAULT_STRATEGY", 8192, 2),
    ] as [(Bool, Int, Int, String, Int, Int?)])
    func partsGiveLibpngsRows(alpha: Bool, level: Int, memLevel: Int, strategy: String, idat: Int, filter: Int?) async throws {
        let data = try await Self.recompressed(Self.source(alpha: alpha), level: level, memLevel: memLevel,
                                               strategy: strategy, idat: idat, filter: filter)
        let label = "\(alpha ? "RGBA" : "RGB") level \(level) memLevel \(memLevel) \(strategy) IDAT \(idat) filter \(filter.map(String.init) ?? "adaptive")"
        let reference = try Self.libpngRows(data).get()
        #expect(reference.count == Self.width * Self.height * (alpha ? 4 : 3))
        // 4 KB parts: blocks are longer, most guesses find no start and are inflated again in
        // order; 64 KB parts: most guesses are right.
        for partBytes in [4096, 65536] {
            let rows = try #require(Self.partRows(data, partBytes: partBytes), "\(label), parts of \(partBytes): declined")
            #expect(rows == reference, "\(label), parts of \(partBytes): \(zip(rows, reference).filter { $0 != $1 }.count) bytes differ")
        }
    }

    /// Some parts of a photo-like file really are joined by their guess, not inflated again.
    @Test func guessedStartsAreUsed() async throws {
        let data = try await Self.recompressed(Self.source(alpha: false), level: 6, idat: 8192)
        let redone = try #require(PNGParts.rows(.memory(data), partBytes: 65536) { _ in })
        #expect(redone < data.count / 2, "\(redone) of \(data.count) bytes inflated again")
    }

    /// Interlaced, 16-bit, palette, greyscale and tRNS files are libpng's: the reader in parts
    /// declines them and the decode gives libpng's result.
    @Test(arguments: [
        ["-interlace", "PNG", "PNG24:"], ["-depth", "16", "PNG48:"], ["-colors", "200", "PNG8:"],
        ["-colorspace", "Gray", "PNG:"], ["tRNS", "PNG24:"],
    ])
    func filesItDoesNotTakeAreLeftToLibpng(options: [String]) async throws {
        let directory = try Fixtures.temporaryDirectory("png-parts")
        let out = directory.appendingPathComponent("out.png").path
        let transparency = options.first == "tRNS"
        let made = try await Command.run("/usr/bin/convert", ["-seed", "3", "-size", "400x300", "plasma:"] + options.dropFirst(transparency ? 1 : 0).dropLast() + [options.last! + out])
        try #require(made.status == 0, "convert: \(made.stderr)")
        var data = try Data(contentsOf: URL(fileURLWithPath: out))
        if transparency {  // a colour key before the image data (ImageMagick writes none for PNG24)
            let at = try Self.idatRange(data).lowerBound - 8
            data = Self.fixingCRCs(data.prefix(at) + Data([0, 0, 0, 6] + Array("tRNS".utf8) + [0, 128, 0, 128, 0, 128, 0, 0, 0, 0]) + data.dropFirst(at))
        }
        #expect(Self.partRows(data, partBytes: 4096) == nil ? true : false, "\(options): taken")
        #expect(Self.outcome(data, shared: true) == Self.outcome(data, shared: false), "\(options)")
    }

    /// The reducer's result with or without the reader in parts: pixels and damage, or the error.
    static func outcome(_ data: Data, shared: Bool, failOn: FailOn = .warning, inflating: Bool = false) -> String {
        do {
            guard let decoded = try PNGReducer.decode(.memory(data), factor: 3, toSRGB: true, failOn: failOn, sharedParts: shared,
                                                      inflating: inflating) else { return "not taken" }
            guard case .pixels(let pixels) = decoded.pixels else { return "a wand" }
            return "\(pixels.width)x\(pixels.height) \(pixels.bytes.hashValue) \(decoded.damage.map { "\($0)" } ?? "undamaged")"
        } catch {
            return "\(error)"
        }
    }

    /// Cut short, too much or too little image data, bytes flipped in the compressed data (CRCs
    /// made right again, so zlib meets them) or with the CRC left wrong: the reducer gives libpng's
    /// outcome every time (the same pixels and damage, or the same error), under each fail_on,
    /// because the reader in parts declines whatever it could not finish exactly as libpng does.
    @Test func damagedFilesComeOutAsLibpngSays() async throws {
        let source = try await Self.source(alpha: false)
        let good = try await Self.recompressed(source, level: 6, idat: 8192)
        var cases: [(String, Data)] = [
            ("cut short", good.prefix(good.count * 2 / 3)),
            ("without IEND", good.prefix(good.count - 12)),
            ("data after the stream", try await Self.recompressed(source, level: 6, idat: 8192, tail: "z += b'0123456789'")),
            ("a row short", try await Self.recompressed(source, level: 6, idat: 8192, tail: "z = zlib.compress(bytes(raw[:-(w * bpp + 1)]))")),
            ("a row too many", try await Self.recompressed(source, level: 6, idat: 8192, tail: "z = zlib.compress(bytes(raw) + bytes(w * bpp + 1))")),
            ("bad filter byte", try await Self.recompressed(source, level: 6, idat: 8192, tail: "raw[500 * (w * bpp + 1)] = 7; z = zlib.compress(bytes(raw))")),
            ("no Adler-32", try await Self.recompressed(source, level: 6, idat: 8192, tail: "z = z[:-4]")),
            ("an ancillary chunk's CRC wrong", try Self.breakingFirstAncillaryCRC(good)),
        ]
        var generator = SplitMix64(seed: 35)
        let stream = try Self.idatRange(good)
        for index in 0..<24 {
            var bytes = [UInt8](good)
            let at = Int.random(in: stream, using: &generator)
            bytes[at] ^= UInt8.random(in: 1...255, using: &generator)
            cases.append(("flipped \(index), CRC wrong", Data(bytes)))
            cases.append(("flipped \(index), CRC made right", Self.fixingCRCs(Data(bytes))))
        }
        var finished = 0
        let copiesBefore = PNGReducer.inflatedCopies.load(ordering: .relaxed)
        for (label, bytes) in cases {
            for failOn in label.hasPrefix("flipped") ? [FailOn.warning, .none] : [FailOn.warning, .error, .none] {
                let libpngAlone = Self.outcome(bytes, shared: false, failOn: failOn)
                #expect(Self.outcome(bytes, shared: true, failOn: failOn) == libpngAlone, "\(label), fail_on \(failOn)")
                // libpng reading a copy inflated by libdeflate (PNGReducer.inflatedCopy): the same.
                #expect(Self.outcome(bytes, shared: false, failOn: failOn, inflating: true) == libpngAlone,
                        "\(label), fail_on \(failOn), inflated copy")
            }
            if PNGParts.rows(.memory(bytes), partBytes: 65536, { _ in }) != nil { finished += 1 }
        }
        // Some flipped bytes still inflate (a changed literal): those the reader finishes too.
        #expect(finished > 0)
        // The copy is made for the files whose image data is whole (an ancillary chunk's CRC wrong).
        #expect(PNGReducer.inflatedCopies.load(ordering: .relaxed) > copiesBefore)
    }

    /// The bytes of the IDAT chunks' data in `png`.
    static func idatRange(_ png: Data) throws -> Range<Int> {
        let bytes = [UInt8](png)
        var at = 8, first: Int?, last = 0
        while at + 8 <= bytes.count {
            let length = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
            if bytes[at + 4..<at + 8].elementsEqual("IDAT".utf8) {
                first = first ?? at + 8
                last = at + 8 + length
            }
            at += 12 + length
        }
        return try #require(first) ..< last
    }

    /// `png` with the CRC of its first ancillary chunk (lower-case first letter) before the image
    /// data made wrong: libpng drops the chunk and records the damage.
    static func breakingFirstAncillaryCRC(_ png: Data) throws -> Data {
        var bytes = [UInt8](png)
        var at = 8
        while at + 12 <= bytes.count {
            let length = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
            if bytes[at + 4] >= UInt8(ascii: "a") {
                bytes[at + 8 + length] ^= 0x5A
                return Data(bytes)
            }
            try #require(!bytes[at + 4..<at + 8].elementsEqual("IDAT".utf8), "no ancillary chunk before the image data")
            at += 12 + length
        }
        throw PipelineError(.decodeFailed, "no ancillary chunk")
    }

    /// `png` with every chunk's CRC computed again.
    static func fixingCRCs(_ png: Data) -> Data {
        var bytes = [UInt8](png)
        var at = 8
        while at + 12 <= bytes.count {
            let length = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
            guard at + 12 + length <= bytes.count else { break }
            var crc: UInt32 = 0xFFFF_FFFF
            for byte in bytes[at + 4..<at + 8 + length] {
                crc ^= UInt32(byte)
                for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
            }
            crc ^= 0xFFFF_FFFF
            for i in 0..<4 { bytes[at + 8 + length + i] = UInt8(truncatingIfNeeded: crc >> (24 - 8 * i)) }
            at += 12 + length
        }
        return Data(bytes)
    }

    /// Read from a file (pread by the parts' threads) as from memory.
    @Test func aFileReadsAsMemoryDoes() async throws {
        let data = try await Self.recompressed(Self.source(alpha: true), level: 6, idat: 8192)
        let path = try Fixtures.temporaryDirectory("png-parts").appendingPathComponent("file.png").path
        try data.write(to: URL(fileURLWithPath: path))
        let descriptor = open(path, O_RDONLY)
        try #require(descriptor >= 0)
        let file = LocalFile(descriptor: descriptor, size: data.count, path: path)
        var rows = [UInt8]()
        #expect(PNGParts.rows(.file(file), partBytes: 65536) { rows += $0 } != nil)
        #expect(rows == (try Self.libpngRows(data).get()))
    }

    /// Image data that compresses more than ``PNGParts/maxRatio`` is left to libpng (or the
    /// inflated copy) even with a thread idle: the parts would hold far more (two bytes a value,
    /// each part sized by the step before) and gain nothing. Photo-like ratios still share.
    @Test func dataThatCompressesFurtherIsLeftToOneThread() async throws {
        let pool = WorkerPool(threads: 2, name: "pk-test")
        let pixels = 2600 * 1600, inflated = PNGParts.inflatedBytes(width: 2600, height: 1600, channels: 3)
        #expect(inflated == 1600 * (1 + 2600 * 3))
        let limit = (inflated + PNGParts.maxRatio - 1) / PNGParts.maxRatio
        // On the pool, with the other thread idle: the ratio alone decides.
        let chosen = try await pool.run {
            [inflated / 2, limit, limit - 1, inflated / 20].map { PNGParts.worthSharing(pixels: pixels, inflatedBytes: inflated, fileBytes: $0) }
        }
        #expect(chosen == [true, true, false, false])
        #expect(!PNGParts.worthSharing(pixels: pixels, inflatedBytes: inflated, fileBytes: inflated))  // on no pool: nobody to share with

        // A smooth gradient (far over 5:1) decoded on the pool: the pixels libpng gives.
        let wand = Wand()
        try wand.readBuiltIn("gradient:white-orange", size: (2600, 1600))
        let data = try wand.encode(format: "PNG24", quality: 90)
        #expect(PNGParts.inflatedBytes(width: 2600, height: 1600, channels: 3) > data.count * PNGParts.maxRatio)
        let hint = DecodeHint(targetSize: PixelSize(width: 100, height: 100), fit: true)
        let decoder = self.decoder
        let serial = try decoder.decode(LoadedData(data: data), hint: hint)
        let pooled = try await pool.run { try decoder.decode(LoadedData(data: data), hint: hint) }
        #expect(try psnr(serial, pooled).isInfinite)
    }

    /// A read the reducer chooses takes the process's one place, and gives it back.
    @Test func oneChosenReadAtATime() {
        // Other tests' decodes may hold the place for a moment: wait for it (a read is short).
        while !PNGParts.takeReadingSlot() { sched_yield() }
        #expect(!PNGParts.takeReadingSlot())
        PNGParts.leaveReadingSlot()
    }

    /// On a worker with an idle neighbour a large PNG takes the reader in parts by itself, and
    /// the decoder's result is the one libpng's read gives.
    @Test func aLargePNGOnAWorkerWithAnIdleNeighbourIsShared() async throws {
        try await expectSharedOnAnIdlePool(format: "PNG24", taken: { PNGParts.count.load(ordering: .relaxed) }, "libpng")
    }
}
