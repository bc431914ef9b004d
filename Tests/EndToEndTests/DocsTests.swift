import Foundation
import Testing
import TestImages

/// The documentation: the generated command reference is current and names every command and
/// option, the site builds with mkdocs --strict (a broken link or anchor fails), and a real
/// browser renders its home page and a guide.
@Suite(.serialized) struct DocsTests {
    static let root = Fixtures.packageRoot

    /// `docs/cli.md` is what docs/tools/cli_reference.py makes from this build's help.
    @Test func theCommandReferenceIsCurrentAndNamesEveryCommandAndOption() async throws {
        let generated = try await Command.run("/usr/bin/env", ["python3", Self.root.appendingPathComponent("docs/tools/cli_reference.py").path, CLITests.binary])
        try #require(generated.status == 0, "\(generated.stderr)")
        let committed = try String(contentsOf: Self.root.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        #expect(generated.stdout == committed, "docs/cli.md is stale: run `make docs`")

        // Every command and every long option the parser knows, found in the reference.
        let dump = try await Command.run(CLITests.binary, ["--experimental-dump-help"])
        let tree = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        var missing: [String] = []
        var count = 0
        func walk(_ command: [String: Any], _ path: [String]) {
            let name = path.joined(separator: " ")
            count += 1
            if !committed.contains("`\(name)`") { missing.append(name) }
            // Hidden options (kept for old scripts, deprecated) are not a user's either.
            for argument in command["arguments"] as? [[String: Any]] ?? [] where argument["shouldDisplay"] as? Bool != false {
                for flag in argument["names"] as? [[String: Any]] ?? [] where flag["kind"] as? String == "long" {
                    let option = "--" + (flag["name"] as? String ?? "")
                    if option != "--help", !committed.contains("`\(option)`") { missing.append("\(name) \(option)") }
                }
            }
            // Hidden commands (bench drivers) are not a user's.
            for sub in command["subcommands"] as? [[String: Any]] ?? [] where sub["commandName"] as? String != "help" && sub["shouldDisplay"] as? Bool != false {
                walk(sub, path + [sub["commandName"] as? String ?? ""])
            }
        }
        walk(try #require(tree["command"] as? [String: Any]), ["pipelinectl"])
        #expect(count >= 15)
        #expect(missing.isEmpty, "not in docs/cli.md: \(missing)")
    }

    /// docs/library.md's Swift is the example apps' code, word for word: each block marked
    /// `<!-- example: NAME -->` is a section `// docs/library.md: NAME` ... `// end` of
    /// examples/HummingbirdApp or examples/VaporApp, which `make test` builds and exercises
    /// (their check.sh). No other Swift block.
    @Test func theLibraryGuidesExamplesAreTheExampleAppsCode() throws {
        let guide = try String(contentsOf: Self.root.appendingPathComponent("docs/library.md"), encoding: .utf8)
        let app = try ["examples/HummingbirdApp/Sources/HummingbirdApp/main.swift", "examples/VaporApp/Sources/VaporApp/main.swift"]
            .map { try String(contentsOf: Self.root.appendingPathComponent($0), encoding: .utf8) }.joined(separator: "\n")
        let parts = guide.components(separatedBy: "```swift\n")
        #expect(parts.count >= 6)
        var names: [String] = []
        for (index, part) in parts.enumerated().dropFirst() {
            let before = parts[index - 1].split(separator: "\n").last.map(String.init) ?? ""
            let code = part.components(separatedBy: "```")[0]
            if before.hasPrefix("<!-- the package manifest") { continue }
            guard before.hasPrefix("<!-- example: "), let name = before.dropFirst(14).split(separator: " ").first else {
                Issue.record("a Swift block in docs/library.md that is not marked as an example: \(code.prefix(80))")
                continue
            }
            names.append(String(name))
            #expect(app.contains("// docs/library.md: \(name)\n" + code + "// end\n"), "block '\(name)' differs from the example app's")
        }
        #expect(names == ["load", "process", "sign", "mount", "serve", "vapor"])
    }

    /// The built-ins table of the pipeline language guide names every registered plugin in its
    /// slot's row (it once left out s3).
    @Test func theBuiltInsTableNamesEveryPlugin() async throws {
        let listed = try await Command.run(CLITests.binary, ["plugins", "--json"])
        let plugins = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        let guide = try String(contentsOf: Self.root.appendingPathComponent("docs/pipelines.md"), encoding: .utf8)
        let rows = guide.split(separator: "\n").filter { $0.hasPrefix("| ") }
        #expect(plugins.count >= 45)
        for plugin in plugins {
            let name = plugin["name"] as? String ?? "", slot = (plugin["slot"] as? String ?? "").replacingOccurrences(of: "_", with: " ")
            let row = rows.first { $0.hasPrefix("| \(slot) |") || $0.hasPrefix("| \(slot) (") }
            #expect(row?.contains("`\(name)`") == true, "docs/pipelines.md: the \(slot) row lacks \(name)")
        }
    }

    /// The report's fields and the metrics a run writes are all in the operating guide: a real
    /// run's report and metrics file are read back, and each key and metric name looked up there.
    @Test func everyReportFieldAndMetricIsDocumented() async throws {
        let dir = try Fixtures.temporaryDirectory("documented")
        defer { try? FileManager.default.removeItem(at: dir) }
        try Fixtures.image("plasma:", width: 300, height: 200).write(to: dir.appendingPathComponent("a.jpg"))
        try "a.jpg\nmissing.jpg\n".write(to: dir.appendingPathComponent("urls.txt"), atomically: true, encoding: .utf8)
        try """
            version: 1
            name: documented
            processors: [ { analyze: {} }, { resize: { width: 64 } } ]
            encoder: jpeg
            output: { dir: \(dir.path)/out }
            """.write(to: dir.appendingPathComponent("p.yaml"), atomically: true, encoding: .utf8)
        let run = try await Command.run(CLITests.binary, ["run", dir.appendingPathComponent("p.yaml").path, dir.appendingPathComponent("urls.txt").path,
                                                          "--report", dir.appendingPathComponent("r.json").path,
                                                          "--metrics", dir.appendingPathComponent("m.prom").path, "--progress", "none"])
        #expect(run.status == 1, "\(run.stderr)")
        let guide = try String(contentsOf: Self.root.appendingPathComponent("docs/operating.md"), encoding: .utf8)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent("r.json"))) as? [String: Any])
        var keys = Set(report.keys)
        for part in ["run", "summary", "stats"] { keys.formUnion((report[part] as? [String: Any])?.keys ?? [:].keys) }
        for item in report["items"] as? [[String: Any]] ?? [] {
            keys.formUnion(item.keys)
            keys.formUnion((item["error"] as? [String: Any])?.keys ?? [:].keys)
        }
        #expect(keys.count >= 30)
        let undocumented = keys.filter { !guide.contains("\"\($0)\"") && !guide.contains("`\($0)`") }
        #expect(undocumented.isEmpty, "report fields not in docs/operating.md: \(undocumented.sorted())")
        let metrics = try String(contentsOf: dir.appendingPathComponent("m.prom"), encoding: .utf8).split(separator: "\n")
            .filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) }
        #expect(metrics.count >= 8)
        let missing = metrics.filter { !guide.contains("`\($0)`") }
        #expect(missing.isEmpty, "metrics not in docs/operating.md: \(missing)")
    }

    /// The README stays a front page: at most 12 KB, every guide linked from it exists.
    @Test func theReadmeIsShortAndItsLinksResolve() throws {
        let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.utf8.count <= 12 * 1024, "README.md is \(readme.utf8.count) bytes")
        let links = readme.components(separatedBy: "](").dropFirst().map { String($0.prefix { $0 != ")" && $0 != "#" }) }
        #expect(links.count >= 15)
        for link in links where !link.hasPrefix("http") {
            #expect(FileManager.default.fileExists(atPath: Self.root.appendingPathComponent(link).path), "README links to \(link), which does not exist")
        }
    }

    /// mkdocs builds the site strictly, and Chromium renders the home page and a guide: the
    /// navigation and the page's own headings are there, and the screenshot is a page, not blank.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/bin/chromium"), "needs Debian's chromium (make test installs it)"))
    func theSiteBuildsStrictlyAndRendersInChromium() async throws {
        let site = try Fixtures.temporaryDirectory("site")
        defer { try? FileManager.default.removeItem(at: site) }
        let built = try await Command.run("/usr/bin/env", ["python3", "-m", "mkdocs", "build", "--strict", "--site-dir", site.path],
                                          environment: ["NO_MKDOCS_2_WARNING": "1", "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                                                        "HOME": ProcessInfo.processInfo.environment["HOME"] ?? "/root"],
                                          directory: Self.root)
        try #require(built.status == 0, "mkdocs build --strict: \(built.stdout)\(built.stderr)")
        // Served over HTTP on loopback, as a docs host would: the search index loads by fetch,
        // which a file:// page may not do.
        let server = try await TestServer.start()
        let types = ["html": "text/html", "css": "text/css", "js": "text/javascript", "json": "application/json",
                     "svg": "image/svg+xml", "png": "image/png", "jpg": "image/jpeg", "woff2": "font/woff2", "xml": "application/xml"]
        let files = FileManager.default.enumerator(atPath: site.path)?.allObjects.compactMap { $0 as? String } ?? []
        #expect(files.count > 20)
        for path in files {
            guard let data = FileManager.default.contents(atPath: site.appendingPathComponent(path).path) else { continue }
            server.serve("/" + path, data, contentType: types[(path as NSString).pathExtension] ?? "application/octet-stream")
        }
        // The Swift API documentation (DocC) that `make test` wrote with docs/tools/api-docs.sh.
        let api = Self.root.appendingPathComponent(".build/api-docs")
        let apiFiles = FileManager.default.enumerator(atPath: api.path)?.allObjects.compactMap { $0 as? String } ?? []
        try #require(!apiFiles.isEmpty, "no .build/api-docs: make test writes it (docs/tools/api-docs.sh .build/api-docs)")
        for path in apiFiles {
            guard let data = FileManager.default.contents(atPath: api.appendingPathComponent(path).path) else { continue }
            server.serve("/api/" + path, data, contentType: types[(path as NSString).pathExtension] ?? "application/octet-stream")
            // DocC's pages are one app that routes by the address: a directory's index is asked
            // for by the directory.
            if path.hasSuffix("/index.html") {
                let directory = "/api/" + path.dropLast("/index.html".count)
                server.serve(directory, data, contentType: "text/html")
                server.serve(directory + "/", data, contentType: "text/html")
            }
        }
        let browser = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
        for (module, symbol) in [("PipelineKit", "PipelineRunner"), ("MagickKit", "Wand")] {
            let page = server.url("/api/\(module)/documentation/\(module.lowercased())/")
            let dom = try await Command.run("/usr/bin/chromium", browser + ["--virtual-time-budget=10000", "--dump-dom", page])
            #expect(dom.stdout.contains(symbol), "the \(module) API page does not list \(symbol); unanswered: \(server.unmatched.suffix(5))")
        }
        for (page, heading) in [("index.html", "The guides"), ("failures.html", "Stopping and resuming"),
                                ("architecture.html", "Three paths, one engine"), ("stages.html", "Processors")] {
            let url = try #require(URL(string: server.url("/" + page)))
            let dom = try await Command.run("/usr/bin/chromium", browser + ["--dump-dom", url.absoluteString])
            #expect(dom.stdout.contains(heading), "\(page) lacks \(heading)")
            #expect(dom.stdout.contains("Running at scale") && dom.stdout.contains("Commands and options"), "\(page): no navigation")
            #expect(!dom.stderr.contains("Uncaught"), "\(dom.stderr.suffix(2000))")
            if page == "architecture.html" {
                // The diagram is an SVG the browser draws itself (no script, no network): it was
                // asked for and served.
                #expect(dom.stdout.contains("diagrams/paths.svg"))
                #expect(server.requests("/diagrams/paths.svg") > 0 && !server.unmatched.contains("/diagrams/paths.svg"))
            }
            if page == "stages.html" {
                // The face and region examples' image pairs (docs/tools/face-examples.sh, run by make test)
                // were asked for and served.
                for image in ["group", "group-faces", "group-smart", "portrait-faces", "portrait-regions", "redact-before", "redact-after"] {
                    let path = "/images/faces/\(image).jpg"
                    #expect(dom.stdout.contains("images/faces/\(image).jpg"), "stages.html does not show \(image)")
                    #expect(server.requests(path) > 0 && !server.unmatched.contains(path), "\(path) was not loaded")
                }
            }
            let shot = site.appendingPathComponent(page + ".png")
            _ = try await Command.run("/usr/bin/chromium", browser + ["--hide-scrollbars", "--window-size=1280,900",
                                                                      "--screenshot=\(shot.path)", url.absoluteString])
            #expect(try await Identified.file(shot.path) == Identified(format: "PNG", width: 1280, height: 900))
            // A rendered page has text, a header bar and a navigation: many colours, not a blank page.
            let colours = try await Command.run("/usr/bin/identify", ["-format", "%k", shot.path])
            #expect((Int(colours.stdout) ?? 0) > 50, "\(page): \(colours.stdout) colours in the screenshot")
        }
        await server.stop()
    }
}
