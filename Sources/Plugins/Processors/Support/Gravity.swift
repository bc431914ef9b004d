import Foundation
import MagickKit
import PipelineKit

/// Where a window is placed inside a larger area (a crop inside an image, an image on a padded
/// canvas, a watermark on an image): the centre, one of the eight compass points, `smart` (where
/// the detail is; see ``SmartCrop``), `faces` (around the faces people marked in the picture's
/// metadata, else those dlib's detector finds, else where the detail is; see ``FaceDetector``) or
/// `regions` (around every region people marked, else where the detail is; see ``MarkedRegions``).
public enum Gravity: String, Sendable, CaseIterable {
    case centre, center, north, northeast, east, southeast, south, southwest, west, northwest, smart, faces, regions

    /// The option values, for specs.
    public static let names = allCases.map(\.rawValue)
    /// The values that look at no image (not `smart`, `faces` or `regions`), for placements that have none to look at.
    public static let placementNames = allCases.filter { !$0.looks }.map(\.rawValue)

    /// Whether the placement depends on what is in the image (`smart`, `faces`, `regions`).
    public var looks: Bool { self == .smart || self == .faces || self == .regions }

    /// Whether the placement reads the regions people marked in the source's metadata.
    var readsRegions: Bool { self == .faces || self == .regions }

    /// The rule a crop by this gravity reports (`crop.rule` in facts) when no face or region decided it:
    /// `smart`, or `centre` for the centre and the compass points' names.
    var rule: String { looks ? "smart" : self == .center ? "centre" : rawValue }

    /// The offset of an `inner` box placed inside `outer` by this gravity, `margin` pixels in from
    /// the edges it touches. `smart`, `faces` and `regions` place like the centre (callers that can look at the
    /// image use ``SmartCrop`` and ``Focus`` instead).
    public func offset(inner: PixelSize, outer: PixelSize, margin: Int = 0) -> (x: Int, y: Int) {
        let freeX = outer.width - inner.width, freeY = outer.height - inner.height
        let name = rawValue
        let x = name.hasSuffix("west") ? margin : name.hasSuffix("east") ? freeX - margin : freeX / 2
        let y = name.hasPrefix("north") ? margin : name.hasPrefix("south") ? freeY - margin : freeY / 2
        return (x, y)
    }

    /// The top-left corner of a `window` cropped from `image` by this gravity (by detail for
    /// `smart`, and for `faces` and `regions` when none was found).
    func cropOrigin(_ window: PixelSize, in image: Wand) throws -> (x: Int, y: Int) {
        let outer = PixelSize(width: image.width, height: image.height)
        if looks, window != outer {
            return try SmartCrop.origin(of: window, in: image)
        }
        let (x, y) = offset(inner: window, outer: outer)
        return (max(0, x), max(0, y))
    }
}
