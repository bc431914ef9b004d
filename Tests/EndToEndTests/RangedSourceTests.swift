import Foundation
import PipelineKit
import Testing
import TestImages

/// A 2-hour 1080p film on a real web server (nginx on loopback), its poster at 1h made by the
/// real binary through the `http` loader: the film is read by range, and nginx's own count of
/// the body bytes it sent (its access log) is under 5% of the file, for the index at the start
/// (`+faststart`) and at the end (ffmpeg's default). The poster is the one the same pipeline makes
/// from the local file, byte for byte, and the disk data cache keeps nothing of the film.
///
/// The film is made by stream copy, not encoding: a 10-second 1080p segment looped 720 times
/// (`-stream_loop`, `-c copy`), about 370 MB per layout.
@Suite(.enabled(if: NginxServer.isInstalled, "needs Debian's nginx (make test installs it)"))
struct RangedSourceTests {
    static func ffmpeg(_ arguments: [String]) async throws {
        let run = try await Command.run("/usr/bin/ffmpeg", ["-hide_banner", "-loglevel", "error", "-y"] + arguments)
        try #require(run.status == 0, "ffmpeg \(arguments): \(run.stderr)")
    }

    @Test func aTwoHourFilmGivesItsPosterAtOneHourReadingUnderFivePercent() async throws {
        let films = try Fixtures.temporaryDirectory("films")
        defer { try? FileManager.default.removeItem(at: films) }
        let segment = films.appendingPathComponent("segment.mp4")
        try await Self.ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=1920x1080:rate=25", "-t", "10", "-c:v", "libx264",
                               "-preset", "ultrafast", "-b:v", "400k", "-g", "50", "-pix_fmt", "yuv420p", segment.path])
        let last = films.appendingPathComponent("index-last.mp4"), first = films.appendingPathComponent("index-first.mp4")
        try await Self.ffmpeg(["-stream_loop", "719", "-i", segment.path, "-c", "copy", last.path])
        try await Self.ffmpeg(["-i", last.path, "-c", "copy", "-movflags", "+faststart", first.path])
        try FileManager.default.removeItem(at: segment)
        let nginx = try await NginxServer.start(root: films)
        defer { nginx.stop() }

        let dir = try Fixtures.temporaryDirectory("ranged-run")
        let pipeline = dir.appendingPathComponent("posters.yaml")
        try """
            loader:
              http: { allow_loopback: true, accept: [video/*], max_bytes: 50MB }
            data_cache:
              disk: { path: \(dir.path)/cache }
            decoder:
              imagemagick: { formats: [video], frame: 1h }
            processors:
              - resize: { width: 480 }
            encoder: { jpeg: { quality: 85 } }
            output: { dir: \(dir.path)/out, name: "{stem}-{index}" }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let list = dir.appendingPathComponent("urls.txt")
        try [nginx.url("/index-last.mp4"), nginx.url("/index-first.mp4")].joined(separator: "\n")
            .write(to: list, atomically: true, encoding: .utf8)
        let report = dir.appendingPathComponent("run.json")
        let run = try await Command.run(CLITests.binary, ["run", pipeline.path, list.path, "--report", report.path, "--progress", "none"],
                                        directory: Fixtures.packageRoot)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")

        // nginx's count of what it sent, per film.
        let logged = try nginx.log()
        for film in [last, first] {
            let size = try #require(try FileManager.default.attributesOfItem(atPath: film.path)[.size] as? Int)
            let responses = logged.filter { $0.path == "/" + film.lastPathComponent }
            let sent = responses.reduce(0) { $0 + $1.bytes }
            print("ranged read: \(film.lastPathComponent): \(sent) of \(size) bytes sent (\(String(format: "%.2f", Double(sent) * 100 / Double(size)))%) in \(responses.count) responses: \(responses.map { "\($0.status) \($0.range ?? "whole") \($0.bytes)" })")
            #expect(sent * 20 < size, "\(film.lastPathComponent): \(sent) of \(size) bytes")
            #expect(responses.filter { $0.status == 206 }.count >= 2)
        }
        // The same poster from the local files (read in place).
        let local = dir.appendingPathComponent("local.txt")
        try [last.path, first.path].joined(separator: "\n").write(to: local, atomically: true, encoding: .utf8)
        let fromFiles = dir.appendingPathComponent("files.yaml")
        try String(contentsOf: pipeline, encoding: .utf8).replacingOccurrences(of: "\(dir.path)/out", with: "\(dir.path)/local")
            .replacingOccurrences(of: "http: { allow_loopback: true, accept: [video/*], max_bytes: 50MB }", with: "file: { max_bytes: 1GB }")
            .write(to: fromFiles, atomically: true, encoding: .utf8)
        let again = try await Command.run(CLITests.binary, ["run", fromFiles.path, local.path, "--progress", "none"],
                                          directory: Fixtures.packageRoot)
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        func outputs(_ folder: String) throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent(folder).path).filter { !$0.hasPrefix(".") }.sorted()
        }
        let made = try outputs("out"), fromLocal = try outputs("local")
        #expect(made == ["index-first-2", "index-last-1"] && fromLocal == made, "\(made) \(fromLocal)")
        for name in made {
            let remote = try Data(contentsOf: dir.appendingPathComponent("out/\(name)"))
            let fromFile = try Data(contentsOf: dir.appendingPathComponent("local/\(name)"))
            #expect(remote == fromFile, "\(name): the poster read by range is the poster read from the file")
        }
        // The report counts the bytes fetched, not the film's size; the data cache kept nothing.
        let items = (try JSONSerialization.jsonObject(with: Data(contentsOf: report)) as? [String: Any])?["items"] as? [[String: Any]] ?? []
        #expect(items.count == 2)
        for item in items {
            let bytes = item["bytes_in"] as? Int ?? 0
            #expect(bytes > 0 && bytes < 30_000_000, "\(item)")
        }
        let cached = FileManager.default.enumerator(atPath: dir.appendingPathComponent("cache").path)?.allObjects
            .compactMap { $0 as? String }.filter { !$0.hasPrefix(".") } ?? []
        let cachedBytes = try cached.reduce(0) { total, path in
            total + ((try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent("cache/\(path)").path)[.size] as? Int) ?? 0)
        }
        #expect(cachedBytes < 10_000_000, "the data cache holds \(cachedBytes) bytes: \(cached)")
    }
}
