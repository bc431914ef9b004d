import ArgumentParser
import Foundation
import PipelineKit

struct Report: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Summarise saved run reports (JSON or JSONL), or list their failures.",
        discussion: """
            Several reports (the shards of one list) are merged: one summary, one list of failures,
            one contact sheet.

            Examples:
              pipelinectl report run.json
              pipelinectl report reports/run-shard-*.json --failed --sources-only > retry.txt
              pipelinectl report run.jsonl --failed
              pipelinectl report run.json --failed --sources-only > retry.txt
              pipelinectl report run.json --html out/sheet.html
              pipelinectl run thumbnails retry.txt
            """)

    @Argument(help: "Reports written by run --report (JSON or JSONL; a killed run's JSONL is fine); several are merged.")
    var files: [String]

    @Flag(help: "List every failed item with its stage, kind and message.")
    var failed = false

    @Flag(help: "With --failed: print only the sources, one per line (a URL list to retry).")
    var sourcesOnly = false

    @Option(help: "Write a self-contained HTML contact sheet here (images linked relative to it).")
    var html: String?

    func validate() throws {
        if files.isEmpty { throw ValidationError("give at least one report") }
        if sourcesOnly && !failed { throw ValidationError("--sources-only goes with --failed") }
    }

    func run() async throws {
        var reports: [RunReport] = []
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else {
                printError("error: cannot read the report '\(file)'")
                throw Exit.invalid
            }
            do { reports.append(try RunReport.read(data)) } catch {
                printError("error: '\(file)' is not a pipelinectl report: \(error)")
                throw Exit.invalid
            }
        }
        let report = RunReport.merged(reports)
        if let html {
            let cwd = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
            let target = html.hasPrefix("/") ? URL(fileURLWithPath: html) : cwd.appendingPathComponent(html)
            let page = ContactSheet.html(report, sheetDirectory: target.deletingLastPathComponent(), workingDirectory: cwd)
            do { try AtomicFile.write(Data(page.utf8), to: target.path) } catch {
                printError("error: cannot write \(html): \(error)")
                throw Exit.invalid
            }
            print("contact sheet in \(html)")
            return
        }
        if failed {
            for item in report.items where item.status == .failed {
                print(sourcesOnly ? item.source : SummaryText.failureLine(item))
            }
            return
        }
        print(SummaryText.render(pipeline: report.pipeline, summary: report.summary, items: report.items, outputDirectory: nil))
    }
}
