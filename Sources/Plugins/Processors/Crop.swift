import Foundation
import MagickKit
import PipelineKit

/// `crop`: cuts a rectangle (`x`, `y`, `width`, `height`), a `width` x `height` window placed by
/// `gravity`, or the largest window of an `aspect` ratio placed by `gravity` (`smart` included).
public struct Crop: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "crop",
            summary: "Cuts a rectangle, a window placed by gravity, or the largest window of an aspect ratio.",
            options: [
                .int("width", range: 1...65535, doc: "Window width in pixels (clipped to the image)."),
                .int("height", range: 1...65535, doc: "Window height in pixels (clipped to the image)."),
                .int("x", range: 0...65535, doc: "Left edge; with `y`, places the window exactly instead of by gravity."),
                .int("y", range: 0...65535, doc: "Top edge; with `x`, places the window exactly instead of by gravity."),
                .string("aspect", doc: "Aspect ratio `W:H` (e.g. `16:9`, `1:1`): the largest window of that shape.")
                    .example("16:9"),
                .oneOf("gravity", Gravity.names, default: "centre",
                       doc: "Where the window is placed when `x`/`y` are not given: the centre, a compass point, smart (the most detailed region), faces (around the faces people marked in the picture's XMP, else those the detector finds, largest first; smart when there are none) or regions (around every region people marked in the XMP, MWG or IPTC; smart when there are none)."),
            ] + FaceDetector.options,
            exclusive: [["aspect", "width"], ["aspect", "height"], ["aspect", "x"], ["aspect", "y"]]),
        make: { options in try Crop(options: options) })

    let width: Int?, height: Int?, x: Int?, y: Int?
    let aspect: Double?
    let gravity: Gravity
    let detector: FaceDetector
    public let identifier: String

    init(options: PluginOptions) throws {
        width = options.int("width")
        height = options.int("height")
        x = options.int("x")
        y = options.int("y")
        gravity = Gravity(rawValue: options.string("gravity")!)!
        detector = FaceDetector(options: options)
        if gravity == .faces { FaceDetector.prepare() }
        if let text = options.string("aspect") {
            let parts = text.split(separator: ":").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard parts.count == 2, parts[0] > 0, parts[1] > 0 else {
                throw PipelineError(.invalidOption, "'aspect' must be W:H with positive numbers, like 16:9; got '\(text)'")
            }
            aspect = parts[0] / parts[1]
        } else {
            aspect = nil
        }
        guard aspect != nil || width != nil || height != nil else {
            throw PipelineError(.invalidOption, "set 'aspect', or 'width' and/or 'height'")
        }
        guard (x == nil) == (y == nil) else { throw PipelineError(.invalidOption, "set both 'x' and 'y', or neither") }
        identifier = "crop(\(options.canonical))"
    }

    /// The face scan's copy and features (`gravity: faces`), admitted with the decode.
    public var workingMemory: Int { gravity == .faces ? detector.workingMemory : 0 }

    /// `faces` and `regions` read the regions people marked in the source's XMP.
    public var wantsSourceMetadata: Bool { gravity.readsRegions }

    /// The window's size for an image of `size` (clipped to the image, and to what lies right of
    /// and below `x`/`y` when they are set).
    func window(for size: PixelSize) -> PixelSize {
        if let aspect {
            let w = Double(size.width), h = Double(size.height)
            return w / h > aspect
                ? PixelSize(width: max(1, Int((h * aspect).rounded())), height: size.height)
                : PixelSize(width: size.width, height: max(1, Int((w / aspect).rounded())))
        }
        var w = min(width ?? size.width, size.width), h = min(height ?? size.height, size.height)
        if let x, let y {
            w = min(w, max(0, size.width - x))
            h = min(h, max(0, size.height - y))
        }
        return PixelSize(width: w, height: h)
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        let size = PixelSize(width: image.width, height: image.height)
        if let x, let y, x >= image.width || y >= image.height {
            throw PipelineError(.processFailed, "the crop origin \(x),\(y) is outside the \(size) image")
        }
        let window = window(for: size)
        if window == size { return image }
        if let x, let y {
            var cut = try image.transformed { try $0.crop(x: x, y: y, width: window.width, height: window.height) }
            MarkedRegions.carry(from: image, to: &cut) { $0.offset(by: -x, -y) }
            return cut
        }
        return try Self.place(window, in: image, gravity: gravity, detector: detector)
    }

    /// `image` cut to a `window` placed by `gravity`; a gravity that looks at the image records
    /// what it found (`faces`, `regions`) and the rule that placed the window (`crop`) in facts.
    static func place(_ window: PixelSize, in image: PipelineImage, gravity: Gravity, detector: FaceDetector) throws -> PipelineImage {
        let size = image.size
        let focus = try Focus.find(gravity, in: image, detector: detector)
        var facts = focus?.facts ?? [:]
        var origin = (x: 0, y: 0)
        var cropped: PipelineImage
        if let focus, !focus.boxes.isEmpty {
            origin = focus.origin(of: window, in: size, factor: 1)
            cropped = try image.transformed { [origin] in try $0.crop(x: origin.x, y: origin.y, width: window.width, height: window.height) }
        } else {
            cropped = try image.transformed { wand in
                origin = try gravity.cropOrigin(window, in: wand)
                try wand.crop(x: origin.x, y: origin.y, width: window.width, height: window.height)
            }
        }
        MarkedRegions.carry(from: image, to: &cropped) { [origin] in $0.offset(by: -origin.x, -origin.y) }
        if gravity.looks {
            let rule = focus.map { $0.boxes.isEmpty ? gravity.rule : $0.rule } ?? gravity.rule
            facts["crop"] = Focus.cropFact(rule: rule, origin: origin, window: window, in: size)
        }
        cropped.facts.merge(facts) { _, found in found }
        return cropped
    }
}
