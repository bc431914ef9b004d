import Foundation
import MagickKit
import PipelineKit

/// What decides where a `faces` or `regions` crop goes: the boxes found in the image about to be
/// cropped, and the rule that found them.
struct Focus {
    /// `regions` (marked by people), `faces` (detected), or `smart` when there were none (the crop
    /// then goes where the detail is).
    let rule: String
    /// The boxes, in the pixels of the image they were found in.
    let boxes: [FocusBox]
    /// Facts to add to the image: `faces` as the detector found them. (The `regions` fact is
    /// carried by the step that crops: see ``MarkedRegions/carry(from:to:_:)``.)
    let facts: ImageFacts

    /// Looks for what `gravity` keeps in `image`. For `regions`, every region people marked in the
    /// source's metadata. For `faces`, the faces they marked (a region a person marked beats the
    /// detector, which then does not run), else the faces the detector finds (a `faces` fact made
    /// by `detect_faces` on an image of this size is used as it is). `nil` for a gravity that does
    /// not look.
    static func find(_ gravity: Gravity, in image: PipelineImage, detector: FaceDetector) throws -> Focus? {
        guard gravity.readsRegions else { return nil }
        let marked = MarkedRegions.of(image)?.regions ?? []
        let kept = gravity == .regions ? marked : marked.filter(\.isFace)
        if !kept.isEmpty { return Focus(rule: "regions", boxes: kept.map(\.box), facts: [:]) }
        guard gravity == .faces else { return Focus(rule: "smart", boxes: [], facts: [:]) }
        let scan = try detector.faces(in: image)
        return Focus(rule: scan.faces.isEmpty ? "smart" : "faces", boxes: scan.faces, facts: ["faces": scan.fact])
    }

    /// The window's top-left corner in an `outer` image (the boxes' image scaled by `factor`).
    ///
    /// Faces are taken largest first while the window can hold all taken so far, so every face is
    /// kept when the window can hold them all, and the largest otherwise. Each box is widened by
    /// `FocusCrop.margin` where the window has room (more above a face, for the hair), and the
    /// window is centred on what it keeps, inside the image.
    func origin(of window: PixelSize, in outer: PixelSize, factor: Double) -> (x: Int, y: Int) {
        let boxes = boxes.map { $0.scaled(by: factor) }.sorted { $0.area > $1.area }
        guard var kept = boxes.first.map(Span.init) else { return (0, 0) }
        for box in boxes.dropFirst() {
            let grown = kept.union(Span(box))
            if grown.width <= Double(window.width), grown.height <= Double(window.height) { kept = grown }
        }
        let padded = kept.padded(within: window)
        func place(_ centre: Double, _ inner: Int, _ outer: Int) -> Int {
            min(max(0, outer - inner), max(0, Int((centre - Double(inner) / 2).rounded())))
        }
        return (place(padded.midX, window.width, outer.width), place(padded.midY, window.height, outer.height))
    }

    /// The `crop` fact: the rule that decided the crop, and the window in the image it was cut from.
    static func cropFact(rule: String, origin: (x: Int, y: Int), window: PixelSize, in outer: PixelSize) -> FactValue {
        .object(["rule": .string(rule), "x": .int(origin.x), "y": .int(origin.y), "width": .int(window.width),
                 "height": .int(window.height), "of_width": .int(outer.width), "of_height": .int(outer.height)])
    }
}

/// A rectangle in floating-point pixels, for placing windows around boxes.
private struct Span {
    var minX: Double, minY: Double, maxX: Double, maxY: Double
    /// The box's share of a margin: what each box grows by, relative to its own size, where there is room.
    static let margin = (side: 0.25, above: 0.45, below: 0.25)

    init(_ box: FocusBox) {
        minX = Double(box.x)
        minY = Double(box.y)
        maxX = Double(box.x + box.width)
        maxY = Double(box.y + box.height)
        size = Double(max(box.width, box.height))
    }

    private init(minX: Double, minY: Double, maxX: Double, maxY: Double, size: Double) {
        self.minX = minX
        self.minY = minY
        self.maxX = maxX
        self.maxY = maxY
        self.size = size
    }

    /// The largest face's side among those spanned (the margin's measure).
    var size: Double
    var width: Double { maxX - minX }
    var height: Double { maxY - minY }
    var midX: Double { (minX + maxX) / 2 }
    var midY: Double { (minY + maxY) / 2 }

    func union(_ other: Span) -> Span {
        Span(minX: min(minX, other.minX), minY: min(minY, other.minY), maxX: max(maxX, other.maxX),
             maxY: max(maxY, other.maxY), size: max(size, other.size))
    }

    /// Grown by the margin, as far as `window` allows (a margin never pushes a face out).
    func padded(within window: PixelSize) -> Span {
        let roomX = max(0, Double(window.width) - width), roomY = max(0, Double(window.height) - height)
        let side = min(size * Self.margin.side, roomX / 2)
        let verticalShare = Self.margin.above + Self.margin.below
        let vertical = min(size * verticalShare, roomY)
        return Span(minX: minX - side, minY: minY - vertical * Self.margin.above / verticalShare,
                    maxX: maxX + side, maxY: maxY + vertical * Self.margin.below / verticalShare, size: size)
    }
}
