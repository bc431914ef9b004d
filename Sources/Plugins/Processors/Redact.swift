import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// `redact`: pixelates (or blurs) every face dlib's detector finds, and the faces people marked in
/// the picture's XMP (or every region they marked, with `marked: all`), before an image is
/// published, so that the face cannot be read back.
///
/// Each face's box grows by `margin` (more above, for the hair) and is then pixelated in blocks of
/// `block` times the face's size, or blurred with a Gaussian of sigma three quarters of a block.
/// Neither may be weaker than blocks of 0.3 of the face: at a tenth, OpenCV's Haar cascades still
/// found every one of the 54 faces of the test set, at 0.15 46, at 0.3 and above none (nor did
/// dlib's HOG detector, which lost them from 0.15). The tests check both detectors.
/// Faces come from a `detect_faces` earlier in the chain on an image of this size, or from a scan
/// of its own (``FaceDetector``); marked regions from ``MarkedRegions``. The facts keep the faces
/// found (`faces`), the marked regions (`regions`) and how many areas were redacted (`redacted`).
public struct Redact: ImageProcessing {
    public enum Mode: String, Sendable, CaseIterable { case pixelate, blur }
    /// Which marked regions are redacted besides the detected faces.
    public enum Marked: String, Sendable, CaseIterable { case faces, all, none }

    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "redact",
            summary: "Pixelates or blurs every face the detector finds or people marked, strongly enough that it cannot be found again.",
            options: [
                .oneOf("mode", Mode.allCases.map(\.rawValue), default: "pixelate", doc: "pixelate: blocks of one colour; blur: a Gaussian blur of the same strength."),
                .number("block", default: 0.34, range: 0.3...1,
                        doc: "The strength: pixel blocks of this share of the face's size (at least 0.3: weaker, OpenCV's face cascades still find pixelated faces); a blur's sigma is three quarters of a block."),
                .number("margin", default: 0.3, range: 0...2,
                        doc: "How far past the detector's box (eyebrows to chin) the redaction reaches, as a share of the face's size; twice as far above, for the forehead and hair."),
                .oneOf("marked", Marked.allCases.map(\.rawValue), default: "faces",
                       doc: "Which regions people marked in the picture's XMP (MWG or IPTC) are redacted as well as the faces the detector finds: faces (MWG Face, IPTC human), all, or none."),
            ] + FaceDetector.options),
        make: { options in Redact(options: options) })

    public let mode: Mode
    public let block: Double
    public let margin: Double
    public let marked: Marked
    public let detector: FaceDetector

    init(options: PluginOptions) {
        mode = Mode(rawValue: options.string("mode") ?? "pixelate") ?? .pixelate
        block = max(0.3, options.number("block") ?? 0.34)
        margin = options.number("margin") ?? 0.3
        marked = Marked(rawValue: options.string("marked") ?? "faces") ?? .faces
        detector = FaceDetector(options: options)
        FaceDetector.prepare()
    }

    public var identifier: String {
        "redact(\(mode.rawValue),\(block),\(margin),\(detector.identifier)" + (marked == .faces ? "" : ",marked=\(marked.rawValue)") + ")"
    }

    /// Marked regions are read from the source's XMP.
    public var wantsSourceMetadata: Bool { marked != .none }

    /// The scan's copy and features, admitted with the decode.
    public var workingMemory: Int { detector.workingMemory }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        let scan = try detector.faces(in: image)
        let regions = marked == .none ? nil : MarkedRegions.of(image)
        let chosen = (regions?.regions ?? []).filter { marked == .all || $0.isFace }.map(\.box)
        let boxes = scan.faces + chosen
        var out = image
        if !boxes.isEmpty {
            let areas = boxes.compactMap { area(around: $0, in: image.size) }
            out = try image.transformed { wand in
                for (box, side) in areas { try redact(box, faceSide: side, in: wand) }
            }
        }
        out.facts["faces"] = scan.fact
        if let regions { out.facts["regions"] = regions.fact }
        out.facts["redacted"] = .int(boxes.count)
        return out
    }

    /// The face's box grown by the margin (twice as much above), inside the image, with the face's size.
    func area(around face: FocusBox, in size: PixelSize) -> (FocusBox, Int)? {
        let side = max(face.width, face.height)
        let grow = Int((Double(side) * margin).rounded())
        let grown = FocusBox(x: face.x - grow, y: face.y - 2 * grow, width: face.width + 2 * grow, height: face.height + 3 * grow)
        return grown.clipped(to: size).map { ($0, side) }
    }

    /// Pixelates or blurs `box` of `wand` in place.
    func redact(_ box: FocusBox, faceSide: Int, in wand: Wand) throws {
        let cell = max(2, Int((Double(faceSide) * block).rounded(.up)))
        let region = wand.clone()
        try region.crop(x: box.x, y: box.y, width: box.width, height: box.height)
        switch mode {
        case .pixelate:
            // Averages of cell x cell blocks, each drawn as one colour.
            try region.scale(width: max(1, (box.width + cell - 1) / cell), height: max(1, (box.height + cell - 1) / cell))
            try region.resize(width: box.width, height: box.height, filter: PointFilter)
        case .blur:
            try region.blur(radius: 0, sigma: 0.75 * Double(cell))
        }
        try wand.replace(with: region, x: box.x, y: box.y)
    }
}
