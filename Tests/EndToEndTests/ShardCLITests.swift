import FlyingFox
import Foundation
import PipelineKit
import Testing
import TestSupport

/// `--shard` across real processes: the list split once, outputs identical to one process, and
/// the shards' reports merged by `pipelinectl report`.
extension CLITests {
    /// 30 distinct images and 2 duplicate lines behind the loopback server, and a pipeline writing under `dir/NAME`.
    func shardSetup() async throws -> (dir: URL, list: URL, server: TestServer, pipeline: (String) throws -> String) {
        let server = try await TestServer.start()
        let dir = try Fixtures.temporaryDirectory("shards")
        var urls: [String] = []
        for i in 0..<30 {
            server.serve("/p\(i).jpg", try Fixtures.image("plasma:", width: 200 + i, height: 150))
            urls.append(server.url("/p\(i).jpg"))
        }
        urls += [urls[4], urls[17], server.url("/missing.jpg")]
        let list = dir.appendingPathComponent("urls.txt")
        try urls.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        func pipeline(_ name: String) throws -> String {
            let file = dir.appendingPathComponent("\(name).yaml")
            try """
                loader:
                  http: { allow_loopback: true, retry_attempts: 1 }
                processors:
                  - resize: { width: 64 }
                encoder: png
                output:
                  dir: \(dir.path)/\(name)
                  name: "{index}-{stem}.{ext}"
                """.write(to: file, atomically: true, encoding: .utf8)
            return file.path
        }
        return (dir, list, server, pipeline)
    }

    @Test func threeShardsMakeWhatOneProcessMakes() async throws {
        let (dir, list, server, pipeline) = try await shardSetup()
        let sharded = try pipeline("sharded")
        let reports = dir.appendingPathComponent("reports/run.json").path
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("reports"), withIntermediateDirectories: true)
        // Three processes at once, as three machines would run them.
        let processes = try (0..<3).map { k in
            try Command.start(Self.binary, ["run", sharded, list.path, "--shard", "\(k)/3", "--report", reports, "--progress", "none"])
        }
        var statuses: [Int32] = []
        for process in processes { statuses.append(try await process.wait().status) }
        // The missing image fails in exactly one shard (exit 1); the others succeed.
        #expect(statuses.sorted() == [0, 0, 1])
        for path in 1...30 { #expect(server.requests("/p\(path - 1).jpg") == 1, "p\(path - 1)") }
        #expect(server.requests("/missing.jpg") == 1)

        let single = try await pipelinectl(["run", try pipeline("single"), list.path, "--progress", "none"])
        #expect(single.status == 1)
        let one = Set(try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("single").path).filter { !$0.hasPrefix(".") })
        let union = Set(try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("sharded").path).filter { !$0.hasPrefix(".") })
        #expect(one == union && one.count == 32)
        for name in one {
            let a = try Data(contentsOf: dir.appendingPathComponent("single/\(name)"))
            let b = try Data(contentsOf: dir.appendingPathComponent("sharded/\(name)"))
            #expect(a == b, "\(name)")
        }
        // Each shard keeps its own resume record.
        let records = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("sharded/.pipelinectl").path)
        #expect(records.filter { $0.hasSuffix("-of-3.txt") }.count == 3)

        // The reports carry their shard's name and merge into one.
        let names = (0..<3).map { dir.appendingPathComponent("reports/run-shard-\($0)-of-3.json").path }
        let merged = try await pipelinectl(["report"] + names)
        #expect(merged.stdout.contains("33 items: 32 ok, 1 failed, 0 skipped"), "\(merged.stdout)")
        let failed = try await pipelinectl(["report"] + names + ["--failed", "--sources-only"])
        #expect(failed.stdout == server.url("/missing.jpg") + "\n")
        let sheet = dir.appendingPathComponent("sheet.html").path
        #expect(try await pipelinectl(["report"] + names + ["--html", sheet]).status == 0)
        let html = try String(contentsOfFile: sheet, encoding: .utf8)
        #expect(html.components(separatedBy: "<img loading=\"lazy\"").count - 1 == 32)
        await server.stop()
    }

    @Test func badShardsExitAsInvalidConfiguration() async throws {
        let out = try await pipelinectl(["run", "thumbnails", "examples/urls.txt", "--shard", "3/3"])
        #expect(out.status == 2)
        #expect(out.stderr.contains("error: shard index 3 is out of range for 3 shards (0 to 2)"))
        var environment = ProcessInfo.processInfo.environment
        for name in Shard.indexVariables { environment[name] = nil }
        let auto = try await Command.run(Self.binary, ["run", "thumbnails", "examples/urls.txt", "--shard", "auto/4"],
                                         environment: environment, directory: Fixtures.packageRoot)
        #expect(auto.status == 2)
        #expect(auto.stderr.contains("needs the shard index in one of JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID, AWS_BATCH_JOB_ARRAY_INDEX"))
        environment["JOB_COMPLETION_INDEX"] = "1"
        let dir = try Fixtures.temporaryDirectory("auto-shard")
        let ran = try await Command.run(Self.binary, ["run", "thumbnails", "examples/urls.txt", "--shard", "auto/2", "-o", dir.path,
                                                      "--progress", "none"], environment: environment, directory: Fixtures.packageRoot)
        #expect(ran.stdout.contains("shard 1/2: "), "\(ran.stdout)\(ran.stderr)")
    }
}
