import FlyingFox
import Foundation
import PipelineKit
import Testing
import TestImages

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

extension CLITests {
    /// A shard killed with SIGKILL mid-run and run again with `--resume` fetches only what it had
    /// not finished, and makes the same outputs as an uninterrupted shard.
    @Test func aKilledShardResumesWithOnlyItsMissingItems() async throws {
        let (dir, list, server, pipeline) = try await shardSetup()
        let sharded = try pipeline("killed")
        let lines = try String(contentsOf: list, encoding: .utf8).split(separator: "\n").map(String.init)
        let mine = lines.filter { Shard.shard(ofKey: $0, count: 2) == 1 }
        // (The server's port is new each run, so which URLs are shard 1's changes: choose among them.)
        let images = Set(mine).subtracting([server.url("/missing.jpg")]).sorted()
        let held = Set(images.prefix(3))
        let quick = Set(images.dropFirst(3))
        try #require(held.count >= 2 && quick.count >= 4)
        // The held images answer only after the gate opens: the first run is killed before that.
        let gate = Gate()
        for url in held {
            let path = String(url.dropFirst(server.url("").count - 1))
            let body = try Fixtures.image("plasma:", width: 200 + (Int(path.dropFirst(2).dropLast(4)) ?? 0), height: 150)
            server.route(path) { _ in
                await gate.wait()
                return HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body)
            }
        }
        let first = try Command.start(Self.binary, ["run", sharded, list.path, "--shard", "1/2", "--progress", "none"])
        let record = dir.appendingPathComponent("killed/.pipelinectl")
        // Wait (bounded) until every quick line (duplicates included: each has its own output) is
        // recorded as done, then SIGKILL.
        let quickLines = lines.filter(quick.contains).count
        let deadline = Date().addingTimeInterval(60)
        func recorded() -> Int {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: record.path)) ?? []
            return files.reduce(0) { count, name in
                count + ((try? String(contentsOf: record.appendingPathComponent(name), encoding: .utf8))?
                    .split(separator: "\n").count ?? 0)
            }
        }
        while recorded() < quickLines, Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        #expect(recorded() >= quickLines)
        kill(first.process.processIdentifier, SIGKILL)
        _ = try await first.wait()
        let before = Dictionary(uniqueKeysWithValues: Set(lines).map { ($0, server.requests(String($0.dropFirst(server.url("").count - 1)))) })

        await gate.open()
        let again = try await pipelinectl(["run", sharded, list.path, "--shard", "1/2", "--resume", "--progress", "none"])
        // Exit 1 when the missing image is this shard's, as in any run.
        #expect(again.status == (mine.contains(server.url("/missing.jpg")) ? 1 : 0), "\(again.stdout)\(again.stderr)")
        for url in Set(lines) {
            let path = String(url.dropFirst(server.url("").count - 1))
            let fetched = server.requests(path) - before[url]!
            if quick.contains(url) { #expect(fetched == 0, "\(url) fetched again") }
            if held.contains(url) { #expect(fetched == 1, "\(url) fetched \(fetched) times") }
            if !mine.contains(url) { #expect(server.requests(path) == 0, "\(url) is the other shard's") }
        }
        // The same outputs as one uninterrupted run of the shard.
        let whole = try pipeline("whole")
        _ = try await pipelinectl(["run", whole, list.path, "--shard", "1/2", "--progress", "none"])
        let names = { (name: String) in
            Set(try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent(name).path).filter { !$0.hasPrefix(".") })
        }
        let resumed = try names("killed")
        #expect(resumed == (try names("whole")) && !resumed.isEmpty)
        for name in resumed {
            #expect(try Data(contentsOf: dir.appendingPathComponent("killed/\(name)")) == Data(contentsOf: dir.appendingPathComponent("whole/\(name)")))
        }
        await server.stop()
    }
}

/// Holds waiters until opened.
actor Gate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters.removeAll()
    }
}
