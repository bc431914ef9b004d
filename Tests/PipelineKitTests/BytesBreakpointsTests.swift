import Foundation
@testable import PipelineKit
import Testing

/// The width search of breakpoints by bytes, against encoders whose sizes follow known laws (a
/// fake: the search only sees widths and byte counts).
struct BytesBreakpointsTests {
    /// An encoder whose output weighs `bytes(width)`; counts its encodes.
    final class FakeEncoder: @unchecked Sendable {
        let bytes: (Int) -> Int
        var encodes: [Int] = []
        init(_ bytes: @escaping (Int) -> Int) { self.bytes = bytes }
        func encode(_ width: Int) -> BytesBreakpoints.Trial<Int> {
            encodes.append(width)
            return BytesBreakpoints.Trial(width: width, bytes: bytes(width), value: width)
        }
    }

    /// Successive differences of the chosen sizes, without the last (exempt).
    func steps(_ choice: BytesBreakpoints.Choice<Int>) -> [Double] {
        let bytes = choice.chosen.map { Double($0.bytes) }
        return zip(bytes, bytes.dropFirst()).map { $1 - $0 }.dropLast()
    }

    /// How output sizes grow with width: as the area, faster, slower.
    static func size(_ law: String, _ w: Int) -> Int {
        switch law {
        case "area": Int(0.06 * Double(w * w)) + 800
        case "steeper": Int(pow(Double(w), 2.3) * 0.012) + 300
        default: Int(pow(Double(w), 1.6) * 0.9) + 2_000
        }
    }

    @Test(arguments: ["area", "steeper", "gentler"])
    func successiveSizesDifferByTheStep(law: String) {
        let breakpoints = BytesBreakpoints(minWidth: 200, maxWidth: 2000, bytesStep: 20_000, maxImages: 30)
        let encoder = FakeEncoder { Self.size(law, $0) }
        let choice = breakpoints.choose(imageWidth: 4000, elapsed: { 0 }, encode: encoder.encode)
        #expect(choice.chosen.first?.width == 200 && choice.chosen.last?.width == 2000, "\(law)")
        #expect(!choice.capped)
        #expect(choice.chosen.map(\.width) == choice.chosen.map(\.width).sorted(), "\(law): narrowest first")
        for step in steps(choice) { #expect(abs(step - 20_000) <= 0.15 * 20_000, "\(law): a step of \(step)") }
        // The last gap is what is left: at most one and a half steps.
        let last = Double(choice.chosen.last!.bytes - choice.chosen.dropLast().last!.bytes)
        #expect(last > 0 && last < 1.5 * 20_000, "\(law): last gap \(last)")
        // Every encode is an output or a counted trial.
        #expect(encoder.encodes.count == choice.chosen.count + choice.discarded)
    }

    @Test func moreStepsThanMaxImagesWidenTheStep() {
        let breakpoints = BytesBreakpoints(minWidth: 100, maxWidth: 3000, bytesStep: 5_000, maxImages: 6)
        let encoder = FakeEncoder { Int(0.08 * Double($0 * $0)) }
        let choice = breakpoints.choose(imageWidth: 3000, elapsed: { 0 }, encode: encoder.encode)
        #expect(choice.capped)
        #expect(choice.chosen.count == 6)
        let span = Double(choice.chosen.last!.bytes - choice.chosen.first!.bytes)
        #expect(choice.step == Int((span / 5).rounded(.up)))
        for step in steps(choice) { #expect(abs(step - Double(choice.step)) <= 0.15 * Double(choice.step)) }
    }

    @Test func aSpanSmallerThanAStepGivesTheWidestAlone() {
        let breakpoints = BytesBreakpoints(minWidth: 320, maxWidth: 1920, bytesStep: 50_000, maxImages: 10)
        let flat = FakeEncoder { 1_000 + $0 / 10 }  // a flat illustration: barely grows
        let choice = breakpoints.choose(imageWidth: 1920, elapsed: { 0 }, encode: flat.encode)
        #expect(choice.chosen.map(\.width) == [1920])
        #expect(flat.encodes == [1920, 320])
    }

    @Test func neverWiderThanTheImage() {
        let breakpoints = BytesBreakpoints(minWidth: 320, maxWidth: 1920, bytesStep: 10_000, maxImages: 10)
        let small = FakeEncoder { $0 * $0 }
        #expect(breakpoints.choose(imageWidth: 200, elapsed: { 0 }, encode: small.encode).chosen.map(\.width) == [200])
        let medium = FakeEncoder { $0 * $0 / 4 }
        let choice = breakpoints.choose(imageWidth: 800, elapsed: { 0 }, encode: medium.encode)
        #expect(choice.chosen.last?.width == 800)
        #expect(medium.encodes.allSatisfy { $0 <= 800 })
    }

    @Test func maxImagesOfOneIsTheWidest() {
        let breakpoints = BytesBreakpoints(minWidth: 100, maxWidth: 1000, bytesStep: 1_000, maxImages: 1)
        let encoder = FakeEncoder { $0 * $0 }
        #expect(breakpoints.choose(imageWidth: 5000, elapsed: { 0 }, encode: encoder.encode).chosen.map(\.width) == [1000])
        #expect(encoder.encodes == [1000])
    }

    @Test func anEncoderWhoseSizesJumpStillEndsWithGrowingWidths() {
        // Sizes that fall and rise with width (an encoder switching modes): the search must end,
        // keep widths growing and sizes growing, and spend at most six encodes per width.
        let breakpoints = BytesBreakpoints(minWidth: 100, maxWidth: 2000, bytesStep: 15_000, maxImages: 12)
        let jumpy = FakeEncoder { w in Int(0.05 * Double(w * w)) + (w % 7 == 0 ? 30_000 : 0) + (w / 100 % 2) * 9_000 }
        let choice = breakpoints.choose(imageWidth: 2000, elapsed: { 0 }, encode: jumpy.encode)
        let widths = choice.chosen.map(\.width)
        #expect(widths == widths.sorted() && Set(widths).count == widths.count)
        #expect(choice.chosen.count <= 12)
        let sizes = choice.chosen.dropLast().map(\.bytes)
        #expect(sizes == sizes.sorted())
        #expect(jumpy.encodes.count <= 2 + 6 * 11)
    }

    @Test func aSpentBudgetEstimatesEachWidthOnce() {
        let breakpoints = BytesBreakpoints(minWidth: 200, maxWidth: 2000, bytesStep: 20_000, maxImages: 30, trialTime: 0)
        // A law the first estimate misses (a power of 3 where the search assumes the points' own).
        let encoder = FakeEncoder { w in Int(pow(Double(w), 3) / 40_000) + (w > 1000 ? 25_000 : 0) }
        let choice = breakpoints.choose(imageWidth: 2000, elapsed: { 1 }, encode: encoder.encode)
        #expect(choice.budgetSpent)
        // Two encodes at most per width: the first estimate and, before the budget is looked at, none.
        #expect(encoder.encodes.count == choice.chosen.count + choice.discarded)
        #expect(choice.discarded == 0)
    }

    @Test func optionsAreCheckedTogether() throws {
        #expect(throws: PipelineError.self) {
            try BytesBreakpoints(options: PluginOptions(["min_width": .int(900), "max_width": .int(600)]))
        }
        let made = try BytesBreakpoints(options: PluginOptions(["min_width": .int(300), "max_width": .int(600),
                                                                "bytes_step": .int(4096), "max_images": .int(3)]))
        #expect(made == BytesBreakpoints(minWidth: 300, maxWidth: 600, bytesStep: 4096, maxImages: 3))
    }
}
