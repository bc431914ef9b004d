import Foundation
import Synchronization
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Large local files are left open by the `file` loader and read in place: a TIFF decodes from the
/// descriptor to exactly what the whole file in memory decodes to, a file cut short after it was
/// opened fails as damaged (never a crash, never a partial image), and every other format and
/// every other decoder still gets the whole file.
@Suite struct FilesInPlaceTests: CodecSuite {
    /// Every file left open (nothing is small enough to be read whole).
    let loader = FileLoader(maxBytes: 1 << 30, maxConcurrentLoads: 1, inPlaceAbove: 0)

    func made(_ name: String, _ arguments: [String]) async throws -> String {
        let path = try Fixtures.temporaryDirectory("in-place").appendingPathComponent(name).path
        let result = try await Command.run("/usr/bin/convert", arguments + [path])
        try #require(result.status == 0, "\(result.stderr)")
        return path
    }

    func pixelsEqual(_ a: PipelineImage, _ b: PipelineImage) throws -> Bool {
        guard (a.width, a.height) == (b.width, b.height) else { return false }
        return try psnr(a, b).isInfinite
    }

    @Test(arguments: [["-define", "tiff:rows-per-strip=16", "-compress", "lzw"], ["-define", "tiff:tile-geometry=128x128", "-compress", "zip"]])
    func aTIFFReadInPlaceIsTheTIFFReadWhole(options: [String]) async throws {
        let path = try await made("t.tif", ["-size", "1200x800", "plasma:"] + options)
        let open = try await loader.load(Source(text: path, index: 1))
        let file = try #require(open.file, "left open")
        #expect(open.data.count < file.size && open.byteCount == file.size)
        let whole = LoadedData(data: try Data(contentsOf: URL(fileURLWithPath: path)))
        let inPlace = try decoder.decode(open, hint: hint)
        let inMemory = try decoder.decode(whole, hint: hint)
        #expect(inPlace.width == 300)  // the reduced path, from the descriptor
        #expect(try pixelsEqual(inPlace, inMemory), "\(options)")
        // ImageMagick's own path (no shrink) reads the file whole, and agrees.
        let full = try decoder(["shrink_on_load": .string("false")])
        #expect(try pixelsEqual(try full.decode(open, hint: hint), try full.decode(whole, hint: hint)))
    }

    @Test(arguments: [("cut.tif", ["-define", "tiff:rows-per-strip=16", "-compress", "zip"]), ("cut.png", []), ("cut.jpg", [])])
    func aFileCutShortAfterItWasOpenedFailsAsDamaged(name: String, options: [String]) async throws {
        let path = try await made(name, ["-size", "1200x800", "plasma:"] + options)
        let open = try await loader.load(Source(text: path, index: 1))
        let size = try #require(open.file).size
        // Cut in place (same inode, which the descriptor keeps): the rows at the end are gone.
        #expect(truncate(path, off_t(size / 2)) == 0)
        let error = try #require(throws: PipelineError.self) { try decoder.decode(open, hint: hint) }
        #expect(error.kind == .decodeFailed, "\(error)")
        #expect(error.message.contains(["tif": "TIFF", "png": "PNG", "jpg": "JPEG"][String(name.suffix(3))]!), "\(error)")
        // Emptied: nothing to read at all.
        #expect(truncate(path, 0) == 0)
        let emptied = try #require(throws: PipelineError.self) { try decoder.decode(open, hint: hint) }
        #expect(emptied.kind == .decodeFailed, "\(emptied)")
    }

    /// PNG is read in place by its reduced path (and whole by ImageMagick's); the others whole.
    @Test func everyFormatDecodesFromTheOpenFileAsFromMemory() async throws {
        for name in ["p.png", "j.jpg", "w.webp", "g.gif"] {
            let path = try await made(name, ["-size", "600x400", "plasma:"])
            let open = try await loader.load(Source(text: path, index: 1))
            #expect(open.file != nil)
            let whole = LoadedData(data: try Data(contentsOf: URL(fileURLWithPath: path)))
            #expect(try pixelsEqual(try decoder.decode(open, hint: hint), try decoder.decode(whole, hint: hint)), "\(name)")
            let full = try decoder(["shrink_on_load": .string("false")])
            #expect(try pixelsEqual(try full.decode(open, hint: hint), try full.decode(whole, hint: hint)), "\(name) whole")
        }
    }

    /// A JPEG left open is read when it decodes; its frame header is found past the first bytes
    /// the loader read (64 KB) when a large segment comes first, and the reduced path still reads it.
    @Test func aJPEGWhoseHeaderIsPastTheFirstBytesIsReadFromTheOpenFile() async throws {
        let comment = String(repeating: "a long comment before the frame header ", count: 3000)  // 117 KB
        let path = try await made("late.jpg", ["-size", "1600x1200", "plasma:", "-set", "comment", comment])
        let open = try await loader.load(Source(text: path, index: 1))
        let file = try #require(open.file, "left open")
        #expect(open.data.count == 64 << 10 && file.size > 120_000)
        #expect(JPEGFormat.frame(open.data) == nil, "the frame header is past the first bytes")
        let whole = LoadedData(data: try Data(contentsOf: URL(fileURLWithPath: path)))
        let inPlace = try decoder.decode(open, hint: hint)
        #expect(inPlace.width == 400 && inPlace.rgb8 != nil, "reduced on load by libjpeg's 8-bit path, as from memory")
        #expect(try pixelsEqual(inPlace, try decoder.decode(whole, hint: hint)))
    }

    @Test func smallFilesAreReadWholeAndTheirBodyIsComplete() async throws {
        let path = try await made("small.png", ["-size", "64x48", "plasma:"])
        let loaded = try await FileLoader(maxBytes: 1 << 20, maxConcurrentLoads: 1).load(Source(text: path, index: 1))
        #expect(loaded.file == nil)
        #expect(loaded.data == (try Data(contentsOf: URL(fileURLWithPath: path))))
        // Left open, the digest and the whole body are still the whole file's.
        let open = try await loader.load(Source(text: path, index: 1))
        #expect(try open.wholeData() == loaded.data)
        #expect(open.bodyDigest() == loaded.bodyDigest())
    }

    /// A large TIFF decoded on a worker with an idle neighbour is reduced in pieces on both
    /// threads, from memory and from the open file alike, to exactly the pixels one pass makes;
    /// a piece that fails fails the decode with libtiff's reason.
    @Test func aLargeTIFFIsSharedWithAnIdleThreadAndReadsTheSame() async throws {
        let path = try await made("big.tif", ["-seed", "1", "-size", "4000x2500", "plasma:", "-define", "tiff:rows-per-strip=16", "-compress", "lzw"])
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let decoder = self.decoder, hint = self.hint
        let serial = try decoder.decode(LoadedData(data: data), hint: hint)  // this thread is in no pool: one pass
        let pool = WorkerPool(threads: 2, name: "pk-test")
        let before = ParallelReads.count.load(ordering: .relaxed)
        let shared = try await pool.run { try decoder.decode(LoadedData(data: data), hint: hint) }
        #expect(ParallelReads.count.load(ordering: .relaxed) > before, "reduced in pieces")
        #expect(try pixelsEqual(serial, shared))
        let open = try await loader.load(Source(text: path, index: 1))
        let sharedOpen = try await pool.run { try decoder.decode(open, hint: hint) }
        #expect(try pixelsEqual(serial, sharedOpen))
        // The memory asked of the decode budget is the bands' and the output's, not the page's
        // (10 MP as RGBA is 40 MB): two such files decode side by side under the default budget.
        let estimate = try #require(try decoder.prepare(open, hint: hint).estimatedMemory)
        #expect(estimate > 4000 * 16 * 4 && estimate < 4000 * 2500 * 4 / 4, "\(estimate)")
        // A TIFF for ImageMagick's path (CMYK) asks for that path's memory, the whole page.
        let cmyk = try await made("cmyk.tif", ["-size", "1200x800", "plasma:", "-colorspace", "CMYK", "-compress", "zip"])
        let cmykOpen = try await loader.load(Source(text: cmyk, index: 1))
        #expect(try #require(try decoder.prepare(cmykOpen, hint: hint).estimatedMemory) >= 1200 * 800 * 8)
        // Cut in the middle: the pieces past the cut fail, and so does the decode.
        let cut = data.prefix(data.count * 2 / 3)
        let error = try await #require(throws: PipelineError.self) { try await pool.run { try decoder.decode(LoadedData(data: cut), hint: hint) } }
        #expect(error.kind == .decodeFailed && error.message.contains("TIFF"), "\(error)")
    }

    /// What is not a regular file is refused before it is opened, with its path: a FIFO (opening
    /// it would wait for a writer for ever), a directory; a missing file is not_found.
    @Test(.timeLimit(.minutes(1))) func aFIFOADirectoryAndAMissingFileAreRefusedByName() async throws {
        let dir = try Fixtures.temporaryDirectory("not-regular")
        let fifo = dir.appendingPathComponent("pipe.jpg").path
        #expect(mkfifo(fifo, 0o600) == 0)
        for (path, reason) in [(fifo, "not a regular file"), (dir.path, "not a regular file"),
                               (dir.appendingPathComponent("missing.jpg").path, "No such file")] {
            let error = await #expect(throws: PipelineError.self) { try await loader.load(Source(text: path, index: 1)) }
            #expect(error?.kind == .notFound, "\(path): \(String(describing: error))")
            #expect(error?.message.contains(path) == true && error?.message.contains(reason) == true, "\(String(describing: error))")
        }
    }

    /// A decoder of a plugin bundle that does not read files in place gets every byte from the
    /// engine, in `data`, with no file attached, whatever the loader left open.
    @Test func aDecoderThatTakesBytesGetsTheWholeFile() async throws {
        let dir = try Fixtures.temporaryDirectory("in-place-run")
        let image = try Fixtures.image("plasma:", width: 600, height: 400, format: "PNG")
        try #require(image.count > 64 << 10, "larger than the bytes a loader reads ahead")
        let path = dir.appendingPathComponent("p.png")
        try image.write(to: path)
        let seen = Seen()
        var registry = BuiltIns.registry()
        try registry.register(.decoder(PluginSpec(name: "counting", summary: "Counts the bytes it is given.")) { _ in
            CountingDecoder(seen: seen)
        })
        let text = """
            loader: { file: { in_place_above: 0B } }
            decoder: counting
            processors:
              - resize: { width: 100 }
            encoder: png
            output: { dir: \(dir.path)/out }
            """
        let (parsed, diagnostics) = PipelineFile.parse(text: text, file: "counting.yaml", registry: registry)
        let runner = try PipelineRunner(pipeline: try #require(parsed, "\(diagnostics)"), registry: registry)
        let summary = try await runner.run([Source(text: path.path, index: 1)].stream) { item in
            #expect(item.status == .ok, "\(String(describing: item.error))")
        }
        #expect(summary.ok == 1)
        #expect(seen.counts.withLock { $0 } == [image.count])
    }

    /// A large file read in pieces by several threads is the file, byte for byte; one cut short
    /// after it was opened reads as far as it now goes, and no further.
    @Test func aFileReadInPiecesIsTheFile() async throws {
        let path = try Fixtures.temporaryDirectory("in-place").appendingPathComponent("pieces.bin").path
        var generator = SplitMix64(seed: 9)
        let bytes = Data((0..<5_000_003).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try bytes.write(to: URL(fileURLWithPath: path))
        let descriptor = open(path, O_RDONLY)
        try #require(descriptor >= 0)
        let file = LocalFile(descriptor: descriptor, size: bytes.count, path: path)
        let pool = WorkerPool(threads: 2, name: "pk-test")
        #expect(try await pool.run { EncodedInput.readInPieces(file) } == bytes)
        #expect(EncodedInput.readInPieces(file, pieces: 3) == bytes)  // no pool: one thread takes every piece
        #expect(truncate(path, 3_000_000) == 0)
        #expect(EncodedInput.readInPieces(file) == bytes.prefix(3_000_000))
    }
}

/// Records how many bytes it was given (-1 when a file came attached), then decodes them.
final class Seen: Sendable { let counts = Mutex<[Int]>([]) }

struct CountingDecoder: ImageDecoding {
    let seen: Seen
    func decode(_ data: LoadedData, hint: DecodeHint) throws -> PipelineImage {
        seen.counts.withLock { $0.append(data.file == nil ? data.data.count : -1) }
        return try ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions).decode(data, hint: hint)
    }
}
