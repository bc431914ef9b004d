import Foundation
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
}
