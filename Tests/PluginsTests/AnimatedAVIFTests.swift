import FlyingFox
import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Animations written as AVIF sequences (``AVIFSequence``, ``AVIFEditList``), checked with
/// libavif's own `avifdec` in strict mode (every frame decoded, its colour and timing) and by our
/// reading of the edit list that carries the loop count.
@Suite struct AnimatedAVIFTests: CodecSuite {
    static func tool(_ name: String, _ arguments: [String]) async throws -> String {
        let run = try await Command.run("/usr/bin/\(name)", arguments)
        try #require(run.status == 0, "\(name) \(arguments): \(run.stderr)")
        return run.stdout + run.stderr
    }

    /// Red for 200 ms, green for 500, blue for 300, 90x60, with `loop` (0: forever): a GIF made by
    /// ImageMagick, or a WebP made by libwebp's img2webp (ImageMagick 6 writes WebP frame durations
    /// one frame late) with a transparent corner in every frame.
    static func animation(_ format: String, loop: Int = 0) async throws -> Data {
        let folder = try Fixtures.temporaryDirectory("anim-avif")
        let out = folder.appendingPathComponent("a.\(format)")
        if format == "gif" {
            _ = try await tool("convert", ["-size", "90x60", "-delay", "20", "xc:red", "-delay", "50", "xc:lime", "-delay", "30", "xc:blue",
                                           "-loop", "\(loop)", out.path])
            return try Data(contentsOf: out)
        }
        var frames: [String] = []
        for (index, (colour, duration)) in [("red", 200), ("lime", 500), ("blue", 300)].enumerated() {
            let png = folder.appendingPathComponent("f\(index).png").path
            _ = try await tool("convert", ["-size", "90x60", "xc:\(colour)", "-alpha", "set", "-region", "30x20+0+0", "-alpha", "transparent",
                                           "+region", "PNG32:" + png])
            frames += ["-d", "\(duration)", png]
        }
        _ = try await tool("img2webp", ["-loop", "\(loop)", "-lossless"] + frames + ["-o", out.path])
        return try Data(contentsOf: out)
    }

    func decoded(_ data: Data) throws -> PipelineImage {
        try decoder(["max_frames": .int(100)]).decode(LoadedData(data: data), hint: DecodeHint())
    }

    func avif(_ image: PipelineImage, _ options: [String: OptionValue] = [:]) throws -> Data {
        try HEIFEncoder.avifPlugin.makeEncoder(HEIFEncoder.avifPlugin.options(options)).encode(image)
    }

    /// The edit list's repeat flag, its one segment's duration, and the first track's duration.
    static func loops(_ data: Data) throws -> (repeats: Bool, segment: UInt64, track: UInt64) {
        let top = try #require(AVIFEditList.boxes(data, 0..<data.count))
        let moov = try #require(top.first { $0.type == "moov" })
        let trak = try #require(AVIFEditList.boxes(data, moov.body..<moov.end)?.first { $0.type == "trak" })
        let children = try #require(AVIFEditList.boxes(data, trak.body..<trak.end))
        let tkhd = try #require(children.first { $0.type == "tkhd" }), edts = try #require(children.first { $0.type == "edts" })
        let elst = try #require(AVIFEditList.boxes(data, edts.body..<edts.end)?.first)
        return (AVIFEditList.read(data, elst.body, 4) & 1 == 1, AVIFEditList.read(data, elst.body + 8, 8),
                AVIFEditList.read(data, tkhd.body + 28, 8))
    }

    /// Each frame of a GIF and of a WebP with alpha: decoded by avifdec (strict) in its colour, for
    /// its time; alpha kept where the source had it.
    @Test(arguments: ["gif", "webp"])
    func everyFrameWithItsColourAndTiming(format: String) async throws {
        let image = try decoded(try await Self.animation(format))
        #expect(image.frameCount == 3)
        let data = try avif(image, ["quality": .int(60)])
        #expect(FormatSniffer.sniff(data) == .image(ImageFormat(rawValue: "AVIF")!))
        let folder = try Fixtures.temporaryDirectory("anim-avif-out")
        let file = folder.appendingPathComponent("a.avif")
        try data.write(to: file)
        let info = try await Self.tool("avifdec", ["--info", file.path])
        #expect(info.contains("1000 timescales per second, 1.00 seconds (1000 timescales), 3 frames"), "\(info)")
        for (index, (colour, duration)) in [("red", 200), ("green", 500), ("blue", 300)].enumerated() {
            #expect(info.contains("Decoded frame [\(index)]") && info.contains(String(format: "[duration %.2f (%d timescales)]", Double(duration) / 1000, duration)),
                    "frame \(index): \(info)")
            let png = folder.appendingPathComponent("f\(index).png")
            _ = try await Self.tool("avifdec", ["--index", "\(index)", file.path, png.path])
            let frame = try decoder.decode(LoadedData(data: try Data(contentsOf: png)), hint: DecodeHint())
            let centre = try frame.withCopy { try $0.bytes(channels: "RGBA") }
            let at = (45 + 40 * 90) * 4
            let (r, g, b) = (Int(centre[at]), Int(centre[at + 1]), Int(centre[at + 2]))
            let expected = ["red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)][colour]!
            #expect(abs(r - expected.0) < 24 && abs(g - expected.1) < 24 && abs(b - expected.2) < 24, "frame \(index): \(r),\(g),\(b)")
            if format == "webp" {
                #expect(frame.hasAlpha && centre[(5 + 5 * 90) * 4 + 3] < 16 && centre[at + 3] > 240, "frame \(index): alpha")
            }
        }
    }

    /// The loop count goes into the edit list, as browsers play the source: forever (repeat, track
    /// duration all ones); a GIF's loop count 3, which browsers play 4 times (a repeat count); a
    /// WebP's 3, played 3 times (a count of plays); a GIF without a loop count, once (no repeat).
    @Test func theLoopCountIsKept() async throws {
        for (format, loop, repeats, plays) in [("gif", 0, true, UInt64.max), ("gif", 3, true, 4), ("webp", 3, true, 3), ("gif", 1, false, 1)] {
            let data = try avif(try decoded(try await Self.animation(format, loop: loop)))
            let found = try Self.loops(data)
            #expect(found.segment == 1000 && found.repeats == repeats, "\(format) loop \(loop): \(found)")
            #expect(found.track == (plays == .max ? .max : found.segment * plays), "\(format) loop \(loop): \(found)")
            let file = try Fixtures.temporaryDirectory("anim-avif-loop").appendingPathComponent("l.avif")
            try data.write(to: file)
            _ = try await Self.tool("avifdec", ["--info", file.path])  // still valid to libavif in strict mode
        }
    }

    /// `animated: false` writes the first frame as a still; `max_bytes` lowers a sequence's quality
    /// until it fits, and fails as too large when nothing does.
    @Test func stillsOnRequestAndMaxBytes() async throws {
        let still = try avif(try decoded(try await Self.animation("gif")), ["animated": .bool(false)])
        #expect(AVIFEditList.boxes(still, 0..<still.count)?.contains { $0.type == "moov" } == false)
        let plasma = try Fixtures.temporaryDirectory("anim-avif-plasma").appendingPathComponent("p.gif")
        _ = try await Self.tool("convert", ["-size", "160x120", "-delay", "10", "plasma:red-blue", "plasma:green-yellow", "plasma:white-black",
                                            "-loop", "0", plasma.path])
        let image = try decoded(try Data(contentsOf: plasma))
        let full = try avif(image, ["quality": .int(95)])
        let limit = full.count * 2 / 3
        let fitted = try avif(image, ["quality": .int(95), "max_bytes": .int(limit)])
        let fittedLoops = try Self.loops(fitted)
        #expect(fitted.count <= limit && fittedLoops.repeats, "\(fitted.count) of \(full.count)")
        #expect(throws: PipelineError.self) { try avif(image, ["max_bytes": .int(1024)]) }
    }

    /// An AVIF sequence as a source: the decoder reads its first frame (libheif reads the still
    /// image libavif stores beside the track); a truncated one and flipped bytes fail with a kind
    /// the report names, never a crash.
    @Test func sequencesAsSourcesAndDamagedOnes() async throws {
        let data = try avif(try decoded(try await Self.animation("gif")))
        let first = try decoder.decode(LoadedData(data: data), hint: DecodeHint())
        #expect(first.width == 90 && first.height == 60 && first.frameCount == 1)
        do {
            _ = try decoder.decode(LoadedData(data: data.prefix(data.count * 2 / 3)), hint: DecodeHint())
            Issue.record("a truncated sequence was decoded")
        } catch let error as PipelineError {
            #expect([.decodeFailed, .truncated].contains(error.kind), "\(error)")
        }
        survivesBitFlips(data, from: 32, times: 40, flips: 4, seed: 62)
    }

    /// Chromium reads what we write as an animation: its own AVIF decoder (WebCodecs'
    /// `ImageDecoder`, on a page from a loopback server) finds every frame in its colour, for its
    /// time, and the loop count: forever, three plays (a WebP's loop count 3), and once. Headless
    /// Chromium does not advance image animations on screen, so the page decodes each frame as the
    /// browser would show it, and posts what it found back.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")))
    func chromiumPlaysEveryFrameForItsTimeWithTheLoopCount() async throws {
        let server = try await TestServer.start()
        let (results, found) = AsyncStream.makeStream(of: String.self)
        server.route("/result") { request in
            found.yield(String(decoding: try await request.bodyData, as: UTF8.self))
            return HTTPResponse(statusCode: .noContent)
        }
        let cases: [(String, Int, String)] = [("gif", 0, "Infinity"), ("webp", 3, "2"), ("gif", 1, "0")]
        for (index, (format, loop, _)) in cases.enumerated() {
            server.serve("/a\(index).avif", try avif(try decoded(try await Self.animation(format, loop: loop))), contentType: "image/avif")
        }
        server.serve("/page.html", Data(Self.page(files: cases.indices.map { "a\($0).avif" }).utf8), contentType: "text/html")
        let profile = try Fixtures.temporaryDirectory("chromium-avif")
        let browser = try Command.start("/usr/bin/chromium", ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
                                                              "--user-data-dir=\(profile.path)", server.url("/page.html")])
        // The answer is an event: the page's post, or the browser's exit. The bound only catches
        // a browser that never answers.
        let exited = Task { let run = try await browser.wait(); found.yield("exited \(run.status): \(run.stderr.suffix(2000))") }
        let bound = Task { try await Task.sleep(for: .seconds(600)); found.yield("no answer in 600 s") }
        var answer = ""
        for await text in results { answer = text; break }
        bound.cancel()
        kill(browser.process.processIdentifier, SIGKILL)
        _ = try? await exited.value
        await server.stop()
        let decoded = try #require(try? JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [[String: Any]], "\(answer)")
        #expect(decoded.count == cases.count, "\(answer)")
        for (file, (format, loop, repetitions)) in zip(decoded, cases) {
            #expect(file["animated"] as? Bool == true && file["frameCount"] as? Int == 3, "\(format) loop \(loop): \(file)")
            #expect(file["repetitionCount"] as? String == repetitions, "\(format) loop \(loop): \(file)")
            let frames = file["frames"] as? [[String: Any]] ?? []
            #expect(frames.map { $0["duration"] as? Int } == [200_000, 500_000, 300_000], "\(format) loop \(loop): \(frames)")
            #expect(frames.map { $0["colour"] as? String } == ["red", "green", "blue"], "\(format) loop \(loop): \(frames)")
        }
    }

    /// A page that decodes each of `files` with Chromium's ImageDecoder and posts, for each, the
    /// frame count, the repetition count, and every frame's duration (µs) and colour at its centre.
    static func page(files: [String]) -> String {
        """
        <!doctype html><html><body><canvas id="c" width="90" height="60"></canvas>
        <script>
        const ctx = document.getElementById('c').getContext('2d', { willReadFrequently: true });
        async function read(file) {
          const decoder = new ImageDecoder({ data: await (await fetch(file)).arrayBuffer(), type: 'image/avif' });
          await decoder.tracks.ready;
          await decoder.completed;
          const track = decoder.tracks.selectedTrack, frames = [];
          for (let i = 0; i < track.frameCount; i++) {
            const { image } = await decoder.decode({ frameIndex: i });
            ctx.drawImage(image, 0, 0);
            const [r, g, b] = ctx.getImageData(45, 30, 1, 1).data;
            const colour = r > 200 && g < 60 ? 'red' : g > 200 && r < 60 ? 'green' : b > 200 && r < 60 ? 'blue' : `${r},${g},${b}`;
            frames.push({ duration: image.duration, colour });
            image.close();
          }
          return { animated: track.animated, frameCount: track.frameCount, repetitionCount: String(track.repetitionCount), frames };
        }
        (async () => { const out = []; for (const f of [\(files.map { "'\($0)'" }.joined(separator: ", "))]) out.push(await read(f)); return out; })()
          .then(r => fetch('/result', { method: 'POST', body: JSON.stringify(r) }), e => fetch('/result', { method: 'POST', body: 'error ' + e }));
        </script></body></html>
        """
    }
}
