import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// `resize`: scales to fit inside a box, to fill it (cover, then crop by gravity), or to stretch to it.
public struct Resize: ImageProcessing {
    public enum Mode: String, Sendable, CaseIterable { case fit, fill, stretch, fill_down }

    static let filters: [String: FilterTypes] = [
        "lanczos": LanczosFilter, "mitchell": MitchellFilter, "triangle": TriangleFilter,
        "catrom": CatromFilter, "box": BoxFilter, "point": PointFilter, "cubic": CubicFilter,
    ]

    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "resize",
            summary: "Scales to fit a box, fill it (cover, then crop by gravity, smart, faces and marked regions included) or stretch to it.",
            options: [
                .int("width", range: 1...16384, doc: "Box width in pixels; omit to follow the aspect ratio."),
                .int("height", range: 1...16384, doc: "Box height in pixels; omit to follow the aspect ratio."),
                .oneOf("mode", Mode.allCases.map(\.rawValue), default: "fit",
                       doc: "fit: inside the box; fill: cover the box, then crop by gravity (without upscale, a source that would have to be enlarged to cover the box is not: it keeps its size, cropped only where it exceeds the box, so a 400x225 source stays 400x225 in a 1200x630 box); stretch: exactly the box; fill_down: like fill, but an image smaller than the box is only cropped to the box's aspect ratio, never enlarged."),
                .oneOf("gravity", Gravity.names, default: "centre",
                       doc: "Which part a fill crop keeps: the centre, a compass point, smart (the most detailed region) faces (every face the window can hold, else the largest, with a margin: faces people marked in the picture's XMP, else those the detector finds; smart when there are none) or regions (every region people marked in the XMP, MWG or IPTC, the same way; smart when there are none). See Every stage in the guides."),
                .number("dpr", default: 1, range: 1...8, doc: "Device pixel ratio: width and height are multiplied by it (2 makes a 200px box 400px)."),
                .bool("upscale", default: false, doc: "Enlarge images smaller than the box."),
                .oneOf("filter", filters.keys.sorted(), default: "lanczos", doc: "Resampling filter."),
                .bool("pre_shrink", default: true,
                      doc: "When shrinking by 6x or more, first average pixel blocks down to at least three times the target, then apply the filter: several times faster on large images, visually the same."),
            ] + FaceDetector.options,
            advice: { options, written in
                // fill without upscale leaves a small source smaller than the box: say so, unless
                // the file chose upscale itself.
                guard options.string("mode") == "fill", !written.contains("upscale"),
                      let width = options.int("width"), let height = options.int("height") else { return nil }
                return "a source smaller than \(width)x\(height) is not enlarged (upscale is off), so it comes out smaller "
                    + "than the box, not cropped to it; set upscale: true to always fill the box, mode: fill_down to crop "
                    + "small sources to its shape, or upscale: false to keep this and silence the warning"
            }),
        make: { options in try Resize(options: options) })

    public let width: Int?
    public let height: Int?
    public let mode: Mode
    public let upscale: Bool
    public let filter: String
    public let preShrink: Bool
    public let gravity: Gravity
    public let dpr: Double
    /// How `gravity: faces` looks for faces.
    public let detector: FaceDetector

    init(options: PluginOptions) throws {
        let ratio = options.number("dpr") ?? 1
        dpr = ratio
        width = options.int("width").map { Int((Double($0) * ratio).rounded()) }
        height = options.int("height").map { Int((Double($0) * ratio).rounded()) }
        gravity = Gravity(rawValue: options.string("gravity") ?? "centre") ?? .centre
        mode = Mode(rawValue: options.string("mode")!)!
        upscale = options.bool("upscale")!
        filter = options.string("filter")!
        preShrink = options.bool("pre_shrink")!
        detector = FaceDetector(options: options)
        if gravity == .faces { FaceDetector.prepare() }
        guard width != nil || height != nil else {
            throw PipelineError(.invalidOption, "set 'width', 'height' or both")
        }
    }

    public var identifier: String {
        let faces = gravity == .faces ? "(\(detector.identifier))" : ""
        let place = [.fill, .fill_down].contains(mode) && gravity != .centre && gravity != .center ? "," + gravity.rawValue + faces : ""
        return "resize(\(width.map(String.init) ?? "auto")x\(height.map(String.init) ?? "auto"),\(mode.rawValue)\(place),upscale=\(upscale),\(filter)\(preShrink ? "" : ",exact"))"
    }

    /// The face scan's copy and features (`gravity: faces`), admitted with the decode.
    public var workingMemory: Int { gravity == .faces && [.fill, .fill_down].contains(mode) ? detector.workingMemory : 0 }

    /// A fill by `faces` or `regions` reads the regions people marked in the source's XMP.
    public var wantsSourceMetadata: Bool { gravity.readsRegions && [.fill, .fill_down].contains(mode) }

    public var decodeHint: PixelSize? {
        PixelSize(width: width ?? 1, height: height ?? 1)
    }

    /// In fit mode with both sides set, the image is scaled by the smaller ratio: only the side
    /// that limits it has to reach the box.
    public var decodeHintFits: Bool { mode == .fit && width != nil && height != nil }

    /// How many times the target a block average before the filter leaves it, at least (here and
    /// in a PNG's decode). A block blurs what the filter would keep: averaged to twice the target,
    /// as libvips does, a 5120x2880 PNG wallpaper fitted to 512 read 53.8 dB against Lanczos on
    /// every pixel and a 1080x1920 one 55.0; to three times or more (the decoder's averages kept
    /// in 16 bits), 58.8 both. GIF and HEIF decodes keep twice: their thumbnails were already 7-8
    /// dB closer than vipsthumbnail's, and three times cost AVIF about 10% of its time.
    static let boxHeadroom = 3

    /// The side of the pixel blocks averaged before the filter when shrinking `source` to `target`:
    /// the smaller axis's shrink over ``boxHeadroom``, rounded down, or `nil` when that is under 2.
    static func preShrinkBlock(from source: PixelSize, to target: PixelSize) -> Int? {
        let shrink = min(Double(source.width) / Double(max(1, target.width)), Double(source.height) / Double(max(1, target.height)))
        let block = Int(shrink / Double(boxHeadroom))
        return block >= 2 ? block : nil
    }

    /// The size the image is scaled to, and the crop (for `fill`) that follows.
    func plan(for width: Int, _ height: Int) -> (scaled: PixelSize, crop: PixelSize?) {
        let w = Double(width), h = Double(height)
        let boxW = self.width.map(Double.init), boxH = self.height.map(Double.init)
        func size(_ scale: Double) -> PixelSize {
            PixelSize(width: max(1, Int((w * scale).rounded())), height: max(1, Int((h * scale).rounded())))
        }
        switch (mode, boxW, boxH) {
        case (_, let bw?, nil):
            return (size(upscale ? bw / w : min(1, bw / w)), nil)
        case (_, nil, let bh?):
            return (size(upscale ? bh / h : min(1, bh / h)), nil)
        case (.fit, let bw?, let bh?):
            let scale = min(bw / w, bh / h)
            return (size(upscale ? scale : min(1, scale)), nil)
        case (.fill, let bw?, let bh?):
            var scale = max(bw / w, bh / h)
            if !upscale { scale = min(1, scale) }
            let scaled = PixelSize(width: max(1, Int((w * scale).rounded(.up))), height: max(1, Int((h * scale).rounded(.up))))
            let crop = PixelSize(width: min(Int(bw), scaled.width), height: min(Int(bh), scaled.height))
            return (scaled, crop)
        case (.fill_down, let bw?, let bh?):
            let scale = max(bw / w, bh / h)
            if scale <= 1 || upscale {
                let scaled = PixelSize(width: max(1, Int((w * scale).rounded(.up))), height: max(1, Int((h * scale).rounded(.up))))
                return (scaled, PixelSize(width: min(Int(bw), scaled.width), height: min(Int(bh), scaled.height)))
            }
            // Smaller than the box: keep the pixels, crop to the box's aspect ratio.
            let ratio = bw / bh
            let crop = w / h > ratio
                ? PixelSize(width: max(1, Int((h * ratio).rounded())), height: height)
                : PixelSize(width: width, height: max(1, Int((w / ratio).rounded())))
            return (PixelSize(width: width, height: height), crop)
        case (.stretch, let bw?, let bh?):
            if !upscale, Int(bw) > width || Int(bh) > height {
                return (PixelSize(width: min(Int(bw), width), height: min(Int(bh), height)), nil)
            }
            return (PixelSize(width: Int(bw), height: Int(bh)), nil)
        case (_, nil, nil):
            return (PixelSize(width: width, height: height), nil)
        }
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        let (scaled, crop) = plan(for: image.width, image.height)
        if scaled.width == image.width, scaled.height == image.height, crop == nil { return image }
        let cropping = crop.map { $0.width < scaled.width || $0.height < scaled.height } ?? false
        // Faces are found in the image as it comes (more pixels than the scaled one), and the
        // window is placed around them in the scaled image.
        let focus = cropping ? try Focus.find(gravity, in: image, detector: detector) : nil
        var placed: (x: Int, y: Int)?
        if let focus, let crop, !focus.boxes.isEmpty {
            placed = focus.origin(of: crop, in: scaled, factor: Double(scaled.width) / Double(image.width))
        }
        var resized = try resized(image, scaled: scaled, crop: crop, placed: placed)
        let sx = Double(scaled.width) / Double(image.width), sy = Double(scaled.height) / Double(image.height)
        let origin = cropping ? resized.origin : (x: 0, y: 0)
        MarkedRegions.carry(from: image, to: &resized.image) { $0.scaled(x: sx, y: sy).offset(by: -origin.x, -origin.y) }
        if cropping, gravity.looks, let crop {
            resized.image.facts.merge(focus?.facts ?? [:]) { _, found in found }
            let rule = placed != nil ? focus?.rule ?? gravity.rule : gravity.rule
            resized.image.facts["crop"] = Focus.cropFact(rule: rule, origin: resized.origin, window: crop, in: scaled)
        }
        return resized.image
    }

    /// `image` scaled to `scaled`, then cut to `crop` at `placed` (or where ``gravity`` places it),
    /// and the window's top-left corner.
    func resized(_ image: PipelineImage, scaled: PixelSize, crop: PixelSize?, placed: (x: Int, y: Int)?) throws
        -> (image: PipelineImage, origin: (x: Int, y: Int)) {
        let origin = placed ?? crop.map { gravity.offset(inner: $0, outer: scaled) } ?? (0, 0)
        if let pixels = image.rgb8, let resized = resized8(pixels, scaled: scaled, crop: crop, placed: placed) {
            return (image.derived(pixels: resized), (max(0, origin.x), max(0, origin.y)))
        }
        if let pixels = image.rgb16, let resized = resized16(pixels, scaled: scaled, crop: crop, placed: placed) {
            return (image.derived(pixels: resized), (max(0, origin.x), max(0, origin.y)))
        }
        let filterType = Self.filters[filter] ?? LanczosFilter
        var cut = (x: 0, y: 0)
        let made = try image.transformed { wand in
            if scaled.width != image.width || scaled.height != image.height {
                // A windowed filter's cost grows with the shrink factor (its support widens with
                // it); a box average first keeps the filter's work small. The box is a whole number
                // of pixels (a third of the shrink, rounded down: ``boxHeadroom``), so the filter
                // still has at least three times the target to work from: a box of a fractional
                // width blurs and aliases fine detail (37 dB instead of 47 on a grass texture).
                if preShrink, let block = Self.preShrinkBlock(from: PixelSize(width: image.width, height: image.height), to: scaled) {
                    try wand.scale(width: max(scaled.width, image.width / block), height: max(scaled.height, image.height / block))
                }
                // Lanczos (the default) in our own single-precision passes where the image is
                // RGB or grey; every other filter and colour space in ImageMagick's resize.
                let resampled = try filter == "lanczos" && Resampler.resize(wand, width: scaled.width, height: scaled.height)
                if !resampled {
                    try wand.resize(width: scaled.width, height: scaled.height, filter: filterType)
                }
            }
            if let crop, crop.width < scaled.width || crop.height < scaled.height {
                cut = try placed ?? gravity.cropOrigin(crop, in: wand)
                try wand.crop(x: cut.x, y: cut.y, width: crop.width, height: crop.height)
            }
        }
        return (made, cut)
    }

    /// The resize and crop of 8-bit pixels without a wand (Lanczos, after a block average as the
    /// wand's path makes one, a crop by a compass gravity), or `nil` for the wand's path: the same
    /// weights as there (``Resampler``), so the same picture, rounded to 8 bits once instead of twice.
    func resized8(_ pixels: RGB8Pixels, scaled: PixelSize, crop: PixelSize?, placed: (x: Int, y: Int)? = nil) -> RGB8Pixels? {
        let size = PixelSize(width: pixels.width, height: pixels.height)
        let crops = crop.map { $0.width < scaled.width || $0.height < scaled.height } ?? false
        guard filter == "lanczos", !(crops && gravity.looks && placed == nil) else { return nil }
        var out = pixels
        if preShrink, let block = Self.preShrinkBlock(from: size, to: scaled) {
            // The wand's path scales to whole blocks' size with fractional spans at the far edge;
            // here a partial last block is averaged over the pixels it has, which stretches the
            // picture by the missing fraction: smaller blocks until that moves the edge by at most
            // a twentieth of an output pixel, or none (the filter then reads every pixel).
            let shrink = min(Double(size.width) / Double(max(1, scaled.width)), Double(size.height) / Double(max(1, scaled.height)))
            if let fitting = (2...block).reversed().first(where: { BoxReducer.edgeShift(size, block: $0, shrink: shrink) <= 0.05 }) {
                out = pixels.boxReduced(by: fitting)
            }
        }
        if scaled != PixelSize(width: out.width, height: out.height) {
            out = Resampler.resize(out, width: scaled.width, height: scaled.height)
        }
        if crops, let crop {
            let (x, y) = placed ?? gravity.offset(inner: crop, outer: scaled)
            out = out.cropped(x: max(0, x), y: max(0, y), width: crop.width, height: crop.height)
        }
        return out
    }
}

extension Resize {
    /// The Lanczos resize and crop of 16-bit pixels to 8-bit ones without a wand, as
    /// ``resized8(_:scaled:crop:placed:)`` does for 8-bit pixels, or `nil` for the wand's path
    /// (another filter, a smart crop, or a shrink that a block average would go before).
    func resized16(_ pixels: RGB16Pixels, scaled: PixelSize, crop: PixelSize?, placed: (x: Int, y: Int)? = nil) -> RGB8Pixels? {
        let size = PixelSize(width: pixels.width, height: pixels.height)
        let crops = crop.map { $0.width < scaled.width || $0.height < scaled.height } ?? false
        guard filter == "lanczos", !(crops && gravity.looks && placed == nil),
              !(preShrink && Self.preShrinkBlock(from: size, to: scaled) != nil) else { return nil }
        var out = scaled == size
            ? RGB8Pixels(rounding: pixels.samples, width: size.width, height: size.height, hasAlpha: pixels.hasAlpha)
            : Resampler.resize(pixels, width: scaled.width, height: scaled.height)
        if crops, let crop {
            let (x, y) = placed ?? gravity.offset(inner: crop, outer: scaled)
            out = out.cropped(x: max(0, x), y: max(0, y), width: crop.width, height: crop.height)
        }
        return out
    }
}

extension RGB8Pixels {
    /// 16-bit `samples` rounded to 8 bits (as ImageMagick exports them: the nearest of 0...255).
    convenience init(rounding samples: [UInt16], width: Int, height: Int, hasAlpha: Bool) {
        self.init(width: width, height: height, hasAlpha: hasAlpha,
                  bytes: samples.map { UInt8((UInt32($0) * 255 + 32_767) / 65_535) })
    }

    /// Averages of `block` x `block` pixels (``BoxReducer``; a partial block at the right or
    /// bottom edge averages the pixels it has).
    func boxReduced(by block: Int) -> RGB8Pixels {
        let reducer = BoxReducer(width: width, height: height, factor: block, alpha: hasAlpha)
        let rowLength = width * channels
        let reduced = bytes.withUnsafeBufferPointer { bytes in
            // `reduce` throws only what the feed throws, and this feed does not.
            try! reducer.reduce(feeding: { y, take in take(UnsafeBufferPointer(rebasing: bytes[(y * rowLength)..<((y + 1) * rowLength)])) })
        }
        return RGB8Pixels(width: reducer.outWidth, height: reducer.outHeight, hasAlpha: hasAlpha, bytes: reduced)
    }

    /// The `width` x `height` window at `x`, `y` (inside the image).
    func cropped(x: Int, y: Int, width: Int, height: Int) -> RGB8Pixels {
        let n = channels, rowLength = width * n
        var out = [UInt8](repeating: 0, count: rowLength * height)
        bytes.withUnsafeBufferPointer { source in
            out.withUnsafeMutableBufferPointer { out in
                for row in 0..<height {
                    (out.baseAddress! + row * rowLength).update(from: source.baseAddress! + ((y + row) * self.width + x) * n, count: rowLength)
                }
            }
        }
        return RGB8Pixels(width: width, height: height, hasAlpha: hasAlpha, bytes: out)
    }
}
