import Foundation
import MagickKit
import PipelineKit

/// `detect_faces`: finds frontal faces with dlib's HOG detector and adds them to the item's facts
/// (`faces`: boxes and scores in the pixels of the image it was given) without changing a pixel.
///
/// A later `crop` or `resize` with `gravity: faces` on an image of the same size uses these faces
/// instead of looking again. The scan works on a copy of at most `detect_megapixels` million pixels
/// (see ``FaceDetector``), so its cost does not grow with the source.
public struct DetectFaces: ImageProcessing {
    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "detect_faces",
            summary: "Finds frontal faces (dlib's HOG detector, offline) and adds their boxes and scores to the facts, without changing the image.",
            options: FaceDetector.options),
        make: { options in
            FaceDetector.prepare()
            return DetectFaces(detector: FaceDetector(options: options))
        })

    /// How faces are looked for.
    public let detector: FaceDetector

    /// Only reads: the resize after it still sets how far the decoder may reduce.
    public var onlyReads: Bool { true }

    public var identifier: String { "detect_faces(\(detector.identifier))" }

    /// The scan's copy and features, admitted with the decode.
    public var workingMemory: Int { detector.workingMemory }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        var out = image
        out.facts["faces"] = try detector.scan(image).fact
        return out
    }
}
