import CMagickWand
import Foundation
import PipelineKit

/// `resize`: scales to fit inside a box, to fill it (cover, then centre crop), or to stretch to it.
public struct Resize: ImageProcessing {
    public enum Mode: String, Sendable, CaseIterable { case fit, fill, stretch }

    static let filters: [String: FilterTypes] = [
        "lanczos": LanczosFilter, "mitchell": MitchellFilter, "triangle": TriangleFilter,
        "catrom": CatromFilter, "box": BoxFilter, "point": PointFilter, "cubic": CubicFilter,
    ]

    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "resize",
            summary: "Scales to fit a box, fill it (cover and centre crop) or stretch to it.",
            options: [
                .int("width", range: 1...16384, doc: "Box width in pixels; omit to follow the aspect ratio."),
                .int("height", range: 1...16384, doc: "Box height in pixels; omit to follow the aspect ratio."),
                .oneOf("mode", Mode.allCases.map(\.rawValue), default: "fit",
                       doc: "fit: inside the box; fill: cover the box and crop the centre; stretch: exactly the box."),
                .bool("upscale", default: false, doc: "Enlarge images smaller than the box."),
                .oneOf("filter", filters.keys.sorted(), default: "lanczos", doc: "Resampling filter."),
                .bool("pre_shrink", default: true,
                      doc: "When shrinking by 3x or more, first average pixel blocks down to twice the target, then apply the filter (as libvips does): several times faster on large images, visually the same."),
            ]),
        make: { options in try Resize(options: options) })

    public let width: Int?
    public let height: Int?
    public let mode: Mode
    public let upscale: Bool
    public let filter: String
    public let preShrink: Bool

    init(options: PluginOptions) throws {
        width = options.int("width")
        height = options.int("height")
        mode = Mode(rawValue: options.string("mode")!)!
        upscale = options.bool("upscale")!
        filter = options.string("filter")!
        preShrink = options.bool("pre_shrink")!
        guard width != nil || height != nil else {
            throw PipelineError("invalid_option", "set 'width', 'height' or both")
        }
    }

    public var identifier: String {
        "resize(\(width.map(String.init) ?? "auto")x\(height.map(String.init) ?? "auto"),\(mode.rawValue),upscale=\(upscale),\(filter)\(preShrink ? "" : ",exact"))"
    }

    public var decodeHint: PixelSize? {
        PixelSize(width: width ?? 1, height: height ?? 1)
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
        case (.stretch, let bw?, let bh?):
            if !upscale, Int(bw) > width || Int(bh) > height {
                return (PixelSize(width: min(Int(bw), width), height: min(Int(bh), height)), nil)
            }
            return (PixelSize(width: Int(bw), height: Int(bh)), nil)
        case (_, nil, nil):
            return (PixelSize(width: width, height: height), nil)
        }
    }

    public func process(_ image: PipelineKit.Image) throws -> PipelineKit.Image {
        let (scaled, crop) = plan(for: image.width, image.height)
        if scaled.width == image.width, scaled.height == image.height, crop == nil { return image }
        let filterType = Self.filters[filter] ?? LanczosFilter
        return try image.transformed { wand in
            if scaled.width != image.width || scaled.height != image.height {
                // A windowed filter's cost grows with the shrink factor (its support widens with
                // it); a box average to twice the target first keeps the filter's work small.
                if preShrink, scaled.width * 3 <= image.width, scaled.height * 3 <= image.height {
                    try wand.scale(width: scaled.width * 2, height: scaled.height * 2)
                }
                try wand.resize(width: scaled.width, height: scaled.height, filter: filterType)
            }
            if let crop, crop.width < scaled.width || crop.height < scaled.height {
                try wand.crop(x: (scaled.width - crop.width) / 2, y: (scaled.height - crop.height) / 2,
                              width: crop.width, height: crop.height)
            }
        }
    }
}
