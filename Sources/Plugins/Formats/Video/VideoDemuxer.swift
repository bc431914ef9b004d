import CVideo
import Foundation
import MagickKit
import PipelineKit

/// The bytes of a video as libavformat reads them through our I/O alone (``VideoDemuxer``): in
/// memory, a local file read in place, or a remote body fetched by range, from any offset. Counts what is read, and refuses to
/// read past `limit` bytes in all (the decoder's `video.max_read`).
final class VideoBytes: @unchecked Sendable {
    enum Storage {
        case memory(Data)
        case file(LocalFile)
        case ranged(any RangedBody)
    }

    let storage: Storage
    let size: Int
    let limit: Int
    private(set) var position = 0
    /// Bytes read so far.
    private(set) var read = 0
    /// Why the last read failed, for the error libavformat returns.
    private(set) var failure: PipelineError?

    init(_ storage: Storage, limit: Int) {
        self.storage = storage
        switch storage {
        case .memory(let data): size = data.count
        case .file(let file): size = file.size
        case .ranged(let body): size = body.size
        }
        self.limit = limit
    }

    /// Copies up to `count` bytes at the position into `buffer`: the count, 0 at the end, -1 when
    /// the limit or the file refuses.
    func read(into buffer: UnsafeMutablePointer<UInt8>, count: Int) -> Int32 {
        let wanted = min(count, size - position)
        guard wanted > 0 else { return 0 }
        guard read + wanted <= limit else {
            failure = PipelineError(.tooLarge, "video: reading it needs more than \(Units.formatSize(limit)) (the decoder's video.max_read)")
            return -1
        }
        switch storage {
        case .memory(let data):
            data.withUnsafeBytes { bytes in
                buffer.update(from: bytes.bindMemory(to: UInt8.self).baseAddress! + position, count: wanted)
            }
        case .file(let file):
            let (got, error) = file.read(at: position, count: wanted, into: buffer)
            guard error == nil, got > 0 else {
                failure = PipelineError(.io, "video: reading \(file.path) at \(position) failed (errno \(error ?? 0))")
                return -1
            }
            position += got
            read += got
            return Int32(got)
        case .ranged(let body):
            do {
                let got = try body.read(at: position, count: wanted, into: buffer)
                position += got
                read += got
                return Int32(got)
            } catch {
                failure = error as? PipelineError ?? PipelineError(.network, "video: reading \(body.name) at \(position): \(error)")
                return -1
            }
        }
        position += wanted
        read += wanted
        return Int32(wanted)
    }

    /// Moves to `offset` (the size for ``PK_VIDEO_SIZE``); -1 outside the file.
    func seek(_ offset: Int64) -> Int64 {
        if offset == Int64(PK_VIDEO_SIZE) { return Int64(size) }
        guard offset >= 0, offset <= Int64(size) else { return -1 }
        position = Int(offset)
        return offset
    }
}

/// One video opened by libavformat through ``VideoBytes`` only: nothing the file names is ever
/// opened (no protocol, playlist entry or reference), only the allowed demuxers read it, and only
/// the allowed codecs decode it. Used by one item at a time (the reader's header, then its decode).
final class VideoDemuxer: @unchecked Sendable {
    /// The demuxers that may read a file: MP4 and QuickTime, Matroska and WebM.
    static let formats = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm"
    /// The codecs that may decode its picture.
    static let codecs = "h264,hevc,vp8,vp9,av1"

    let bytes: VideoBytes
    private let handle: OpaquePointer
    let info: pk_video_info
    /// What the last decode took (``VideoReader/poster(_:pick:frame:deadline:)``), for the item's facts.
    var posterFacts: ImageFacts = [:]

    /// Opens `bytes`, reading the container's header and finding the video stream. Throws
    /// `decode_failed` for a file that is not such a video or has no video stream,
    /// `unsupported_format` for a codec that is not allowed, and what ``VideoBytes`` refused.
    init(_ bytes: VideoBytes, deadline: Int64 = 0) throws {
        self.bytes = bytes
        var info = pk_video_info()
        var kind: Int32 = 0
        var error = [CChar](repeating: 0, count: 256)
        let opaque = Unmanaged.passUnretained(bytes).toOpaque()
        let read: pk_video_read = { opaque, buffer, size in
            Unmanaged<VideoBytes>.fromOpaque(opaque!).takeUnretainedValue().read(into: buffer!, count: Int(size))
        }
        let seek: pk_video_seek = { opaque, offset in
            Unmanaged<VideoBytes>.fromOpaque(opaque!).takeUnretainedValue().seek(offset)
        }
        guard let handle = pk_video_open(opaque, read, seek, Self.formats, Self.codecs, deadline, &info, &kind, &error, Int32(error.count)) else {
            if let failure = bytes.failure { throw failure }
            let message = "video: " + Self.text(error)
            throw PipelineError(kind == 2 ? .unsupportedFormat : message.contains("time limit") ? .timeout : .decodeFailed, message)
        }
        self.handle = handle
        self.info = info
    }

    deinit { pk_video_close(handle) }

    /// The codec's name (`h264`, `hevc`, `vp9`...), and the demuxer's.
    var codec: String { withUnsafeBytes(of: info.codec) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) } }
    var container: String { withUnsafeBytes(of: info.container) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) } }
    /// The picture's size as shown: turned by the stream's rotation.
    var shownSize: PixelSize {
        info.rotation == 90 || info.rotation == 270 ? PixelSize(width: Int(info.height), height: Int(info.width))
            : PixelSize(width: Int(info.width), height: Int(info.height))
    }
    var duration: Double? { info.duration >= 0 ? info.duration : nil }

    /// The frame shown at `seconds` (the first at or after it; the last when the video is
    /// shorter), upright, scaled to `size`, and its time.
    func frame(at seconds: Double, size: PixelSize, deadline: Int64) throws -> (pixels: RGB8Pixels, time: Double) {
        try decoded(size) { rgb, time, error, count in
            pk_video_frame_at(handle, seconds, Int32(size.width), Int32(size.height), rgb, time, deadline, error, count) == 0 ? 1 : -1
        }!
    }

    /// The next keyframe, decoded alone, upright and scaled to `size`; nil at the end.
    func nextKeyframe(size: PixelSize, deadline: Int64) throws -> (pixels: RGB8Pixels, time: Double)? {
        try decoded(size) { rgb, time, error, count in
            pk_video_next_keyframe(handle, Int32(size.width), Int32(size.height), rgb, time, deadline, error, count)
        }
    }

    /// What one of the shim's decodes (1: a frame, 0: none left, -1: an error) made at `size`.
    private func decoded(_ size: PixelSize, _ decode: (UnsafeMutablePointer<UInt8>, UnsafeMutablePointer<Double>, UnsafeMutablePointer<CChar>, Int32) -> Int32)
        throws -> (pixels: RGB8Pixels, time: Double)? {
        var rgb = [UInt8](repeating: 0, count: size.width * size.height * 3)
        var time = 0.0
        var error = [CChar](repeating: 0, count: 256)
        let count = Int32(error.count)
        let status = rgb.withUnsafeMutableBufferPointer { pixels in
            error.withUnsafeMutableBufferPointer { decode(pixels.baseAddress!, &time, $0.baseAddress!, count) }
        }
        if status == 0 { return nil }
        guard status == 1 else { throw failure(error) }
        return (RGB8Pixels(width: size.width, height: size.height, hasAlpha: false, bytes: rgb), time)
    }

    /// A C string in `buffer` (up to its NUL).
    static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func sharpness(_ pixels: RGB8Pixels) -> Double {
        pixels.bytes.withUnsafeBufferPointer { pk_video_sharpness($0.baseAddress, Int32(pixels.width), Int32(pixels.height)) }
    }

    private func failure(_ error: [CChar]) -> PipelineError {
        if let refused = bytes.failure { return refused }
        let message = Self.text(error)
        return PipelineError(message.contains("time limit") ? .timeout : .decodeFailed, "video: " + message)
    }
}
