import CMagickWand
import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing

/// Every input `make fuzz` found a crash, leak or hang with (Fixtures/fuzz/TARGET/), replayed
/// through the same target: each must return. Under the sanitizers of `make fuzz` they are also
/// checked for memory errors; here they are checked for crashes and traps, on every `make test`.
@Suite struct FuzzRegressionTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/fuzz")

    static func inputs() -> [(target: String, file: URL)] {
        let targets = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
        return targets.sorted().flatMap { target in
            ((try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(target).path)) ?? []).sorted().map {
                (target, root.appendingPathComponent(target).appendingPathComponent($0))
            }
        }
    }

    @Test func everyFoundInputReturns() throws {
        let inputs = Self.inputs()
        #expect(!inputs.isEmpty, "no fuzz regressions found under \(Self.root.path)")
        for (target, file) in inputs {
            let run = try #require(FuzzTargets.all[target], "no fuzz target named \(target) (\(file.lastPathComponent))")
            run(try Data(contentsOf: file))
        }
    }

    /// The HEIF reader's first finding: libheif's message for an empty input was read after the
    /// context that owns it was freed. The reason must still be libheif's.
    @Test func heifEmptyInputKeepsLibheifsReason() {
        #expect(throws: PipelineError.self) { _ = try HEIFReducer.File(Data()) }
        do { _ = try HEIFReducer.File(Data()) } catch let error as PipelineError {
            #expect(error.kind == .decodeFailed && error.message.hasPrefix("HEIF: ") && error.message.count > 6, "\(error)")
        } catch { Issue.record("\(error)") }
    }

    /// The HEIF reader's second finding: a grid whose 'dimg' reference points at itself sent
    /// libheif 1.15 into endless recursion (a stack overflow, or with its tile threads a failed
    /// thread start and an uncaught exception): the process ended. It is now refused before libheif decodes.
    @Test func heifImageDerivedFromItselfIsRefused() throws {
        let found = try Data(contentsOf: Self.root.appendingPathComponent("heif/grid-derived-from-itself-recursed-in-libheif"))
        #expect(throws: PipelineError(.decodeFailed, "HEIF: image 2 is derived from itself (its 'dimg' references form a cycle)")) {
            _ = try HEIFReducer.File(found)
        }
        // The same by construction: a meta box whose primary item 7 is derived from 9, and 9 from 7.
        func box(_ type: String, _ body: [UInt8]) -> [UInt8] {
            let size = UInt32(8 + body.count)
            return [UInt8(size >> 24), UInt8(size >> 16 & 255), UInt8(size >> 8 & 255), UInt8(size & 255)] + Array(type.utf8) + body
        }
        let iref = box("iref", [0, 0, 0, 0] + box("dimg", [0, 7, 0, 1, 0, 9]) + box("dimg", [0, 9, 0, 1, 0, 7]))
        let file = box("ftyp", Array("heic".utf8) + [0, 0, 0, 0] + Array("mif1heic".utf8))
            + box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 7]) + iref)
        #expect(HEIFReferences.problem(Data(file)) == "HEIF: image 7 is derived from itself (its 'dimg' references form a cycle)")
        // A grid of two tiles is fine.
        let grid = box("ftyp", Array("heic".utf8) + [0, 0, 0, 0]) + box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 1])
            + box("iref", [0, 0, 0, 0] + box("dimg", [0, 1, 0, 2, 0, 2, 0, 3])))
        #expect(HEIFReferences.problem(Data(grid)) == nil)
    }

    /// The PNG whole-image reader's finding: pixels taller than ImageMagick's height limit
    /// (policy.xml, 16KP on Debian) made ImageMagick 6 assert inside ConstituteImage, ending the
    /// process. Making an image past the limits now fails as too_large.
    @Test func pixelsOverImageMagicksLimitsFailAsTooLarge() throws {
        let height = Int(Magick.resourceLimit(HeightResource)) + 1
        #expect(throws: PipelineError.self) {
            _ = try Wand.fromPixels([UInt8](repeating: 0, count: 2 * height * 3), width: 2, height: height, hasAlpha: false)
        }
        do {
            _ = try Wand.fromPixels([UInt8](repeating: 0, count: 2 * height * 3), width: 2, height: height, hasAlpha: false)
        } catch let error as PipelineError {
            #expect(error.kind == .tooLarge && error.message.hasPrefix("2x\(height) is over ImageMagick's limits in policy.xml"), "\(error)")
        }
        let found = try Data(contentsOf: Self.root.appendingPathComponent("png/tall-png-over-imagemagick-height-limit-asserted"))
        #expect(throws: PipelineError.self) { _ = try PNGReducer.decodeWhole(found, failOn: .none) }
    }
}
