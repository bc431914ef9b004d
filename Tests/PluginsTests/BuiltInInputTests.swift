import Foundation
import MagickKit
import PipelineKit
import Testing

/// Inputs a pipeline file's tests name by ImageMagick built-in (`plasma:`, `rose:`) are the same
/// image every run, so a test that passed once passes again on another machine.
@Suite struct BuiltInInputTests {
    /// The pixels, as PPM: a PNG also carries its creation time, which changes with the second.
    static func pixels(_ png: Data) throws -> Data {
        let wand = Wand()
        try wand.read(png, format: "PNG")
        return try wand.encode(format: "PPM")
    }

    @Test func plasmaIsTheSameImageEveryTime() throws {
        let imaging = MagickTestImaging()
        let first = try Self.pixels(try imaging.makeInput("plasma:", size: PixelSize(width: 96, height: 64)))
        for _ in 0..<3 {
            #expect(try Self.pixels(try imaging.makeInput("plasma:", size: PixelSize(width: 96, height: 64))) == first,
                    "plasma: gave another image: a pipeline test on it would pass or fail by chance")
        }
    }

    @Test func fixturesMadeFromPlasmaAreTheSameEveryTime() throws {
        let wand = Wand(), again = Wand()
        try wand.readBuiltIn("plasma:", size: (40, 30))
        try again.readBuiltIn("plasma:", size: (40, 30))
        #expect(try wand.encode(format: "PPM") == again.encode(format: "PPM"), "readBuiltIn(\"plasma:\") is not repeatable")
    }
}
