import Foundation
import MagickKit
import PipelineKit

/// Where a window is placed inside a larger area (a crop inside an image, an image on a padded
/// canvas, a watermark on an image): the centre, one of the eight compass points, `smart` (where
/// the detail is; see ``SmartCrop``) or `faces` (around the faces dlib's detector finds, or where
/// the detail is when it finds none; see ``FaceDetector``).
public enum Gravity: String, Sendable, CaseIterable {
    case centre, center, north, northeast, east, southeast, south, southwest, west, northwest, smart, faces

    /// The option values, for specs.
    public static let names = allCases.map(\.rawValue)
    /// The values that look at no image (not `smart` or `faces`), for placements that have none to look at.
    public static let placementNames = allCases.filter { !$0.looks }.map(\.rawValue)

    /// Whether the placement depends on what is in the image (`smart`, `faces`).
    public var looks: Bool { self == .smart || self == .faces }

    /// The rule a crop by this gravity reports (`crop.rule` in facts) when no face decided it:
    /// `smart`, or `centre` for the centre and the compass points' names.
    var rule: String { looks ? "smart" : self == .center ? "centre" : rawValue }

    /// The offset of an `inner` box placed inside `outer` by this gravity, `margin` pixels in from
    /// the edges it touches. `smart` and `faces` place like the centre (callers that can look at the
    /// image use ``SmartCrop`` and ``Focus`` instead).
    public func offset(inner: PixelSize, outer: PixelSize, margin: Int = 0) -> (x: Int, y: Int) {
        let freeX = outer.width - inner.width, freeY = outer.height - inner.height
        let name = rawValue
        let x = name.hasSuffix("west") ? margin : name.hasSuffix("east") ? freeX - margin : freeX / 2
        let y = name.hasPrefix("north") ? margin : name.hasPrefix("south") ? freeY - margin : freeY / 2
        return (x, y)
    }

    /// The top-left corner of a `window` cropped from `image` by this gravity (by detail for
    /// `smart`, and for `faces` when no face was found).
    func cropOrigin(_ window: PixelSize, in image: Wand) throws -> (x: Int, y: Int) {
        let outer = PixelSize(width: image.width, height: image.height)
        if looks, window != outer {
            return try SmartCrop.origin(of: window, in: image)
        }
        let (x, y) = offset(inner: window, outer: outer)
        return (max(0, x), max(0, y))
    }
}
