import Foundation
import PipelineKit
import Testing
import TestImages

/// A pipeline's `sources:` hold for `run` as for `serve`: every line of a list outside them
/// (dot segments, encoded dots, links that lead out, other origins, redirects) fails alone as
/// `source_not_allowed`, before any byte of it is read; lines inside are made.
@Suite struct RunBoundaryTests {
    @Test func aListCannotLeaveThePipelinesSources() async throws {
        let jpeg = try Fixtures.jpeg(120, 90)
        let other = try ScriptedServer { _, connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        defer { other.stop() }
        let origin = try ScriptedServer { request, connection in
            if request.path == "/ok/away.jpg" {
                connection.write("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:\(other.port)/x.jpg\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            }
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        defer { origin.stop() }
        let dir = try Fixtures.temporaryDirectory("run-boundary")
        let fm = FileManager.default
        let images = dir.appendingPathComponent("img"), outside = dir.appendingPathComponent("outside")
        try fm.createDirectory(at: images, withIntermediateDirectories: true)
        try fm.createDirectory(at: outside, withIntermediateDirectories: true)
        try jpeg.write(to: images.appendingPathComponent("a.jpg"))
        try jpeg.write(to: outside.appendingPathComponent("secret.jpg"))
        try fm.createSymbolicLink(atPath: images.appendingPathComponent("out.jpg").path, withDestinationPath: outside.appendingPathComponent("secret.jpg").path)
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            version: 1
            name: p
            sources: ["\(images.path)/", "http://127.0.0.1:\(origin.port)/ok/"]
            loader:
              http: { allow_loopback: true, retry_attempts: 1 }
            processors:
              - resize: { width: 32, height: 32 }
            encoder: jpeg
            output: { dir: \(dir.path)/out, name: "{hash}.{ext}" }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let lines: [(String, String?)] = [
            ("img/a.jpg", nil),                                             // relative to the list: inside
            (images.path + "/a.jpg", nil),
            (origin.url("/ok/a.jpg"), nil),
            (images.path + "/../outside/secret.jpg", "source_not_allowed"),
            ("img/../outside/secret.jpg", "source_not_allowed"),
            ("file://" + images.path + "/%2e%2e/outside/secret.jpg", "source_not_allowed"),
            (images.path + "/out.jpg", "source_not_allowed"),
            (origin.url("/ok/../private/a.jpg"), "source_not_allowed"),
            (origin.url("/other/a.jpg"), "source_not_allowed"),
            ("http://127.0.0.1:\(other.port)/ok/a.jpg", "source_not_allowed"),
            (origin.url("/ok/away.jpg"), "source_not_allowed"),
        ]
        let list = dir.appendingPathComponent("list.txt")
        try lines.map(\.0).joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let reportPath = dir.appendingPathComponent("report.json")
        let result = try await Command.run(CLITests.binary, ["run", pipeline.path, list.path, "--report", reportPath.path, "--progress", "none"],
                                           directory: Fixtures.packageRoot)
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")  // some items failed
        let items = try #require(try Reports.read(reportPath)["items"] as? [[String: Any]])
        #expect(items.count == lines.count)
        for (item, (line, kind)) in zip(items, lines) {
            let got = (item["error"] as? [String: Any])?["kind"] as? String
            #expect(got == kind, "\(line): \(item)")
        }
        #expect(other.received.isEmpty, "the other origin got \(other.received.map(\.path))")
        #expect(origin.requests("/private/a.jpg") == 0 && origin.requests("/other/a.jpg") == 0)
        // The pipeline's sources are checked by validate too.
        try """
            version: 1
            sources: ["img/"]
            encoder: jpeg
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let invalid = try await Command.run(CLITests.binary, ["validate", pipeline.path])
        #expect(invalid.status != 0 && invalid.stderr.contains("sources: 'img/' is not an absolute directory"), "\(invalid.stderr)")
    }
}
