import Foundation
import MagickKit
import PipelineKit
import Testing

/// Inputs a pipeline file's tests name by ImageMagick built-in (`plasma:`, `rose:`) are the same
/// image every run, so a test that passed once passes again on another machine.
@Suite struct BuiltInInputTests {
    @Test func plasmaIsTheSameImageEveryTime() throws {
        let imaging = MagickTestImaging()
        let first = try imaging.makeInput("plasma:", size: PixelSize(width: 96, height: 64))
        for _ in 0..<3 {
            #expect(try imaging.makeInput("plasma:", size: PixelSize(width: 96, height: 64)) == first,
                    "plasma: gave another image: a pipeline test on it would pass or fail by chance")
        }
    }

    @Test func fixturesMadeFromPlasmaAreTheSameEveryTime() throws {
        let wand = Wand(), again = Wand()
        try wand.readBuiltIn("plasma:", size: (40, 30))
        try again.readBuiltIn("plasma:", size: (40, 30))
        #expect(try wand.encode(format: "PNG") == again.encode(format: "PNG"), "readBuiltIn(\"plasma:\") is not repeatable")
    }
}
