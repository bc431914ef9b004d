import Foundation
import MagickKit
import PipelineKit

/// SVG: its row in ``FormatTable`` (allowed by the decoder's `allow_svg`, not by `formats`), its
/// reader, and its fuzz target.
enum SVGFormat {
    static let entry = FormatEntry(name: nil, formats: [.svg], byDefault: false,
                                   reader: { _, loaded, _ in SVGReader(try loaded.wholeData()) },
                                   fuzzTargets: ["svg": fuzz])

    /// The SVG screen (what an allowed SVG must not contain) and its size reader; the rendering
    /// itself is ImageMagick's.
    @Sendable static func fuzz(_ data: Data) {
        _ = try? SVGScreen.check(data)
        _ = SVGScreen.declaredSize(data)
    }
}

/// SVG (when `allow_svg` accepts it, after ``SVGScreen`` refused anything that is not
/// self-contained): the size it declares; rendered by ImageMagick's own renderer.
struct SVGReader: FormatReader {
    var format: ImageFormat { .svg }
    let data: Data
    let size: PixelSize

    init(_ data: Data) {
        self.data = data
        size = SVGScreen.declaredSize(data)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan { ReadPlan(estimatedMemory: magickMemory()) }

    /// ImageMagick's own renderer (MSVG): the SVG coder would hand the file to an external
    /// program. The renderer's problems are ``SVGScreen/render(_:into:)``'s to judge (the refused
    /// delegate is one and is not damage).
    func magickRead(into wand: Wand, maxFrames: Int?) throws -> Damage? {
        try SVGScreen.render(data, into: wand)
        return nil
    }

    /// Nothing: an SVG has no EXIF, profile or orientation to read (ImageMagick would render it to ping).
    func headerFacts(facts: Bool, metadata: Bool, upright: (Int) -> Bool) -> HeaderFacts { HeaderFacts() }
}
