import FlyingFox
import Foundation
import PipelineKit
import Synchronization
import Testing
import TestImages

/// The built `pipelinectl` binary, run as a user would, against real files and a real HTTP server
/// on loopback; outputs are checked with ImageMagick's `identify`.
@Suite struct CLITests {
    static let binary = Fixtures.packageRoot.appendingPathComponent(".build/debug/pipelinectl").path
    static let corpusScript = Fixtures.packageRoot.appendingPathComponent("../shared/bench/corpus.sh").standardizedFileURL.path

    func pipelinectl(_ arguments: [String], stdin: Data? = nil, in directory: URL? = nil) async throws -> Command.Result {
        try await Command.run(Self.binary, arguments, stdin: stdin, directory: directory ?? Fixtures.packageRoot)
    }

    /// `--version` names the version, the revision the Makefile built from (PIPELINECTL_REVISION, which
    /// it also hands to the tests) and each library with the version it runs, as pkg-config and
    /// ImageMagick's own tools report them.
    @Test func versionNamesTheBuildAndTheLibrariesItRunsWith() async throws {
        let printed = try await pipelinectl(["--version"])
        #expect(printed.status == 0, "\(printed.stderr)")
        var rows: [String: String] = [:]
        let lines = printed.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.range(of: #"^pipelinectl \d+\.\d+\.\d+$"#, options: .regularExpression) != nil, "\(lines)")
        for line in lines.dropFirst() {
            let parts = line.split(separator: " ", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts.count == 2 { rows[parts[0]] = parts[1] }
        }
        let given = ProcessInfo.processInfo.environment["PIPELINECTL_REVISION"] ?? ""
        #expect(rows["revision"] == (given.isEmpty ? "unknown" : given))
        func packageVersion(_ module: String) async throws -> String {
            try await Command.run("/usr/bin/pkg-config", ["--modversion", module]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        #expect(rows["libcurl"]?.hasPrefix(try await packageVersion("libcurl") + " (OpenSSL/") == true, "\(rows)")
        #expect(rows["libpng"] == (try await packageVersion("libpng")))
        #expect(rows["libwebp"] == (try await packageVersion("libwebp")))
        #expect(rows["libtiff"] == (try await packageVersion("libtiff-4")))
        #expect(rows["libheif"] == (try await packageVersion("libheif")))
        #expect(rows["libjpeg-turbo"] == (try await packageVersion("libjpeg")) + " (built with)")
        let magick = try await Command.run("/usr/bin/convert", ["-version"]).stdout
        let magickVersion = try #require(rows["ImageMagick"]?.split(separator: " ").first, "\(rows)")
        #expect(magick.hasPrefix("Version: ImageMagick \(magickVersion) "), "\(magick)")
        #expect(rows["giflib"]?.hasPrefix("5.") == true)
    }

    /// Every command's help, at 80 columns: the text we write (above USAGE) is wrapped once, by the
    /// argument parser at the terminal's width: a line ends early only where a paragraph does, and
    /// no example is broken.
    /// A file validated for another host: what this machine lacks (a CA file, a writable cache
    /// directory) is a warning at `validate`, with its position, and an error for `run` here.
    @Test func machineFactsWarnAtValidateAndStopARunHere() async throws {
        let dir = try Fixtures.temporaryDirectory("facts")
        let file = dir.appendingPathComponent("prod.yaml")
        try """
            version: 1
            name: prod
            loader:
              http: { ca_file: /etc/pki/internal-ca.pem }
            encoder: jpeg
            output: { dir: \(dir.appendingPathComponent("out").path) }
            """.write(to: file, atomically: true, encoding: .utf8)
        let validated = try await pipelinectl(["validate", file.path])
        #expect(validated.status == 0, "\(validated.stderr)")
        #expect(validated.stderr.contains("prod.yaml:4:20: warning: loader.http.ca_file: the file '/etc/pki/internal-ca.pem' cannot be read on this machine"),
                "\(validated.stderr)")
        let list = dir.appendingPathComponent("urls.txt")
        try "https://example.com/a.jpg\n".write(to: list, atomically: true, encoding: .utf8)
        let run = try await pipelinectl(["run", file.path, list.path])
        #expect(run.status == 2 && run.stderr.contains("prod.yaml:4:20: error: loader.http.ca_file"), "\(run.stderr)")
    }

    @Test func helpIsWrappedOnceAtTheTerminalsWidth() async throws {
        let dump = try await pipelinectl(["--experimental-dump-help"])
        let root = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        func paths(_ command: [String: Any], _ prefix: [String]) -> [[String]] {
            let subcommands = command["subcommands"] as? [[String: Any]] ?? []
            return [prefix] + subcommands.flatMap { sub in
                (sub["commandName"] as? String).map { $0 == "help" ? [] : paths(sub, prefix + [$0]) } ?? []
            }
        }
        let commands = paths(try #require(root["command"] as? [String: Any]), [])
        #expect(commands.count >= 15, "\(commands)")
        for command in commands {
            let help = try await Command.run(Self.binary, command + ["--help"], environment: ["COLUMNS": "80", "PATH": "/usr/bin:/bin"])
            let lines = help.stdout.components(separatedBy: "\n")
            let text = lines.prefix { !$0.hasPrefix("USAGE:") }
            let name = (["pipelinectl"] + command).joined(separator: " ")
            for (line, next) in zip(text, text.dropFirst()) {
                #expect(line.count <= 80, "\(name) --help: a line of \(line.count) columns: \(line)")
                guard !next.isEmpty, !next.hasPrefix(" ") else { continue }
                #expect(!line.hasPrefix(" "), "\(name) --help: an example is broken: '\(line)' / '\(next)'")
                guard !line.isEmpty, !line.hasPrefix(" ") else { continue }
                let word = next.split(separator: " ").first.map(String.init) ?? ""
                #expect(line.count + 1 + word.count > 79, "\(name) --help: wrapped early: '\(line)' / '\(next)'")
            }
        }
    }

    /// A copy of thumbnails.yaml that may reach the loopback server and writes under `dir`.
    func thumbnailsPipeline(in dir: URL) throws -> String {
        var text = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("pipelines/thumbnails.yaml"), encoding: .utf8)
        text = text.replacingOccurrences(of: "    max_bytes: 50MB", with: "    max_bytes: 50MB\n    allow_loopback: true")
        text = text.replacingOccurrences(of: "path: .cache/pipelinectl/data", with: "path: \(dir.path)/cache")
        text = text.replacingOccurrences(of: "dir: out/thumbnails", with: "dir: \(dir.path)/out")
        let path = dir.appendingPathComponent("thumbnails.yaml")
        try text.write(to: path, atomically: true, encoding: .utf8)
        return path.path
    }

    /// A copy of thumbnails.yaml as ``thumbnailsPipeline(in:)`` makes it, changed by `edit`, written
    /// to `dir/name`.
    func thumbnailsPipeline(in dir: URL, named name: String, _ edit: (String) -> String) throws -> URL {
        let path = dir.appendingPathComponent(name)
        try edit(try String(contentsOfFile: try thumbnailsPipeline(in: dir), encoding: .utf8)).write(to: path, atomically: true, encoding: .utf8)
        return path
    }

    /// `-q` is silent when every item is fine, and says what failed (on standard error) when not.
    @Test func quietIsSilentUnlessSomethingFails() async throws {
        let dir = try Fixtures.temporaryDirectory("quiet")
        let good = dir.appendingPathComponent("good.jpg")
        try Fixtures.jpeg(120, 80).write(to: good)
        let list = dir.appendingPathComponent("urls.txt")
        try "\(good.path)\n".write(to: list, atomically: true, encoding: .utf8)
        let pipeline = try thumbnailsPipeline(in: dir)
        let quiet = try await pipelinectl(["run", pipeline, list.path, "-q", "--report", dir.appendingPathComponent("r.json").path])
        #expect(quiet.status == 0)
        #expect(quiet.stdout.isEmpty && quiet.stderr.isEmpty)
        try "\(good.path)\n\(dir.path)/missing.jpg\n".write(to: list, atomically: true, encoding: .utf8)
        let failing = try await pipelinectl(["run", pipeline, list.path, "--quiet", "--log-level", "critical"])
        #expect(failing.status == 1)
        #expect(failing.stdout.isEmpty)
        #expect(failing.stderr.contains("0 ok, 1 kept, 1 failed") && failing.stderr.contains("missing.jpg"))
    }

    /// A local directory behaves as a bucket does: a changed pipeline replaces its outputs, an
    /// unchanged one keeps them (`kept`), `existing: keep` reports a changed one stale and exits 1,
    /// and `--resume` does not skip outputs another pipeline wrote under the same names.
    @Test func changedPipelinesReplaceTheirFilesAndIdenticalOnesKeepThem() async throws {
        let dir = try Fixtures.temporaryDirectory("stale")
        let (list, _) = try Fixtures.imageList(in: dir, ["plasma:", "gradient:navy-gold"])
        let out = dir.appendingPathComponent("out")
        let pipeline = dir.appendingPathComponent("web.yaml")
        func configure(quality: Int, existing: String = "replace_if_changed") throws {
            try """
                processors:
                  - resize: { width: 300 }
                encoder: { jpeg: { quality: \(quality) } }
                output: { dir: \(out.path), name: "{stem}.{ext}", existing: \(existing) }
                """.write(to: pipeline, atomically: true, encoding: .utf8)
        }
        func files() throws -> [String: Data] {
            Dictionary(uniqueKeysWithValues: try ["photo0.jpg", "photo1.jpg"].map { ($0, try Data(contentsOf: out.appendingPathComponent($0))) })
        }
        try configure(quality: 85)
        #expect(try await pipelinectl(["run", pipeline.path, list.path, "--progress", "none"]).status == 0)
        let at85 = try files()
        try configure(quality: 40)
        let second = try await pipelinectl(["run", pipeline.path, list.path, "--progress", "none"])
        #expect(second.status == 0 && second.stdout.contains("2 items: 2 ok, 0 failed"), "\(second.stdout)\(second.stderr)")
        let at40 = try files()
        #expect(at40.allSatisfy { $0.value.count < at85[$0.key]!.count })
        let third = try await pipelinectl(["run", pipeline.path, list.path, "--progress", "none", "--report", dir.appendingPathComponent("r.json").path])
        #expect(third.status == 0 && third.stdout.contains("2 items: 0 ok, 2 kept, 0 failed"), "\(third.stdout)\(third.stderr)")
        #expect(try files() == at40)
        let items = try report(dir.appendingPathComponent("r.json"))["items"] as? [[String: Any]] ?? []
        #expect(items.allSatisfy { $0["status"] as? String == "kept" && ($0["kept"] as? [String]) == ($0["outputs"] as? [String]) })

        try configure(quality: 85, existing: "keep")
        let kept = try await pipelinectl(["run", pipeline.path, list.path, "--progress", "none"])
        #expect(kept.status == 1 && kept.stdout.contains("2 outputs were already there with another fingerprint"), "\(kept.stdout)\(kept.stderr)")
        #expect(try files() == at40)

        // Resume: the quality-40 run recorded these names complete; a quality-85 run with --resume
        // finds their fingerprints name another recipe and makes them again.
        try configure(quality: 40)
        let resumed40 = try await pipelinectl(["run", pipeline.path, list.path, "--resume", "--progress", "none"])
        #expect(resumed40.stdout.contains("2 items: 0 ok, 0 failed, 2 skipped"), "\(resumed40.stdout)")
        try configure(quality: 85)
        #expect(try await pipelinectl(["run", pipeline.path, list.path, "--progress", "none"]).status == 0)
        try configure(quality: 40)
        let resumedAgain = try await pipelinectl(["run", pipeline.path, list.path, "--resume", "--progress", "none"])
        #expect(resumedAgain.stdout.contains("2 items: 2 ok, 0 failed, 0 skipped"), "\(resumedAgain.stdout)")
        #expect(try files() == at40)
    }

    func report(_ path: URL) throws -> [String: Any] {
        try Reports.read(path)
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: corpusScript), "needs ../shared/bench/corpus.sh"),
          .timeLimit(.minutes(10)))
    func seventyPhotosFromDiskAndLoopbackHTTP() async throws {
        let fetched = try await Command.run("/bin/bash", [Self.corpusScript])
        let corpus = URL(fileURLWithPath: fetched.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let files = try FileManager.default.contentsOfDirectory(atPath: corpus.path)
            .filter { $0.hasSuffix(".jpg") || $0.hasSuffix(".png") }.sorted().prefix(70)
        #expect(files.count == 70)
        let server = try await TestServer.start()
        var lines: [String] = []
        for (i, name) in files.enumerated() {
            let path = corpus.appendingPathComponent(name).path
            if i % 2 == 0 {
                lines.append(path)
            } else {
                server.serve("/photos/\(name)", try Data(contentsOf: URL(fileURLWithPath: path)),
                             contentType: name.hasSuffix(".png") ? "image/png" : "image/jpeg")
                lines.append(server.url("/photos/\(name)"))
            }
        }
        let dir = try Fixtures.temporaryDirectory("e2e")
        let list = dir.appendingPathComponent("urls.txt")
        try lines.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let reportPath = dir.appendingPathComponent("report.json")
        let result = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path, "--report", reportPath.path])
        #expect(result.status == 0, "\(result.stderr)\nunmatched at the server: \(server.unmatched.prefix(5)) requests: \(server.totalRequests)")
        #expect(result.stdout.contains("thumbnails: 70 items: 70 ok, 0 failed, 0 skipped"))
        let outputs = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("out").path)
            .filter { $0 != ".pipelinectl" }  // the completion manifest, for --resume
        #expect(outputs.count == 70)
        let json = try report(reportPath)
        let summary = json["summary"] as! [String: Any]
        #expect(summary["total"] as? Int == 70 && summary["ok"] as? Int == 70 && summary["failed"] as? Int == 0)
        let items = json["items"] as! [[String: Any]]
        #expect(items.count == 70)
        for (i, item) in items.enumerated() {
            let output = (item["outputs"] as! [String])[0]
            let made = try await Identified.file(output)
            let sourcePath = corpus.appendingPathComponent(files[files.startIndex + i]).path
            let source = try await Identified.file(sourcePath)
            #expect(made.format == "JPEG")
            #expect(max(made.width, made.height) == min(256, max(source.width, source.height)), "\(output)")
            let sourceAspect = Double(source.width) / Double(source.height)
            let madeAspect = Double(made.width) / Double(made.height)
            #expect(abs(madeAspect - sourceAspect) / sourceAspect < 0.01, "\(output): \(made) from \(source)")
            #expect(item["width"] as? Int == made.width && item["height"] as? Int == made.height)
        }
        await server.stop()
    }

    /// Local loads outrun the CPU workers; pixels must still stay within ImageMagick's policy limits
    /// (a decoded image waiting in a queue per item in flight once exhausted them).
    @Test(.enabled(if: FileManager.default.fileExists(atPath: corpusScript), "needs ../shared/bench/corpus.sh"),
          .timeLimit(.minutes(10)))
    func wholeCorpusFromLocalFilesStaysWithinImageMagickLimits() async throws {
        let fetched = try await Command.run("/bin/bash", [Self.corpusScript])
        let corpus = URL(fileURLWithPath: fetched.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let files = try FileManager.default.contentsOfDirectory(atPath: corpus.path)
            .filter { $0.hasSuffix(".jpg") || $0.hasSuffix(".png") }.sorted()
        let dir = try Fixtures.temporaryDirectory("corpus")
        let list = dir.appendingPathComponent("all.txt")
        try files.map { corpus.appendingPathComponent($0).path }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["run", "pipelines/responsive.yaml", list.path, "-o", dir.appendingPathComponent("out").path, "--progress", "none"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("\(files.count) items: \(files.count) ok"))
    }

    /// A truncated JPEG: failed under the default fail_on, decoded and marked degraded under
    /// fail_on: none (report item, summary count, summary line), and the same source twice in one
    /// list is marked both times (a degraded decode is never reused as if it were whole).
    @Test func failOnNoneMarksDamagedItemsDegraded() async throws {
        let dir = try Fixtures.temporaryDirectory("degraded")
        let whole = try Fixtures.image("plasma:fractal", width: 400, height: 300)
        let cut = dir.appendingPathComponent("cut.jpg"), good = dir.appendingPathComponent("good.jpg")
        try whole.prefix(whole.count / 2).write(to: cut)
        try whole.write(to: good)
        let list = dir.appendingPathComponent("list.txt")
        try "\(cut.path)\n\(good.path)\n\(cut.path)\n".write(to: list, atomically: true, encoding: .utf8)
        let strict = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path, "--report", dir.appendingPathComponent("strict.json").path])
        #expect(strict.status == 1)
        #expect(strict.stdout.contains("cut.jpg: decode (imagemagick) decode_failed: JPEG: Premature end of JPEG file"), "\(strict.stdout)")

        let pipeline = try thumbnailsPipeline(in: dir, named: "lenient.yaml") {
            $0.replacingOccurrences(of: "decoder: imagemagick", with: "decoder:\n  imagemagick: { fail_on: none }")
        }
        let reportPath = dir.appendingPathComponent("lenient.json")
        let lenient = try await pipelinectl(["run", pipeline.path, list.path, "--report", reportPath.path])
        #expect(lenient.status == 0, "\(lenient.stdout)\n\(lenient.stderr)")
        // The cut file named twice: one item (degraded) and a duplicate of it.
        #expect(lenient.stdout.contains("2 items: 2 ok, 0 failed, 0 skipped (1 degraded: decoded despite damage, as fail_on allows)")
                && lenient.stdout.contains("duplicates: 1"), "\(lenient.stdout)")
        let report = try report(reportPath)
        let items = try #require(report["items"] as? [[String: Any]])
        #expect(items.map { $0["degraded"] as? String } == ["JPEG: Premature end of JPEG file", nil, "JPEG: Premature end of JPEG file"])
        #expect((report["summary"] as? [String: Any])?["degraded"] as? Int == 1)
    }

    /// `analyze` first in the chain: its facts are in the report for a decoded item, a duplicate
    /// line, and a re-run that reuses the stored output without decoding.
    @Test func analyzeFactsReachTheReportAndSurviveReuse() async throws {
        let dir = try Fixtures.temporaryDirectory("facts")
        let server = try await TestServer.start()
        let flat = try Fixtures.image("xc:#3a7bd5", width: 200, height: 100, format: "PNG")
        server.serve("/flat.png", CacheableResource(body: flat, headers: ["Cache-Control": "max-age=3600", "Content-Type": "image/png"]))
        let list = dir.appendingPathComponent("list.txt")
        try "\(server.url("/flat.png"))\n\(server.url("/flat.png"))\n".write(to: list, atomically: true, encoding: .utf8)
        let pipeline = try thumbnailsPipeline(in: dir, named: "facts.yaml") {
            $0.replacingOccurrences(of: "processors:\n", with: "processors:\n  - analyze: { blurhash: 3x2 }\n")
                .replacingOccurrences(of: "  name: \"{stem}-{hash8}.{ext}\"", with: "  name: \"{stem}-{hash8}.{ext}\"\n  facts_sidecar: true")
        }
        let expected: [String: Any] = [
            "format": "PNG", "width": 200, "height": 100, "frames": 1,
            // PyPI's blurhash.encode of a flat #3a7bd5 picture with 3x2 components.
            "dominant_color": "#3a7bd5", "dhash": "0000000000000000", "blurhash": "B36wUFp1fQpMfkfQ",
        ]
        for run in ["first", "again"] {
            let reportPath = dir.appendingPathComponent("\(run).json")
            let result = try await pipelinectl(["run", pipeline.path, list.path, "--report", reportPath.path])
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            let items = try #require(try report(reportPath)["items"] as? [[String: Any]])
            for item in items {
                let facts = try #require(item["facts"] as? [String: Any], "\(run): \(item)")
                for (key, value) in expected { #expect("\(facts[key] ?? "missing")" == "\(value)", "\(run) \(key)") }
                #expect(facts["alpha"] as? Bool == false, "\(run)")
                let palette = facts["palette"] as? [[String: Any]]
                #expect(palette?.count == 1 && palette?.first?["share"] as? Double == 1, "\(run)")
                #expect((facts["thumbhash"] as? String).flatMap { Data(base64Encoded: $0) }?.count ?? 0 >= 5, "\(run)")
            }
            // Again: the stored output is reused without decoding. The list names the source twice:
            // whichever line runs first makes it (processed_hit), the other is a duplicate of that,
            // which asks no cache (off).
            if run == "again" {
                let outcomes = Set(items.compactMap { ($0["cache"] as? [String: Any])?["data"] as? String })
                #expect(outcomes == ["processed_hit", "off"], "\(outcomes)")
                #expect(items.filter { $0["duplicate"] as? Bool == true }.count == 1)
            }
            // The sidecar, named after the source ({stem}-{hash8}.json) and listed last in the
            // item's outputs, holds the same facts.
            let outputs = try #require(items.first?["outputs"] as? [String])
            #expect(outputs.count == 2 && outputs[1].hasSuffix(".json"), "\(run): \(outputs)")
            #expect(((outputs[1] as NSString).lastPathComponent).range(of: "^flat-[0-9a-f]{8}\\.json$", options: .regularExpression) != nil)
            let sidecar = URL(fileURLWithPath: outputs[1])
            let written = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: sidecar)) as? [String: Any], "\(run)")
            #expect(written["blurhash"] as? String == "B36wUFp1fQpMfkfQ" && written["dominant_color"] as? String == "#3a7bd5", "\(run)")
            try FileManager.default.removeItem(at: sidecar)
        }
        // The contact sheet shows the dominant colour behind each picture.
        let sheet = dir.appendingPathComponent("sheet.html")
        let made = try await pipelinectl(["report", dir.appendingPathComponent("first.json").path, "--html", sheet.path], in: dir)
        #expect(made.status == 0, "\(made.stderr)")
        #expect(try String(contentsOf: sheet, encoding: .utf8).contains("<div class=\"pic\" style=\"background:#3a7bd5\" data-placeholder=\"#3a7bd5\">"))
        await server.stop()
    }

    /// `metadata:` through the whole run: the output keeps the copyright and loses the GPS
    /// position; a run with another policy makes its output again rather than reusing the stored
    /// one, which carries the first policy's metadata.
    @Test func metadataPolicyDecidesWhatOutputsCarry() async throws {
        let dir = try Fixtures.temporaryDirectory("metadata")
        let photo = dir.appendingPathComponent("photo.jpg")
        try Fixtures.jpeg(400, 300).write(to: photo)
        let tagged = try await Command.run("/usr/bin/exiftool", [
            "-q", "-overwrite_original", "-Copyright=(c) Ann", "-Make=Canon", "-GPSLatitude=48.85", "-GPSLatitudeRef=N", photo.path,
        ])
        try #require(tagged.status == 0, "\(tagged.stderr)")
        let server = try await TestServer.start()
        server.serve("/photo.jpg", CacheableResource(body: try Data(contentsOf: photo),
                                                     headers: ["Cache-Control": "max-age=3600", "Content-Type": "image/jpeg"]))
        let list = dir.appendingPathComponent("list.txt")
        try "\(server.url("/photo.jpg"))\n".write(to: list, atomically: true, encoding: .utf8)
        for (run, section, expected) in [("copyright", "metadata: { keep: [icc, copyright] }\n", "(c) Ann|-|-"),
                                         ("default", "", "-|-|-"), ("gps", "metadata: { keep: [gps] }\n", "-|-|48.85")] {
            let pipeline = try thumbnailsPipeline(in: dir, named: "\(run).yaml") { $0.replacingOccurrences(of: "\ntests:", with: "\n\(section)tests:") }
            let reportPath = dir.appendingPathComponent("\(run).json")
            let result = try await pipelinectl(["run", pipeline.path, list.path, "--report", reportPath.path])
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            let items = try #require(try report(reportPath)["items"] as? [[String: Any]])
            let output = try #require((items.first?["outputs"] as? [String])?.first)
            let read = try await Command.run("/usr/bin/exiftool", ["-s3", "-n", "-f", "-p", "$Copyright|$Make|$GPSLatitude", output])
            #expect(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == expected, "\(run)")
            #expect((items.first?["cache"] as? [String: Any])?["data"] as? String != "processed_hit", "\(run): made again")
        }
        await server.stop()
    }

    /// A quality target's choice is reported per output, and again when a later run reuses the
    /// stored output without encoding.
    @Test func theChosenQualityIsReportedAndKeptWithStoredOutputs() async throws {
        let dir = try Fixtures.temporaryDirectory("target")
        let photo = dir.appendingPathComponent("photo.png")
        try Fixtures.image("rose:", format: "PNG").write(to: photo)
        let list = dir.appendingPathComponent("list.txt")
        try "\(photo.path)\n".write(to: list, atomically: true, encoding: .utf8)
        let pipeline = try thumbnailsPipeline(in: dir, named: "target.yaml") {
            $0.replacingOccurrences(of: "    quality: 82", with: "    quality: { target_ssim: 0.97, min: 40, max: 95 }")
        }
        var first: [String: Any]?
        for run in ["first", "again"] {
            let reportPath = dir.appendingPathComponent("\(run).json")
            let result = try await pipelinectl(["run", pipeline.path, list.path, "--report", reportPath.path])
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            let item = try #require((try report(reportPath)["items"] as? [[String: Any]])?.first)
            let encoding = try #require(((item["facts"] as? [String: Any])?["encoding"] as? [[String: Any]])?.first, "\(run): \(item)")
            #expect(encoding["target_met"] as? Bool == true && (encoding["quality"] as? Int).map { (40...95).contains($0) } == true, "\(run)")
            if run == "again" {
                #expect((item["cache"] as? [String: Any])?["data"] as? String == "processed_hit")
                let text = { (facts: [String: Any]) in facts.keys.sorted().map { "\($0)=\(facts[$0]!)" }.joined(separator: ",") }
                #expect(text(encoding) == text(first ?? [:]))
            }
            first = encoding
        }
    }

    /// on_failure: a 404 is made from its alternative source, one whose alternative also fails from
    /// the fallback image, and a failure of another kind stays failed; the fallback is never kept as
    /// the source, so the next run asks for it again.
    @Test func onFailureTriesAlternativesThenTheFallback() async throws {
        let dir = try Fixtures.temporaryDirectory("onfailure")
        let server = try await TestServer.start()
        server.serve("/backup/gone.jpg", try Fixtures.jpeg(400, 300))
        server.serve("/missing.jpg", Data("not here".utf8), status: .notFound, contentType: "text/plain")
        server.serve("/gone.jpg", Data("not here".utf8), status: .notFound, contentType: "text/plain")
        server.serve("/page.jpg", Data("<html><body>hello</body></html>".utf8), contentType: "text/html")
        let placeholder = dir.appendingPathComponent("placeholder.png")
        try Fixtures.image("xc:#808080", width: 600, height: 600, format: "PNG").write(to: placeholder)
        let pipeline = try thumbnailsPipeline(in: dir, named: "p.yaml") {
            $0.replacingOccurrences(of: "\ntests:", with: """

            on_failure:
              kinds: ["http_status:404"]
              alternatives: ["\(server.url("/backup"))/{name}"]
              fallback: \(placeholder.path)

            tests:
            """)
        }
        let list = dir.appendingPathComponent("list.txt")
        try [server.url("/gone.jpg"), server.url("/missing.jpg"), server.url("/page.jpg")].joined(separator: "\n")
            .write(to: list, atomically: true, encoding: .utf8)
        let reportPath = dir.appendingPathComponent("r.json")
        let result = try await pipelinectl(["run", pipeline.path, list.path, "--report", reportPath.path])
        #expect(result.status == 1, "\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("3 items: 2 ok, 1 failed, 0 skipped (1 from an alternative source; 1 from the fallback image)"), "\(result.stdout)")
        let report = try report(reportPath)
        let items = try #require(report["items"] as? [[String: Any]])
        try #require(items.count == 3)
        #expect(items[0]["status"] as? String == "ok" && items[0]["alternative"] as? String == server.url("/backup/gone.jpg"))
        #expect((items[0]["recovered_from"] as? [String: Any])?["message"] as? String == "HTTP 404 Not Found")
        #expect(items[0]["fallback"] == nil && items[0]["error"] is NSNull)
        #expect(items[1]["status"] as? String == "ok" && items[1]["fallback"] as? Bool == true && items[1]["alternative"] == nil)
        #expect((items[1]["recovered_from"] as? [String: Any])?["kind"] as? String == "http_status")
        #expect(items[1]["width"] as? Int == 256 && items[1]["height"] as? Int == 256)
        let fallbackOutput = try #require((items[1]["outputs"] as? [String])?.first)
        #expect(fallbackOutput.contains("missing-"))  // under the item's own name
        #expect(try await Identified.file(fallbackOutput) == Identified(format: "JPEG", width: 256, height: 256))
        #expect(items[2]["status"] as? String == "failed" && (items[2]["error"] as? [String: Any])?["kind"] as? String == "not_an_image")
        let summary = try #require(report["summary"] as? [String: Any])
        #expect(summary["alternatives"] as? Int == 1 && summary["fallbacks"] as? Int == 1)
        // Again: the alternative's bytes are cached, the fallback is not, so the source is asked again.
        let missingBefore = server.requests("/missing.jpg")
        let again = try await pipelinectl(["run", pipeline.path, list.path, "--report", reportPath.path])
        #expect(again.stdout.contains("0 ok, 2 kept, 1 failed, 0 skipped (1 from an alternative source; 1 from the fallback image)"), "\(again.stdout)")
        #expect(server.requests("/missing.jpg") == missingBefore + 1)
        #expect(server.requests("/backup/gone.jpg") == 1)
        await server.stop()
    }

    @Test func badItemsFailAloneWithTheirKindAndExitOne() async throws {
        let server = try await TestServer.start()
        server.serve("/ok.jpg", try Fixtures.jpeg(640, 480))
        let dir = try Fixtures.temporaryDirectory("e2e")
        let text = dir.appendingPathComponent("notes.jpg")
        try Data("just some text, not an image\n".utf8).write(to: text)
        let list = dir.appendingPathComponent("urls.txt")
        try [server.url("/ok.jpg"), server.url("/gone.jpg"), "notes.jpg"].joined(separator: "\n")
            .write(to: list, atomically: true, encoding: .utf8)
        let reportPath = dir.appendingPathComponent("report.json")
        let result = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path, "--report", reportPath.path])
        #expect(result.status == 1)
        #expect(result.stdout.contains("3 items: 1 ok, 2 failed"))
        #expect(result.stdout.contains("\(server.url("/gone.jpg")): load (http) http_status: HTTP 404 Not Found"))
        #expect(result.stdout.contains("notes.jpg: decode (imagemagick) not_an_image: the content is text, not an image"))
        let items = try #require(try report(reportPath)["items"] as? [[String: Any]])
        try #require(items.count == 3)
        #expect(items.map { $0["status"] as? String } == ["ok", "failed", "failed"])
        #expect((items[1]["error"] as? [String: Any])?["kind"] as? String == "http_status")
        #expect((items[1]["error"] as? [String: Any])?["plugin"] as? String == "http")
        #expect((items[2]["error"] as? [String: Any])?["kind"] as? String == "not_an_image")
        #expect(items[0]["error"] is NSNull)
        let output = try #require((items[0]["outputs"] as? [String])?.first)
        #expect(try await Identified.file(output) == Identified(format: "JPEG", width: 256, height: 192))
        await server.stop()
    }

    @Test func invalidPipelineExitsTwoAndRunsNothing() async throws {
        let dir = try Fixtures.temporaryDirectory("e2e")
        let pipeline = dir.appendingPathComponent("bad.yaml")
        try """
            version: 1
            processors:
              - resize: { width: wide }
            encoder:
              jpeg:
                qualty: 80
            output:
              dir: \(dir.path)/out
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let list = dir.appendingPathComponent("urls.txt")
        try "a.jpg\n".write(to: list, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["run", pipeline.path, list.path])
        #expect(result.status == 2)
        #expect(result.stderr.contains("\(pipeline.path):3:22: error: expected an integer for 'processors.0.resize.width', got 'wide'\n  - resize: { width: wide }\n                     ^"))
        #expect(result.stderr.contains("\(pipeline.path):6:5: error: unknown option 'encoder.jpeg.qualty'; did you mean 'quality'?"))
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("out").path))
        let validate = try await pipelinectl(["validate", pipeline.path])
        #expect(validate.status == 1)
    }

    @Test func yamlSyntaxErrorIsReportedWithPosition() async throws {
        let dir = try Fixtures.temporaryDirectory("e2e")
        let pipeline = dir.appendingPathComponent("broken.yaml")
        try "encoder:\n  jpeg: {quality: 80\n".write(to: pipeline, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["validate", pipeline.path])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("\(pipeline.path):3:1: error: invalid YAML: did not find expected ',' or '}'"))
    }

    @Test func examplePipelinesAreValidAndFoundByName() async throws {
        let result = try await pipelinectl(["validate", "thumbnails", "avatars.yaml", "pipelines/webp-previews.yaml"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("pipelines/thumbnails.yaml: ok (thumbnails)"))
        #expect(result.stdout.contains("pipelines/avatars.yaml: ok (avatars)"))
        // A directory, as `serve DIR` takes it: every pipeline file in it.
        let directory = try await pipelinectl(["validate", "pipelines/"])
        #expect(directory.status == 0, "\(directory.stderr)")
        let files = try FileManager.default.contentsOfDirectory(atPath: Fixtures.packageRoot.appendingPathComponent("pipelines").path)
            .filter { $0.hasSuffix(".yaml") }
        #expect(files.count > 3 && files.allSatisfy { directory.stdout.contains($0 + ": ok") }, "\(directory.stdout)")
    }

    @Test func missingPipelineOrListOrBadArgumentsExitTwo() async throws {
        let missing = try await pipelinectl(["run", "no-such-pipeline", "x.txt"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("error: no pipeline 'no-such-pipeline' (looked for no-such-pipeline, pipelines/no-such-pipeline, pipelines/no-such-pipeline.yaml)"))
        let noList = try await pipelinectl(["run", "thumbnails", "/nonexistent/urls.txt"])
        #expect(noList.status == 2)
        #expect(noList.stderr.contains("cannot open the URL list '/nonexistent/urls.txt'"))
        #expect(try await pipelinectl(["run", "thumbnails"]).status == 2)
        #expect(try await pipelinectl(["frobnicate"]).status == 2)
    }

    @Test func readsTheListFromStandardInput() async throws {
        let dir = try Fixtures.temporaryDirectory("e2e")
        let image = dir.appendingPathComponent("in.png")
        try Fixtures.alphaPNG(300, 100).write(to: image)
        let pipeline = try thumbnailsPipeline(in: dir)
        let result = try await pipelinectl(["run", pipeline, "-", "--output", dir.appendingPathComponent("o2").path],
                                     stdin: Data("\(image.path)\n".utf8))
        #expect(result.status == 0, "\(result.stderr)")
        let written = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("o2").path)
            .filter { $0 != ".pipelinectl" }  // the completion manifest, for --resume
        #expect(written.count == 1 && written[0].hasPrefix("in-"))
        #expect(try await Identified.file(dir.appendingPathComponent("o2/\(written[0])").path)
            == Identified(format: "JPEG", width: 256, height: 85))
    }

    @Test func committedPluginReferenceIsCurrent() async throws {
        let result = try await pipelinectl(["plugins", "--markdown"])
        let committed = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("docs/plugins.md"), encoding: .utf8)
        #expect(result.stdout == committed, "docs/plugins.md is stale: run `make docs`")
    }

    @Test func explainPrintsAValidPipeline() async throws {
        let result = try await pipelinectl(["explain", "thumbnails"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("  - resize:  # cache key part: resize(256x256,fit,upscale=false,lanczos)"))
        #expect(result.stdout.contains("    max_pixels: 50MP"))  // a default filled in, normalised
        let dir = try Fixtures.temporaryDirectory("explain")
        let file = dir.appendingPathComponent("explained.yaml")
        try result.stdout.write(to: file, atomically: true, encoding: .utf8)
        let again = try await pipelinectl(["explain", file.path])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.split(separator: "\n").dropFirst() == result.stdout.split(separator: "\n").dropFirst())
    }

    @Test func pipelineTestsReportWhatFailed() async throws {
        let dir = try Fixtures.temporaryDirectory("ptest")
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            processors:
              - resize: { width: 100, height: 100 }
            encoder: png
            tests:
              - name: right
                input: "rose:"
                expect: { width: 70, height: 46, format: PNG }
              - name: wrong
                input: "plasma:"
                size: 400x300
                expect: { width: 90, format: jpg }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["test", pipeline.path])
        #expect(result.status == 1)
        #expect(result.stdout.contains("  ok   right\n  FAIL wrong\n       output: width expected 90, got 100\n       output: format expected JPEG, got PNG\n"))
        #expect(result.stdout.hasSuffix("1 passed, 1 failed\n"))
    }

    /// `fallback` and `facts` expectations, each failing with what it found.
    @Test func pipelineTestsCheckFallbackAndFacts() async throws {
        let dir = try Fixtures.temporaryDirectory("ptest-facts")
        let placeholder = dir.appendingPathComponent("placeholder.png")
        try Fixtures.image("xc:#808080", width: 50, height: 50, format: "PNG").write(to: placeholder)
        try "not an image".write(to: dir.appendingPathComponent("notes.txt"), atomically: true, encoding: .utf8)
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            processors:
              - analyze: { blurhash: none, palette: 1 }
              - resize: { width: 100, height: 100 }
            encoder: { jpeg: { quality: { target_ssim: 0.95 } } }
            on_failure: { fallback: \(placeholder.path) }
            tests:
              - name: right
                input: "xc:#3a7bd5"
                size: 40x40
                expect: { fallback: false, facts: { dominant_color: "#3a7bd5", "encoding.0.target_met": true, width: 40 } }
              - name: wrong
                input: notes.txt
                expect: { fallback: false, facts: { dominant_color: "#000000", "encoding.3.quality": 80 } }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["test", pipeline.path])
        #expect(result.status == 1)
        #expect(result.stdout.contains("""
              ok   right
              FAIL wrong
                   expected the source, but the fallback image was used (the content is text, not an image)
                   fact dominant_color: expected #000000, got #808080
                   fact encoding.3.quality: expected 80, but the item has none

            """), "\(result.stdout)")
    }

    @Test func validateAsJSON() async throws {
        let dir = try Fixtures.temporaryDirectory("json")
        let pipeline = dir.appendingPathComponent("p.yaml")
        try "encoder:\n  jpeg: { qualty: 1 }\n".write(to: pipeline, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["validate", "--format", "json", pipeline.path])
        #expect(result.status == 1)
        let list = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]]
        #expect(list?.count == 1)
        #expect(list?.first?["line"] as? Int == 2 && list?.first?["column"] as? Int == 11)
        #expect(list?.first?["severity"] as? String == "error")
    }

    @Test func describeAndSchemaComeFromTheSpecs() async throws {
        let describe = try await pipelinectl(["plugins", "describe", "jpeg"])
        #expect(describe.stdout.contains("jpeg (encoder)") && describe.stdout.contains("  quality  (integer or map of target_ssim, min, max, default 82, 1 – 100)"))
        // The pipeline file's own sections are described the same way.
        let output = try await pipelinectl(["plugins", "describe", "output"])
        #expect(output.status == 0 && output.stdout.hasPrefix("output (pipeline file section)") && output.stdout.contains("  existing  (replace_if_changed|keep|replace"))
        let variants = try await pipelinectl(["plugins", "describe", "variants"])
        #expect(variants.stdout.contains("  processors  (list of processors)") && variants.stdout.contains("  encoder  (an encoder)"))
        for section in ["metadata", "on_failure", "serve", "params"] {
            let described = try await pipelinectl(["plugins", "describe", section])
            #expect(described.status == 0 && described.stdout.contains("(pipeline file section)"), "\(section): \(described.stderr)")
        }
        let typo = try await pipelinectl(["plugins", "describe", "outptu"])
        #expect(typo.status == 2 && typo.stderr.contains("no plugin or pipeline file section named 'outptu'; did you mean 'output'?"))
        let schema = try await pipelinectl(["schema"])
        let object = try JSONSerialization.jsonObject(with: Data(schema.stdout.utf8)) as? [String: Any]
        let properties = object?["properties"] as? [String: Any]
        #expect(Set(properties?.keys.map { $0 } ?? []) == Set(PipelineFile.topLevelKeys))
        let committed = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("docs/pipeline.schema.json"), encoding: .utf8)
        #expect(schema.stdout == committed, "docs/pipeline.schema.json is stale: run `make docs`")
    }

    /// `work`'s queue options are the queue plugin's own, checked by its spec before anything is
    /// reached: an unknown name with the names there are, a value out of range with the range,
    /// an option of the other queue kind, a list that is not a queue. The earlier flags still
    /// work and name their new spelling.
    @Test func workTakesTheQueuePluginsOptions() async throws {
        let pipeline = try thumbnailsPipeline(in: try Fixtures.temporaryDirectory("queue-options"))
        let queue = "postgres://nobody@127.0.0.1:\(try MotoServer.freePort())/none"
        let unknown = try await pipelinectl(["work", pipeline, "--queue", queue, "--queue-option", "visibilty=90s"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("unknown option 'visibilty' for 'postgres'; did you mean 'visibility'?"), "\(unknown.stderr)")
        let range = try await pipelinectl(["work", pipeline, "--queue", queue, "--queue-option", "max_attempts=0"])
        #expect(range.status == 2 && range.stderr.contains("'max_attempts' must be"), "\(range.stderr)")
        let otherKind = try await pipelinectl(["work", pipeline, "--queue", queue, "--dead-letter", "sqs://1/failed"])
        #expect(otherKind.status == 2 && otherKind.stderr.contains("unknown option 'dead_letter' for 'postgres'"), "\(otherKind.stderr)")
        let notAQueue = try await pipelinectl(["work", pipeline, "--queue", "urls.txt"])
        #expect(notAQueue.status == 2 && notAQueue.stderr.contains("'file' lists are not queues"), "\(notAQueue.stderr)")
        // The old spelling is taken, and named: the run then fails to reach the (closed) port.
        let old = try await pipelinectl(["work", pipeline, "--queue", queue, "--visibility", "90s", "--until-empty"])
        #expect(old.stderr.contains("warning: --visibility is deprecated; use --queue-option visibility=90s"), "\(old.stderr)")
        #expect(old.status == 3 || old.status == 2, "\(old.status): \(old.stderr)")
    }

    /// A list of a 404, a comment, a blank line and eight images, on a loopback server.
    ///
    /// With `holdImages`, each image is answered only once the condition holds (the test's
    /// event: the progress line drawn on the terminal after the 404, say), and the 404 first. (Only
    /// for a pipeline with a load slot for every line: with fewer, the images could hold every slot
    /// waiting.)
    func slowList(holdImages: (@Sendable () async -> Void)? = nil) async throws -> (dir: URL, list: URL, server: TestServer) {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(300, 200)
        server.route("/missing.jpg") { _ in HTTPResponse(statusCode: .notFound) }
        for i in 0..<8 {
            server.route("/\(i).jpg") { _ in
                await holdImages?()
                return HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body)
            }
        }
        let dir = try Fixtures.temporaryDirectory("progress")
        let list = dir.appendingPathComponent("urls.txt")
        try ([server.url("/missing.jpg"), "# a comment", ""] + (0..<8).map { server.url("/\($0).jpg") })
            .joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        return (dir, list, server)
    }

    @Test func progressLineIsDrawnOnATerminal() async throws {
        let screenFile = Mutex<URL?>(nil)
        // The images wait until the terminal shows the line redrawn after the 404: so the line is
        // drawn while items are in flight, however loaded the machine (bounded only against a hang).
        let (dir, list, server) = try await slowList {
            for _ in 0..<1200 {
                if let file = screenFile.withLock({ $0 }), let screen = try? String(contentsOf: file, encoding: .utf8),
                   screen.contains("failed 1") { return }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        screenFile.withLock { $0 = dir.appendingPathComponent("typescript") }
        let pipeline = try thumbnailsPipeline(in: dir, named: "slots.yaml") { $0.replacingOccurrences(of: "max_concurrent: 8", with: "max_concurrent: 16") }.path
        let command = "\(Self.binary) run \(pipeline) \(list.path) --item-timeout 30s"
        // `script` runs the command on a pseudo-terminal, as an interactive shell would.
        let result = try await Command.run("/usr/bin/script", ["-qfec", command, dir.appendingPathComponent("typescript").path])
        #expect(result.status == 1)  // one item is a 404
        let screen = result.stdout
        #expect(screen.contains("\r\u{1B}[K"))
        #expect(screen.contains("/9 ("))  // the total, counted from the list (comments and blanks skipped)
        #expect(screen.contains("items/s"))
        #expect(screen.contains("failed 1"))
        await server.stop()
    }

    @Test func noControlCharactersWhenNotATerminal() async throws {
        let (dir, list, server) = try await slowList()
        let result = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path])
        #expect(result.status == 1)
        #expect(!result.stderr.contains("\u{1B}") && !result.stdout.contains("\u{1B}") && !result.stderr.contains("\r"))
        let plain = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path, "--progress", "plain", "--log-level", "error"])
        #expect(!plain.stderr.contains("\u{1B}"))
        await server.stop()
    }

    @Test func jsonlReportIsStreamedAndReadBack() async throws {
        let (dir, list, server) = try await slowList()
        let report = dir.appendingPathComponent("run.jsonl")
        _ = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path, "--report", report.path, "--report-format", "jsonl"])
        let lines = try String(contentsOf: report, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 11)  // run, 9 items, summary
        #expect(lines.first?.contains("\"report_version\":3") == true && lines.first?.contains("\"type\":\"run\"") == true)
        #expect(lines.last?.contains("\"type\":\"summary\"") == true)
        // A killed run leaves the lines written so far; `report` still reads them.
        let killed = dir.appendingPathComponent("killed.jsonl")
        try lines.prefix(4).joined(separator: "\n").write(to: killed, atomically: true, encoding: .utf8)
        let partial = try await pipelinectl(["report", killed.path])
        #expect(partial.status == 0)
        #expect(partial.stdout.hasPrefix("thumbnails: 3 items:"))
        let failed = try await pipelinectl(["report", report.path, "--failed", "--sources-only"])
        #expect(failed.status == 0)
        #expect(failed.stdout == server.url("/missing.jpg") + "\n")
        await server.stop()
    }

    @Test func metricsMatchTheReportAndLogsCanBeJSON() async throws {
        let (dir, list, server) = try await slowList()
        let report = dir.appendingPathComponent("run.json"), metrics = dir.appendingPathComponent("run.prom")
        let result = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path, "--report", report.path,
                                            "--metrics", metrics.path, "--log-format", "json"])
        #expect(result.status == 1)
        // Prometheus text exposition, parsed back: `name{labels} value` per line.
        var values: [String: Double] = [:]
        for line in try String(contentsOf: metrics, encoding: .utf8).split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
        }
        let saved = try Reports.read(report)
        let summary = try #require(saved["summary"] as? [String: Any])
        let stats = try #require(saved["stats"] as? [String: Any])
        #expect(((stats["stages_ms"] as? [String: Any])?["decode"] as? [String: Any])?["count"] as? Int == 8)
        #expect(((stats["cache"] as? [String: Any])?["image"] as? [String: Any])?["miss"] as? Int == 8)
        #expect(values["pipelinectl_items_total{pipeline=\"thumbnails\",status=\"ok\"}"] == Double(summary["ok"] as? Int ?? -1))
        let header = try #require(saved["run"] as? [String: Any])
        let build = "pipelinectl_build_info{version=\"\(header["version"] as? String ?? "")\",revision=\"\(header["revision"] as? String ?? "")\"}"
        #expect(values[build] == 1, "\(values.keys.filter { $0.contains("build") })")
        #expect(values["pipelinectl_items_total{pipeline=\"thumbnails\",status=\"failed\"}"] == Double(summary["failed"] as? Int ?? -1))
        #expect(values["pipelinectl_bytes_in_total{pipeline=\"thumbnails\"}"] == Double(summary["bytes_in"] as? Int ?? -1))
        #expect(values["pipelinectl_bytes_out_total{pipeline=\"thumbnails\"}"] == Double(summary["bytes_out"] as? Int ?? -1))
        #expect(values["pipelinectl_item_failures_total{pipeline=\"thumbnails\",stage=\"load\",kind=\"http_status\"}"] == 1)
        #expect(values["pipelinectl_stage_duration_seconds_count{pipeline=\"thumbnails\",stage=\"decode\"}"] == 8)
        // One JSON object per failed item on stderr.
        let logs = result.stderr.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(logs.count == 1 && logs.first?["kind"] as? String == "http_status" && logs.first?["level"] as? String == "warning")
        await server.stop()
    }

    @Test func reportSummarisesASavedReport() async throws {
        let dir = try Fixtures.temporaryDirectory("report")
        let file = dir.appendingPathComponent("saved.json")
        func item(_ i: Int, _ status: String, decode: Double, error: String = "null") -> String {
            """
            {"source": "https://img.test/\(i).jpg", "index": \(i), "status": "\(status)", "outputs": [], "error": \(error),
             "width": 256, "height": 192, "bytes_in": 1000, "bytes_out": 100,
             "timings_ms": {"load": 10, "decode": \(decode), "process": 2, "encode": 1}, "cache": {"data": "miss", "image": "miss"}}
            """
        }
        let notFound = #"{"stage": "load", "plugin": "http", "kind": "http_status", "message": "HTTP 404 Not Found"}"#
        let items = (1...18).map { item($0, "ok", decode: Double($0)) } + (19...22).map { item($0, "failed", decode: 0, error: notFound) }
        try """
            {"report_version": 1, "pipeline": "shop", "summary": {"total": 22, "ok": 18, "failed": 4, "skipped": 0,
             "wall_seconds": 2.0, "bytes_in": 22000, "bytes_out": 1800}, "items": [\(items.joined(separator: ","))]}
            """.write(to: file, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["report", file.path])
        #expect(result.stdout == """
            shop: 22 items: 18 ok, 4 failed, 0 skipped in 2.00s (11.0 items/s)
            bytes in 22.0 KB, out 1.8 KB
            stage ms     p50     p95     max
              load        10.0    10.0    10.0
              decode       9.0    18.0    18.0
              process      2.0     2.0     2.0
              encode       1.0     1.0     1.0
            cache: data 0 hit, 22 miss (0% hit); image 0 hit, 22 miss (0% hit)
            failures by kind: http_status 4
              https://img.test/19.jpg: load (http) http_status: HTTP 404 Not Found
              https://img.test/20.jpg: load (http) http_status: HTTP 404 Not Found
              https://img.test/21.jpg: load (http) http_status: HTTP 404 Not Found
                ... 1 more of this kind

            """)
    }

    /// The contact sheet in a real browser: it loads without script errors, has one tile per item,
    /// and the failed tiles carry their kind. A screenshot is kept for a person to look at.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/bin/chromium"), "needs Debian's chromium (make test installs it)"))
    func contactSheetRendersInChromium() async throws {
        let server = try await TestServer.start()
        let dir = try Fixtures.temporaryDirectory("sheet")
        var lines: [String] = []
        for i in 0..<6 {
            server.serve("/p\(i).jpg", try Fixtures.image(i % 2 == 0 ? "plasma:" : "gradient:teal-gold", width: 400 + 50 * i, height: 300))
            lines.append(server.url("/p\(i).jpg"))
        }
        server.serve("/page.jpg", Data("<html>gone</html>".utf8), contentType: "text/html")
        lines += [server.url("/missing.jpg"), server.url("/page.jpg")]
        let list = dir.appendingPathComponent("urls.txt")
        try lines.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let report = dir.appendingPathComponent("run.json")
        let run = try await pipelinectl(["run", try thumbnailsPipeline(in: dir), list.path, "--report", report.path, "--progress", "none"], in: dir)
        #expect(run.status == 1)
        let sheet = dir.appendingPathComponent("sheet/index.html")
        let made = try await pipelinectl(["report", report.path, "--html", sheet.path], in: dir)
        #expect(made.status == 0, "\(made.stderr)")
        let html = try String(contentsOf: sheet, encoding: .utf8)
        // Self-contained: no external script, stylesheet or image.
        #expect(!html.contains("<script src") && !html.contains("<link") && !html.contains("src=\"http"))
        let browser = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
        let dom = try await Command.run("/usr/bin/chromium", browser + ["--dump-dom", sheet.absoluteString])
        #expect(dom.stdout.contains("data-ready=\"yes\""), "the page's script did not finish: \(dom.stderr.suffix(2000))")
        #expect(!dom.stderr.contains("Uncaught"), "\(dom.stderr)")
        #expect(dom.stdout.components(separatedBy: "class=\"tile ").count - 1 == 8)
        #expect(dom.stdout.contains("data-status=\"failed\" data-kind=\"http_status\""))
        #expect(dom.stdout.contains("data-status=\"failed\" data-kind=\"not_an_image\""))
        #expect(dom.stdout.contains("6 of 8 shown") || dom.stdout.contains("8 of 8 shown"))
        // A long source is cut in its directory part: the file name stays whole.
        #expect(dom.stdout.contains("<span class=\"name\">p5.jpg</span>") && dom.stdout.contains("<span class=\"name\">missing.jpg</span>"))
        let shot = dir.appendingPathComponent("sheet.png")
        _ = try await Command.run("/usr/bin/chromium", browser + ["--hide-scrollbars", "--window-size=1280,900",
                                                                  "--screenshot=\(shot.path)", sheet.absoluteString])
        #expect(try await Identified.file(shot.path) == Identified(format: "PNG", width: 1280, height: 900))
        // Every image the sheet links to exists, relative to the sheet.
        let sources = html.components(separatedBy: "<img loading=\"lazy\" src=\"").dropFirst().map { String($0.prefix { $0 != "\"" }) }
        #expect(sources.count == 6)
        for src in sources {
            let path = sheet.deletingLastPathComponent().appendingPathComponent(src.removingPercentEncoding ?? src).standardizedFileURL.path
            #expect(FileManager.default.fileExists(atPath: path), "\(src)")
        }
        await server.stop()
    }

    /// 30 images, 300 ms each, two transfers at a time, no data cache: a run of about 5 s. Each
    /// request carries the `X-Run` header set from `$RUN`, counted in `runs`.
    func resumableSetup() async throws -> (dir: URL, pipeline: String, list: URL, server: TestServer, runs: EventLog) {
        let server = try await TestServer.start()
        let dir = try Fixtures.temporaryDirectory("resume")
        var urls: [String] = []
        let runs = EventLog()
        for i in 0..<30 {
            let body = try Fixtures.image("gradient:navy-gold", width: 300 + i, height: 200)
            server.route("/r\(i).jpg") { request in
                runs.record(request.headers[HTTPHeader("X-Run")] ?? "")
                try await Task.sleep(for: .milliseconds(300))
                return HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body)
            }
            urls.append(server.url("/r\(i).jpg"))
        }
        let list = dir.appendingPathComponent("urls.txt")
        try urls.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            loader:
              http: { allow_loopback: true, max_concurrent: 2, headers: { X-Run: "${RUN:-first}" } }
            processors:
              - resize: { width: 64 }
            encoder: jpeg
            output:
              dir: \(dir.path)/out
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        return (dir, pipeline.path, list, server, runs)
    }

    func outputs(in dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("out").path)) ?? [])
            .filter { !$0.hasPrefix(".") }
    }

    func waitForOutputs(_ count: Int, in dir: URL) async throws {
        for _ in 0..<200 where outputs(in: dir).count < count { try await Task.sleep(for: .milliseconds(50)) }
    }

    @Test func ctrlCStopsGracefullyAndWritesTheReport() async throws {
        let (dir, pipeline, list, server, _) = try await resumableSetup()
        let report = dir.appendingPathComponent("run.json")
        let process = try Command.start(Self.binary, ["run", pipeline, list.path, "--report", report.path, "--progress", "none"])
        try await waitForOutputs(2, in: dir)
        kill(process.process.processIdentifier, SIGINT)
        let result = try await process.wait()
        #expect(result.status == 130)
        #expect(result.stdout.contains("stopped early: "))
        #expect(result.stderr.contains("stopping: no new items"))
        let saved: [String: Any]? = try Reports.read(report)
        let summary = try #require(saved?["summary"] as? [String: Any])
        let notStarted = try #require(summary["not_started"] as? Int)
        #expect(notStarted > 0 && (summary["total"] as? Int ?? 0) + notStarted == 30)
        // Items in flight finished; nothing half-written was left.
        let all = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("out").path)
        #expect(!all.contains { $0.hasSuffix(".tmp") })
        #expect(outputs(in: dir).count == summary["ok"] as? Int)
        await server.stop()
    }

    @Test func killedRunIsResumedWithExactlyTheRemainingItems() async throws {
        let (dir, pipeline, list, server, runs) = try await resumableSetup()
        let process = try Command.start(Self.binary, ["run", pipeline, list.path, "--progress", "none"])
        try await waitForOutputs(4, in: dir)
        kill(process.process.processIdentifier, SIGKILL)
        _ = try await process.wait()
        let done = outputs(in: dir).count
        #expect(done >= 4 && done < 30)
        // Requests the killed process sent may still reach the server late; the resumed run's are
        // told apart by their X-Run header.
        let report = dir.appendingPathComponent("resumed.json")
        var environment = ProcessInfo.processInfo.environment
        environment["RUN"] = "resumed"
        let resumed = try await Command.run(Self.binary, ["run", pipeline, list.path, "--resume", "--report", report.path, "--progress", "none"],
                                            environment: environment, directory: Fixtures.packageRoot)
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        let summary = try #require(try Reports.read(report)["summary"] as? [String: Any])
        let skipped = try #require(summary["skipped"] as? Int)
        // Every output recorded before the kill is skipped. One may have been renamed into place but
        // not yet recorded: the resumed run loads its source, finds the output there with the
        // fingerprint it would write, and keeps it (status kept, not written again).
        let kept = summary["kept"] as? Int ?? 0
        #expect(skipped >= done - 1 && skipped <= done && kept <= 1 && skipped + kept <= done)
        #expect((summary["ok"] as? Int ?? 0) + kept == 30 - skipped)
        #expect(runs.count("resumed") == 30 - skipped)
        #expect(outputs(in: dir).count == 30)
        for name in outputs(in: dir) {
            #expect(try await Identified.file(dir.appendingPathComponent("out/\(name)").path).format == "JPEG", "\(name)")
        }
        // A second resume has nothing left to do.
        let again = try await pipelinectl(["run", pipeline, list.path, "--resume", "--progress", "none"])
        #expect(again.stdout.contains("30 items: 0 ok, 0 failed, 30 skipped"))
        await server.stop()
    }

    @Test func twoProcessesShareOneCacheAndTheCacheCommandsWork() async throws {
        let server = try await TestServer.start()
        let dir = try Fixtures.temporaryDirectory("shared")
        var urls: [String] = []
        for i in 0..<40 {
            let body = try Fixtures.image("plasma:", width: 400 + i, height: 300)
            server.route("/s\(i).jpg") { _ in
                try await Task.sleep(for: .milliseconds(20))
                return HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg", HTTPHeader("Cache-Control"): "max-age=3600"], body: body)
            }
            urls.append(server.url("/s\(i).jpg"))
        }
        let list = dir.appendingPathComponent("urls.txt")
        try urls.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            loader:
              http: { allow_loopback: true, max_concurrent: 4 }
            data_cache:
              disk: { path: \(dir.path)/cache, store: all }
            processors:
              - resize: { width: 64 }
            encoder: jpeg
            output:
              dir: \(dir.path)/out
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        // Two runs at once over the same list and cache, writing to different directories.
        let a = try Command.start(Self.binary, ["run", pipeline.path, list.path, "-o", dir.appendingPathComponent("a").path, "--progress", "none"])
        let b = try Command.start(Self.binary, ["run", pipeline.path, list.path, "-o", dir.appendingPathComponent("b").path, "--progress", "none"])
        let (first, second) = (try await a.wait(), try await b.wait())
        #expect(first.status == 0 && second.status == 0, "\(first.stderr)\(second.stderr)")
        for name in ["a", "b"] {
            let files = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent(name).path).filter { $0.hasSuffix(".jpg") }
            #expect(files.count == 40)
        }
        let cacheFiles = try FileManager.default.subpathsOfDirectory(atPath: dir.appendingPathComponent("cache").path)
        #expect(!cacheFiles.contains { $0.hasSuffix(".tmp") })
        // A third run with the server gone: every item from whole processed entries, no request.
        await server.stop()
        let requests = server.totalRequests
        let report = dir.appendingPathComponent("warm.json")
        let warm = try await pipelinectl(["run", pipeline.path, list.path, "-o", dir.appendingPathComponent("c").path,
                                          "--report", report.path, "--progress", "none"])
        #expect(warm.status == 0, "\(warm.stdout)\(warm.stderr)")
        #expect(server.totalRequests == requests)
        let items = try #require(try self.report(report)["items"] as? [[String: Any]])
        #expect(items.count == 40 && items.allSatisfy { ($0["cache"] as? [String: Any])?["data"] as? String == "processed_hit" })
        #expect(warm.stdout.contains("40 processed hit"))

        let stats = try await pipelinectl(["cache", "stats", pipeline.path, "--json"])
        let figures = try #require(try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any])
        #expect(figures["entries"] as? Int == 80 && figures["originals"] as? Int == 40 && figures["outputs"] as? Int == 40)
        let lastRun = try #require((figures["last_run"] as? [String: Any])?["counts"] as? [String: Any])
        #expect(lastRun["processed_hit"] as? Int == 40)
        let text = try await pipelinectl(["cache", "stats", pipeline.path])
        #expect(text.stdout.contains("entries:  80 (40 loaded, 40 encoded outputs)"))
        #expect(text.stdout.contains("(hit rate 100%)"))

        let removed = try await pipelinectl(["cache", "rm", pipeline.path, urls[0]])
        #expect(removed.status == 0 && removed.stdout.contains("removed 2 entries"))
        let again = try await pipelinectl(["cache", "rm", pipeline.path, urls[0]])
        #expect(again.status == 1 && again.stdout.contains("removed 0 entries"))
        let pruned = try await pipelinectl(["cache", "prune", pipeline.path])
        #expect(pruned.status == 0 && pruned.stdout.contains("pruned 0 entries"))
        let notADuration = try await pipelinectl(["cache", "prune", pipeline.path, "--older-than", "soon"])
        #expect(notADuration.status == 2 && notADuration.stderr.contains("--older-than 'soon' is not a duration"))
        #expect(try await pipelinectl(["cache", "prune", pipeline.path, "--older-than", "1d"]).stdout.contains("pruned 0 entries"))
        _ = try await pipelinectl(["cache", "rm", pipeline.path, urls[1]])  // 76 left after this
        let unused = try await pipelinectl(["cache", "prune", pipeline.path, "--older-than", "0s"])
        #expect(unused.stdout.contains("pruned 76 entries"), "\(unused.stdout)")
        let cleared = try await pipelinectl(["cache", "clear", pipeline.path])
        #expect(cleared.stdout.contains("cleared 0 entries"))
        let empty = try await pipelinectl(["cache", "stats", pipeline.path, "--json"])
        #expect(empty.stdout.contains("\"entries\" : 0"))
    }

    @Test func cacheCommandsNeedADataCache() async throws {
        let dir = try Fixtures.temporaryDirectory("nocache")
        let pipeline = dir.appendingPathComponent("p.yaml")
        try "encoder: png\n".write(to: pipeline, atomically: true, encoding: .utf8)
        let result = try await pipelinectl(["cache", "stats", pipeline.path])
        #expect(result.status == 2 && result.stderr.contains("has no data_cache"))
    }

    @Test func pluginsListsEverySlot() async throws {
        let result = try await pipelinectl(["plugins"])
        #expect(result.status == 0)
        for line in ["loader:", "  file ", "  http ", "data_cache:", "  disk ", "decoder:", "  imagemagick ",
                     "processor:", "  resize ", "image_cache:", "  memory ", "encoder:", "  jpeg ", "  png ", "  webp "] {
            #expect(result.stdout.contains(line), "\(line)")
        }
    }
}
