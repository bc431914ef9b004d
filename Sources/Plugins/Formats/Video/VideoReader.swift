import CVideo
import Foundation
import MagickKit
import PipelineKit

/// A video's poster, read by libavformat and decoded by libavcodec (``VideoDemuxer``) from the
/// bytes in memory or a local file in place: the container's header and the video stream are read
/// when the reader is made, and the limits (duration, the picture's size) are checked before any
/// frame is decoded. The image is one frame (`frame: 2s`), the sharpest of the first keyframes
/// (`frame: { best_of: 5 }`), or a contact strip (`frame: { strip: 6 }`), turned upright by the
/// stream's rotation and scaled by libswscale to what the chain needs (with the same headroom
/// other formats keep for the resize filter).
struct VideoReader: FormatReader {
    let format: ImageFormat
    let video: VideoDemuxer
    let settings: VideoSettings
    /// The first bytes only: a video is never held whole for ImageMagick.
    let data: Data

    init(_ format: ImageFormat, _ loaded: LoadedData, settings: VideoSettings) throws {
        self.format = format
        self.settings = settings
        data = loaded.data.prefix(64 << 10)
        let storage: VideoBytes.Storage = if let file = loaded.file { .file(file) } else if let body = loaded.ranged { .ranged(body) } else { .memory(loaded.data) }
        let bytes = VideoBytes(storage, limit: settings.maxRead)
        video = try VideoDemuxer(bytes, deadline: pk_video_now_ms() + Int64(settings.maxDecodeTime * 1000))
        if let duration = video.duration, duration > settings.maxDuration {
            throw PipelineError(.tooLarge, "video: \(Self.clock(duration)) long, over max_duration \(Self.clock(settings.maxDuration))")
        }
    }

    var byteCount: Int { video.bytes.size }

    /// One frame's size as shown.
    var frameSize: PixelSize { video.shownSize }

    /// The image's size at full scale: one frame, or the strip of frames.
    var size: PixelSize {
        guard case .strip(let count, let columns) = settings.pick else { return frameSize }
        let rows = (count + columns - 1) / columns
        return PixelSize(width: frameSize.width * min(count, columns), height: frameSize.height * rows)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        // Scaled while converted: to what the chain needs with the resize's headroom, never up.
        let scale = settings.shrinkOnLoad ? max(1, (hint.maxShrink(from: size) ?? 1) / Double(settings.headroom)) : 1
        let frame = PixelSize(width: max(1, Int((Double(frameSize.width) / scale).rounded())),
                              height: max(1, Int((Double(frameSize.height) / scale).rounded())))
        let video = self.video, pick = self.settings.pick, seconds = self.settings.maxDecodeTime
        let coded = Int(video.info.width) * Int(video.info.height)
        // The decoder's reference frames (4:2:0, up to 16) and the converted frames (RGB, turned).
        let memory = coded * 24 + (size.width * size.height * 3) / Int(scale * scale) * 3 + (4 << 20)
        return ReadPlan(reduced: {
            let deadline = pk_video_now_ms() + Int64(seconds * 1000)
            let (pixels, facts) = try Self.poster(video, pick: pick, frame: frame, deadline: deadline)
            video.posterFacts = facts
            return (.pixels(pixels), nil)
        }, estimatedMemory: memory)
    }

    /// The image `pick` makes of `video`, each frame at `frame` size.
    static func poster(_ video: VideoDemuxer, pick: VideoSettings.Pick, frame: PixelSize, deadline: Int64) throws -> (RGB8Pixels, ImageFacts) {
        switch pick {
        case .at(let seconds):
            let (pixels, time) = try video.frame(at: seconds, size: frame, deadline: deadline)
            return (pixels, ["poster": .object(["rule": .string("at"), "time": .number(time)])])
        case .sharpestKeyframe(let count):
            var best: (pixels: RGB8Pixels, time: Double, score: Double)?
            var seen = 0
            while seen < count, let (pixels, time) = try video.nextKeyframe(size: frame, deadline: deadline) {
                seen += 1
                let score = VideoDemuxer.sharpness(pixels)
                if best == nil || score > best!.score { best = (pixels, time, score) }
            }
            guard let best else { throw PipelineError(.decodeFailed, "video: no keyframe could be decoded") }
            return (best.pixels, ["poster": .object(["rule": .string("sharpest keyframe"), "time": .number(best.time),
                                                     "keyframes": .int(seen)])])
        case .strip(let count, let columns):
            let duration = video.duration ?? 0
            var strip = [UInt8](repeating: 0, count: frame.width * frame.height * 3 * columns * ((count + columns - 1) / columns))
            let width = frame.width * min(count, columns), rows = (count + columns - 1) / columns
            var times: [FactValue] = []
            for index in 0..<count {
                let (pixels, time) = try video.frame(at: duration * (Double(index) + 0.5) / Double(count), size: frame, deadline: deadline)
                times.append(.number(time))
                let (column, row) = (index % columns, index / columns)
                for y in 0..<frame.height {
                    let from = y * frame.width * 3, to = ((row * frame.height + y) * width + column * frame.width) * 3
                    strip.replaceSubrange(to..<(to + frame.width * 3), with: pixels.bytes[from..<(from + frame.width * 3)])
                }
            }
            strip.removeLast(strip.count - width * frame.height * rows * 3)
            return (RGB8Pixels(width: width, height: frame.height * rows, hasAlpha: false, bytes: strip),
                    ["poster": .object(["rule": .string("strip"), "times": .list(times)])])
        }
    }

    /// Which frame was taken, and when (`poster`), once decoded.
    var decodedFacts: ImageFacts { video.posterFacts }

    /// The video's facts from its header: duration, codecs, frame rate, rotation. No metadata.
    func headerFacts(facts: Bool, metadata: Bool, upright: (Int) -> Bool) -> HeaderFacts {
        var read = HeaderFacts()
        guard facts else { return read }
        var video: ImageFacts = ["codec": .string(self.video.codec), "container": .string(self.video.container),
                                 "width": .int(Int(self.video.info.width)), "height": .int(Int(self.video.info.height)),
                                 "rotation": .int(Int(self.video.info.rotation))]
        if let duration = self.video.duration { video["duration"] = .number(duration) }
        if self.video.info.frame_rate > 0 { video["frame_rate"] = .number((self.video.info.frame_rate * 1000).rounded() / 1000) }
        if self.video.info.bit_rate > 0 { video["bit_rate"] = .int(Int(self.video.info.bit_rate)) }
        read.facts["video"] = .object(video)
        return read
    }

    /// `1h05m03s` style, for messages.
    static func clock(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded())
        let (hours, minutes, rest) = (whole / 3600, whole / 60 % 60, whole % 60)
        return hours > 0 ? String(format: "%dh%02dm%02ds", hours, minutes, rest) : minutes > 0 ? String(format: "%dm%02ds", minutes, rest) : "\(rest)s"
    }
}
