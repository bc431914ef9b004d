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

    /// `mp4` (H.264 baseline, its index at the end) with its sequence parameter set rewritten to
    /// claim `width` x `height` macroblocks: each box around the `avcC` grows by what it grew.
    static func claiming(_ mp4: Data, width: Int, height: Int) throws -> Data {
        var file = mp4
        let avcC = try #require(file.firstRange(of: Data("avcC".utf8))).lowerBound
        let spsStart = avcC + 4 + 8, spsLength = Int(file[avcC + 10]) << 8 | Int(file[avcC + 11])
        var rbsp = [UInt8]()
        for byte in file[spsStart..<(spsStart + spsLength)] {
            if byte == 3, rbsp.suffix(2) == [0, 0] { continue }  // emulation prevention
            rbsp.append(byte)
        }
        var bit = 32  // after the NAL header, profile, constraints and level
        func isSet(_ index: Int) -> Bool { (rbsp[index / 8] >> UInt8(7 - index % 8)) & 1 == 1 }
        func read(_ count: Int) -> Int {
            var value = 0
            for _ in 0..<count {
                value = value << 1 | (isSet(bit) ? 1 : 0)
                bit += 1
            }
            return value
        }
        func readUE() -> Int {
            var zeros = 0
            while read(1) == 0 { zeros += 1 }
            return (1 << zeros) - 1 + read(zeros)
        }
        var out = [Bool]()
        func write(_ value: Int, _ count: Int) { for index in (0..<count).reversed() { out.append(value >> index & 1 == 1) } }
        func writeUE(_ value: Int) {
            let bits = Int.bitWidth - (value + 1).leadingZeroBitCount
            write(0, bits - 1)
            write(value + 1, bits)
        }
        write(Int(rbsp[0]) << 24 | Int(rbsp[1]) << 16 | Int(rbsp[2]) << 8 | Int(rbsp[3]), 32)
        writeUE(readUE())  // seq_parameter_set_id
        writeUE(readUE())  // log2_max_frame_num_minus4
        let order = readUE()
        writeUE(order)
        if order == 0 { writeUE(readUE()) }
        writeUE(readUE())  // max_num_ref_frames
        write(read(1), 1)  // gaps_in_frame_num_value_allowed_flag
        _ = readUE(); _ = readUE()
        writeUE(width - 1)
        writeUE(height - 1)
        let last = (0..<(rbsp.count * 8)).last(where: isSet)!
        while bit <= last { write(read(1), 1) }
        while out.count % 8 != 0 { out.append(false) }
        var sps = [UInt8]()
        var zeros = 0
        for start in stride(from: 0, to: out.count, by: 8) {
            let byte = out[start..<(start + 8)].reduce(UInt8(0)) { $0 << 1 | ($1 ? 1 : 0) }
            if zeros >= 2, byte <= 3 { sps.append(3); zeros = 0 }
            sps.append(byte)
            zeros = byte == 0 ? zeros + 1 : 0
        }
        let delta = sps.count - spsLength
        file.replaceSubrange(spsStart..<(spsStart + spsLength), with: sps)
        file[avcC + 10] = UInt8(sps.count >> 8)
        file[avcC + 11] = UInt8(sps.count & 0xFF)
        for name in ["moov", "trak", "mdia", "minf", "stbl", "stsd", "avc1", "avcC"] {
            let at = try #require(file[..<(avcC + 4)].lastRange(of: Data(name.utf8))).lowerBound - 4
            let size = (at..<(at + 4)).reduce(0) { $0 << 8 | Int(file[$1]) } + delta
            for index in 0..<4 { file[at + index] = UInt8(size >> (8 * (3 - index)) & 0xFF) }
        }
        return file
    }

    /// A bitstream whose sequence header claims 100,000 x 100,000 fails as too_large or
    /// decode_failed before a frame is decoded, and quickly; the same rewrite to the true size
    /// decodes (the rewrite itself is sound).
    @Test func aHeaderClaimingAHugePictureFailsAlone() async throws {
        let file = try await Self.clip("small.mp4", codec: ["-c:v", "libx264", "-profile:v", "baseline", "-preset", "ultrafast"], size: "64x48")
        let data = try Data(contentsOf: file)
        let same = try Self.claiming(data, width: 4, height: 3)
        let image = try decoder(["frame": .number(1)]).decode(LoadedData(data: same), hint: DecodeHint())
        #expect(image.width == 64 && image.height == 48)
        let huge = try Self.claiming(data, width: 6250, height: 6250)
        let start = ContinuousClock.now
        do {
            let image = try decoder(["frame": .number(1)]).decode(LoadedData(data: huge), hint: DecodeHint())
            Issue.record("decoded a picture claiming 100000x100000 as \(image.width)x\(image.height)")
        } catch let error as PipelineError {
            #expect([.tooLarge, .decodeFailed].contains(error.kind), "\(error)")
            print("a video claiming 100000x100000: \(error.kind): \(error.message)")
        }
        #expect(ContinuousClock.now - start < .seconds(60), "refused from the header, not after decoding")
    }

    /// Mean saturation (the largest channel less the smallest) and the spread of the samples, in
    /// 16-bit units, of `image`.
    func colourfulness(_ image: PipelineImage) throws -> (saturation: Double, spread: Double) {
        try image.withCopy { wand in
            var row = [UInt16](repeating: 0, count: wand.width * 3)
            var (saturation, sum, squares, count) = (0.0, 0.0, 0.0, 0.0)
            for y in 0..<wand.height {
                try wand.exportRow(y, channels: "RGB", into: &row)
                for x in 0..<wand.width {
                    let pixel = row[(3 * x)..<(3 * x + 3)].map(Double.init)
                    saturation += pixel.max()! - pixel.min()!
                    for value in pixel { sum += value; squares += value * value }
                    count += 1
                }
            }
            let mean = sum / (3 * count)
            return (saturation / count, (squares / (3 * count) - mean * mean).squareRoot())
        }
    }

    /// HDR as a phone films it: `frames` (sRGB, 16-bit RGB rows) taken as scene light, in BT.2020
    /// primaries, with SDR white at HDR's reference white (203 cd/m2: HLG's 75% signal), coded by
    /// HLG's OETF or PQ's inverse EOTF, as 10-bit HEVC tagged BT.2020 with that transfer.
    static func hdrClip(_ frames: Data, size: (Int, Int), transfer: String, into file: URL) async throws {
        var samples = [UInt16](repeating: 0, count: frames.count / 2)
        _ = samples.withUnsafeMutableBytes { frames.copyBytes(to: $0) }
        let toBT2020: [[Double]] = [[0.6274, 0.3293, 0.0433], [0.0691, 0.9195, 0.0114], [0.0164, 0.0880, 0.8956]]
        let (a, b) = (0.17883277, 1 - 4 * 0.17883277), c = 0.5 - a * log(4 * a)
        func code(_ light: Double) -> Double {
            if transfer == "arib-std-b67" {
                let scene = min(1, max(0, light * 0.2647))  // HLG's scene light of 203 cd/m2 on a 1000 cd/m2 display
                return scene <= 1.0 / 12 ? (3 * scene).squareRoot() : a * log(12 * scene - b) + c
            }
            let (m1, m2, c1, c2, c3) = (2610.0 / 16384, 2523.0 / 4096 * 128, 3424.0 / 4096, 2413.0 / 4096 * 32, 2392.0 / 4096 * 32)
            let y = pow(max(0, light) * 203 / 10_000, m1)
            return pow((c1 + c2 * y) / (1 + c3 * y), m2)
        }
        for start in stride(from: 0, to: samples.count, by: 3) {
            let linear = (0..<3).map { index -> Double in
                let v = Double(samples[start + index]) / 65535
                return v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4)
            }
            for index in 0..<3 {
                let wide = (0..<3).reduce(0.0) { $0 + toBT2020[index][$1] * linear[$1] }
                samples[start + index] = UInt16((code(wide) * 65535).rounded())
            }
        }
        let raw = file.deletingPathExtension().appendingPathExtension("rgb48")
        try samples.withUnsafeBytes { Data($0) }.write(to: raw)
        try await ffmpeg(["-f", "rawvideo", "-pix_fmt", "rgb48le", "-s", "\(size.0)x\(size.1)", "-r", "25", "-i", raw.path,
                          "-vf", "scale=out_color_matrix=bt2020:out_range=tv,format=yuv420p10le", "-c:v", "libx265",
                          "-x265-params", "log-level=none:crf=12:colorprim=bt2020:transfer=\(transfer):colormatrix=bt2020nc",
                          "-tag:v", "hvc1", file.path])
    }

    /// A phone's HLG clip, and a PQ one, give a poster as colourful as the scene: converted to
    /// sRGB (to linear light, HLG's system gamma, BT.2020 to BT.709, highlights rolled off), its
    /// saturation and spread within 20% of the SDR frame's. Shown as coded (what ffmpeg's CLI
    /// does without a tone mapping filter) the same frame is washed out: about half.
    @Test(arguments: ["arib-std-b67", "smpte2084"])
    func hdrGivesAPosterAsColourfulAsTheScene(transfer: String) async throws {
        let dir = try Fixtures.temporaryDirectory("hdr")
        let scene = dir.appendingPathComponent("scene.mp4"), raw = dir.appendingPathComponent("scene.raw")
        try await Self.ffmpeg(["-f", "lavfi", "-i", "mandelbrot=size=480x270:rate=25", "-t", "1", "-f", "rawvideo", "-pix_fmt", "rgb48le", raw.path])
        try await Self.ffmpeg(["-f", "rawvideo", "-pix_fmt", "rgb48le", "-s", "480x270", "-r", "25", "-i", raw.path,
                               "-c:v", "libx264", "-qp", "0", "-pix_fmt", "yuv444p", scene.path])
        let hdr = dir.appendingPathComponent("hdr.mp4")
        try await Self.hdrClip(try Data(contentsOf: raw), size: (480, 270), transfer: transfer, into: hdr)
        let poster = try decoder(["frame": .number(0.5)]).decode(LoadedData(data: try Data(contentsOf: hdr)), hint: DecodeHint())
        let sdr = try await ffmpegFrame(scene, at: 0.5, width: 480, height: 270)
        let asCoded = dir.appendingPathComponent("as-coded.png")
        try await Self.ffmpeg(["-ss", "0.5", "-i", hdr.path, "-frames:v", "1", "-vf", "format=rgb24", asCoded.path])
        let washed = try ImageMagickDecoder(options: ImageMagickDecoder.plugin.defaultOptions)
            .decode(LoadedData(data: try Data(contentsOf: asCoded)), hint: DecodeHint())
        let (ours, theirs, plain) = (try colourfulness(poster), try colourfulness(sdr), try colourfulness(washed))
        let label = "\(transfer): saturation \(Int(ours.saturation)) (SDR \(Int(theirs.saturation)), as coded \(Int(plain.saturation))), "
            + "spread \(Int(ours.spread)) (SDR \(Int(theirs.spread)), as coded \(Int(plain.spread)))"
        print("hdr poster: \(label)")
        #expect(ours.saturation > theirs.saturation * 0.8 && ours.spread > theirs.spread * 0.8, "\(label)")
        #expect(plain.saturation < theirs.saturation * 0.7, "the clip is really HDR: \(label)")
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
