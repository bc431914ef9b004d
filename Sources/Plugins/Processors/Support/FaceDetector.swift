import CFaceDetect
import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// A face, or a region a person marked: a box in the pixels of the image it was found in.
public struct FocusBox: Sendable, Equatable {
    public var x: Int, y: Int, width: Int, height: Int
    /// The detector's confidence (0 is its threshold, 1 and more a clear face); 1 for a marked region.
    public var score: Double

    public init(x: Int, y: Int, width: Int, height: Int, score: Double = 1) {
        self.x = x
        self.y = y
        self.width = width
        self.height = height
        self.score = score
    }

    public var area: Int { width * height }

    /// The box in an image `factor` times as large (after a resize of the whole image).
    func scaled(by factor: Double) -> FocusBox { scaled(x: factor, y: factor) }

    /// The box in an image scaled by `sx` across and `sy` down.
    func scaled(x sx: Double, y sy: Double) -> FocusBox {
        FocusBox(x: Int((Double(x) * sx).rounded()), y: Int((Double(y) * sy).rounded()),
                 width: max(1, Int((Double(width) * sx).rounded())), height: max(1, Int((Double(height) * sy).rounded())), score: score)
    }

    /// The box moved by `dx`, `dy`.
    func offset(by dx: Int, _ dy: Int) -> FocusBox {
        FocusBox(x: x + dx, y: y + dy, width: width, height: height, score: score)
    }

    /// The part of the box inside a `size` image, or `nil` when none is.
    func clipped(to size: PixelSize) -> FocusBox? {
        let left = max(0, x), top = max(0, y)
        let right = min(size.width, x + width), bottom = min(size.height, y + height)
        guard right > left, bottom > top else { return nil }
        return FocusBox(x: left, y: top, width: right - left, height: bottom - top, score: score)
    }

    var fact: FactValue {
        .object(["x": .int(x), "y": .int(y), "width": .int(width), "height": .int(height),
                 "score": .number((score * 100).rounded() / 100)])
    }
}

/// What the face detector found in an image, in that image's pixels.
public struct FaceScan: Sendable, Equatable {
    /// The faces, highest score first.
    public var faces: [FocusBox]
    /// The image that was scanned (its size).
    public var image: PixelSize
    /// The size of the reduced (or enlarged) copy the detector scanned.
    public var scanned: PixelSize
    /// The side of the smallest face the scan could find, in the image's pixels.
    public var smallest: Int

    /// The `faces` fact: the boxes and scores, the size of the image they are measured in, what
    /// was scanned and the smallest face it could find.
    public var fact: FactValue {
        .object([
            "detector": .string("dlib-hog"),
            "boxes": .list(faces.map(\.fact)),
            "width": .int(image.width), "height": .int(image.height),
            "scanned": .string("\(scanned.width)x\(scanned.height)"),
            "smallest": .int(smallest),
        ])
    }

    /// The scan a `faces` fact records, when it was made on an image of `size` (by `detect_faces`,
    /// `redact` or a faces crop earlier in the chain, or read back from an item's facts).
    public init?(fact: FactValue?, size: PixelSize) {
        guard case .object(let fields)? = fact, case .int(size.width)? = fields["width"], case .int(size.height)? = fields["height"],
              case .list(let boxes)? = fields["boxes"], case .int(let smallest)? = fields["smallest"],
              let parts = fields["scanned"]?.string?.split(separator: "x").compactMap({ Int($0) }), parts.count == 2 else { return nil }
        let scanned = PixelSize(width: parts[0], height: parts[1])
        faces = boxes.compactMap { box in
            guard case .object(let b) = box, case .int(let x)? = b["x"], case .int(let y)? = b["y"],
                  case .int(let w)? = b["width"], case .int(let h)? = b["height"] else { return nil }
            let score: Double = if case .number(let s)? = b["score"] { s } else if case .int(let s)? = b["score"] { Double(s) } else { 0 }
            return FocusBox(x: x, y: y, width: w, height: h, score: score)
        }
        image = size
        self.scanned = scanned
        self.smallest = smallest
    }

    init(faces: [FocusBox], image: PixelSize, scanned: PixelSize, smallest: Int) {
        self.faces = faces
        self.image = image
        self.scanned = scanned
        self.smallest = smallest
    }
}

/// Finds frontal faces with dlib 19.24's HOG detector (Sources/CFaceDetect), on a copy of the
/// image scaled so that the smallest face asked for is about the detector's 80-pixel window.
///
/// The copy is never more than `megapixels` and never more than twice the image's size (one
/// upsampling, for small images), so the time and memory a scan takes are bounded whatever the
/// image: about 55 ms per million pixels scanned on one core here (docs/stages.md). Faces smaller
/// than the scan can see are not found; the `faces` fact says how small a face it could find
/// (`smallest`). With the defaults, 40-pixel faces are found in images up to about 0.25 MP, and
/// in a W x H image faces from about 80 x sqrt(W x H / 1,000,000) pixels: 280 in a 12 MP photo,
/// a tenth of its short side.
public struct FaceDetector: Sendable, Equatable {
    /// The detector's window: faces of about this many pixels (and larger) are found.
    static let window = 80.0
    /// The most faces kept (highest scores first).
    static let capacity = 64

    /// The most pixels of the scanned copy, in millions.
    public var megapixels: Double
    /// The smallest face to find, in pixels of the source image (as its header gives its size).
    public var minFace: Int
    /// Added to the detector's threshold: above 0 finds fewer, surer faces.
    public var threshold: Double

    public init(megapixels: Double = 1, minFace: Int = 40, threshold: Double = 0) {
        self.megapixels = megapixels
        self.minFace = minFace
        self.threshold = threshold
    }

    /// The options `detect_faces` and the `faces` gravity share.
    static let options: [OptionSpec] = [
        .number("detect_megapixels", default: 1, range: 0.05...64,
                doc: "The most pixels, in millions, of the copy the face detector scans: bounds its time and memory (about 55 ms per million on one core here). In a W x H image it finds faces from about 80 x sqrt(W x H / (detect_megapixels x 1,000,000)) pixels."),
        .int("min_face", default: 40, range: 8...4096,
             doc: "The smallest face to look for, in pixels of the source image: the copy is scaled so such a face fills the detector's 80-pixel window (at most 2x up, and never over detect_megapixels)."),
        .number("face_threshold", default: 0, range: -1...3,
                doc: "Added to the detector's threshold: higher finds fewer, surer faces."),
    ]

    /// Starts reading the detector's model (about 0.2 s, once per process) on a thread of its own,
    /// so that a run's or a service's first scan does not wait for it. Called when a processor
    /// that scans is made.
    static func prepare() { _ = preparing }

    private static let preparing: Void = {
        let thread = Thread { pk_prepare_face_detector() }
        thread.name = "pk-face-model"
        thread.start()
    }()

    init(options: PluginOptions) {
        megapixels = options.number("detect_megapixels") ?? 1
        minFace = options.int("min_face") ?? 40
        threshold = options.number("face_threshold") ?? 0
    }

    /// Bytes a scan needs at most: the grey copy, dlib's own copy, and its HOG features over the
    /// image pyramid (31 floats per 8x8 cell, a pyramid of 5/6 steps: about 7 bytes a pixel),
    /// with room for the detector's score maps.
    var workingMemory: Int { Int(megapixels * 1_000_000) * 16 }

    /// The identifier part for cache keys.
    var identifier: String { "\(megapixels),\(minFace),\(threshold)" }

    /// How much the scanned copy is scaled from an image of `size` whose source was `source`.
    func scale(for size: PixelSize, source: PixelSize?) -> Double {
        let pixels = Double(max(1, size.width)) * Double(max(1, size.height))
        // Image pixels per source pixel, along a side: below 1 when the decoder reduced the image
        // on load. By area, so a source whose header gives it turned (EXIF 5-8) counts the same.
        let reduced = source.map { min(1, (pixels / (Double(max(1, $0.width)) * Double(max(1, $0.height)))).squareRoot()) } ?? 1
        let wanted = Self.window / max(1, Double(minFace) * reduced)
        return min(2, wanted, (megapixels * 1_000_000 / pixels).squareRoot())
    }

    /// The faces an earlier stage recorded for `image` (a `faces` fact made on an image of its
    /// size), or else a scan of it.
    func faces(in image: PipelineImage) throws -> FaceScan {
        try FaceScan(fact: image.facts["faces"], size: image.size) ?? scan(image)
    }

    /// The faces in `image`, in its pixels.
    public func scan(_ image: PipelineImage) throws -> FaceScan {
        let size = image.size
        let scale = scale(for: size, source: image.sourceSize)
        let scanned = PixelSize(width: max(1, Int((Double(size.width) * scale).rounded())),
                                height: max(1, Int((Double(size.height) * scale).rounded())))
        // Scaled straight from the image (no copy of it first: a 50 MP decode is 400 MB in Q16).
        let gray = try image.greyScaled(width: scanned.width, height: scanned.height)
        let found = try Self.detect(gray, size: scanned, threshold: threshold)
        let back = 1 / scale
        let faces = found.compactMap { $0.scaled(by: back).clipped(to: size) }
        return FaceScan(faces: faces, image: size, scanned: scanned, smallest: Int((Self.window * 0.9 * back).rounded()))
    }

    /// dlib's detector on 8-bit grey pixels.
    static func detect(_ gray: [UInt8], size: PixelSize, threshold: Double) throws -> [FocusBox] {
        guard size.width >= 16, size.height >= 16 else { return [] }
        var faces = [pk_face](repeating: pk_face(), count: capacity)
        var message = [CChar](repeating: 0, count: 256)
        let count = gray.withUnsafeBufferPointer { pixels in
            pk_detect_faces(pixels.baseAddress, size.width, size.height, threshold, &faces, capacity, &message, message.count)
        }
        guard count >= 0 else {
            let text = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw PipelineError(.processFailed, "face detection failed: \(text)")
        }
        return faces.prefix(min(count, capacity)).map {
            FocusBox(x: $0.left, y: $0.top, width: $0.width, height: $0.height, score: $0.score)
        }
    }
}
