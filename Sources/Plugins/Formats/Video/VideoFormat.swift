import CVideo
import Foundation
import PipelineKit

/// Video (MP4, QuickTime, WebM, Matroska): its row in ``FormatTable`` (`formats: [video]`, off
/// unless listed), the decoder options that say which frame becomes the image and the limits,
/// and its fuzz target. Read by ``VideoReader`` through libavformat and libavcodec 5.1.
enum VideoFormat {
    static let entry = FormatEntry(
        name: "video", formats: [.mp4, .mov, .webm, .mkv], byDefault: false,
        reader: { format, loaded, settings in try VideoReader(format, loaded, settings: settings.video) },
        fuzzTargets: ["video": fuzz], readsItself: true)

    /// The fields of the map form of the decoder's `frame` option.
    static let frameFields: [OptionSpec] = [
        .duration("at", doc: "The frame shown at this time (the last frame when the video is shorter)."),
        .int("best_of", range: 1...100, doc: "The sharpest of the first N keyframes (the variance of its Laplacian), each decoded alone."),
        .int("strip", range: 2...64, doc: "A contact strip of N frames at even times, side by side."),
        .int("columns", range: 1...64, doc: "With strip: frames a row (default: all in one row)."),
    ]

    /// The decoder options a video reads (``VideoSettings``).
    static let options: [OptionSpec] = [
        OptionSpec(name: "frame", kind: .either(.duration, .record(frameFields)), defaultValue: .number(1),
                   doc: "Which frame of a video (formats: [video]) becomes the image: a time (2s, 1h5m), or { at: 2s }, { best_of: 5 } (the sharpest of the first keyframes), { strip: 6, columns: 3 } (a contact sheet of frames at even times). serve can take the time as a parameter (sets: decoder.imagemagick.frame).")
            .example("{ best_of: 5 }"),
        .duration("max_duration", default: "4h", doc: "Longest video accepted (from its header); longer fails as too_large before anything is decoded.")
            .example("30m"),
        .size("max_video_read", default: "512MB", min: "1MB", max: "64GB",
              doc: "Most bytes of a video read to make its image (the header, the index and the frames decoded); more fails as too_large. A poster needs a small part of a long video.")
            .example("64MB"),
        .duration("max_decode_time", default: "60s", doc: "Longest a video's header, and then its frames, may take to read and decode; longer fails as timeout.")
            .example("10s"),
    ]

    /// The libavformat and libavcodec path over any bytes: open, then one frame at a time taken
    /// from the bytes' own size and a keyframe. Small and bounded: at most 64x64 frames, 2 s.
    @Sendable static func fuzz(_ data: Data) {
        let bytes = VideoBytes(.memory(data), limit: 8 << 20)
        let deadline = pk_video_now_ms() + 2000
        guard let video = try? VideoDemuxer(bytes, deadline: deadline) else { return }
        _ = try? video.frame(at: Double(data.count % 7), size: PixelSize(width: 32, height: 24), deadline: deadline)
        _ = try? video.nextKeyframe(size: PixelSize(width: 16, height: 16), deadline: deadline)
    }
}

/// Which frame a video becomes, and what may be read and decoded to get it (the decoder's
/// `frame`, `max_duration`, `max_video_read` and `max_decode_time`).
struct VideoSettings: Sendable, Equatable {
    enum Pick: Sendable, Equatable {
        /// The frame shown at this time, in seconds.
        case at(Double)
        /// The sharpest of the first N keyframes.
        case sharpestKeyframe(of: Int)
        /// N frames at even times, `columns` a row.
        case strip(count: Int, columns: Int)
    }

    var pick: Pick = .at(1)
    var maxDuration: Double = 4 * 3600
    var maxRead: Int = 512 << 20
    var maxDecodeTime: Double = 60

    init() {}

    /// The settings of the decoder's options; throws `invalid_option` when `frame` names two ways.
    init(options: PluginOptions) throws {
        if let map = options.map("frame") {
            let fields = PluginOptions(map)
            let ways = [fields.seconds("at").map { Pick.at($0) }, fields.int("best_of").map { Pick.sharpestKeyframe(of: $0) },
                        fields.int("strip").map { Pick.strip(count: $0, columns: fields.int("columns") ?? $0) }].compactMap { $0 }
            guard ways.count <= 1 else { throw PipelineError(.invalidOption, "frame: give one of at, best_of or strip") }
            if fields.int("columns") != nil, fields.int("strip") == nil { throw PipelineError(.invalidOption, "frame: columns needs strip") }
            pick = ways.first ?? .at(1)
        } else if let at = options.seconds("frame") {
            pick = .at(at)
        }
        maxDuration = options.seconds("max_duration") ?? maxDuration
        maxRead = options.bytes("max_video_read") ?? maxRead
        maxDecodeTime = options.seconds("max_decode_time") ?? maxDecodeTime
    }
}
