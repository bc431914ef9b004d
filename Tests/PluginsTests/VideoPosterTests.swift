import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// Poster frames from video (``VideoReader``) on clips made here by the ffmpeg CLI, checked
/// against ffmpeg's own frame at the same time (`ffmpeg -ss T -i F -frames:v 1`): every listed
/// codec and container, rotation, a short and a long clip, the sharpest keyframe, a contact
/// strip, and the files that must fail alone (truncated, damaged, too long, no video, a playlist).
@Suite struct VideoPosterTests: CodecSuite {
    static func ffmpeg(_ arguments: [String]) async throws {
        let run = try await Command.run("/usr/bin/ffmpeg", ["-hide_banner", "-loglevel", "error", "-y"] + arguments)
        try #require(run.status == 0, "ffmpeg \(arguments): \(run.stderr)")
    }

    /// A clip of `seconds` of ffmpeg's moving test pattern (a frame counter and a sweeping
    /// hand: every frame differs), 320x240 at 25 frames a second, a keyframe every 2 s.
    static func clip(_ name: String, codec: [String], seconds: Double = 4, size: String = "320x240", extra: [String] = []) async throws -> URL {
        let file = try Fixtures.temporaryDirectory("video").appendingPathComponent(name)
        try await ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=\(size):rate=25", "-t", "\(seconds)", "-g", "50", "-pix_fmt", "yuv420p"]
                         + extra + codec + [file.path])
        return file
    }

    static let codecs: [(name: String, file: String, codec: [String])] = [
        ("h264", "h264.mp4", ["-c:v", "libx264", "-preset", "ultrafast"]),
        ("h264 in QuickTime", "h264.mov", ["-c:v", "libx264", "-preset", "ultrafast"]),
        ("hevc", "hevc.mp4", ["-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1", "-x265-params", "log-level=none"]),
        ("vp8", "vp8.webm", ["-c:v", "libvpx", "-deadline", "realtime", "-b:v", "1M"]),
        ("vp9", "vp9.webm", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-b:v", "1M"]),
        ("av1", "av1.mkv", ["-c:v", "libaom-av1", "-cpu-used", "8", "-b:v", "1M"]),
    ]

    func decoder(_ options: [String: OptionValue]) throws -> any ImageDecoding {
        try ImageMagickDecoder.plugin.makeDecoder(ImageMagickDecoder.plugin.options(["formats": .list([.string("video")])].merging(options) { $1 }))
    }

    /// ffmpeg's frame at `seconds` of `file`, upright, as a decoded image at `width` x `height`.
    func ffmpegFrame(_ file: URL, at seconds: Double, width: Int, height: Int) async throws -> PipelineImage {
        let png = file.deletingLastPathComponent().appendingPathComponent("ff-\(seconds).png")
        try await Self.ffmpeg(["-ss", "\(seconds)", "-i", file.path, "-frames:v", "1", "-vf", "scale=\(width):\(height):flags=area", png.path])
        return try ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)
            .decode(LoadedData(data: try Data(contentsOf: png)), hint: DecodeHint())
    }

    /// Each codec and container: the frame at 2.6 s is the one ffmpeg takes at that time (closer
    /// to it than to the frame before or after), and the facts name the codec and the duration.
    @Test(arguments: 0..<6)
    func everyCodecGivesTheFrameAskedFor(index: Int) async throws {
        let (name, fileName, codec) = Self.codecs[index]
        let file = try await Self.clip(fileName, codec: codec)
        let data = try Data(contentsOf: file)
        let sniffed = FormatSniffer.sniff(data)
        #expect([.image(.mp4), .image(.mov), .image(.webm), .image(.mkv)].contains(sniffed), "\(name): \(sniffed)")
        let poster = try decoder(["frame": .number(2.6)]).decode(LoadedData(data: data), hint: DecodeHint(wantsSourceFacts: true))
        #expect(poster.width == 320 && poster.height == 240, "\(name): \(poster.width)x\(poster.height)")
        let at = try await ffmpegFrame(file, at: 2.6, width: 320, height: 240)
        let before = try await ffmpegFrame(file, at: 2.56, width: 320, height: 240)
        let after = try await ffmpegFrame(file, at: 2.64, width: 320, height: 240)
        let (same, earlier, later) = (try psnr(poster, at), try psnr(poster, before), try psnr(poster, after))
        #expect(same >= 30 && same > earlier + 3 && same > later + 3, "\(name): \(same) dB at 2.6 s, \(earlier) before, \(later) after")
        guard case .object(let video)? = poster.facts["video"] else { Issue.record("\(name): no video facts"); return }
        #expect(video["codec"] == .string(name.components(separatedBy: " ")[0]), "\(name): \(video)")
        if case .number(let duration)? = video["duration"] { #expect(abs(duration - 4) < 0.2, "\(name): \(duration)") }
        guard case .object(let taken)? = poster.facts["poster"], case .number(let time)? = taken["time"] else {
            Issue.record("\(name): no poster facts \(poster.facts)"); return
        }
        #expect(abs(time - 2.6) < 0.021, "\(name): the frame at \(time) s")
    }

    /// A clip stored sideways (a display matrix): the poster is upright, as ffmpeg shows it, and
    /// the facts give the clockwise turn that shows it so. (ffmpeg 5.1's `rotate=90` writes a
    /// matrix of 90° counterclockwise, as ffprobe reports it: shown upright, a 270° turn.)
    @Test func rotationIsApplied() async throws {
        let plain = try await Self.clip("plain.mp4", codec: ["-c:v", "libx264", "-preset", "ultrafast"])
        let turned = plain.deletingLastPathComponent().appendingPathComponent("turned.mp4")
        try await Self.ffmpeg(["-i", plain.path, "-c", "copy", "-metadata:s:v:0", "rotate=90", turned.path])
        let poster = try decoder(["frame": .number(1)]).decode(LoadedData(data: try Data(contentsOf: turned)), hint: DecodeHint(wantsSourceFacts: true))
        #expect(poster.width == 240 && poster.height == 320, "\(poster.width)x\(poster.height)")
        let theirs = try await ffmpegFrame(turned, at: 1, width: 240, height: 320)
        #expect(try psnr(poster, theirs) >= 30)
        guard case .object(let video)? = poster.facts["video"] else { Issue.record("no video facts"); return }
        #expect(video["rotation"] == .int(270), "\(video)")
    }

    /// A long clip (10 minutes) read in place from a local file: the frame at 7m30s, reading a
    /// small part of the file; a time past the end gives the last frame.
    @Test func aLongClipReadInPlace() async throws {
        let file = try await Self.clip("long.mp4", codec: ["-c:v", "libx264", "-preset", "ultrafast"], seconds: 600, size: "160x120")
        let descriptor = open(file.path, O_RDONLY)
        try #require(descriptor >= 0)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int)
        let loaded = try LoadedData(file: LocalFile(descriptor: descriptor, size: size, path: file.path))
        let poster = try decoder(["frame": .number(450)]).decode(loaded, hint: DecodeHint())
        let theirs = try await ffmpegFrame(file, at: 450, width: 160, height: 120)
        #expect(try psnr(poster, theirs) >= 30)
        // In place, the poster at 7m30s reads the index and one group of frames: a small part.
        var settings = VideoSettings()
        settings.pick = .at(450)
        let reader = try VideoReader(.mp4, loaded, settings: settings)
        _ = try reader.plan(DecodeHint(), try #require((try decoder([:]) as? ImageMagickDecoder)?.settings)).reduced?()
        #expect(reader.video.bytes.read * 20 < reader.video.bytes.size, "\(reader.video.bytes.read) of \(reader.video.bytes.size) bytes read")
        let last = try decoder(["frame": .number(9999)]).decode(loaded, hint: DecodeHint())
        guard case .object(let taken)? = last.facts["poster"], case .number(let time)? = taken["time"] else { Issue.record("no poster facts"); return }
        #expect(time > 599 && time < 600, "\(time)")
    }

    /// `best_of` takes the sharpest of the first keyframes: a clip blurred for its first 2 s and
    /// sharp after gives the keyframe at 2 s; `strip` lays frames at even times side by side.
    @Test func sharpestKeyframeAndStrip() async throws {
        let file = try await Self.clip("blur.mp4", codec: ["-c:v", "libx264", "-preset", "ultrafast"], seconds: 6,
                                       extra: ["-vf", "boxblur=8:enable='lt(t,2)'"])
        let data = try Data(contentsOf: file)
        let best = try decoder(["frame": .map(["best_of": .int(3)])]).decode(LoadedData(data: data), hint: DecodeHint())
        guard case .object(let taken)? = best.facts["poster"], case .number(let time)? = taken["time"] else { Issue.record("no poster facts"); return }
        #expect(time >= 2 && taken["keyframes"] == .int(3), "\(taken)")
        let strip = try decoder(["frame": .map(["strip": .int(4), "columns": .int(2)])]).decode(LoadedData(data: data), hint: DecodeHint())
        #expect(strip.width == 640 && strip.height == 480, "\(strip.width)x\(strip.height)")
        guard case .object(let laid)? = strip.facts["poster"], case .list(let times)? = laid["times"] else { Issue.record("no strip facts"); return }
        #expect(times.count == 4)
        // The map form of a time, and a frame that names two ways, refused when the decoder is made.
        let at = try decoder(["frame": .map(["at": .number(1)])]).decode(LoadedData(data: data), hint: DecodeHint())
        guard case .object(let chosen)? = at.facts["poster"], case .number(let when)? = chosen["time"] else { Issue.record("no poster facts"); return }
        #expect(abs(when - 1) < 0.021 && chosen["rule"] == .string("at"), "\(chosen)")
        #expect(throws: PipelineError.self) { try decoder(["frame": .map(["at": .number(1), "best_of": .int(2)])]) }
        #expect(throws: PipelineError.self) { try decoder(["frame": .map(["columns": .int(2)])]) }
        // Under a 100 px box the frames are scaled while converted, with the resize's headroom.
        let small = try decoder(["frame": .number(1)]).decode(LoadedData(data: data), hint: hint)
        // (A fill: both sides keep twice the 100 px box.)
        #expect(small.width == 267 && small.height == 200, "\(small.width)x\(small.height) under \(hint)")
    }

    /// Files that fail alone, each with a kind: truncated, damaged, a header claiming 10 hours, no
    /// video stream, a playlist (never opened: nothing it names is read), a codec not allowed,
    /// and the read limit.
    @Test func badVideosFailWithTheirKinds() async throws {
        let file = try await Self.clip("bad.mp4", codec: ["-c:v", "libx264", "-preset", "ultrafast"], extra: ["-movflags", "+faststart"])
        let data = try Data(contentsOf: file)
        let plain = try decoder([:])
        func kind(_ bytes: Data, _ with: (any ImageDecoding)? = nil) -> ErrorKind? {
            do { _ = try (with ?? plain).decode(LoadedData(data: bytes), hint: DecodeHint()); return nil } catch { return (error as? PipelineError)?.kind }
        }
        #expect(kind(data.prefix(data.count / 20)) == .decodeFailed)
        survivesBitFlips(data, from: 64, times: 30, flips: 8, seed: 62, kinds: [.decodeFailed, .tooLarge, .timeout], using: plain)
        // The movie header's duration says 10 hours: refused before a frame is decoded.
        var long = data
        let mvhd = try #require(long.firstRange(of: Data("mvhd".utf8)))
        let timescale = mvhd.upperBound + 4 + 8
        let scale = (timescale..<timescale + 4).reduce(0) { $0 << 8 | Int(long[$1]) }
        let tenHours = UInt32(36_000 * scale)
        for index in 0..<4 { long[timescale + 4 + index] = UInt8(tenHours >> (8 * (3 - index)) & 0xFF) }
        #expect(kind(long) == .tooLarge)
        let audio = file.deletingLastPathComponent().appendingPathComponent("audio.mp4")
        try await Self.ffmpeg(["-f", "lavfi", "-i", "sine=duration=1", "-c:a", "aac", audio.path])
        #expect(kind(try Data(contentsOf: audio)) == .decodeFailed)
        let playlist = Data("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n\(file.path)\n#EXT-X-ENDLIST\n".utf8)
        #expect(kind(playlist) == .notAnImage)
        let mpeg4 = file.deletingLastPathComponent().appendingPathComponent("mpeg4.mp4")
        try await Self.ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10", "-t", "1", "-c:v", "mpeg4", mpeg4.path])
        #expect(kind(try Data(contentsOf: mpeg4)) == .unsupportedFormat)
        #expect(kind(data, try decoder(["max_video_read": .int(1 << 20), "frame": .number(3.9)])) == nil)
        #expect(kind(data, try decoder(["max_video_read": .int(20_000)])) == .tooLarge)
        // Not listed in formats: refused, naming the entry to add.
        #expect(kind(data, ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)) == .unsupportedFormat)
    }
}
