import Foundation
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The `html` and `text` report formats: the contact sheet and the summary, written by the
/// registry's report plugins as `run --report-format` makes them.
@Suite struct PageReportTests {
    /// A run of two items in `dir`: one ok with a local output, one failed.
    func write(_ format: String, to path: String, in dir: URL) throws {
        let report = try BuiltIns.registry().makeReport(format, path: path)
        var header = RunHeader(pipeline: "thumbs", fingerprint: "f")
        header.workingDirectory = dir.path
        header.output = "out"
        try report.begin(header)
        var ok = ItemResult(source: "https://example.com/a b.jpg", index: 0, status: .ok)
        ok.outputs = ["out/a b.jpg"]
        try report.item(ok)
        var failed = ItemResult(source: "https://example.com/broken.jpg", index: 1, status: .failed)
        failed.error = ItemError(stage: .decode, kind: .decodeFailed, message: "JPEG: premature end of data")
        try report.item(failed)
        var summary = RunSummary()
        summary.total = 2
        summary.ok = 1
        summary.failed = 1
        summary.wallSeconds = 0.5
        try report.finish(summary: summary, statistics: RunStatistics([ok, failed]))
    }

    @Test func htmlIsTheContactSheetWithOutputsLinkedFromThePage() throws {
        let dir = try Fixtures.temporaryDirectory("html-report")
        let page = dir.appendingPathComponent("reports/sheet.html")
        try write("html", to: page.path, in: dir)
        let html = try String(contentsOf: page, encoding: .utf8)
        #expect(html.hasPrefix("<!doctype html>"))
        #expect(html.contains("src=\"../out/a%20b.jpg\""), "the output, relative to the page: \(html.prefix(2000))")
        #expect(html.contains("decode_failed") && html.contains("premature end of data"))
        #expect(html.contains("<title>thumbs"))
        // Written aside and renamed: nothing else is left in the folder.
        #expect(try FileManager.default.contentsOfDirectory(atPath: page.deletingLastPathComponent().path) == ["sheet.html"])
    }

    @Test func textIsTheSummaryRunPrints() throws {
        let dir = try Fixtures.temporaryDirectory("text-report")
        let path = dir.appendingPathComponent("summary.txt").path
        try write("text", to: path, in: dir)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasPrefix("thumbs: 2 items: 1 ok, 1 failed"), "\(text)")
        #expect(text.contains("decode_failed"), "\(text)")
        #expect(text.contains("https://example.com/broken.jpg"), "the failure's example: \(text)")
    }

    @Test func anUnknownFormatNamesTheKnownOnes() {
        #expect(throws: PipelineError.self) { try BuiltIns.registry().makeReport("htm", path: "/tmp/x") }
        do { _ = try BuiltIns.registry().makeReport("htm", path: "/tmp/x") } catch {
            #expect("\(error)".contains("html"), "\(error)")
        }
    }
}
