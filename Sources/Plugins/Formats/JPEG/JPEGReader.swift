import Foundation
import MagickKit
import PipelineKit

/// JPEG: the frame header (size, components, progressive) read in place. Colour JPEGs are scaled
/// by libjpeg and averaged while read (``JPEGReducer``); the rest go to ImageMagick, which asks
/// libjpeg for the same DCT scale (`jpeg:size`).
struct JPEGReader: FormatReader {
    var format: ImageFormat { .jpeg }
    let input: EncodedInput
    /// The whole file: for a local file left open, read when asked (in pieces by the pool's idle
    /// threads when there are some, ``EncodedInput/data``), which the decode does on a CPU worker:
    /// read while the header was read, a 22 MB JPEG took 15-20 ms of one core before its parts
    /// could start on both.
    var data: Data { input.data }
    var byteCount: Int { input.byteCount }
    let size: PixelSize
    /// `nil` when the frame header is not in the first 256 KB (ImageMagick read the size).
    let frame: JPEGFormat.Frame?

    /// `head`: the file's first bytes (all of it when `input` is in memory). A frame header past
    /// them (a large EXIF or ICC block first) is looked for in the whole file, read then and kept.
    init(_ input: EncodedInput, head: Data) throws {
        if let found = JPEGFormat.frame(head) {
            self.input = input
            frame = found
        } else {
            let whole = input.data
            self.input = .memory(whole)
            frame = JPEGFormat.frame(whole)
        }
        size = try frame?.size ?? ImageMagickDecoder.pingedSize(self.input.data, format: .jpeg)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        let scale = settings.shrinkOnLoad ? JPEGReducer.plan(size, hint: hint, headroom: settings.headroom) : nil
        // ImageMagick asks for width/d x height/d: libjpeg then decodes at exactly 1/d, the scale
        // libvips uses (at least twice the target: see JPEGReducer.plan).
        let jpegSize = scale.map { "\(size.width / $0.denominator)x\(size.height / $0.denominator)" }
        if let frame, frame.components == 3 || frame.components == 1, let scale {
            let (input, progressive) = (self.input, frame.progressive)
            return ReadPlan(reduced: {
                guard let reduced = try JPEGReducer.decode(input.data, plan: scale, toSRGB: settings.toSRGB, autoOrient: settings.autoOrient,
                                                           failOn: settings.failOn) else { return nil }
                if settings.toSRGB, case .wand(let wand) = reduced.pixels { try wand.convertToSRGB() }
                return reduced
            }, jpegSize: jpegSize,
            estimatedMemory: JPEGReducer.estimatedMemory(size, plan: scale, progressive: progressive) + byteCount)
        }
        let d = scale?.denominator ?? 1
        let decoded = PixelSize(width: (size.width + d - 1) / d, height: (size.height + d - 1) / d)
        // A progressive JPEG keeps every DCT coefficient of the full-size image until the end.
        let coefficients = frame?.progressive == true ? size.width * size.height * 3 : 0
        return ReadPlan(jpegSize: jpegSize, estimatedMemory: magickMemory(decoded: decoded, codecBytesPerPixel: 1, extra: coefficients))
    }
}
