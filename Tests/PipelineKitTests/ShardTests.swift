import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// Shards: a frozen assignment of sources to shards, `--shard` parsing, and a list split by the
/// engine so that every line is run by exactly one shard.
@Suite struct ShardTests {
    /// The frozen contract: SHA-256 of the key's UTF-8, first 8 bytes big-endian, modulo N.
    /// Computed independently with Python's hashlib:
    /// `int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "big") % n`.
    @Test(arguments: [
        ("https://example.com/a.jpg", 0, 10, 2),
        ("https://example.com/b.jpg", 1, 15, 479),
        ("s3://bucket/photos/1.png", 0, 8, 32),
        ("file:///srv/img/x.webp", 0, 10, 706),
        ("", 0, 4, 652),
        ("https://cdn.test/p/1.jpg?w=200", 1, 11, 99),
        ("ünïcødé/ключ.jpg", 1, 7, 583),
    ])
    func goldenVectors(_ key: String, _ of2: Int, _ of16: Int, _ of1000: Int) {
        #expect(Shard.shard(ofKey: key, count: 2) == of2)
        #expect(Shard.shard(ofKey: key, count: 16) == of16)
        #expect(Shard.shard(ofKey: key, count: 1000) == of1000)
        #expect(Shard.shard(ofKey: key, count: 1) == 0)
    }

    @Test func parsesExplicitAndEngineIndexes() throws {
        #expect(try Shard.parse("3/16", environment: [:]) == Shard(index: 3, count: 16))
        for name in Shard.indexVariables {
            #expect(try Shard.parse("auto/4", environment: [name: "2"]) == Shard(index: 2, count: 4))
        }
        // Kubernetes first, when several are set.
        #expect(try Shard.parse("auto/4", environment: ["SLURM_ARRAY_TASK_ID": "1", "JOB_COMPLETION_INDEX": "3"]).index == 3)
    }

    @Test func badShardsSayWhatIsWrong() {
        func message(_ text: String, _ environment: [String: String] = [:]) -> String? {
            do { _ = try Shard.parse(text, environment: environment); return nil } catch {
                return (error as? PipelineError)?.message
            }
        }
        #expect(message("16/16") == "shard index 16 is out of range for 16 shards (0 to 15)")
        #expect(message("-1/4") == "shard index -1 is out of range for 4 shards (0 to 3)")
        #expect(message("1/0") == "the shard count must be at least 1, got 0")
        #expect(message("3") == "--shard expects K/N or auto/N (for example 3/16), got '3'")
        #expect(message("auto/4") == "--shard auto/4 needs the shard index in one of JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID, AWS_BATCH_JOB_ARRAY_INDEX; none is set")
        #expect(message("auto/4", ["SLURM_ARRAY_TASK_ID": "7"]) == "SLURM_ARRAY_TASK_ID=7: shard index 7 is out of range for 4 shards (0 to 3)")
        #expect(message("auto/4", ["AWS_BATCH_JOB_ARRAY_INDEX": "x"]) == "AWS_BATCH_JOB_ARRAY_INDEX is 'x', not a shard index")
    }

    @Test func shardFileNames() throws {
        let shard = try Shard(index: 3, count: 16)
        #expect(shard.name("reports/run.json") == "reports/run-shard-3-of-16.json")
        #expect(shard.name("run.jsonl") == "run-shard-3-of-16.jsonl")
        #expect(shard.name("metrics") == "metrics-shard-3-of-16")
    }
}

extension EngineSharingTests {
    /// Four shards over one list with duplicates: every line is run by exactly one shard, a
    /// duplicate by the same shard as its first copy, and each shard counts the others' lines.
    @Test func shardsSplitTheListExactlyOnce() async throws {
        let loader = ScriptedLoader()
        var lines: [String] = []
        for i in 0..<40 {
            loader.script("s\(i)", .bytes(Data("\(10 + i)x10".utf8)))
            lines.append("s\(i)")
        }
        lines += ["s3", "s17", "s3"]
        var seen: [Int: Int] = [:]
        for k in 0..<4 {
            let run = try await run(loader, lines, name: "{index}.{ext}") { $0.shard = try? Shard(index: k, count: 4) }
            #expect(run.summary.shard == "\(k)/4")
            #expect(run.summary.total + (run.summary.otherShards ?? -1) == lines.count)
            #expect(run.summary.ok == run.summary.total)
            for item in run.items {
                seen[item.index, default: 0] += 1
                #expect(Shard.shard(ofKey: "scripted://" + lines[item.index - 1], count: 4) == k)
            }
        }
        #expect(seen.count == lines.count && seen.values.allSatisfy { $0 == 1 })
        for i in 0..<40 { #expect(loader.calls("s\(i)") == 1) }  // duplicates reused within their shard
    }

    /// After the grace period, `abort()` cancels what is still in flight and the run returns.
    @Test func abortCancelsItemsInFlight() async throws {
        let loader = ScriptedLoader()
        loader.script("held", .hold(Data("10x10".utf8)))
        loader.script("quick", .bytes(Data("10x10".utf8)))
        loader.script("quick2", .bytes(Data("10x10".utf8)))
        final class Box: Sendable { let runner = Mutex<PipelineRunner?>(nil) }
        let box = Box()
        let task = Task {
            try await run(loader, ["quick", "held", "quick2"], name: "{index}.{ext}") { _ in } onRunner: { runner in
                box.runner.withLock { $0 = runner }
            }
        }
        #expect(await loader.log.wait(for: "started held"))
        let runner = try #require(box.runner.withLock { $0 })
        runner.stop()
        runner.abort()
        let result = try await task.value
        #expect(loader.log.count("cancelled held") == 1)
        #expect(result[2].status == .failed && result[2].error?.kind == .cancelled)
        #expect(result.summary.total + (result.summary.notStarted ?? 0) == 3)
    }
}

extension ShardTests {
    /// Reading ahead (a list in a file) hands out exactly the owned lines, in list order, and
    /// counts the others, whatever the list's length against the batch size.
    @Test(arguments: [0, 1, 2047, 2048, 4096, 5000])
    func readAheadKeepsOrderAndCounts(lines: Int) async throws {
        let dir = try Fixtures.temporaryDirectory("owned")
        let file = dir.appendingPathComponent("urls.txt")
        try (0..<lines).map { "https://x.test/\($0).jpg" }.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        let owns: @Sendable (Source) -> Bool = { $0.index % 3 == 0 }
        for readAhead in [true, false] {
            var owned = PipelineRunner.OwnedSources(SourceList(path: file.path).makeAsyncIterator(), owns: owns, readAhead: readAhead)
            var indexes: [Int] = []
            while let source = try await owned.next() { indexes.append(source.index) }
            #expect(indexes == Array(stride(from: 3, through: lines, by: 3)), "readAhead \(readAhead)")
            #expect(owned.skipped == lines - indexes.count)
        }
    }
}
