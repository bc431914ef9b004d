import Foundation
import PipelineKit
import Synchronization
import Testing
import TestImages

/// The exit-code table of the docs (docs/operating.md) against the binary: every code it lists is the one a real case
/// ends with, and it lists every code the binary uses.
@Suite struct ExitCodeTests {
    /// The table under "## Exit codes" in docs/operating.md: code -> meaning.
    static func documented() throws -> [Int: String] {
        let readme = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("docs/operating.md"), encoding: .utf8)
        let section = try #require(readme.range(of: "## Exit codes"))
        var table: [Int: String] = [:]
        for line in readme[section.upperBound...].split(separator: "\n").drop(while: { !$0.hasPrefix("|") }).prefix(while: { $0.hasPrefix("|") }) {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 2 else { continue }
            for code in cells[0].split(separator: ",").compactMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) { table[code] = cells[1] }
        }
        return table
    }

    @Test func theTableListsExactlyTheCodesTheBinaryUses() throws {
        let table = try Self.documented()
        #expect(Set(table.keys) == [0, 1, 2, 3, 130, 143], "\(table.keys.sorted())")
        #expect(!table.values.contains { $0.contains("64") }, "usage errors exit 2, not 64")
    }

    @Test func eachDocumentedCodeIsWhatARealCaseEndsWith() async throws {
        let table = try Self.documented()
        let dir = try Fixtures.temporaryDirectory("exit")
        let good = dir.appendingPathComponent("good.png")
        try Fixtures.image("plasma:", width: 40, height: 30, format: "PNG").write(to: good)
        let pipeline = dir.appendingPathComponent("p.yaml")
        try "encoder: png\noutput: { dir: \(dir.path)/out }\n".write(to: pipeline, atomically: true, encoding: .utf8)
        let goodList = dir.appendingPathComponent("good.txt"), badList = dir.appendingPathComponent("bad.txt")
        try good.path.write(to: goodList, atomically: true, encoding: .utf8)
        try "\(good.path)\n\(dir.path)/missing.png\n".write(to: badList, atomically: true, encoding: .utf8)
        let broken = dir.appendingPathComponent("broken.yaml")
        try "encoder: { jpeg: { qualty: 80 } }\n".write(to: broken, atomically: true, encoding: .utf8)
        let remote = dir.appendingPathComponent("remote.yaml")
        try "encoder: png\noutput: { dir: s3://bucket/x }\n".write(to: remote, atomically: true, encoding: .utf8)
        var unreachable = ProcessInfo.processInfo.environment
        unreachable["AWS_ENDPOINT_URL"] = "http://127.0.0.1:\(try TestServer.unusedPort())"
        unreachable["AWS_ACCESS_KEY_ID"] = "k"
        unreachable["AWS_SECRET_ACCESS_KEY"] = "s"
        let cases: [(code: Int32, arguments: [String], environment: [String: String]?)] = [
            (0, ["run", pipeline.path, goodList.path], nil),
            (1, ["run", pipeline.path, badList.path], nil),
            (2, ["run", broken.path, goodList.path], nil),          // an invalid pipeline
            (2, ["run", pipeline.path], nil),                       // a missing argument, caught by the parser
            (2, ["run", pipeline.path, goodList.path, "--wrokers", "2"], nil),  // an unknown option
            (2, ["run", pipeline.path, dir.appendingPathComponent("nope.txt").path], nil),  // a missing list
            (3, ["run", remote.path, goodList.path], unreachable),  // the output store cannot be reached
        ]
        for (code, arguments, environment) in cases {
            #expect(table[Int(code)] != nil, "code \(code) is not in docs/operating.md")
            let result = try await Command.run(CLITests.binary, arguments + ["--progress", "none"], environment: environment,
                                               directory: Fixtures.packageRoot)
            #expect(result.status == code, "\(arguments.dropFirst().first ?? ""): \(result.stdout)\(result.stderr)")
        }
    }

    /// SIGTERM: items in flight get the grace period, then are cancelled; the exit code is 143.
    @Test func sigtermStopsTheRunWith143() async throws {
        let arrived = EventLog()
        let server = try ScriptedServer { request, connection in
            arrived.record("request")
            connection.waitForClose()
        }
        defer { server.stop() }
        let dir = try Fixtures.temporaryDirectory("sigterm")
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            loader: { http: { allow_loopback: true } }
            encoder: png
            output: { dir: \(dir.path)/out }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let list = dir.appendingPathComponent("urls.txt")
        try (0..<4).map { "http://127.0.0.1:\(server.port)/hung/\($0).jpg" }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let process = try Command.start(CLITests.binary, ["run", pipeline.path, list.path, "--stop-grace", "1s", "--progress", "none"])
        #expect(await arrived.wait(for: "request", atMost: 120))
        kill(process.process.processIdentifier, SIGTERM)
        let result = try await process.wait()
        #expect(result.status == 143, "\(result.stdout)\(result.stderr)")
        #expect(try Self.documented()[143] != nil)
    }
}
