@_exported import TestSupport
import Foundation
import MagickKit
import PipelineKit

/// Images for tests, made with ImageMagick's built-in generators (nothing downloaded). A test
/// target that imports this module has TestSupport too; the engine's tests (PipelineKitTests)
/// import TestSupport alone and make no image.
extension Fixtures {
    /// Encodes an ImageMagick built-in (`plasma:`, `gradient:red-blue`, `rose:`) as `format`.
    public static func image(_ spec: String, width: Int? = nil, height: Int? = nil, format: String = "JPEG",
                             quality: Int = 90) throws -> Data {
        let wand = Wand()
        try wand.readBuiltIn(spec, size: width.flatMap { w in height.map { (w, $0) } })
        return try wand.encode(format: format, quality: quality)
    }

    /// A JPEG of `width` x `height` with detail (a gradient, so it compresses small).
    public static func jpeg(_ width: Int, _ height: Int) throws -> Data {
        try image("gradient:navy-orange", width: width, height: height, format: "JPEG")
    }

    /// A PNG with an alpha channel: transparent with an opaque square in the middle.
    public static func alphaPNG(_ width: Int, _ height: Int) throws -> Data {
        let square = Wand()
        try square.readBuiltIn("canvas:red", size: (width / 2, height / 2))
        return try compose(transparent: (width, height), square: square)
    }

    private static func compose(transparent size: (Int, Int), square: Wand) throws -> Data {
        let canvas = Wand()
        try canvas.readBuiltIn("xc:none", size: size)
        try canvas.composite(square, x: size.0 / 4, y: size.1 / 4)
        return try canvas.encode(format: "PNG")
    }

}

extension Fixtures {
    /// PNGs of ImageMagick's built-in `specs` at `width` x `height` in `dir` (`photo0.png`...), and
    /// a list of their paths (`dir/urls.txt`).
    public static func imageList(in dir: URL, _ specs: [String], width: Int = 600, height: Int = 400) throws -> (list: URL, paths: [String]) {
        var paths: [String] = []
        for (i, spec) in specs.enumerated() {
            let file = dir.appendingPathComponent("photo\(i).png")
            try image(spec, width: width, height: height, format: "PNG").write(to: file)
            paths.append(file.path)
        }
        let list = dir.appendingPathComponent("urls.txt")
        try paths.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        return (list, paths)
    }
}

