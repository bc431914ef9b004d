import ArgumentParser
import Foundation
import PipelineKit

struct Report: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Summarise saved run reports (JSON or JSONL), or list their failures.",
        discussion: helpText("""
            Several reports are merged: the shards of one list, or a first run and its retries. Each
            source counts once, with its newest result; a missing shard, a report given twice and
            reports of different pipelines are warned about on standard error. Reports may be read
            from a bucket: one key, or every report under a prefix ending in '/'.

            Examples:
              pipelinectl report run.json
              pipelinectl report reports/run-shard-*.json
              pipelinectl report s3://my-bucket/reports/
              pipelinectl report run.json --failed
              pipelinectl report run.json --failed --sources-only > retry.txt
              pipelinectl run thumbnails retry.txt --report retry.json
              pipelinectl report run.json retry.json
              pipelinectl report run.json --html out/sheet.html
              pipelinectl report s3://my-bucket/reports/run.json \\
                --html sheet.html --presign 1d
              pipelinectl report reports/run-shard-*.json --to run.json
              pipelinectl report run.json retry.json --to run.jsonl --format jsonl
            """))

    @Argument(help: "Reports written by run --report: files, or s3:// keys and prefixes (ending in '/'); several are merged.")
    var files: [String]

    @Flag(help: "List every failed item with its stage, kind and message.")
    var failed = false

    @Flag(help: "With --failed: print only the sources, one per line, local paths made absolute (a URL list to retry from anywhere).")
    var sourcesOnly = false

    @Option(help: "Write a self-contained HTML contact sheet here (local images linked relative to it, objects by their URL).")
    var html: String?

    @Option(help: "With --html: link objects in a bucket by presigned URLs valid this long (e.g. 1h, 7d; at most 7d), for private buckets.")
    var presign: String?

    @Option(help: "Write the merged report here, in --format (one report of the shards, or of a run and its retries).")
    var to: String?

    @Option(help: "With --to: the report format, as run's --report-format (json, jsonl, html, text; `plugins` lists this build's).")
    var format: String = "json"

    func validate() throws {
        if files.isEmpty { throw ValidationError("give at least one report") }
        if sourcesOnly && !failed { throw ValidationError("--sources-only goes with --failed") }
        if to != nil, html != nil || failed { throw ValidationError("--to writes the merged report: it goes without --html and --failed") }
        if let presign {
            guard html != nil else { throw ValidationError("--presign goes with --html") }
            guard let seconds = Units.parseDuration(presign), seconds >= 1, seconds <= 604_800 else {
                throw ValidationError("--presign expects a duration from 1s to 7d, got '\(presign)'")
            }
        }
    }

    func run() async throws {
        var inputs: [ReportMerge.Input] = []
        for file in files {
            for (name, data, directory) in try await Self.read(file) {
                do { inputs.append(ReportMerge.Input(name: name, report: try RunReport.read(data), fallbackBase: directory)) } catch {
                    printError("error: '\(name)' is not a pipelinectl report: \((error as? PipelineError)?.message ?? "\(error)")")
                    throw Exit.invalid
                }
            }
        }
        let merged = ReportMerge(inputs)
        for warning in merged.warnings { printError("warning: " + warning) }
        let report = merged.report
        if let html {
            try await writeSheet(merged, to: html)
            return
        }
        if let to {
            try writeMerged(merged, to: to)
            return
        }
        if failed {
            for (index, item) in report.items.enumerated() where item.status == .failed {
                print(sourcesOnly ? ReportMerge.absoluteSource(item.source, base: merged.bases[index]) : SummaryText.failureLine(item))
            }
            return
        }
        print(SummaryText.render(pipeline: report.pipeline, summary: report.summary, items: report.items, outputDirectory: nil))
        if inputs.count > 1 { print("\(inputs.count) reports merged: each source counted once, with its newest result") }
    }

    /// The report or reports `file` names: a local file, one object, or every `.json`/`.jsonl`
    /// object under a prefix; each with its name and the directory relative sources of a version 1
    /// report resolve against (a local report's own).
    static func read(_ file: String) async throws -> [(String, Data, String?)] {
        guard Source.urlScheme(of: file) != nil else {
            guard let data = FileManager.default.contents(atPath: file) else {
                let reason = FileManager.default.fileExists(atPath: file) ? "it cannot be read" : "no such file"
                printError("error: cannot read the report '\(file)': \(reason)")
                throw Exit.invalid
            }
            let absolute = file.hasPrefix("/") ? file : FileManager.default.currentDirectoryPath + "/" + file
            return [(file, data, URL(fileURLWithPath: absolute).deletingLastPathComponent().path)]
        }
        let slash = file.range(of: "/", options: .backwards)!
        let directory = String(file[..<slash.lowerBound]), name = String(file[slash.upperBound...])
        do {
            let destination = try PipelineCtl.registry.makeDestination(directory, options: PluginOptions())
            if !name.isEmpty {
                guard let data = try await destination.read(name) else {
                    throw PipelineError(.notFound, "no such object")
                }
                return [(file, data, nil)]
            }
            let keys = try await destination.list(under: "").filter { $0.hasSuffix(".json") || $0.hasSuffix(".jsonl") }
            guard !keys.isEmpty else { throw PipelineError(.notFound, "no .json or .jsonl report under it") }
            var found: [(String, Data, String?)] = []
            for key in keys.sorted() {
                guard let data = try await destination.read(key) else { continue }
                found.append((destination.location(key), data, nil))
            }
            return found
        } catch let error as PipelineError {
            printError("error: cannot read the report '\(file)': \(error.message)")
            throw Exit.invalid
        }
    }

    /// `--to`: the merged report written by the report plugin of `--format`, item by item, as a
    /// run writes its own. A single report keeps its header; a merge gets a new one (the first
    /// report's output and working directory), and its local sources are made absolute.
    func writeMerged(_ merged: ReportMerge, to path: String) throws {
        let report = merged.report
        let writer: any ReportWriting
        do { writer = try PipelineCtl.registry.makeReport(format, path: path) } catch let error as PipelineError where error.kind == .io {
            printError("error: \(error.message)")
            throw Exit.infrastructure
        } catch {
            printError("error: --format: \((error as? PipelineError)?.message ?? "\(error)")")
            throw Exit.invalid
        }
        let first = merged.headers.compactMap { $0 }.first
        var header = report.run ?? RunHeader(pipeline: report.pipeline, fingerprint: first?.fingerprint ?? "")
        if report.run == nil {
            header.output = first?.output
            header.outputURL = first?.outputURL
            header.workingDirectory = first?.workingDirectory ?? FileManager.default.currentDirectoryPath
        }
        do {
            try writer.begin(header)
            for (index, var item) in report.items.enumerated() {
                // Sources of several lists are made absolute, since the new header has no list base.
                if report.run == nil { item.source = ReportMerge.absoluteSource(item.source, base: merged.bases[index]) }
                try writer.item(item)
            }
            try writer.finish(summary: report.summary, statistics: report.stats)
        } catch {
            printError("error: cannot write the report \(path): \((error as? PipelineError)?.message ?? "\(error)")")
            throw Exit.infrastructure
        }
        print("\(report.items.count) item\(report.items.count == 1 ? "" : "s") of \(files.count) report\(files.count == 1 ? "" : "s") written to \(path) (\(format))")
    }

    /// The contact sheet: local outputs linked relative to the sheet, objects by their HTTP URL as
    /// the run addressed the store (or presigned, with `--presign`).
    func writeSheet(_ merged: ReportMerge, to html: String) async throws {
        let cwd = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        let target = html.hasPrefix("/") ? URL(fileURLWithPath: html) : cwd.appendingPathComponent(html)
        var presigned: ((String, String) throws -> String?)?
        if let seconds = presign.flatMap(Units.parseDuration).map({ Int($0) }) {
            var destinations: [String: any OutputDestination] = [:]
            presigned = { dir, key in
                if destinations[dir] == nil {
                    do { destinations[dir] = try PipelineCtl.registry.makeDestination(dir, options: PluginOptions()) } catch {
                        printError("error: --presign: \(dir): \((error as? PipelineError)?.message ?? "\(error)")")
                        throw Exit.invalid
                    }
                }
                return destinations[dir]?.presignedURL(key, expires: seconds)
            }
        }
        let links = try ContactSheet.links(merged.report.items, headers: merged.headers, page: target, cwd: cwd, stored: presigned)
        let page = ContactSheet.html(merged.report, links: links)
        do { try AtomicFile.write(Data(page.utf8), to: target.path) } catch {
            printError("error: cannot write \(html): \(error)")
            throw Exit.invalid
        }
        print("contact sheet in \(html)")
    }
}
