import FlyingFox
import Foundation
@testable import PipelineKit
import Plugins
import Synchronization
import Testing
import TestImages

/// The run engine with the real built-in plugins, real files and a real server on loopback.
@Suite struct EngineTests {
    let registry = BuiltIns.registry()

    struct Run {
        let summary: RunSummary
        let items: [ItemResult]
        let outputDirectory: URL
        subscript(_ index: Int) -> ItemResult { items.first { $0.index == index }! }
    }

    func pipeline(_ yaml: String) throws -> Pipeline {
        let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "test.yaml", registry: registry)
        guard let pipeline else { throw PipelineValidationError(diagnostics: diagnostics, source: yaml) }
        return pipeline
    }

    func run(_ yaml: String, lines: [String], base: URL? = nil, output: URL? = nil, resume: Bool = false,
             configure: (inout RunOptions) -> Void = { _ in }) async throws -> Run {
        let dir = try output ?? Fixtures.temporaryDirectory("out")
        var options = RunOptions()
        options.outputDirectory = dir.path
        options.resume = resume
        configure(&options)
        let runner = try PipelineRunner(pipeline: try pipeline(yaml), registry: registry, options: options)
        let collected = Mutex<[ItemResult]>([])
        let sources = lines.enumerated().map { Source(text: $0.element, index: $0.offset + 1, base: base?.path) }
        let summary = try await runner.run(AsyncStream { continuation in
            for source in sources { continuation.yield(source) }
            continuation.finish()
        }) { item in collected.withLock { $0.append(item) } }
        return Run(summary: summary, items: collected.withLock { $0 }.sorted { $0.index < $1.index }, outputDirectory: dir)
    }

    static let thumbnails = """
        loader:
          http: { allow_loopback: true, timeout: 10s }
        processors:
          - resize: { width: 64, height: 64 }
        image_cache: memory
        encoder: jpeg
        """

    /// A queue's worker waits for its next message for as long as there is none: an item that
    /// finished meanwhile is reported (onItem: the report line, the metrics) at once, not when
    /// the next message comes. The list here sends its second source only after the first is
    /// reported; before, the run waited for ever (the time limit ends it).
    @Test(.timeLimit(.minutes(2))) func itemsAreReportedWhileTheListWaits() async throws {
        let files = try Fixtures.temporaryDirectory("in")
        try Fixtures.jpeg(300, 200).write(to: files.appendingPathComponent("a.jpg"))
        try Fixtures.jpeg(300, 200).write(to: files.appendingPathComponent("b.jpg"))
        let dir = try Fixtures.temporaryDirectory("out")
        var options = RunOptions()
        options.outputDirectory = dir.path
        let runner = try PipelineRunner(pipeline: try pipeline("loader: file\nprocessors:\n  - resize: { width: 32 }\nencoder: jpeg\n"),
                                        registry: registry, options: options)
        let (sources, feed) = AsyncStream<Source>.makeStream()
        feed.yield(Source(text: "a.jpg", index: 1, base: files.path))
        let reported = Mutex<[String]>([])
        let summary = try await runner.run(sources) { item in
            let count = reported.withLock { $0.append(item.source); return $0.count }
            if count == 1 {
                feed.yield(Source(text: "b.jpg", index: 2, base: files.path))
                feed.finish()
            }
        }
        #expect(reported.withLock { $0 } == ["a.jpg", "b.jpg"])
        #expect(summary.ok == 2)
    }

    /// onItem is called for one item at a time (a report writer relies on it: JSON items written
    /// side by side once made an invalid report), even when it suspends.
    @Test func onItemIsNeverCalledTwiceAtOnce() async throws {
        let files = try Fixtures.temporaryDirectory("in")
        var lines: [String] = []
        for index in 0..<24 {
            try Fixtures.jpeg(64, 48).write(to: files.appendingPathComponent("p\(index).jpg"))
            lines.append("p\(index).jpg")
        }
        let active = Mutex((now: 0, most: 0, calls: 0))
        let dir = try Fixtures.temporaryDirectory("out")
        var options = RunOptions()
        options.outputDirectory = dir.path
        let runner = try PipelineRunner(pipeline: try pipeline("loader: file\nprocessors:\n  - resize: { width: 16 }\nencoder: jpeg\noutput: { name: \"{stem}.{ext}\" }\n"),
                                        registry: registry, options: options)
        let sources = lines.enumerated().map { Source(text: $0.element, index: $0.offset + 1, base: files.path) }
        _ = try await runner.run(AsyncStream { continuation in
            for source in sources { continuation.yield(source) }
            continuation.finish()
        }) { _ in
            active.withLock { $0.now += 1; $0.most = max($0.most, $0.now); $0.calls += 1 }
            for _ in 0..<20 { await Task.yield() }  // a suspension where another call could come in
            active.withLock { $0.now -= 1 }
        }
        #expect(active.withLock { $0.calls } == 24)
        #expect(active.withLock { $0.most } == 1)
    }

    @Test func autoEncoderNamesOutputsByTheFormatItChose() async throws {
        let files = try Fixtures.temporaryDirectory("in")
        try Fixtures.alphaPNG(300, 200).write(to: files.appendingPathComponent("logo.png"))
        try Fixtures.jpeg(300, 200).write(to: files.appendingPathComponent("photo.jpg"))
        try Fixtures.image("plasma:", width: 300, height: 200, format: "BMP").write(to: files.appendingPathComponent("scan.bmp"))
        let cache = try Fixtures.temporaryDirectory("cache")
        let yaml = """
            loader: file
            data_cache:
              disk: { path: \(cache.path), store: processed }
            processors:
              - resize: { width: 64 }
            encoder: auto
            output:
              name: "{stem}.{ext}"
            """
        let out = try Fixtures.temporaryDirectory("out")
        let expected = ["logo.png", "photo.jpg", "scan.jpg"].map { out.path + "/" + $0 }
        let first = try await run(yaml, lines: ["logo.png", "photo.jpg", "scan.bmp"], base: files, output: out)
        #expect(first.items.map(\.outputs) == expected.map { [$0] })
        #expect(FormatSniffer.sniff(try Data(contentsOf: URL(fileURLWithPath: expected[0]))) == .image(ImageFormat(rawValue: "PNG")!))
        #expect(FormatSniffer.sniff(try Data(contentsOf: URL(fileURLWithPath: expected[2]))) == .image(ImageFormat(rawValue: "JPEG")!))
        // From the processed-output cache, the same names.
        for path in expected { try FileManager.default.removeItem(atPath: path) }
        let second = try await run(yaml, lines: ["logo.png", "photo.jpg", "scan.bmp"], base: files, output: out)
        #expect(second.items.map(\.cacheData) == [.processedHit, .processedHit, .processedHit])
        #expect(second.items.map(\.outputs) == expected.map { [$0] })
        #expect(expected.allSatisfy { FileManager.default.fileExists(atPath: $0) })
        // Resumed, the completed items are skipped and name the files they wrote.
        let resumed = try await run(yaml, lines: ["logo.png", "photo.jpg", "scan.bmp"], base: files, output: out, resume: true)
        #expect(resumed.items.map(\.status) == [.skipped, .skipped, .skipped])
        #expect(resumed.items.map(\.outputs) == expected.map { [$0] })
    }

    /// `--state-dir`: the record `--resume` reads is kept outside the output folder, one file per
    /// output folder and pipeline, and a resumed run finds it there.
    @Test func theResumeRecordCanLiveOutsideTheOutputFolder() async throws {
        let files = try Fixtures.temporaryDirectory("in")
        for name in ["a", "b"] { try Fixtures.jpeg(90, 60).write(to: files.appendingPathComponent("\(name).jpg")) }
        let out = try Fixtures.temporaryDirectory("out"), state = try Fixtures.temporaryDirectory("state")
        let first = try await run(Self.thumbnails, lines: ["a.jpg", "b.jpg"], base: files, output: out) { $0.stateDirectory = state.path }
        #expect(first.summary.ok == 2)
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path).allSatisfy { !$0.hasPrefix(".") })
        #expect(try FileManager.default.contentsOfDirectory(atPath: state.path).filter { $0.hasPrefix("done-") }.count == 1)
        let resumed = try await run(Self.thumbnails, lines: ["a.jpg", "b.jpg"], base: files, output: out, resume: true) {
            $0.stateDirectory = state.path
        }
        #expect(resumed.items.map(\.status) == [.skipped, .skipped])
    }

    @Test func failingItemsBesideGoodOnes() async throws {
        let server = try await TestServer.start()
        server.serve("/good.jpg", try Fixtures.jpeg(400, 300))
        server.serve("/page.jpg", Data("<html><body>oops</body></html>".utf8), contentType: "text/html")
        let files = try Fixtures.temporaryDirectory("in")
        try Fixtures.alphaPNG(300, 400).write(to: files.appendingPathComponent("local.png"))
        let run = try await run(Self.thumbnails, lines: [
            server.url("/good.jpg"), server.url("/missing.jpg"), server.url("/page.jpg"), "local.png",
            "nope.png", "ftp://example.invalid/x.jpg",
        ], base: files)
        #expect(run.summary.total == 6 && run.summary.ok == 2 && run.summary.failed == 4)
        #expect(run[1].status == .ok && run[1].width == 64 && run[1].height == 48)
        #expect(run[2].error == ItemError(stage: .load, kind: .httpStatus, message: "HTTP 404 Not Found", plugin: "http"))
        #expect(run[3].error == ItemError(stage: .load, kind: .notAnImage, message: "served as text/html, which is not in 'accept'", plugin: "http"))
        #expect(run[4].status == .ok && run[4].width == 48 && run[4].height == 64)
        #expect(run[5].error?.kind == .notFound)
        #expect(run[6].error?.kind == .blockedProtocol)
        for item in run.items where item.status == .ok {
            #expect(try await Identified.file(item.outputs[0]).format == "JPEG")
        }
        // Exactly the two good outputs, and no temporary files.
        // Exactly the two outputs; besides them only the completion manifest's folder, no temporary file.
        let entries = try FileManager.default.contentsOfDirectory(atPath: run.outputDirectory.path)
        let written = entries.filter { $0 != ".pipelinectl" }
        #expect(written.count == 2 && written.allSatisfy { $0.hasSuffix(".jpg") && !$0.hasPrefix(".") })
        await server.stop()
    }

    @Test func duplicateSourcesAreLoadedAndDecodedOnce() async throws {
        let server = try await TestServer.start()
        // In flight together or one after another, the same source is one load.
        server.serve("/same.jpg", try Fixtures.jpeg(200, 100))
        let yaml = Self.thumbnails + "\noutput:\n  name: \"{index}.{ext}\"\n"
        let run = try await run(yaml, lines: Array(repeating: server.url("/same.jpg"), count: 5))
        #expect(server.requests("/same.jpg") == 1)
        #expect(run.summary.ok == 5)
        #expect(run.items.filter { $0.cacheImage == .miss }.count == 1)  // decoded once
        #expect(Set(run.items.map(\.outputs[0])).count == 5)
        await server.stop()
    }

    @Test func sameSourceSameOutputIsWrittenOnce() async throws {
        let server = try await TestServer.start()
        server.serve("/a.jpg", try Fixtures.jpeg(100, 100))
        let run = try await run(Self.thumbnails, lines: [server.url("/a.jpg"), server.url("/a.jpg")])
        #expect(run.summary.ok == 1 && run.summary.duplicateDeliveries == 1 && run.summary.outputsWritten == 1)
        // Either line may lead (both are in flight at once): the other is the duplicate.
        #expect(run.items[0].outputs == run.items[1].outputs && run.items.filter(\.duplicate).count == 1)
        #expect(server.requests("/a.jpg") == 1)
        await server.stop()
    }

    @Test func differentSourcesNeverOverwriteEachOther() async throws {
        let server = try await TestServer.start()
        server.serve("/a/photo.jpg", try Fixtures.jpeg(100, 100))
        server.serve("/b/photo.jpg", try Fixtures.jpeg(100, 50))
        let yaml = Self.thumbnails + "\noutput:\n  name: \"{stem}.{ext}\"\n"
        let run = try await run(yaml, lines: [server.url("/a/photo.jpg"), server.url("/b/photo.jpg")])
        let failed = run.items.filter { $0.status == .failed }
        #expect(run.summary.ok == 1 && failed.count == 1)
        #expect(failed.first?.error?.kind == .outputCollision)
        #expect(failed.first?.error?.stage == .output)
        await server.stop()
    }

    @Test func dataCacheServesTheSecondRun() async throws {
        let server = try await TestServer.start()
        server.serve("/a.jpg", try Fixtures.jpeg(300, 200))
        let cache = try Fixtures.temporaryDirectory("cache")
        let yaml = Self.thumbnails + "\ndata_cache:\n  disk: { path: \(cache.path) }\n"
        let first = try await run(yaml, lines: [server.url("/a.jpg")])
        #expect(first[1].cacheData == .miss)
        let second = try await run(yaml, lines: [server.url("/a.jpg")])
        #expect(second[1].cacheData == .hit && second[1].status == .ok)
        #expect(server.requests("/a.jpg") == 1)
        await server.stop()
    }

    @Test func loadsStayWithinMaxConcurrent() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(40, 40)
        let active = Mutex((now: 0, peak: 0))
        let overlap = EventLog()
        for i in 0..<24 {
            server.route("/\(i).jpg") { _ in
                let peak = active.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now); return $0.peak }
                if peak >= 3 { overlap.record("three at once") }
                // Every answer waits until three requests were in flight at once: the limit is
                // reached, never passed (a fourth would have arrived while these wait).
                await overlap.wait(for: "three at once")
                active.withLock { $0.now -= 1 }
                return HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body)
            }
        }
        let yaml = Self.thumbnails.replacingOccurrences(of: "timeout: 10s", with: "timeout: 10s, max_concurrent: 3")
        let run = try await run(yaml, lines: (0..<24).map { server.url("/\($0).jpg") })
        #expect(run.summary.ok == 24)
        let peak = active.withLock { $0.peak }
        #expect(peak == 3)  // the limit holds, and is used
        await server.stop()
    }

    /// `rose, rose, wizard`: two items, one duplicate, two files, in the summary, the report
    /// (read back from JSON lines) and the counts.
    @Test func aSourceListedTwiceIsOneItemAndOneDuplicate() async throws {
        let files = try Fixtures.temporaryDirectory("in")
        try Fixtures.jpeg(120, 80).write(to: files.appendingPathComponent("rose.jpg"))
        try Fixtures.jpeg(80, 120).write(to: files.appendingPathComponent("wizard.jpg"))
        let run = try await run(Self.thumbnails, lines: ["rose.jpg", "rose.jpg", "wizard.jpg"], base: files) { $0.maxInFlight = 1 }
        #expect(run.summary.total == 2 && run.summary.ok == 2 && run.summary.duplicateDeliveries == 1)
        #expect(run.summary.outputsWritten == 2 && run.summary.deliveries == 3)
        #expect(run.items.map(\.duplicate) == [false, true, false])
        let written = try FileManager.default.contentsOfDirectory(atPath: run.outputDirectory.path).filter { !$0.hasPrefix(".") }
        #expect(written.count == 2)
        // Read back as `pipelinectl report` reads a report: the same counts.
        let lines = try run.items.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        let read = try lines.map { try JSONDecoder().decode(ItemResult.self, from: Data($0.utf8)) }
        var counted = RunSummary()
        for item in read { counted.add(item) }
        #expect(counted.total == 2 && counted.duplicateDeliveries == 1 && counted.outputsWritten == 2)
        let summary = try JSONSerialization.jsonObject(with: JSONEncoder().encode(run.summary)) as? [String: Any]
        #expect(summary?["duplicate_deliveries"] as? Int == 1 && summary?["deliveries"] as? Int == 3)
    }

    /// A source named again after its file was replaced is a new item, made from the new content.
    @Test func aReplacedFileNamedAgainIsANewItem() async throws {
        let files = try Fixtures.temporaryDirectory("in")
        let path = files.appendingPathComponent("rose.jpg")
        try Fixtures.jpeg(120, 80).write(to: path)
        let out = try Fixtures.temporaryDirectory("out")
        var options = RunOptions()
        options.outputDirectory = out.path
        let runner = try PipelineRunner(pipeline: try pipeline(Self.thumbnails), registry: registry, options: options)
        let first = await runner.runItem(Source(text: path.path, index: 1))
        let again = await runner.runItem(Source(text: path.path, index: 2))
        #expect(first.status == .ok && again.duplicate)
        try Fixtures.jpeg(60, 120).write(to: path)  // a re-upload: another size, another time
        let replaced = await runner.runItem(Source(text: path.path, index: 3))
        #expect(replaced.status == .ok && !replaced.duplicate && !replaced.shared, "\(String(describing: replaced.error))")
        #expect(replaced.width == 32 && replaced.height == 64 && first.width == 64)
    }

    /// Hit ratios count lookups of the caches the pipeline has: none without a cache (shared work
    /// is not a hit), and hits over lookups with a data cache.
    @Test func cacheHitRatiosAreHitsOverLookupsOfConfiguredCaches() async throws {
        let server = try await TestServer.start()
        for (name, width) in [("a", 90), ("b", 100), ("c", 110), ("d", 120)] { server.serve("/\(name).jpg", try Fixtures.jpeg(width, 60)) }
        let url = { (name: String) in server.url("/\(name).jpg") }
        let plain = Self.thumbnails.replacingOccurrences(of: "image_cache: memory\n", with: "")
        let uncached = try await run(plain, lines: [url("a"), url("a"), url("b")]) { $0.maxInFlight = 1 }
        let text = SummaryText.render(pipeline: "t", summary: uncached.summary, items: uncached.items, outputDirectory: nil)
        #expect(!text.contains("hit") && text.contains("duplicates: 1"), "\(text)")

        let cache = try Fixtures.temporaryDirectory("cache")
        let cached = plain + "\ndata_cache:\n  disk: { path: \(cache.path) }\n"
        let first = try await run(cached, lines: [url("a"), url("b"), url("a"), url("c")]) { $0.maxInFlight = 1 }
        // Three lookups (the repeated line asked nothing), three misses.
        #expect(RunStatistics(first.items).cache["data"].map { [$0.hit, $0.miss] } == [0, 3])
        let second = try await run(cached, lines: [url("a"), url("b"), url("d")]) { $0.maxInFlight = 1 }
        let stats = RunStatistics(second.items)
        #expect(stats.cache["data"].map { [$0.hit, $0.miss] } == [2, 1])
        #expect(stats.cache["data"]?.hitRate == 2.0 / 3.0)
        let summary = SummaryText.render(pipeline: "t", summary: second.summary, items: second.items, outputDirectory: nil)
        #expect(summary.contains("cache: data 2 hit, 1 miss (67% hit)") && !summary.contains("image"), "\(summary)")
        await server.stop()
    }

    @Test func fiftyCopiesOfOneURLAreOneTransfer() async throws {
        let server = try await TestServer.start()
        server.serve("/one.jpg", try Fixtures.jpeg(120, 90))
        // One load slot and no data cache: copies that arrive after the first finished reuse it too.
        let yaml = Self.thumbnails.replacingOccurrences(of: "timeout: 10s", with: "timeout: 10s, max_concurrent: 1")
            .replacingOccurrences(of: "image_cache: memory\n", with: "")
        let run = try await run(yaml, lines: Array(repeating: server.url("/one.jpg"), count: 50))
        #expect(run.summary.ok == 1 && run.summary.duplicateDeliveries == 49)
        #expect(server.requests("/one.jpg") == 1)
        await server.stop()
    }

    @Test func signedURLsDifferingInAStrippedParameterShareOneCacheEntry() async throws {
        let server = try await TestServer.start()
        server.serve("/p/1.jpg", try Fixtures.jpeg(80, 60))
        let cache = try Fixtures.temporaryDirectory("cache")
        let yaml = """
            loader:
              http: { allow_loopback: true, strip_query: [sig, expires] }
            data_cache:
              disk: { path: \(cache.path) }
            encoder: png
            """
        let first = try await run(yaml, lines: [server.url("/p/1.jpg?sig=aaa&expires=1")])
        let second = try await run(yaml, lines: [server.url("/p/1.jpg?sig=bbb&expires=2")])
        #expect(first[1].cacheData == .miss && second[1].cacheData == .hit)
        #expect(server.requests("/p/1.jpg") == 1)
        let entries = try FileManager.default.subpathsOfDirectory(atPath: cache.path).filter { $0.count > 3 && $0.contains("/") }
        #expect(entries.count == 1)
        // The outputs are named by the same key too: one image, one name.
        #expect(first[1].outputs.map { ($0 as NSString).lastPathComponent } == second[1].outputs.map { ($0 as NSString).lastPathComponent })
        await server.stop()
    }

    @Test func fetchOnlyLoadsIntoTheCacheWithoutDecoding() async throws {
        let server = try await TestServer.start()
        server.serve("/a.jpg", Data((0..<17).map { UInt8($0 * 13 + 7) }), contentType: "application/octet-stream")  // not even an image
        let cache = try Fixtures.temporaryDirectory("cache")
        let yaml = Self.thumbnails + "\ndata_cache:\n  disk: { path: \(cache.path) }\n"
        var options = RunOptions()
        options.fetchOnly = true
        let output = try Fixtures.temporaryDirectory("out")
        options.outputDirectory = output.path
        let runner = try PipelineRunner(pipeline: try pipeline(yaml), registry: registry, options: options)
        let item = await runner.runItem(Source(text: server.url("/a.jpg"), index: 1))
        #expect(item.status == .ok && item.bytesIn == 17 && item.cacheData == .miss && item.outputs.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).isEmpty)
        await server.stop()
    }

    @Test func readsTheListLazilyFromAFile() async throws {
        let dir = try Fixtures.temporaryDirectory("list")
        try Fixtures.jpeg(50, 50).write(to: dir.appendingPathComponent("a.jpg"))
        // ASCII white space is trimmed on the bytes, other white space (no-break, ideographic) as text.
        let list = "\u{FEFF}# comment\n\n  a.jpg  \r\n# another\na.jpg\n\t\u{00A0}b.jpg\u{3000}\n \u{00A0}# no-break\n\u{000B}HTTP://X.test/c.jpg\u{000C}"
        try Data(list.utf8).write(to: dir.appendingPathComponent("urls.txt"))
        var seen: [Source] = []
        for try await source in SourceList(path: dir.appendingPathComponent("urls.txt").path) { seen.append(source) }
        #expect(seen.map(\.text) == ["a.jpg", "a.jpg", "b.jpg", "HTTP://X.test/c.jpg"])
        #expect(seen.map(\.index) == [3, 5, 6, 8])
        #expect(seen.map(\.scheme) == [nil, nil, nil, "http"])
        #expect(seen[0].localPath == dir.appendingPathComponent("a.jpg").path)
    }
}
