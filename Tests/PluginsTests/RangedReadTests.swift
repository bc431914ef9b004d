import Foundation
import PipelineKit
@testable import Plugins
import Synchronization
import Testing
import TestImages

/// A large video from the `http` and `s3` loaders is read by range (``LoadedData/ranged``): the
/// first GET stops after the head, and the decoder fetches only what the poster needs, each range
/// pinned to the first answer's content. Served by a raw loopback server that answers as a file
/// server does (and, on cue, as a misbehaving one), and by moto for S3. The 2-hour film against
/// nginx is in the end-to-end tests (RangedSourceTests).
@Suite(.serialized) struct RangedReadTests: CodecSuite {
    /// A file server's answers for one body: 200 with Accept-Ranges and an ETag, 206 to a Range,
    /// 412 to an If-Match of another ETag. Counts the body bytes written.
    final class FileServer: Sendable {
        struct State {
            var body: Data
            var etag = "\"v1\""
            var answersRanges = true
            var offersRanges = true
            var sent = 0
            var ranges: [String] = []
        }
        let state: Mutex<State>
        init(_ body: Data) { state = Mutex(State(body: body)) }

        func script(_ request: ScriptedServer.Request, _ connection: ScriptedServer.Connection) {
            let now = state.withLock { $0 }
            let offer = now.offersRanges ? "Accept-Ranges: bytes\r\n" : ""
            if let range = request.headers["range"], now.answersRanges,
               let spec = range.split(separator: "=").last?.split(separator: "-", omittingEmptySubsequences: false),
               spec.count == 2, let start = Int(spec[0]), let end = Int(spec[1]) {
                state.withLock { $0.ranges.append(range) }
                guard request.headers["if-match"] == now.etag else {
                    _ = connection.write("HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                }
                let part = now.body[start...min(end, now.body.count - 1)]
                _ = connection.write("HTTP/1.1 206 Partial Content\r\nContent-Type: video/mp4\r\nETag: \(now.etag)\r\n\(offer)"
                    + "Content-Range: bytes \(start)-\(start + part.count - 1)/\(now.body.count)\r\nContent-Length: \(part.count)\r\nConnection: close\r\n\r\n")
                if connection.write(Data(part)) { state.withLock { $0.sent += part.count } }
                return
            }
            _ = connection.write("HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nETag: \(now.etag)\r\n\(offer)"
                + "Content-Length: \(now.body.count)\r\nConnection: close\r\n\r\n")
            var offset = 0
            while offset < now.body.count {
                let piece = now.body[offset..<min(now.body.count, offset + 16_384)]
                guard connection.write(Data(piece)) else { break }
                state.withLock { $0.sent += piece.count }
                offset += piece.count
            }
        }
    }

    func loader(_ options: [String: OptionValue] = [:]) throws -> HTTPLoader {
        try HTTPLoader(options: HTTPLoader.plugin.options(["allow_loopback": .bool(true), "ranges_above": .int(256 << 10),
                                                           "accept": .list([.string("video/*")])].merging(options) { $1 }),
                       environment: [:])
    }

    func decoder(_ frame: Double) throws -> any ImageDecoding {
        try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options([
            "formats": .list([.string("video"), .string("png")]), "frame": .number(frame)]))
    }

    /// Two minutes of 320x240 (a keyframe every 2 s, its index at the end), about 30 MB.
    func minute() async throws -> Data {
        let file = try await VideoPosterTests.clip("minutes.mp4", codec: ["-c:v", "libx264", "-preset", "ultrafast", "-b:v", "2M"],
                                                   seconds: 120, size: "320x240")
        return try Data(contentsOf: file)
    }

    @Test func aLargeVideoIsReadByRangeAndGivesTheFrameReadWhole() async throws {
        let body = try await minute()
        let files = FileServer(body)
        let server = try ScriptedServer(files.script)
        defer { server.stop() }
        let loaded = try await loader().load(Source(text: server.url("/minute.mp4"), index: 1))
        let ranged = try #require(loaded.ranged, "left to be read by range")
        #expect(ranged.size == body.count && loaded.byteCount == body.count)
        #expect(loaded.data.count >= 64 << 10 && loaded.data == body.prefix(loaded.data.count))
        let poster = try decoder(50).decode(loaded, hint: DecodeHint())
        let whole = try decoder(50).decode(LoadedData(data: body), hint: DecodeHint())
        #expect(try psnr(poster, whole).isInfinite, "the same frame, the same pixels")
        // Every range was pinned and the poster at 50 s read a small part of the file.
        let state = files.state.withLock { $0 }
        #expect(!state.ranges.isEmpty, "\(state.ranges)")
        #expect(loaded.bytesLoaded < body.count / 8, "\(loaded.bytesLoaded) of \(body.count) bytes fetched")
        // Its identity (for sharing and caches) is its URL, validator and size: nothing more is read.
        let before = loaded.bytesLoaded
        #expect(loaded.bodyDigest().count == 64 && loaded.bytesLoaded == before && loaded.isPartial)
    }

    /// The content changes between the first answer and a range (a new ETag): the range is
    /// refused by its If-Match (412), and the decode fails saying so, never mixing two files.
    @Test func aSourceThatChangesWhileReadFailsAndMixesNothing() async throws {
        let files = FileServer(try await minute())
        let server = try ScriptedServer(files.script)
        defer { server.stop() }
        let loaded = try await loader().load(Source(text: server.url("/v.mp4"), index: 1))
        #expect(loaded.ranged != nil)
        files.state.withLock { $0.etag = "\"v2\"" }
        let error = #expect(throws: PipelineError.self) { try decoder(30).decode(loaded, hint: DecodeHint()) }
        #expect(error?.kind == .httpStatus)
        #expect(error?.message.contains("the source changed while it was read by range") == true, "\(error?.message ?? "")")
    }

    /// A server that answered ranges at first and then answers the whole body (200) fails the
    /// decode as http_status, after no retries (it is not a passing fault).
    @Test func aServerThatStopsAnsweringRangesFails() async throws {
        let files = FileServer(try await minute())
        let server = try ScriptedServer(files.script)
        defer { server.stop() }
        let loaded = try await loader().load(Source(text: server.url("/v.mp4"), index: 1))
        files.state.withLock { $0.answersRanges = false }
        let error = #expect(throws: PipelineError.self) { try decoder(30).decode(loaded, hint: DecodeHint()) }
        #expect(error?.kind == .httpStatus && error?.message.contains("no longer answers that range") == true, "\(String(describing: error))")
    }

    /// Without Accept-Ranges, or for a body that is not a video, the body is read whole as before,
    /// within max_bytes; a video over max_bytes from such a server fails as too_large.
    @Test func otherBodiesAreReadWholeWithinMaxBytes() async throws {
        let body = try await minute()
        let files = FileServer(body)
        files.state.withLock { $0.offersRanges = false }
        let server = try ScriptedServer(files.script)
        defer { server.stop() }
        let whole = try await loader(["max_bytes": .int(64 << 20)]).load(Source(text: server.url("/v.mp4"), index: 1))
        #expect(whole.ranged == nil && whole.data == body)
        let error = await #expect(throws: PipelineError.self) {
            try await loader(["max_bytes": .int(1 << 20)]).load(Source(text: server.url("/v.mp4"), index: 1))
        }
        #expect(error?.kind == .tooLarge)
        // A large PNG from a server that offers ranges is read whole.
        let png = try Fixtures.image("plasma:", width: 1200, height: 900, format: "PNG")
        let images = FileServer(png)
        let imageServer = try ScriptedServer(images.script)
        defer { imageServer.stop() }
        let image = try await loader(["accept": .list([.string("video/*"), .string("image/*")])])
            .load(Source(text: imageServer.url("/big.png"), index: 1))
        #expect(png.count > 256 << 10 && image.ranged == nil && image.data == png)
        // max_ranged_bytes 0B turns ranges off: the video is fetched whole.
        files.state.withLock { $0.offersRanges = true }
        let off = try await loader(["max_bytes": .int(64 << 20), "max_ranged_bytes": .int(0)])
            .load(Source(text: server.url("/v.mp4"), index: 1))
        #expect(off.ranged == nil && off.data == body)
    }

    /// An S3 object (moto): the GET stops after the head and the ranges are signed GETs with
    /// If-Match; the poster is the one read whole, and an object replaced meanwhile fails.
    @Test func anS3VideoIsReadByRange() async throws {
        let body = try await minute()
        let moto = try await MotoServer.start(buckets: ["videos"])
        defer { moto.stop() }
        let file = try Fixtures.temporaryDirectory("s3-ranged").appendingPathComponent("m.mp4")
        try body.write(to: file)
        func put() async throws {
            let run = try await Command.run("/usr/bin/env", ["python3", "-c", """
                import boto3, sys
                s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                                  aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
                s3.put_object(Bucket="videos", Key="up/m.mp4", Body=open(sys.argv[4], "rb").read() + sys.argv[5].encode(),
                              ContentType="video/mp4")
                """, moto.endpoint, moto.accessKey, moto.secretKey, file.path, "\(Date().timeIntervalSince1970)"])
            try #require(run.status == 0, "\(run.stderr)")
        }
        try await put()
        var options = S3Loader.plugin.defaultOptions.values
        options["ranges_above"] = .int(256 << 10)
        let s3 = try S3Loader(options: PluginOptions(options), environment: moto.environment)
        let loaded = try await s3.load(Source(text: "s3://videos/up/m.mp4", index: 1))
        let ranged = try #require(loaded.ranged, "left to be read by range")
        #expect(ranged.size > body.count)
        let poster = try decoder(50).decode(loaded, hint: DecodeHint())
        let whole = try decoder(50).decode(LoadedData(data: body), hint: DecodeHint())
        #expect(try psnr(poster, whole).isInfinite)
        #expect(loaded.bytesLoaded < body.count / 8, "\(loaded.bytesLoaded) of \(body.count) bytes fetched")
        // Replaced (another ETag): the next range is refused.
        let again = try await s3.load(Source(text: "s3://videos/up/m.mp4", index: 1))
        try await put()
        let error = #expect(throws: PipelineError.self) { try decoder(20).decode(again, hint: DecodeHint()) }
        #expect(error?.kind == .httpStatus && error?.message.contains("changed") == true, "\(String(describing: error))")
    }
}
