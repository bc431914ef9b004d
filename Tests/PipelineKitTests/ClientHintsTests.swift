import Foundation
@testable import PipelineKit
import Testing

/// `Breakpoints.choose`: how Client Hints pick among declared widths, and which headers an
/// answer must vary on. Garbage never fails a request: it counts as no hint.
@Suite struct ClientHintsTests {
    let breakpoints = Breakpoints(widths: [640, 160, 320, 1280, 320], param: "w", defaultWidth: 300)

    func choose(_ headers: [String: String]) -> Breakpoints.Choice {
        breakpoints.choose { name in headers.first { $0.key.lowercased() == name.lowercased() }?.value }
    }

    @Test func declaredWidthsAreSortedAndTheDefaultIsOneOfThem() {
        #expect(breakpoints.widths == [160, 320, 640, 1280])
        #expect(breakpoints.defaultWidth == 320)
        #expect(Breakpoints(widths: [100, 200], param: "w").defaultWidth == 200)
    }

    @Test func theLayoutWidthIsSnappedUpToADeclaredWidth() {
        #expect(choose(["Sec-CH-Width": "300"]).width == 320)
        #expect(choose(["Sec-CH-Width": "320"]).width == 320)
        #expect(choose(["Sec-CH-Width": "321"]).width == 640)
        #expect(choose(["Sec-CH-Width": "1"]).width == 160)
        #expect(choose(["Sec-CH-Width": "99999"]).width == 1280)  // above every breakpoint: the largest
        #expect(choose(["Sec-CH-Width": "600.5"]).width == 640)
        // The older header, when the new one is absent; the new one wins when both come (Chromium sends both).
        #expect(choose(["Width": "700"]).width == 1280)
        #expect(choose(["Sec-CH-Width": "150", "Width": "700"]).width == 160)
    }

    @Test func theViewportTimesTheDPRWhenNoLayoutWidthCame() {
        #expect(choose(["Sec-CH-Viewport-Width": "300", "Sec-CH-DPR": "2"]).width == 640)
        #expect(choose(["Viewport-Width": "300", "DPR": "1"]).width == 320)
        // DPR alone scales the default width.
        #expect(choose(["Sec-CH-DPR": "2"]).width == 640)
        #expect(choose(["Sec-CH-DPR": "1"]) == Breakpoints.Choice(width: 320, read: Breakpoints.headerNames.filter { $0 != "DPR" }, hinted: false))
    }

    @Test func saveDataTakesTheWidthBelow() {
        #expect(choose(["Sec-CH-Width": "600", "Save-Data": "on"]).width == 320)
        #expect(choose(["Sec-CH-Width": "100", "Save-Data": "on"]).width == 160)  // nothing below the smallest
        #expect(choose(["Sec-CH-Width": "600", "Save-Data": "off"]).width == 640)
    }

    @Test func garbageZeroNegativeAndHugeHintsNeverFail() {
        for value in ["", "abc", "0", "-5", "NaN", "inf", "1e400", "12px", " ", "3,4"] {
            let choice = choose(["Sec-CH-Width": value, "Sec-CH-DPR": value, "Sec-CH-Viewport-Width": value])
            #expect(choice.width == 320, "\(value)")
            #expect(!choice.hinted, "\(value)")
        }
        #expect(choose(["Sec-CH-Width": "1e300"]).width == 1280)
        #expect(choose(["Sec-CH-Viewport-Width": "1000", "Sec-CH-DPR": "1e300"]).width == 1280)  // DPR capped
    }

    @Test func theAnswerVariesOnExactlyTheHintsRead() {
        #expect(choose(["Sec-CH-Width": "300"]).read == ["Sec-CH-Width", "Save-Data"])
        #expect(choose(["Width": "300"]).read == ["Sec-CH-Width", "Width", "Save-Data"])
        #expect(choose(["Sec-CH-Viewport-Width": "300"]).read
            == ["Sec-CH-Width", "Width", "Sec-CH-Viewport-Width", "Sec-CH-DPR", "DPR", "Save-Data"])
        #expect(choose([:]).read == Breakpoints.headerNames)
    }
}

/// `CacheTags`: the tags of an answer, and the header lines that carry them.
@Suite struct CacheTagsTests {
    @Test func tagsNameTheSourceByHashThePipelineAndTheVariant() {
        let tags = CacheTags()
        let all = tags.tags(source: "https://img.example.com/a b.jpg?x=1", pipeline: "thumbs", variant: "small")
        #expect(all.count == 3)
        #expect(all[0].hasPrefix("pk-s-") && all[0].count == 5 + 24)
        #expect(all[1] == "pk-p-thumbs" && all[2] == "pk-v-thumbs.small")
        #expect(tags.source("https://img.example.com/a b.jpg?x=1") == all[0])
        #expect(tags.source("https://img.example.com/a b.jpg?x=2") != all[0])
        #expect(tags.tags(source: "a", pipeline: "my pipe,1", variant: nil) == [tags.source("a"), "pk-p-my_pipe_1"])
        let lines = tags.headerLines(["a", "b"])
        #expect(lines.map(\.0) == ["Surrogate-Key", "Cache-Tag"] && lines.map(\.1) == ["a b", "a,b"])
    }
}
