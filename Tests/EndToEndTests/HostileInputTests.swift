import Foundation
import PipelineKit
import Testing
import TestImages

/// Hostile files through the real binary: each fails alone with its kind, the good ones are made,
/// and nothing is read, written or deleted outside the output directory (ImageMagick's temporary
/// directory included).
@Suite struct HostileInputTests {
    static let binary = Fixtures.packageRoot.appendingPathComponent(".build/debug/pipelinectl").path

    /// Every file below `root`, relative, sorted.
    static func tree(_ root: URL) -> [String] {
        (FileManager.default.enumerator(atPath: root.path)?.compactMap { $0 as? String } ?? []).sorted()
    }

    @Test func hostileFilesFailAloneAndTouchNothingOutsideTheOutput() async throws {
        let sandbox = try Fixtures.temporaryDirectory("hostile")
        let inputs = sandbox.appendingPathComponent("in"), tmp = sandbox.appendingPathComponent("tmp")
        for dir in [inputs, tmp] { try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true) }
        let victim = inputs.appendingPathComponent("victim.txt")
        try Data("do not delete\n".utf8).write(to: victim)
        let jpeg = try Fixtures.image("logo:")  // a built-in, so the flips below always land on the same bytes
        var flipped = [UInt8](jpeg)
        for i in stride(from: 700, to: flipped.count - 2, by: 97) { flipped[i] ^= 0xFF }
        let files: [(String, Data, String)] = [
            ("good.jpg", jpeg, "ok"),
            // ImageTragick: MVG that would read (and, through ephemeral:, delete) a file.
            ("mvg.jpg", Data("push graphic-context\nviewbox 0 0 640 480\nimage over 0,0 0,0 'ephemeral:\(victim.path)'\npop graphic-context\n".utf8), "unsupported_format"),
            ("msl.jpg", Data("<?xml version=\"1.0\"?>\n<image>\n<read filename=\"\(victim.path)\"/>\n<write filename=\"\(sandbox.path)/pwned.png\"/>\n</image>\n".utf8), "unsupported_format"),
            ("xxe.svg", Data("<?xml version=\"1.0\"?><!DOCTYPE svg [<!ENTITY x SYSTEM \"file://\(victim.path)\">]><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><text>&x;</text></svg>".utf8), "unsupported_format"),
            ("href.svg", Data("<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" width=\"10\" height=\"10\"><image xlink:href=\"msl:\(inputs.path)/msl.jpg\"/></svg>".utf8), "unsupported_format"),
            ("text.jpg", Data("text:\(victim.path)\n".utf8), "not_an_image"),
            ("page.jpg", Data("<html><body>not found</body></html>".utf8), "not_an_image"),
            ("huge.png", Fixtures.pngHeader(width: 100_000, height: 100_000), "too_large"),
            ("truncated.jpg", jpeg.prefix(jpeg.count / 3), "decode_failed"),
            ("flipped.jpg", Data(flipped), "decode_failed"),
            ("empty.jpg", Data(), "decode_failed"),
            ("fine.svg", Data("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"80\" height=\"40\"><rect width=\"80\" height=\"40\" fill=\"red\"/></svg>".utf8), "ok"),
        ]
        for (name, data, _) in files { try data.write(to: inputs.appendingPathComponent(name)) }
        let list = sandbox.appendingPathComponent("list.txt")
        try files.map { inputs.appendingPathComponent($0.0).path }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let pipeline = sandbox.appendingPathComponent("p.yaml")
        try """
            version: 1
            name: hostile
            loader: file
            decoder:
              imagemagick: { allow_svg: true }
            processors:
              - resize: { width: 64 }
            encoder: png
            output:
              dir: \(sandbox.path)/out
              name: "{stem}-{hash8}.{ext}"
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let before = Self.tree(sandbox)
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = tmp.path
        environment["MAGICK_TEMPORARY_PATH"] = tmp.path
        let report = sandbox.appendingPathComponent("out/report.json")
        let result = try await Command.run(Self.binary, ["run", pipeline.path, list.path, "--report", report.path, "--progress", "none"],
                                           environment: environment, directory: sandbox)
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        let json = try Reports.read(report)
        let items = try #require(json["items"] as? [[String: Any]])
        try #require(items.count == files.count)
        for (item, (name, _, expected)) in zip(items, files) {
            let kind = (item["error"] as? [String: Any])?["kind"] as? String ?? "ok"
            #expect(kind == expected, "\(name): \(item["error"] ?? "")")
        }
        // Nothing changed outside the output directory: inputs intact, no file written, temp empty.
        #expect(try Data(contentsOf: victim) == Data("do not delete\n".utf8))
        let after = Self.tree(sandbox).filter { !$0.hasPrefix("out") }
        #expect(after == before, "\(Set(after).symmetricDifference(before))")
        #expect(Self.tree(tmp).isEmpty)
        let outputs = Self.tree(sandbox.appendingPathComponent("out")).filter { !$0.hasPrefix(".pipelinectl") && $0 != "report.json" }
        #expect(outputs.count == 2 && outputs.allSatisfy { $0.hasSuffix(".png") }, "\(outputs)")
    }
}
