import Foundation
import MagickKit
import Synchronization
@testable import PipelineKit
import Testing
import TestImages

/// Colour options are checked at `validate` by ``ColorSyntax``, which must agree with ImageMagick:
/// each string here goes through both, and the verdicts must match.
@Suite struct ColorSyntaxTests {
    static let strings = [
        // names, in any case and spacing
        "white", "White", "LightBlue", "light blue", " white", "white ", "grey50", "gray 50", "GrEy50", "grey100",
        "none", "transparent", "fuchsia", "snow1", "navyblue", "opaque",
        "not-a-colour", "light-blue", "light_blue", "grey101", "white1", "red5", "ff0000", "0xffffff", "blah",
        // hex
        "#fff", "#FFF", "#ffff", "#ffffff", "#ff8800cc", "#fffffffff", "#ffffffffffff", "#ffffffffffffffff",
        "#" + String(repeating: "f", count: 24), "#" + String(repeating: "f", count: 32),
        "#" + String(repeating: "f", count: 48), "#" + String(repeating: "f", count: 64),
        "#", "#ff", "#fffff", "#ggg", "# fff", "#fffz", " #fff",
        "#" + String(repeating: "f", count: 15), "#" + String(repeating: "f", count: 20),
        "#" + String(repeating: "f", count: 30), "#" + String(repeating: "f", count: 36),
        // functional
        "rgb(1,2,3)", "rgb(1, 2, 3)", "RGB(1,2,3)", "rgb(10%,20%,30%)", "rgb(1,2)", "rgb(1,2,3", "rgb(1,2,3)x",
        "rgba(0,0,0,0.5)", "RGBA(1,2,3,0.5)", "srgb(1,2,3)", "srgba(1,2,3,0.5)", "sRGBa(1,2,3)", "hsl(120,50%,50%)",
        "hsla(120,50%,50%,0.3)", "hsb(1,2,3)", "hsva(1,2,3,4)", "hwb(1,2,3)", "cmyk(1,2,3,4)", "cmyka(1,2,3,4,5)",
        "gray(50%)", "graya(1,1)", "lab(50,10,10)", "xyz(1,2,3)", "rec709ycbcr(1,2,3)", "lineargray(5)",
        "rgb (1,2,3)", " rgb(1,2,3)", "rgb( 1,2,3)", "rgb(.5,1,1)", "rgb(+1)", "rgb(1e)", "rgb(1,,2)",
        "device-rgb(1,2,3)", "DEVICE-RGB(1)", "device-cmyk(1,2,3,4)", "icc-color(rgb,1,2,3)",
        "rgb(foo)", "rgb()", "rgb(", "rgb(,1,2)", "rgb( ,1)", "rgb(-)", "rgb(.)", "rgb(--1)", "rgb(%)", "rgb(a,b,c)",
        "rgbaa(1)", "rgba (1,2,3,4)", "cmyka (1)", "a(1)", "(1,2,3)", "blah(1,2,3)", "white(1)", "device-(1)",
        "device-srgba(1,2,3,4)", "icc-color(x, 1)", "icc-color(foo)", "r g b(1,2,3)", "hsla", "rgb",
    ]

    /// (An empty string is left out: `xc:` with nothing names ImageMagick's default colour, and a
    /// pipeline's empty `color:` is refused as empty.)
    @Test func verdictsAgreeWithImageMagick() async throws {
        var disagreements: [String] = []
        for text in Self.strings {
            let ours = ColorSyntax.problem(text) == nil
            let theirs = try await Command.run("/usr/bin/convert", ["xc:" + text, "null:"]).status == 0
            if ours != theirs { disagreements.append("'\(text)': ours \(ours), ImageMagick \(theirs)") }
        }
        #expect(disagreements.isEmpty, "\(disagreements)")
        #expect(ColorSyntax.problem("") != nil)
    }

    @Test func theNamesAreImageMagicksNames() async throws {
        let listed = try await Command.run("/usr/bin/convert", ["-list", "color"])
        // Each colour's line: NAME, its value (`srgb(240,248,255)`), where it complies.
        let names = Set(listed.stdout.split(separator: "\n").compactMap { line -> String? in
            let fields = line.split(separator: " ")
            return fields.count >= 2 && fields[1].contains("(") ? fields[0].lowercased() : nil
        })
        #expect(names.count > 600)
        #expect(names == ColorSyntax.names, "differ: \(names.symmetricDifference(ColorSyntax.names).sorted())")
    }

    @Test func aNearNameIsSuggested() {
        #expect(ColorSyntax.problem("whte")?.contains("did you mean 'white'?") == true)
        #expect(ColorSyntax.problem("#ff")?.contains("got 2") == true)
    }

    /// ImageMagick's XPM writer walks its colour-name list without the lock its name lookups take,
    /// and the two share one iterator: a lookup beside such a write once missed `fractal` (CI,
    /// "unrecognized color `fractal'"). MagickKit holds one lock for both; with it, no lookup of a
    /// known name made beside XPM writes fails (without it, a run here missed dozens).
    @Test func namesAreFoundBesideWritesThatNameColours() throws {
        let misses = Mutex<[String]>([]), rose = try Fixtures.image("rose:", format: "PNG")
        // Every name in turn, so that each is looked for deep in the list (a hit moves it first).
        let names = ColorSyntax.names.sorted(), writing = Atomic(true)
        DispatchQueue.concurrentPerform(iterations: 2) { lane in
            let wand = Wand()
            if lane == 0 { _ = try? wand.read(rose, format: "PNG") }
            if lane == 0 {
                for _ in 0..<40 { _ = try? wand.clone().encode(format: "XPM") }
                writing.store(false, ordering: .releasing)
            } else {
                var looked = 0
                while writing.load(ordering: .acquiring) || looked < names.count {
                    let name = names[looked % names.count]
                    if !Wand.isColor(name) { misses.withLock { $0.append(name) } }
                    looked += 1
                }
            }
        }
        #expect(misses.withLock { $0 } == [])
    }
}
