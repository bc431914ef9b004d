import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestImages
import CLinux

/// What the process counts: each decoded item's bytes are sniffed once and its header read once,
/// by the reader of its format family (HEIF included: libheif opens the file once, for the size,
/// the memory estimate and the decode); and what MagickKit asks of ImageMagick it gives back
/// (heap bytes in use, from glibc's `mallinfo2`). The counters are the whole process's, so this
/// suite runs alone, one test at a time (`make test` gives it a process of its own).
@Suite(.serialized) struct ProcessCountTests {
    func counts() -> (sniffs: Int, headers: Int, heif: Int) {
        (FormatSniffer.count.load(ordering: .relaxed), HeaderReads.count.load(ordering: .relaxed),
         HEIFReducer.File.opened.load(ordering: .relaxed))
    }

    @Test func oneSniffAndOneHeaderReadPerDecodedItem() async throws {
        let dir = try Fixtures.temporaryDirectory("reads")
        let server = try await TestServer.start()
        var lines: [String] = []
        for (index, format) in ["JPEG", "PNG", "WEBP", "HEIC", "AVIF", "GIF", "TIFF", "BMP"].enumerated() {
            let data = try Fixtures.image("plasma:", width: 640, height: 480, format: format)
            let file = dir.appendingPathComponent("local\(index).\(format.lowercased())")
            try data.write(to: file)
            server.serve("/remote\(index)", data, contentType: "application/octet-stream")
            lines += [file.path, server.url("/remote\(index)")]  // one read by the file loader, one by http
        }
        let text = """
            loader: { http: { allow_loopback: true } }
            processors:
              - resize: { width: 100 }
            encoder: png
            output: { dir: \(dir.path)/out }
            """
        let (parsed, diagnostics) = PipelineFile.parse(text: text, file: "reads.yaml", registry: BuiltIns.registry())
        let runner = try PipelineRunner(pipeline: try #require(parsed, "\(diagnostics)"), registry: BuiltIns.registry())
        let before = counts()
        let summary = try await runner.run(lines.enumerated().map { Source(text: $0.element, index: $0.offset + 1) }.stream) { item in
            #expect(item.status == .ok, "\(item.source): \(String(describing: item.error))")
        }
        let after = counts()
        #expect(summary.ok == lines.count)
        #expect(after.sniffs - before.sniffs == lines.count, "sniffs")
        #expect(after.headers - before.headers == lines.count, "header reads")
        #expect(after.heif - before.heif == 4, "libheif opened once for each HEIC and AVIF item")
        await server.stop()
    }

    /// Bytes the heap holds in use now.
    func inUse() -> Int { Int(mallinfo2().uordblks) }

    /// `propertyNames` (which `strip` and the encoders call for every output) freed the list but not
    /// the names in it: about 190 bytes an output, left among the encoders' freed buffers so glibc
    /// could not reuse them; a 100,000-item run's RSS grew by 770 bytes an item.
    @Test func propertyNamesGivesEveryNameBack() throws {
        let wand = Wand()
        try wand.read(try Fixtures.image("plasma:", width: 16, height: 16, format: "PNG"), format: "PNG")
        #expect(wand.propertyNames("*").count >= 3)  // png:IHDR.*, date:*, ...
        for _ in 0..<1000 { _ = wand.propertyNames("*") }
        let before = inUse()
        for _ in 0..<20_000 { _ = wand.propertyNames("*") }
        let grown = inUse() - before
        // Leaking three short names a call would be over a megabyte.
        #expect(grown < 64 * 1024, "the heap grew by \(grown) bytes over 20,000 calls")
    }
}

extension Array where Element: Sendable {
    /// The elements as an AsyncSequence.
    var stream: AsyncStream<Element> {
        AsyncStream { continuation in
            for element in self { continuation.yield(element) }
            continuation.finish()
        }
    }
}
