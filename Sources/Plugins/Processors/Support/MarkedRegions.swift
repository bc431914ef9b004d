import Foundation
import MagickKit
import PipelineKit

/// A region a person marked in the picture (XMP: MWG or IPTC), placed on an image.
public struct MarkedRegion: Sendable, Equatable {
    /// The box in the image's pixels (a marked point is one pixel).
    public var box: FocusBox
    /// `face`, `pet`, `focus`, `barcode` (MWG's types), an IPTC region type (`human`, `animal`...),
    /// or `region`.
    public var kind: String
    public var name: String?
    /// IPTC's role (`cropping`, `mainSubjectArea`...), when given.
    public var role: String?
    /// `mwg` or `iptc`.
    public var standard: String

    /// Whether it marks a person: MWG's `Face`, IPTC's `human`, or a type named `face` or `headshot`.
    public var isFace: Bool { ["face", "human", "headshot"].contains(kind) }

    var fact: FactValue {
        var fields: [String: FactValue] = ["x": .int(box.x), "y": .int(box.y), "width": .int(box.width), "height": .int(box.height),
                                           "type": .string(kind), "standard": .string(standard)]
        if let name { fields["name"] = .string(name) }
        if let role { fields["role"] = .string(role) }
        return .object(fields)
    }
}

/// The regions people marked in an image, in the pixels of the image they are placed on, and
/// what was wrong with the metadata they came from.
///
/// They are read from the source's XMP (``XMPRegions``) the first time a step asks, and recorded
/// in the `regions` fact. Steps that move pixels carry the fact to their output: `crop`, `resize`,
/// `flip`, `flop`, `rotate` by quarter turns and `auto_orient`. After any other step that changes
/// the image's shape (`trim`, `pad`, `border`...), the regions no longer say where anything is:
/// they are then not used, and a warning says why.
public struct MarkedRegions: Sendable, Equatable {
    public var regions: [MarkedRegion]
    /// The size of the image the boxes are measured in.
    public var image: PixelSize
    /// What was wrong: regions that could not be read or lie outside the picture, a packet over
    /// the limits, or regions that no longer fit the image.
    public var warnings: [String]

    public init(regions: [MarkedRegion], image: PixelSize, warnings: [String] = []) {
        self.regions = regions
        self.image = image
        self.warnings = warnings
    }

    /// The `regions` fact: the boxes, the size of the image they are in, and any warnings.
    public var fact: FactValue {
        var fields: [String: FactValue] = ["width": .int(image.width), "height": .int(image.height), "boxes": .list(regions.map(\.fact))]
        if !warnings.isEmpty { fields["warnings"] = .list(warnings.map(FactValue.string)) }
        return .object(fields)
    }

    /// The regions a `regions` fact records.
    public init?(fact: FactValue?) {
        guard case .object(let fields)? = fact, case .int(let width)? = fields["width"], case .int(let height)? = fields["height"],
              case .list(let boxes)? = fields["boxes"] else { return nil }
        image = PixelSize(width: width, height: height)
        if case .list(let notes)? = fields["warnings"] { warnings = notes.compactMap(\.string) } else { warnings = [] }
        regions = boxes.compactMap { value in
            guard case .object(let b) = value, case .int(let x)? = b["x"], case .int(let y)? = b["y"],
                  case .int(let w)? = b["width"], case .int(let h)? = b["height"] else { return nil }
            return MarkedRegion(box: FocusBox(x: x, y: y, width: w, height: h), kind: b["type"]?.string ?? "region",
                                name: b["name"]?.string, role: b["role"]?.string, standard: b["standard"]?.string ?? "mwg")
        }
    }

    /// The marked regions of `image`: those a step before recorded (scaled, when the image was
    /// only scaled since), or else those its source's XMP holds. `nil` when it has none and
    /// nothing was wrong.
    public static func of(_ image: PipelineImage) -> MarkedRegions? {
        if let recorded = MarkedRegions(fact: image.facts["regions"]) {
            if recorded.image == image.size { return recorded }
            if sameShape(recorded.image, image.size) {
                let sx = Double(image.width) / Double(max(1, recorded.image.width))
                let sy = Double(image.height) / Double(max(1, recorded.image.height))
                return recorded.mapped(to: image.size) { $0.scaled(x: sx, y: sy) }
            }
            return MarkedRegions(regions: [], image: image.size, warnings: recorded.warnings + [
                "the regions were placed on a \(recorded.image) image, and a step since made it \(image.size) in a way "
                    + "that does not carry them (only crop, resize, flip, flop, rotate and auto_orient do): they are not used",
            ])
        }
        guard let metadata = image.metadata, let xmp = metadata.xmp, XMPRegions.mayHoldRegions(xmp) else { return nil }
        let read = XMPRegions.read(xmp, orientation: metadata.orientation, stored: image.sourceSize)
        guard !read.regions.isEmpty || !read.warnings.isEmpty else { return nil }
        // The pixels show the whole source, upright or as stored; anything else was cut before.
        if let source = image.sourceSize, !sameShape(source, image.size),
           !sameShape(PixelSize(width: source.height, height: source.width), image.size) {
            return MarkedRegions(regions: [], image: image.size, warnings: read.warnings + [
                "the source is \(source), and a step before this one made it \(image.size) without carrying its regions: they are not used",
            ])
        }
        let orientation = metadata.upright ? 1 : metadata.orientation
        let regions = read.regions.map { region -> MarkedRegion in
            let box = FocusBox(fractions: Orientation.stored((region.x, region.y, region.width, region.height), orientation), of: image.size)
            let placed = box.clipped(to: image.size)
                ?? FocusBox(x: min(box.x, image.width - 1), y: min(box.y, image.height - 1), width: 1, height: 1)
            return MarkedRegion(box: placed, kind: region.kind, name: region.name, role: region.role, standard: region.standard)
        }
        return MarkedRegions(regions: regions, image: image.size, warnings: read.warnings)
    }

    /// Whether two sizes have the same shape, but for the rounding of a scale (a reduced decode).
    static func sameShape(_ a: PixelSize, _ b: PixelSize) -> Bool {
        guard a.width > 0, a.height > 0, b.width > 0, b.height > 0 else { return false }
        let ratio = (Double(a.width) / Double(a.height)) / (Double(b.width) / Double(b.height))
        return abs(ratio - 1) <= 1 / Double(min(a.width, a.height, b.width, b.height)) + 0.002
    }

    /// The regions on an image of `size`, each box moved by `transform` (`nil` drops it: it left
    /// the image).
    func mapped(to size: PixelSize, _ transform: (FocusBox) -> FocusBox?) -> MarkedRegions {
        MarkedRegions(regions: regions.compactMap { region in
            guard let box = transform(region.box).flatMap({ $0.clipped(to: size) }) else { return nil }
            var moved = region
            moved.box = box
            return moved
        }, image: size, warnings: warnings)
    }

    /// Records in `output` the regions of `input` after a step that moved its pixels as
    /// `transform` moves a box; nothing when `input` has none.
    public static func carry(from input: PipelineImage, to output: inout PipelineImage, _ transform: (FocusBox) -> FocusBox?) {
        guard input.facts["regions"] != nil || input.metadata?.xmp != nil, let regions = of(input) else { return }
        output.facts["regions"] = regions.mapped(to: output.size, transform).fact
    }

    /// ``carry(from:to:_:)`` for a quarter turn or mirror: `orientation` is the EXIF orientation
    /// whose correction the step applied (6: a quarter turn clockwise, 2: a mirror left to right...).
    public static func carry(from input: PipelineImage, to output: inout PipelineImage, orientation: Int) {
        let size = input.size, out = output.size
        carry(from: input, to: &output) { box in
            var turned = FocusBox(fractions: Orientation.upright(box.fractions(of: size), orientation), of: out)
            turned.score = box.score
            return turned
        }
    }
}

extension FocusBox {
    /// A box given in fractions of a `size` image, in its pixels (rounded to the nearest, at
    /// least one pixel each way: a quarter turn and back gives the box it started from).
    init(fractions box: (x: Double, y: Double, width: Double, height: Double), of size: PixelSize) {
        let w = Double(size.width), h = Double(size.height)
        self.init(x: Int((box.x * w).rounded()), y: Int((box.y * h).rounded()),
                  width: max(1, Int((box.width * w).rounded())), height: max(1, Int((box.height * h).rounded())))
    }

    /// The box in fractions of a `size` image.
    func fractions(of size: PixelSize) -> (x: Double, y: Double, width: Double, height: Double) {
        let w = Double(max(1, size.width)), h = Double(max(1, size.height))
        return (Double(x) / w, Double(y) / h, Double(width) / w, Double(height) / h)
    }
}
