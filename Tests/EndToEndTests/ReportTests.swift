import Foundation
import PipelineKit
import Testing
import TestImages

/// Reports that tell the truth when read later: a run's header, retries and shards merged with
/// each source counted once, warnings for what does not add up, and retry lists that work from
/// any directory.
@Suite struct ReportTests {
    func pipelinectl(_ arguments: [String], in directory: URL) async throws -> Command.Result {
        try await Command.run(CLITests.binary, arguments, directory: directory)
    }

    /// `count` small PNGs under `dir/local/imgs`, a list of them by relative path in `dir/local`,
    /// and a pipeline; the `missing` names are listed too but not made yet.
    func setup(_ name: String, count: Int, missing: [String] = []) throws -> (dir: URL, list: URL, pipeline: URL) {
        let dir = try Fixtures.temporaryDirectory(name)
        let images = dir.appendingPathComponent("local/imgs")
        try FileManager.default.createDirectory(at: images, withIntermediateDirectories: true)
        var lines: [String] = []
        for i in 0..<count {
            try Fixtures.image(i % 2 == 0 ? "plasma:" : "gradient:navy-gold", width: 64, height: 48, format: "PNG")
                .write(to: images.appendingPathComponent("a\(i).png"))
            lines.append("imgs/a\(i).png")
        }
        lines += missing.map { "imgs/\($0)" }
        let list = dir.appendingPathComponent("local/urls.txt")
        try lines.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            name: small
            processors:
              - resize: { width: 32 }
            encoder: png
            output: { dir: \(dir.path)/out, name: "{stem}-{hash8}.{ext}" }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        return (dir, list, pipeline)
    }

    /// The issue's case: 20 sources, 4 of them missing at first. The retry list names them by
    /// absolute path, so it runs from any directory; the two reports merged count 20 sources, each
    /// with its newest result, whichever order they are given in.
    @Test func aRetryCountsEachSourceOnceWithItsNewestResultAndItsListWorksFromAnywhere() async throws {
        let later = (0..<4).map { "later\($0).png" }
        let (dir, list, pipeline) = try setup("retry", count: 16, missing: later)
        let first = try await pipelinectl(["run", pipeline.path, "local/urls.txt", "--report", "run1.json", "--progress", "none"], in: dir)
        #expect(first.status == 1 && first.stdout.contains("20 items: 16 ok, 4 failed"), "\(first.stdout)\(first.stderr)")
        _ = list
        let retry = try await pipelinectl(["report", "run1.json", "--failed", "--sources-only"], in: dir)
        let expected = later.map { dir.appendingPathComponent("local/imgs/\($0)").standardizedFileURL.path }
        #expect(retry.stdout.split(separator: "\n").map(String.init) == expected, "\(retry.stdout)")
        for name in later {
            try Fixtures.image("plasma:", width: 64, height: 48, format: "PNG").write(to: dir.appendingPathComponent("local/imgs/\(name)"))
        }
        // The retry list, run from another directory.
        let elsewhere = dir.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        try retry.stdout.write(to: elsewhere.appendingPathComponent("retry.txt"), atomically: true, encoding: .utf8)
        let second = try await pipelinectl(["run", pipeline.path, "retry.txt", "--report", dir.appendingPathComponent("run2.json").path,
                                            "--progress", "none"], in: elsewhere)
        #expect(second.status == 0 && second.stdout.contains("4 items: 4 ok, 0 failed"), "\(second.stdout)\(second.stderr)")
        for order in [["run1.json", "run2.json"], ["run2.json", "run1.json"]] {
            let merged = try await pipelinectl(["report"] + order, in: dir)
            #expect(merged.status == 0)
            #expect(merged.stdout.contains("small: 20 items: 20 ok, 0 failed, 0 skipped"), "\(order): \(merged.stdout)")
            #expect(merged.stdout.contains("2 reports merged"), "\(merged.stdout)")
            #expect(merged.stderr.isEmpty, "\(merged.stderr)")
            let failed = try await pipelinectl(["report"] + order + ["--failed"], in: dir)
            #expect(failed.stdout.isEmpty, "\(failed.stdout)")
        }
    }

    /// Shards' reports merged into one report file by a report plugin: a JSON report that
    /// `report` reads back as the whole run, JSON Lines, the contact sheet and the summary; an
    /// unknown format and --to beside --html are refused before anything is written.
    @Test func mergedReportsAreWrittenByAnyReportFormat() async throws {
        let (dir, _, pipeline) = try setup("merged", count: 8, missing: ["gone.png"])
        for k in 0..<2 {
            let run = try await pipelinectl(["run", pipeline.path, "local/urls.txt", "--shard", "\(k)/2", "--report", "r.json",
                                             "--progress", "none"], in: dir)
            #expect(run.status <= 1, "\(run.stdout)\(run.stderr)")
        }
        let shards = ["r-shard-0-of-2.json", "r-shard-1-of-2.json"]
        let json = try await pipelinectl(["report"] + shards + ["--to", "all.json"], in: dir)
        #expect(json.status == 0 && json.stdout.contains("9 items of 2 reports written to all.json (json)"), "\(json.stdout)\(json.stderr)")
        let read = try await pipelinectl(["report", "all.json"], in: dir)
        #expect(read.stdout.contains("small: 9 items: 8 ok, 1 failed"), "\(read.stdout)\(read.stderr)")
        #expect(!read.stdout.contains("reports merged"), "one report now: \(read.stdout)")
        let failed = try await pipelinectl(["report", "all.json", "--failed", "--sources-only"], in: dir)
        #expect(failed.stdout.hasSuffix("local/imgs/gone.png\n"), "\(failed.stdout)")

        let lines = try await pipelinectl(["report"] + shards + ["--to", "all.jsonl", "--format", "jsonl"], in: dir)
        #expect(lines.status == 0, "\(lines.stderr)")
        let jsonl = try String(contentsOf: dir.appendingPathComponent("all.jsonl"), encoding: .utf8).split(separator: "\n")
        #expect(jsonl.count == 11 && jsonl.first?.contains("\"type\":\"run\"") == true && jsonl.last?.contains("\"type\":\"summary\"") == true)

        let sheet = try await pipelinectl(["report"] + shards + ["--to", "sheets/all.html", "--format", "html"], in: dir)
        #expect(sheet.status == 0, "\(sheet.stderr)")
        let html = try String(contentsOf: dir.appendingPathComponent("sheets/all.html"), encoding: .utf8)
        #expect(html.components(separatedBy: "<div class=\"tile ").count - 1 == 9, "a tile per item")
        #expect(html.contains("src=\"../out/a0-"), "outputs linked from the page's folder")
        let text = try await pipelinectl(["report"] + shards + ["--to", "all.txt", "--format", "text"], in: dir)
        #expect(text.status == 0)
        #expect(try String(contentsOf: dir.appendingPathComponent("all.txt"), encoding: .utf8).hasPrefix("small: 9 items: 8 ok, 1 failed"))

        let unknown = try await pipelinectl(["report"] + shards + ["--to", "x.xml", "--format", "xml"], in: dir)
        #expect(unknown.status == 2 && unknown.stderr.contains("unknown report format 'xml'"), "\(unknown.stderr)")
        let unwritable = try await pipelinectl(["report"] + shards + ["--to", "/proc/none/z.json"], in: dir)
        #expect(unwritable.status == 3 && unwritable.stderr.hasPrefix("error: cannot write the report to /proc/none/z.json"), "\(unwritable.stderr)")
        let both = try await pipelinectl(["report"] + shards + ["--to", "y.json", "--html", "y.html"], in: dir)
        #expect(both.status == 2 && both.stderr.contains("--to writes the merged report"), "\(both.stderr)")
        for name in ["x.xml", "y.json", "y.html"] { #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent(name).path)) }
    }

    /// Three shards' reports: two of them say which one is missing; one given twice is read once;
    /// reports of two different pipelines are said to be so.
    @Test func shardReportsSayWhichShardIsMissingOrRepeated() async throws {
        let (dir, _, pipeline) = try setup("shards", count: 12)
        // Sources go to shards by their hash, and their URLs name the loopback server's port: how
        // many each shard gets varies from run to run (now and then one gets none of the twelve).
        var shardItems: [Int] = []
        for k in 0..<3 {
            let run = try await pipelinectl(["run", pipeline.path, "local/urls.txt", "--shard", "\(k)/3", "--report", "r.json",
                                             "--progress", "none"], in: dir)
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            shardItems.append(run.stdout.firstMatch(of: /small: (\d+) items/).flatMap { Int($0.1) } ?? 0)
        }
        #expect(shardItems.reduce(0, +) == 12, "\(shardItems)")
        let names = (0..<3).map { "r-shard-\($0)-of-3.json" }
        let all = try await pipelinectl(["report"] + names, in: dir)
        #expect(all.stdout.contains("12 items: 12 ok") && all.stderr.isEmpty, "\(all.stdout)\(all.stderr)")

        let two = try await pipelinectl(["report", names[0], names[2]], in: dir)
        #expect(two.status == 0)
        #expect(two.stderr.contains("warning: shard 1/3 of 3 is missing (given: 0/3, 2/3): the totals cover only part of the list"),
                "\(two.stderr)")
        let counted = try #require(two.stdout.firstMatch(of: /small: (\d+) items/).flatMap { Int($0.1) })
        let sizes = names.map { "\($0): \((try? String(contentsOf: dir.appendingPathComponent($0), encoding: .utf8))?.count ?? -1) bytes" }
        #expect(counted == shardItems[0] + shardItems[2], "\(shardItems): \(two.stdout)\(two.stderr) \(sizes)")

        let twice = try await pipelinectl(["report", names[0], names[0], names[1], names[2]], in: dir)
        #expect(twice.stdout.contains("12 items: 12 ok"), "\(twice.stdout)")
        #expect(twice.stderr.contains("warning: '\(names[0])' is the same run as '\(names[0])'"), "\(twice.stderr)")

        // Shard 1 run again: both its runs are read, each source once.
        _ = try await pipelinectl(["run", pipeline.path, "local/urls.txt", "--shard", "1/3", "--report", "again.json", "--progress", "none"], in: dir)
        let rerun = try await pipelinectl(["report"] + names + ["again-shard-1-of-3.json"], in: dir)
        #expect(rerun.stdout.contains("12 items: "), "\(rerun.stdout)")
        #expect(rerun.stderr.contains("shard 1/3 was run 2 times"), "\(rerun.stderr)")

        // Another pipeline's report.
        let other = dir.appendingPathComponent("other.yaml")
        try String(contentsOf: pipeline, encoding: .utf8).replacingOccurrences(of: "width: 32", with: "width: 24")
            .write(to: other, atomically: true, encoding: .utf8)
        _ = try await pipelinectl(["run", other.path, "local/urls.txt", "--report", "other.json", "--progress", "none"], in: dir)
        let mixed = try await pipelinectl(["report", names[0], "other.json"], in: dir)
        #expect(mixed.stderr.contains("warning: the reports are of 2 different pipelines or versions of one"), "\(mixed.stderr)")
    }

    /// The JSON report is one document written as items finish: the run's header first (id, start,
    /// fingerprint, shard, list, output), every item once, then the summary and figures.
    @Test func theJSONReportCarriesTheRunAndEveryItemOnce() async throws {
        let (dir, _, pipeline) = try setup("header", count: 6)
        let run = try await pipelinectl(["run", pipeline.path, "local/urls.txt", "--shard", "0/1", "--report", "r.json",
                                         "--progress", "none"], in: dir)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let report = try Reports.read(dir.appendingPathComponent("r-shard-0-of-1.json"))
        #expect(report["report_version"] as? Int == 3)
        let header = try #require(report["run"] as? [String: Any])
        #expect((header["id"] as? String)?.count == 36)
        #expect((header["started"] as? String)?.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#, options: .regularExpression) != nil)
        #expect((header["fingerprint"] as? String)?.count == 64)
        #expect(header["shard"] as? String == "0/1" && header["pipeline"] as? String == "small")
        #expect(header["list"] as? String == "local/urls.txt")
        #expect(header["list_base"] as? String == dir.appendingPathComponent("local").standardizedFileURL.path)
        #expect(header["output"] as? String == dir.path + "/out")
        // The build that made it, as `pipelinectl --version` names it.
        let version = try await pipelinectl(["--version"], in: dir).stdout.split(separator: "\n").map(String.init)
        #expect(version.first == "pipelinectl " + (header["version"] as? String ?? "-"))
        #expect(version.contains("revision       " + (header["revision"] as? String ?? "-")))
        let items = try #require(report["items"] as? [[String: Any]])
        #expect(items.map { $0["index"] as? Int ?? 0 } == Array(1...6))
        #expect((report["summary"] as? [String: Any])?["ok"] as? Int == 6)
        // Nothing is left beside it: the document was written aside and renamed into place.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".tmp") }.isEmpty)
    }
}
